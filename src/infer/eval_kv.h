/*
 * eval_kv.h: scoring text through the real decode path, with a compressed
 * (quantised, evicted) or uncompressed KV cache: the same windows of T
 * predictions as plain eval (al_eval_ids), each scored token by token from
 * an empty cache through al_decoder_step, so that every prediction sees
 * exactly the cache a generating model would hold. `eval --kv-*`, `kvlab`
 * and the study's KV frontier all measure through it.
 */
#ifndef AL_EVAL_KV_H
#define AL_EVAL_KV_H

#include "../attn/kve.h"
#include "../model/model.h"

typedef struct al_eval_kv_result {
    double loss;               /* mean nats per predicted token */
    size_t count;              /* predictions */
    double kv_bytes_per_token; /* the bytes the window caches held at their ends over the tokens they held */
    double kv_fp32_per_token;  /* the uncompressed fp32 cache of the same model, per token */
    double seconds;
} al_eval_kv_result;

/* Scores ids[0, n) (at most max_predictions predictions; 0: all) in windows
 * of T through a cache of T positions compressed as o asks (NULL or zeroed:
 * uncompressed fp32). layer_err (NULL, or [num_layers]) receives the mean
 * relative error of each layer's attention output against a full fp32
 * cache fed the same inputs. 0, or -1 with one line in err. */
int al_eval_decode(const al_model *m, const int *ids, size_t n, int T, size_t max_predictions, const al_kv_opts *o,
                   double *layer_err, al_eval_kv_result *r, al_err *err);
/* The same, and layer_recall (NULL, or [num_layers]; needs layer_err) the
 * mean recall of attention mass per layer (al_decoder_layer_recall: 1
 * without eviction). An evicting cache (o->e): al_kve_check's rules for
 * the window T; SnapKV's prompt 0 means T / 2. */
int al_eval_decode_recall(const al_model *m, const int *ids, size_t n, int T, size_t max_predictions,
                          const al_kv_opts *o, double *layer_err, double *layer_recall, al_eval_kv_result *r,
                          al_err *err);

#endif
