/*
 * kve.h: KV-cache eviction (issue 15, item 2): which positions of a layer's
 * cache a decoder keeps when a token budget is set. The options here are the
 * user's request (--kv-evict, --kv-budget, --kv-sinks, --kv-prompt,
 * --kv-layer-budget); al_kv_opts bundles them with the quantisation of
 * kvq.h, as the decoder (model.h) and eval through the decode path
 * (infer/eval_kv.h) take them.
 */
#ifndef AL_KVE_H
#define AL_KVE_H

#include "kvq.h"

/* X(ENUM, name): the eviction policies, as --kv-evict spells them */
#define AL_KVE_METHODS(X)                                                                                              \
    X(NONE, "none")                                                                                                    \
    X(WINDOW, "window")                                                                                                \
    X(H2O, "h2o")                                                                                                      \
    X(SNAPKV, "snapkv")
#define AL_KVE_ENUM_(e, s) AL_KVE_##e,
typedef enum { AL_KVE_METHODS(AL_KVE_ENUM_) AL_KVE_COUNT } al_kve_method;
#undef AL_KVE_ENUM_
/* the method named s (-1: none of them) and a method's name */
int al_kve_from_name(const char *s);
const char *al_kve_name(al_kve_method m);

/* per-layer budgets: the same in every layer, or PyramidKV's (more in the
 * lower layers, fewer in the higher, the same total) */
enum { AL_KVE_UNIFORM = 0, AL_KVE_PYRAMID = 1 };

typedef struct al_kve_opts {
    al_kve_method method;
    double budget;    /* in (0, 1]: a fraction of the positions seen; >= 2 (integral): a count */
    int sinks;        /* the first positions always kept (StreamingLLM's attention sinks) */
    int prompt;       /* SnapKV: the prompt's length in tokens (0: half the window) */
    int layer_budget; /* AL_KVE_UNIFORM or AL_KVE_PYRAMID */
} al_kve_opts;

/* Everything a compressed cache is asked for. A zeroed al_kv_opts is the
 * uncompressed cache. */
typedef struct al_kv_opts {
    al_kvq_opts q;
    al_kve_opts e;
} al_kv_opts;

#endif
