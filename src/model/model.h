/*
 * model.h: the byte-level Llama-style language model and the vision
 * transformer (ViT), which share their transformer blocks.
 *
 * Data structure: every parameter lives in one flat float arena `w`, laid out
 * once from a table of (HF name, shape) entries in a fixed order: the input
 * side (LM: the embedding; ViT: patch embedding weight and bias, CLS token,
 * position embeddings), then per layer input_layernorm, the attention
 * design's tensors (its params() order), post_attention_layernorm,
 * gate/up/down; then the final norm and the output side (LM: lm_head unless
 * tied; ViT: classifier weight and bias). Gradients (`g`) and the optimizer's
 * moments use the same layout, so "the gradient of tensor i" is
 * g + params[i].offset and a checkpoint is the arena written with names.
 *
 * Both tasks run the same blocks over a residual stream x[B*T, d] (static
 * blocks_fwd / blocks_bwd in model.c): the LM with T tokens and a causal
 * mask, the ViT with T = 1 + patches (CLS first) and no mask. The ViT has
 * no RoPE: its positions are the learned pos_embed, and its RoPE tables are
 * the identity (angle 0), so the designs run unchanged.
 *
 * Activations for a B x T batch live in one more arena (al_acts), sized from
 * the same config plus the attention design's saved_floats().
 */
#ifndef AL_MODEL_H
#define AL_MODEL_H

#include "../attn/attn.h"
#include "../core/core.h"
#include "../nn/nn.h"
#include "config.h"

typedef struct al_param {
    char name[96];
    int ndim;
    int64_t shape[2];
    size_t offset, numel;
    al_init_kind init;
    float std;
    int decay;
} al_param;

typedef struct al_layer_ptrs {
    float *ln1, *ln2, *gate, *up, *down;
    al_attn_layer attn;
} al_layer_ptrs;

typedef struct al_model {
    al_config cfg;
    const al_attn_ops *attn;
    al_param *params;
    int n_params;
    size_t n_floats;         /* arena size */
    float *w, *g;            /* parameters; gradients (NULL until al_model_alloc_grads) */
    /* views into w (gradients: the same offsets in g) */
    float *embed, *final_norm, *lm_head;  /* LM (embed, lm_head NULL for the ViT) */
    /* ViT (NULL for the LM): patch_w [d, C*p*p], patch_b [d], cls [d],
     * pos [1+P, d], cls_w [K, d], cls_b [K] */
    float *patch_w, *patch_b, *cls, *pos, *cls_w, *cls_b;
    al_layer_ptrs *layers, *glayers; /* glayers: same pointers into g */
    al_rope_table rope, rope_aux; /* tables for the design's rope_dims() */
} al_model;

/* Builds the parameter table and arenas for a validated config; weights zero. */
int al_model_create(al_model *m, const al_config *cfg, al_err *err);
void al_model_free(al_model *m);
/* Normal(std) / ones init from a seed, in arena order (reproducible). */
void al_model_init_weights(al_model *m, uint64_t seed);
int al_model_alloc_grads(al_model *m, al_err *err);
void al_model_zero_grads(al_model *m);
/* Parameters without the embedding table (the convention for FLOP counts). */
size_t al_model_matmul_params(const al_model *m);
/* ViT FLOPs per image: every weight multiplies once per token it touches
 * (patch embedding per patch, blocks per token, classifier once) plus
 * bidirectional attention over all 1+P keys. Training: 3x forward. */
double al_vit_fwd_flops_per_image(const al_model *m);
/* Training FLOPs per token at context T: 6 x matmul params + causal attention. */
double al_model_train_flops_per_token(const al_model *m, int T);
double al_model_fwd_flops_per_token(const al_model *m, int T);

/* Checkpoint directory: config.json + model.safetensors (F32 written; F32,
 * F16, BF16 read). extra_json: training settings merged into "attnlab". */
int al_model_save(const al_model *m, const char *dir, const char *extra_json, al_err *err);
int al_model_load(al_model *m, const char *dir, char **extra_out, al_err *err);
/* Loads only the weights of an existing model from a safetensors file. */
int al_model_load_weights(al_model *m, const char *path, al_err *err);

/* ---- activations for training / batched evaluation ---- */
typedef struct al_acts {
    int B, T;
    float *arena;
    size_t n_floats;
    float *x_in;      /* [L+1][N, d] residual stream entering each layer (x_in[L]: after the last) */
    float *xn1, *rstd1, *attn_saved, *x_mid, *xn2, *rstd2, *gate, *up, *hmid; /* per layer */
    float *xnf, *rstdf, *logits, *dlogits;
    float *dres, *dtmp, *dh, *dg, *du, *attn_scratch;
    float *patches;   /* ViT: [B*P, C*p*p] the patch vectors (kept for the patch-embedding gradient) */
    float *cls_x, *cls_dx; /* ViT: [B, d] the CLS rows of the last residual stream, and their gradient */
    int *tokens, *targets; /* LM: [B*T]; ViT: targets[0..B) hold the labels */
    size_t attn_saved_per_layer;
} al_acts;

/* Vision models: T must be 1 + patches (al_vit_acts_create passes it); logits
 * and dlogits are then [B, num_labels]. */
int al_acts_create(al_acts *a, const al_model *m, int B, int T, al_err *err);
int al_vit_acts_create(al_acts *a, const al_model *m, int B, al_err *err);
void al_acts_free(al_acts *a);
/* tokens/targets: [B*T] ints (targets < 0 are ignored). Returns the mean loss
 * over counted targets (0 if targets == NULL); logits kept in a->logits [N, V]
 * and, when targets given, dL/dlogits in a->dlogits. Language models only
 * (a vision model returns NAN: see al_vit_forward). */
double al_model_forward(const al_model *m, al_acts *a, const int *tokens, const int *targets);
/* Accumulates every parameter gradient into m->g (call after forward with targets). */
void al_model_backward(al_model *m, al_acts *a);

/* ---- vision transformer ----
 * images[B, C, S, S] -> patches[B*P, C*p*p]: patch (gy, gx) of image b is row
 * b*P + gy*(S/p) + gx; within a row the entries run over channel, then pixel
 * row, then pixel column of the patch (the order of a Conv2d weight
 * [d, C, p, p] flattened), so patch_w is such a weight. */
void al_vit_patchify(float *patches, const float *images, int B, int C, int S, int p);
/* images[B, C, S, S] (already standardised), labels[B] in [0, K) (or < 0:
 * ignored; NULL: no loss). Token 0 of each sequence is the CLS token, tokens
 * 1..P the patches: x = [cls; patches W^T + b] + pos. Logits [B, K] of the
 * CLS row after the final norm are kept in a->logits; returns the mean
 * cross-entropy over counted labels and keeps dL/dlogits for backward. */
double al_vit_forward(const al_model *m, al_acts *a, const float *images, const int *labels);
/* Accumulates every parameter gradient into m->g (after al_vit_forward with labels). */
void al_vit_backward(al_model *m, al_acts *a);

/* ---- KV cache and single-token decoding ----
 * The cache holds exactly num_layers x capacity x cache_values_per_token
 * floats: the design's own form and nothing else. */
typedef struct al_decoder {
    const al_model *m;
    int capacity;             /* tokens */
    size_t values_per_token;  /* per layer */
    float *cache;             /* [L][capacity][values_per_token] */
    size_t cache_bytes;
    float *scratch;           /* x, xn, y, gate, up + the design's decode scratch */
    int pos;                  /* tokens consumed so far */
} al_decoder;

int al_decoder_create(al_decoder *dec, const al_model *m, int capacity, al_err *err);
void al_decoder_free(al_decoder *dec);
/* Feeds one token at position dec->pos; writes logits[V]; advances pos. */
int al_decoder_step(al_decoder *dec, int token, float *logits, al_err *err);

#endif
