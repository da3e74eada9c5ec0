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
 * the same config plus the attention design's saved_floats(); inference
 * activations (al_acts_create_infer) hold one layer's buffers for all layers.
 *
 * A Hugging Face checkpoint (config.json without the "attnlab" block) is a
 * mapped model (hf.c): the same table and views, but the views point into
 * the memory-mapped safetensors files, matrices in their file dtype (the
 * *_dt fields beside the pointers), 1-D tensors as fp32 copies in a small w;
 * it runs forward and decode only (docs/hf-models.md). attnlab's own model
 * can take the same form for inference: al_model_weights_bf16 points its
 * matrix views at a BF16 copy of the arena (w16).
 */
#ifndef AL_MODEL_H
#define AL_MODEL_H

#include "../attn/attn.h"
#include "../attn/kve.h"
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
    int grad_written; /* the backward writes its gradient whole after al_model_zero_grads, which leaves it */
} al_param;

/* One layer's tensors. gate/up/down are fp32 arena matrices (dtype
 * AL_DT_F32, 0) for attnlab's models; for a mapped Hugging Face checkpoint
 * they point at the file's read-only bytes in the dtype beside them.
 * A DeepseekV2 mixture-of-experts layer (al_config_layer_moe) has instead
 * the router `router` [E, d] (mlp.gate.weight) and the routed experts'
 * matrices experts[3e + 0, 1, 2] = expert e's gate, up [f_e, d] and down
 * [d, f_e] (mlp.experts.e.*), f_e = moe_intermediate_size; gate/up/down are
 * then its shared experts (mlp.shared_experts.*, width ffn =
 * n_shared_experts x f_e; NULL when it has none). Every matrix stays where
 * the file has it: an expert's pages are read only when a token is routed
 * to it. */
typedef struct al_layer_ptrs {
    float *ln1, *ln2, *gate, *up, *down;
    al_attn_layer attn;
    al_dtype gate_dt, up_dt, down_dt;
    int ffn;         /* width of gate/up/down (intermediate_size for a dense layer) */
    al_wref router;  /* MoE: the router; .p NULL for a dense layer */
    al_wref *experts; /* MoE: [3 E] (into al_model.experts) */
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
    al_wref *experts;             /* [L][3 E] the routed experts of MoE layers (NULL: none) */
    /* A Hugging Face checkpoint (cfg.hf != AL_HF_NONE) is mapped, not copied
     * (hf.c): its matrices stay in the memory-mapped files in their dtype
     * (embed_dt / head_dt, the layers' *_dt), w holds only fp32 copies of
     * the 1-D tensors (norm gains, biases), and the model runs forward and
     * decode only (no gradients, no saving). */
    int mapped;
    struct al_ckpt *ckpt;       /* the open, mapped checkpoint files */
    const void **data;          /* [n_params] where each tensor's data is */
    al_dtype *dts;              /* [n_params] its dtype as used */
    void **owned;               /* [n_params] heap copies of misaligned matrices (NULL: none) */
    al_dtype embed_dt, head_dt; /* of embed and lm_head (F32 for arena models) */
    size_t mapped_bytes;        /* tensor bytes used in place from the mapping */
    size_t copied_bytes;        /* tensor bytes copied to the heap (1-D tensors as fp32, misaligned matrices) */
    /* al_model_weights_bf16: every 2-D tensor as BF16 at its arena offset
     * (NULL: none, the views are fp32 into w). dts then holds each tensor's
     * dtype as for a mapped model; like one, the model runs forward and
     * decode only. */
    uint16_t *w16;
    /* The training backward calls grads_final(grads_final_ctx, from) each
     * time the gradients from arena offset `from` to the end are final (the
     * head and final norm, then each layer, last first; the arena holds the
     * input side, the layers in order, then the final norm and the head).
     * NULL: none. dist.c starts their all-reduce while the backward goes on. */
    void (*grads_final)(void *ctx, size_t from);
    void *grads_final_ctx;
    /* Set by al_model_zero_grads, cleared by the next backward: the
     * gradients of the parameters marked grad_written were left as they
     * were, and that backward writes them instead of adding to them. */
    int grads_unset;
} al_model;

/* Builds the parameter table and arenas for a validated config; weights zero. */
int al_model_create(al_model *m, const al_config *cfg, al_err *err);
/* As al_model_create; with arena 0 no weight arena is allocated and no
 * views are set (the mapped loader, hf.c, points them at the file). */
int al_model_build(al_model *m, const al_config *cfg, int arena, al_err *err);
/* Points every view at data[i] of dtype dts[i] (one per parameter, in table
 * order); the mapped loader's last step. Fails when the design's kernels
 * cannot run on that layout (ops->validate_layer). */
int al_model_set_views(al_model *m, const void *const *data, const al_dtype *dts, al_err *err);
void al_model_free(al_model *m);
/* Normal(std) / ones init from a seed, in arena order (reproducible). */
void al_model_init_weights(al_model *m, uint64_t seed);
int al_model_alloc_grads(al_model *m, al_err *err);
/* Every gradient zero for the next backward to add into (those of the
 * parameters marked grad_written in effect: that backward writes them;
 * read m->g after it). */
void al_model_zero_grads(al_model *m);
/* Parameters without the embedding table (the convention for FLOP counts). */
size_t al_model_matmul_params(const al_model *m);
/* ViT FLOPs per image: every weight multiplies once per token it touches
 * (patch embedding per patch, blocks per token, classifier once) plus
 * bidirectional attention over all 1+P keys. Training: 3x forward. */
double al_vit_fwd_flops_per_image(const al_model *m);
/* Training FLOPs per token at context T: 6 x matmul params + causal attention
 * (forward: 2 x; of a MoE layer's routed experts only the
 * num_experts_per_tok a token runs count). */
double al_model_train_flops_per_token(const al_model *m, int T);
double al_model_fwd_flops_per_token(const al_model *m, int T);

/* Checkpoint directory: config.json + model.safetensors (F32 written; F32,
 * F16, BF16 read). extra_json: training settings merged into "attnlab".
 * Loading a Hugging Face checkpoint directory (config.json without an
 * "attnlab" block: Llama, Mistral, Qwen2, dense DeepseekV2; one
 * model.safetensors or shards with model.safetensors.index.json) maps it
 * instead (al_model_map, docs/hf-models.md). */
int al_model_save(const al_model *m, const char *dir, const char *extra_json, al_err *err);
int al_model_load(al_model *m, const char *dir, char **extra_out, al_err *err);
/* al_model_load with RoPE tables for at least min_positions positions (for
 * inputs longer than the model was trained at; 0: the config's). */
int al_model_open(al_model *m, const char *dir, int min_positions, char **extra_out, al_err *err);
/* hf.c: maps the checkpoint files of dir for config c (validated, hf set):
 * every tensor checked against the parameter table (present, shape, dtype),
 * matrices used in place, 1-D tensors converted to fp32. Errors name the
 * directory or file and the tensor. */
int al_model_map(al_model *m, const char *dir, const al_config *c, al_err *err);
/* BF16 weights for inference on attnlab's own fp32 language model: every
 * 2-D tensor (embedding, the design's matrices, MLP, LM head) is rounded to
 * BF16 (nearest even; NaN stays NaN) into one buffer, m->w16, at the same
 * element offsets as the arena, and the views point there; 1-D tensors (norm
 * gains) stay fp32 views into w. Why: decoding reads every weight once per
 * token, so it is bound by their bytes, which this halves; the products then
 * take wmat.c's BF16 kernels, as for a mapped BF16 checkpoint. Keeping the
 * offsets keeps tensors that a design multiplies as one matrix adjacent
 * (MHA's q/k/v, LRKV's five input projections). Afterwards the model is for
 * forward and decode only: gradients and saving are refused, and
 * al_model_weight_bytes counts the BF16 bytes (w keeps the fp32 values, so
 * the model holds 1.5x the fp32 bytes). Refused: a mapped Hugging Face
 * checkpoint (its matrices stay in their file dtype), a vision model, a model
 * with gradients. A second call does nothing. */
int al_model_weights_bf16(al_model *m, al_err *err);
/* Closes the mapping and frees the tables of a mapped model (no-op otherwise). */
void al_model_unmap(al_model *m);
/* Bytes of the weights as the model computes with them: matrices in their
 * dtype (BF16 after al_model_weights_bf16, though the fp32 arena stays),
 * 1-D tensors as fp32 (a tied head counted once). */
size_t al_model_weight_bytes(const al_model *m);
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
    float *moe;       /* MoE models: the routing's workspace (model.c moe_work) */
    int *moe_idx;     /* MoE models: chosen experts [N, k] and a row list [N] */
    float *cls_x, *cls_dx; /* ViT: [B, d] the CLS rows of the last residual stream, and their gradient */
    int *tokens, *targets; /* LM: [B*T]; ViT: targets[0..B) hold the labels */
    size_t attn_saved_per_layer;
    /* inference form (al_acts_create_infer): one layer's buffers shared by
     * all layers, no backward buffers; saved_slot[l] is layer l's slot in
     * attn_saved (n_keep: the shared one, overwritten by later layers) */
    int infer, n_keep;
    int *saved_slot;
    /* attention-map activations (al_acts_create_maps with kept layers): the
     * forward runs layers [0, maps_layers) and stops after the last one's
     * attention (the last kept layer: nothing after it reaches a map); 0:
     * every layer, whole */
    int maps_layers;
    /* al_decoder_prefill: the decoder whose cache each layer's forward fills */
    struct al_decoder *fill;
    /* Set by each forward: BF16 training (BF16 mode, a model with gradients,
     * these full activations) stores the normed layer inputs xn1 and xn2 and
     * the dense MLPs' hmid, and the backward the MLPs' dg and du, as BF16
     * values in the first half of their buffers. Only BF16 products read
     * them (the attention design's projections, the MLP's), and those round
     * an fp32 operand the same way: the bits of fp32 storage, half the bytes
     * written and read. */
    int acts_bf16;
} al_acts;

/* Vision models: T must be 1 + patches (al_vit_acts_create passes it); logits
 * and dlogits are then [B, num_labels]. */
int al_acts_create(al_acts *a, const al_model *m, int B, int T, al_err *err);
/* Activations for forward only (language models), sized for one layer
 * instead of L: what a mapped model always gets from al_acts_create (with
 * no kept layers). The attention blocks of the n_keep layers in keep[]
 * survive the forward, for attention maps (al_acts_saved). */
int al_acts_create_infer(al_acts *a, const al_model *m, int B, int T, const int *keep, int n_keep, al_err *err);
/* The same for attention maps of one sequence: no logits (a forward over
 * them stops after the blocks; the head's T x vocab floats would dwarf the
 * rest for a large vocabulary), and with kept layers it stops after the last
 * kept layer's attention. */
int al_acts_create_maps(al_acts *a, const al_model *m, int T, const int *keep, int n_keep, al_err *err);
/* After a forward: layer l's saved attention block (the design's head_qk
 * reads it), or NULL if an inference batch did not keep that layer. */
const float *al_acts_saved(const al_acts *a, int layer);
int al_vit_acts_create(al_acts *a, const al_model *m, int B, al_err *err);
void al_acts_free(al_acts *a);
/* Test hook: on != 0 keeps BF16 training's stored activations in fp32 (al_acts.acts_bf16 never set). */
void al_model_test_acts_f32(int on);
/* tokens/targets: [B*T] ints (targets < 0 are ignored). Returns the mean loss
 * over counted targets (0 if targets == NULL or a has no logits: maps);
 * logits kept in a->logits [N, V]
 * and, when targets given, dL/dlogits in a->dlogits. Language models only
 * (a vision model returns NAN: see al_vit_forward). */
double al_model_forward(const al_model *m, al_acts *a, const int *tokens, const int *targets);
/* Accumulates every parameter gradient into m->g (call after forward with
 * targets; after al_model_zero_grads: this batch's gradients). */
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
 * values: the design's own form and nothing else, in F32 (default) or BF16
 * (half the bytes every decoded token reads; queries, scores and sums stay
 * fp32, each cached value is rounded once when its token is appended). */
typedef struct al_decoder {
    const al_model *m;
    int capacity;             /* tokens */
    size_t values_per_token;  /* per layer */
    void *cache;              /* [L][capacity][values_per_token] of cache_dt */
    al_dtype cache_dt;        /* AL_DT_F32 or AL_DT_BF16 */
    size_t cache_bytes;
    float *scratch;           /* x, xn, y, gate, up + the design's decode scratch + MoE routing */
    int *moe_idx;             /* MoE models: one token's chosen experts and row list */
    int pos;                  /* tokens consumed so far */
    /* quantised caches (al_decoder_create_q): one al_kvq per layer (NULL:
     * the plain cache above); cache is then NULL and cache_bytes their sum */
    al_kvq *kvq;
    /* al_decoder_track_error: a plain F32 decoder fed the same layer inputs,
     * and per layer the sum over steps of |y - y_full| / |y_full| of the
     * attention output (err_steps steps) */
    struct al_decoder *shadow;
    double *layer_err;
    long err_steps;
    /* evicted caches (al_decoder_create_opts): one al_kve per layer (NULL:
     * every position kept); the cache's rows are then slots (kve.h), and
     * with track_error layer_recall[l] sums over steps the share of the
     * full cache's attention mass that the held keys get */
    al_kve *kve;
    double *layer_recall;
    float *fill_buf; /* al_decoder_prefill with eviction: one head's q, k and a row of weights */
} al_decoder;

/* An F32 cache (al_decoder_create_kv with AL_DT_F32). */
int al_decoder_create(al_decoder *dec, const al_model *m, int capacity, al_err *err);
/* cache_dt: AL_DT_F32 or AL_DT_BF16 (others refused). */
int al_decoder_create_kv(al_decoder *dec, const al_model *m, int capacity, al_dtype cache_dt, al_err *err);
/* A quantised cache (attn/kvq.h: KIVI layout, residual in cache_dt) when
 * q is given and not AL_KVQ_NONE, else as al_decoder_create_kv; a
 * design without cache_segments, or options its cache refuses (a group
 * that does not divide a value unit), fail with one line in err. */
int al_decoder_create_q(al_decoder *dec, const al_model *m, int capacity, al_dtype cache_dt, const al_kvq_opts *q,
                        al_err *err);
/* The cache o asks for (NULL or zeroed: as al_decoder_create_kv): quantised
 * as al_decoder_create_q, and with o->e.method other than none an eviction
 * state per layer (kve.h; budgets per layer from o->e.layer_budget). The
 * cache keeps its capacity (a prompt is held whole until a policy acts);
 * al_decoder_kv_held_bytes counts the positions held (quantised: the
 * closed form of the quantised ones plus the residual's). Options
 * al_kve_check or al_decoder_create_q refuse fail with one line in err. */
int al_decoder_create_opts(al_decoder *dec, const al_model *m, int capacity, al_dtype cache_dt, const al_kv_opts *o,
                           al_err *err);
/* With track_error on an evicting decoder: per layer the mean over steps of
 * the recall of attention mass (mass the full cache's weights put on the
 * positions the compressed cache attended to / all of it; out[num_layers]);
 * 1 for a decoder that does not evict. */
void al_decoder_layer_recall(const al_decoder *dec, double *out);
void al_decoder_free(al_decoder *dec);
/* Empties the cache (pos 0), to decode a new sequence into it. */
void al_decoder_reset(al_decoder *dec);
/* Makes the decoder continue at position pos over whatever the cache holds
 * (benchmarks, after al_decoder_fill_random). */
void al_decoder_seek(al_decoder *dec, int pos);
/* KV bytes per cached token over all layers: the closed form of the cache
 * (quantised: codes + scales, kvq.h; else values x dtype size), and what
 * the pos tokens held now take (quantised: the residual's at its dtype). */
double al_decoder_kv_bytes_per_token(const al_decoder *dec);
/* From now on every step also decodes each layer's input against a full
 * (uncompressed F32) cache of the same inputs and accumulates the relative
 * error of the attention output per layer; al_decoder_layer_errors gives
 * their means over the steps so far (out[num_layers]). 0 or -1 (err). */
int al_decoder_track_error(al_decoder *dec, al_err *err);
void al_decoder_layer_errors(const al_decoder *dec, double *out);
double al_decoder_kv_held_bytes(const al_decoder *dec);
/* Fills the whole cache with N(0, 0.25) values from seed: benchmarks time
 * decoding at a depth without running the tokens before it. */
void al_decoder_fill_random(al_decoder *dec, uint64_t seed);
/* Feeds a prompt into an empty cache in one forward (batched matrix
 * products, every weight read once instead of once per token): the cache then
 * holds exactly what n decode steps would have appended, pos = n, and
 * logits[V] are the last token's. Memory: one layer's activations for n
 * tokens (no logits but the last). Fails without touching the cache if it is
 * not empty, n is outside 1..capacity, a token is outside the vocabulary, or
 * the activations cannot be allocated (callers may then feed the tokens one at
 * a time). */
int al_decoder_prefill(al_decoder *dec, const int *tokens, int n, float *logits, al_err *err);
/* Feeds one token at position dec->pos; writes logits[V]; advances pos. */
int al_decoder_step(al_decoder *dec, int token, float *logits, al_err *err);

#endif
