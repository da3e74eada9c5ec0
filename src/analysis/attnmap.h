/*
 * attnmap.h: attention weights of single heads over a whole input, and the
 * per-head statistics researchers read off attention maps (attention.md 7).
 *
 * Memory is T x T per selected head and nothing for the others: weights are
 * computed from the head's own rotated queries and keys (one product), then
 * each row is mapped by the model's score function. The forward before it
 * keeps O(T) activations per layer (for a memory-mapped Hugging Face model:
 * per selected layer).
 */
#ifndef AL_ATTNMAP_H
#define AL_ATTNMAP_H

#include "../attn/attn.h"
#include "../model/model.h"

/* P[T, T] = f(scale q k^T) of one head, rows are queries; masked pairs (j > i
 * unless s->bidirectional) are exactly 0. q[T, ldq], k[T, ldk] with d_qk =
 * s->dk; only s's scale, score fields and bidirectional are read. */
void al_head_weights(const al_attn_shape *s, int T, const float *q, int ldq, const float *k, int ldk, float *P);

typedef struct al_head_stats {
    double sink_mass;      /* mean over queries of the weight on token 0 */
    double entropy;        /* mean over queries of -sum p log p, nats (|p| normalised per row) */
    double mean_distance;  /* mean over queries of sum |p| (i - j) / sum |p|, in tokens */
    double topk_mass;      /* mean over queries of the share of |p| in the top-k keys */
    double row_sum;        /* mean over queries of sum_j p_ij (1 for softmax) */
    double min_weight, max_weight;
    int topk;
    double budget95;       /* mean over queries of the fewest keys holding 95 % of the row's |p| (al_mass_budget) */
    double budget95_frac;  /* the same count over the keys the query sees (i + 1 causal, T bidirectional), mean */
} al_head_stats;

/* The share of a row's attention mass the budget statistics keep (0.95):
 * the statistic behind per-layer (pyramid) KV budgets. */
#define AL_MASS_BUDGET_SHARE 0.95

/* The fewest keys of row[n] whose |p| sum reaches share * sum |p| (the top
 * ones); 0 when the row has no mass. Expected O(n): a quickselect that keeps
 * only the side where the share is crossed. buf holds n floats. Same count
 * as al_mass_budget_ref. */
int al_mass_budget(const float *row, int n, double share, float *buf);
/* Plain reference: sorts all of |p| and counts down from the largest (-1
 * when out of memory). */
int al_mass_budget_ref(const float *row, int n, double share);

/* Statistics of P[T, T]; rows with no mass are skipped. Softmax-free weights
 * may be negative: entropy, distance and top-k use |p|. Returns 0, or -1
 * with one line in err if the top-k buffer cannot be had. */
int al_head_stats_of(const float *P, int T, int topk, int bidirectional, al_head_stats *out, al_err *err);

/* Loads the model in `dir` with RoPE tables long enough for T tokens (its
 * trained context is returned in *trained_ctx), and runs one forward over
 * tokens[T] into *a, ready for al_attnmap_weights. */
int al_attnmap_prepare(const char *dir, const int *tokens, int T, al_model *m, al_acts *a, int *trained_ctx,
                       al_err *err);
/* The same, keeping for al_attnmap_weights only the n_layers layers in
 * layers[] (n_layers < 0: all). attnlab's own models keep every layer
 * anyway; a memory-mapped Hugging Face checkpoint runs the inference
 * activations (one layer's buffers) plus the kept layers' q/k blocks, so a
 * long input over a large model costs per selected layer, not per layer. */
int al_attnmap_prepare_layers(const char *dir, const int *tokens, int T, const int *layers, int n_layers, al_model *m,
                              al_acts *a, int *trained_ctx, al_err *err);

/* Vision models: loads `dir` and test image `index` of the Fashion-MNIST
 * test split in images_dir (NULL: Debian's), runs one forward over it into
 * *a (T = 1 + patches; token 0 is CLS). pixels[S*S] (may be NULL) receives
 * the image's first channel scaled to [0, 1], *label its class. */
int al_attnmap_prepare_image(const char *dir, const char *images_dir, int index, al_model *m, al_acts *a,
                             float *pixels, int *label, al_err *err);

/* "Attention with softmax", "Attention with (1/14)x^3", ...: the panel title
 * naming a model's score function as the polynomial-attention paper does. */
void al_score_title(const al_config *c, char *buf, size_t cap);

/* After al_model_forward over a (B = 1, T tokens): the weights P[T, T] of
 * (layer, head), from the design's head_qk and the model's score function. */
int al_attnmap_weights(const al_model *m, const al_acts *a, int layer, int head, float *P, al_err *err);

#endif
