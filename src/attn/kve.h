/*
 * kve.h: KV-cache eviction (issue 15, item 2): which positions of a layer's
 * cache a decoder keeps when a token budget is set. The options here are the
 * user's request (--kv-evict, --kv-budget, --kv-sinks, --kv-prompt,
 * --kv-layer-budget); al_kv_opts bundles them with the quantisation of
 * kvq.h, as the decoder (model.h) and eval through the decode path
 * (infer/eval_kv.h) take them.
 *
 * Data structure (al_kve, one per layer, carried by al_kv.e). Keys are
 * cached after RoPE, so attention over the held rows does not depend on
 * their order: the layer's cache rows are slots, and slots [0, n) hold the
 * positions pos[0, n) in no particular order. al_kv_store writes a new
 * position into slot n (n grows by one); al_attn_decode reads slots [0, n)
 * whatever position it is asked for, adds each slot's attention mass of the
 * step to mass[slot] (the sum over query heads of the weights p_j, |p_j|
 * for signed score functions) and then calls al_kve_evict, which removes
 * the policy's victims by moving the last slot's row into each victim's
 * slot (so the held slots stay [0, n), and a design never knows). After a
 * prefill (al_decoder_prefill) the mass comes from the forward's queries
 * and keys (al_kve_colsum, a row-tiled column sum, never T x T).
 *
 * With a quantised cache (al_kv.q, kvq.h: slots [0, qn) quantised, the
 * residual slots [qn, n) exact, in order of age) victims go differently,
 * so that the residual keeps the newest positions and blocks keep their
 * key scales: a victim in the residual is removed by moving the younger
 * residual rows down one (order kept); a victim in the quantised region
 * is overwritten by the oldest residual row (the next to age out anyway),
 * quantised with that block's key scales (clamped) and its own value
 * scales, and the residual moves down one: when there is one quantised
 * victim and the residual holds more than its `residual` newest rows (the
 * row has aged out: the usual step). Otherwise (several quantised victims:
 * after a prefill, at SnapKV's selection; or no aged-out row) the kept
 * slots are quantised anew in slot order (fresh blocks and scales, the
 * quantised rows dequantised first), so the cache always holds its budget.
 *
 * Budgets: keep(t) positions after t have been seen: a fraction b of t
 * (ceil, at least 1), or a count min(b, t); a layer's b is the budget
 * scaled by its layer factor (uniform 1; pyramid 1.5 at layer 0 falling
 * linearly to 0.5 at the top: the same total, a fraction clamped to 1, a
 * count to at least 2). Of keep(t), s = min(sinks, keep - 1) are the first
 * positions (sinks) and the rest r = keep - s:
 *   window  the r most recent positions (StreamingLLM);
 *   h2o     ceil(r/2) most recent, and the r/2 others of the highest
 *           accumulated mass (H2O's half and half): after every step the
 *           lowest-mass positions outside sinks and recent window go
 *           (ties: the newer goes);
 *   snapkv  nothing is evicted until the prompt's last token (prompt
 *           positions) has been decoded; the masses are then the votes of
 *           the observation window, the last w = min(AL_KVE_SNAP_WINDOW,
 *           prompt / 2) prompt queries; the window is kept, sinks are
 *           kept, and the rest of keep(prompt) are the prompt's positions
 *           of the highest vote max-pooled over 7 neighbours (SnapKV's
 *           kernel 7; ties: the older). Positions after the prompt are all
 *           kept as they come.
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

enum { AL_KVE_SNAP_WINDOW = 32, AL_KVE_SNAP_POOL = 7 };

/* One layer's eviction state (the header's data structure). */
typedef struct al_kve {
    al_kve_opts o;
    double budget;   /* this layer's budget (o.budget scaled by its layer factor) */
    int capacity;    /* slots */
    size_t row;      /* cache values per position */
    int n;           /* slots held: [0, n) */
    int seen;        /* positions stored so far (the next new one is `seen`) */
    int cur_pos, cur_slot; /* the position last stored and its slot */
    int *pos;        /* [capacity] the position in each slot */
    float *mass;     /* [capacity] accumulated attention mass of each slot */
    int *gone;       /* [capacity] the positions the last al_kve_evict removed */
    int n_gone;
    int step_mass;   /* 1: mass holds the last step's only (a full cache's, for recall) */
    float *work;     /* [capacity] selection workspace */
    int *iwork;      /* [2 capacity] */
    float *side;     /* quantised caches: [residual + group + 1][row], rows set aside when requantising */
} al_kve;

/* Checks o for a window of T positions (an unknown method, a budget <= 0,
 * above 1 and not an integer, sinks < 0, a SnapKV prompt outside 1..T,
 * an unknown layer budget): 0 or -1 with one line in err naming the flag. */
int al_kve_check(const al_kve_opts *o, int T, al_err *err);
/* Allocates a layer's state for `capacity` positions of `row` values, with
 * layer factor from o->layer_budget for layer l of L. 0 or -1 (err). */
int al_kve_create(al_kve *e, const al_kve_opts *o, int l, int L, int capacity, size_t row, al_err *err);
void al_kve_free(al_kve *e);
/* An evicting layer over quantised cache q: its workspace (e->side). */
int al_kve_attach_quantised(al_kve *e, const al_kvq *q, al_err *err);
/* Empty (no positions seen). */
void al_kve_reset(al_kve *e);
/* Positions [0, n) have been seen and the slots hold as many as the
 * policy keeps of them: the sinks and the newest (benchmarks: the cache
 * contents are random; SnapKV past its prompt: keep(prompt) + n - prompt). */
void al_kve_seek(al_kve *e, int n);
/* The layer budget factor (1 uniform; pyramid: 1.5 - l / (L - 1)). */
double al_kve_layer_factor(int layer_budget, int l, int L);
/* Positions kept after t have been seen with layer budget b (header). */
int al_kve_keep(double b, int t);
/* The slot position p's values go to (a new position: the next free slot). */
int al_kve_slot(al_kve *e, int p);
/* Applies the policy after a step (or a prefill) to the layer's cache c:
 * removes the victims (plain cache: the last slot's row moves into each
 * victim's; quantised: see "With a quantised cache" above) and records
 * them in gone[]. */
struct al_kv;
void al_kve_evict(al_kve *e, const struct al_kv *c);
/* Writes x[row] into quantised slot j (< q->qn): key channels with the
 * scales of j's block, rounded and clamped to the codes; value cells with
 * their own new scales (as a flush would). */
void al_kve_put_quantised(struct al_kvq *q, int j, const float *x);
/* The observation window of SnapKV for a prompt of p tokens. */
int al_kve_snap_window(int prompt);
/* Whether this step's decode adds to mass: h2o always; snapkv for the
 * observation window's queries; a full cache measuring recall (step_mass). */
static inline int al_kve_wants_mass(const al_kve *e) {
    if (e->step_mass || e->o.method == AL_KVE_H2O) return 1;
    return e->o.method == AL_KVE_SNAPKV && e->cur_pos < e->o.prompt &&
           e->cur_pos >= e->o.prompt - al_kve_snap_window(e->o.prompt);
}

/* After a forward over a prompt of T tokens: adds to e->mass (slot = position
 * after a prefill) the column sums of head h's attention weights, queries
 * q[T, d] and keys k[T, d] (rotated, as head_qk gives them), causal, with
 * s's scale and score function, over the rows [r0, T) only (SnapKV's
 * observation window; 0: all rows, H2O). Tiled: O(T) memory in work
 * (al_kve_colsum_work floats). al_kve_colsum_ref: the plain reference. */
struct al_attn_shape;
size_t al_kve_colsum_work(int T);
void al_kve_colsum(const struct al_attn_shape *s, const float *q, const float *k, int d, int T, int r0, float *mass,
                   float *work);
void al_kve_colsum_ref(const struct al_attn_shape *s, const float *q, const float *k, int d, int T, int r0,
                       double *mass);

#endif
