/*
 * attn.h: the one seam between the model and a KV design.
 *
 * Everything outside src/attn/ talks to an attention design through the
 * al_attn_ops table below, so adding a design means one new file that fills
 * the table, plus its tests. A design owns:
 *   - its parameter list (HF tensor names relative to "model.layers.N.self_attn.",
 *     shapes, init), from which loading, saving, init and counting follow;
 *   - the closed-form KV-cache size per token (attention.md 3.6), from which
 *     the cache allocates;
 *   - training forward/backward over whole sequences, keeping in `saved` what
 *     its backward needs;
 *   - a decode step that reads and appends only its own cache form.
 *   - what the rest of the program asks about it (its descriptor, the first
 *     members of al_attn_ops): its name, its own config fields, the defaults
 *     it derives from the shared shape, its head widths, the cache formula
 *     in words, the Hugging Face architecture it is saved under.
 * The score function (softmax, ...) is applied by the shared kernels of
 * score.c, which every design calls with its q/k/v layout.
 *
 * The registry (AL_ATTN_DESIGNS below, registry.c) lists the designs; a new
 * design is its file, one line there, and its tests.
 */
#ifndef AL_ATTN_H
#define AL_ATTN_H

#include <stddef.h>
#include <stdint.h>

#include "../core/config.h"
#include "../core/core.h"
#include "../nn/nn.h"
#include "kvq.h"

enum { AL_ATTN_MAX_PARAMS = 12 };

typedef enum { AL_INIT_NORMAL, AL_INIT_ONES, AL_INIT_ZEROS } al_init_kind;

typedef struct al_param_spec {
    char name[64];        /* relative to the layer's "self_attn." prefix */
    int ndim;
    int64_t shape[2];
    al_init_kind init;
    float std;            /* for AL_INIT_NORMAL */
    int decay;            /* weight decay applies (matrices: 1, gains: 0) */
    int grad_written;     /* 1: backward writes this gradient whole when the layer's grads_unset is set */
} al_param_spec;

/* One layer's view of its weights: w[i] / g[i] follow params() order; g[] are
 * NULL when no gradients exist (inference).
 * wdt[i] is the dtype of w[i]'s data. attnlab's own models are fp32 arenas
 * (wdt all AL_DT_F32, which is 0, so a zeroed layer is one), or for
 * inference their BF16 copy (al_model_weights_bf16: matrices BF16 at the
 * arena's offsets, 1-D tensors fp32). A Hugging Face
 * checkpoint's matrices stay memory-mapped in their file dtype: w[i] then
 * points at read-only BF16/F16/F32 bytes (use al_attn_w, never dereference
 * it as float unless wdt[i] is F32); its 1-D tensors (norm gains, biases)
 * are fp32 copies. Such layers only run forward and decode. */
typedef struct al_attn_layer {
    const al_config *cfg;
    float *w[AL_ATTN_MAX_PARAMS];
    float *g[AL_ATTN_MAX_PARAMS];
    al_dtype wdt[AL_ATTN_MAX_PARAMS];
    const al_rope_table *rope;      /* the design's main RoPE table (rope_dims()[0]) */
    const al_rope_table *rope_aux;  /* a second table if the design needs one, else NULL */
    /* Set by the model for a backward after al_model_zero_grads, which left
     * the gradients whose spec has grad_written as they were: that backward
     * writes them (dW = dY^T X) instead of adding to them. */
    int grads_unset;
} al_attn_layer;

/* w[i] as a weight reference for the products of nn/wmat.c */
static inline al_wref al_attn_w(const al_attn_layer *L, int i) { return (al_wref){L->w[i], L->wdt[i]}; }

/* One layer's KV cache: its values in F32 or BF16 (al_decoder_create_kv).
 * Designs compute a token's entry in fp32 and store it with al_kv_store;
 * the decode kernels (decode.c) read either dtype. With q set the layer is
 * quantised (kvq.h): data is q's residual (row 0 = position q->qn), older
 * positions are q's codes; al_kv_store and al_attn_decode handle both, so
 * a design's code is the same for either. */
typedef struct al_kv {
    void *data;
    al_dtype dt;
    struct al_kvq *q; /* NULL: the plain cache */
    /* NULL, or the layer's eviction state (kve.h): data's rows are then
     * slots, al_kv_store maps a position to its slot and al_attn_decode
     * reads the held slots, accumulates their mass and evicts */
    struct al_kve *e;
} al_kv;

/* c's values [at, at + n) = src[0, n) (BF16: rounded to nearest even);
 * at counts from position 0 of the layer's cache either way */
void al_kv_store(al_kv c, size_t at, const float *src, size_t n);

/* Whether tensor i + 1 of w (dtypes dt; NULL: all fp32, e.g. the gradients)
 * starts right where tensor i, of numel elements, ends, in the same dtype:
 * the arena layout (attnlab's fp32 weights, their gradients, and the BF16
 * copy of al_model_weights_bf16, which keeps the offsets), where a design may
 * multiply adjacent tensors as one matrix. */
static inline int al_attn_adjacent(float *const *w, const al_dtype *dt, int i, size_t numel) {
    const al_dtype d = dt ? dt[i] : AL_DT_F32;
    return (!dt || dt[i + 1] == d) && (const char *)w[i + 1] == (const char *)w[i] + numel * al_dtype_size(d);
}

enum { AL_ATTN_MAX_FIELDS = 8 };

struct al_attn_source; /* convert.h */
typedef struct al_attn_shape al_attn_shape; /* below, with the score kernels */

typedef struct al_attn_ops {
    /* ---- descriptor: what the program asks about the design ---- */
    const char *name;  /* "mla": --attention, the "attention" of config.json's attnlab block */
    const char *title; /* "MLA": figure labels and reports */
    /* The Hugging Face architecture and model_type a language model of this
     * design is saved under (several designs may share one: Llama for
     * MHA/GQA/MQA), and whether a config of that architecture without an
     * attnlab block is this design (NULL: whenever the architecture says
     * so; else judged from the config's head counts). */
    const char *hf_arch, *hf_model_type;
    int (*hf_matches)(const al_config *c);
    /* the design's own config fields (members of al_config; core/config.h) */
    const al_config_field *fields;
    int n_fields;
    /* Fills what the design derives: own fields not given (given[i] for
     * fields[i]) from the shared shape (hidden, heads, head_dim), then the
     * shared fields the design fixes (MLA: head_dim = dn + dr; MLA and LRKV:
     * num_kv_heads = heads). NULL: nothing to derive. */
    void (*derive)(al_config *c, const unsigned char *given);
    /* The next four are optional (NULL: the al_attn_* wrappers below fall
     * back to head_dim, the value count, the name and the title). */
    /* per-head key (query.key) and value widths, for FLOP counts and the
     * "% of MHA" cache ratio (MHA of the same heads has 2 H dv values) */
    void (*head_widths)(const al_config *c, int *dk, int *dv);
    /* the cache's closed form in words ("2 x 4 KV heads x 32"), and the design
     * in one line for `info` ("gqa attention (8 query heads, ...)") */
    void (*cache_formula)(const al_config *c, char *buf, size_t cap);
    void (*describe)(const al_config *c, char *buf, size_t cap);
    /* the panel title of the head-similarity figure ("LRKV (r=14)") */
    void (*figure_title)(const al_config *c, char *buf, size_t cap);
    int qkv_bias; /* implements Qwen2's q/k/v biases */

    /* ---- implementation ---- */
    /* design-specific shape checks beyond al_config_validate */
    int (*validate)(const al_config *c, al_err *err);
    /* the layout a layer's weights (and, when `training`, its gradients)
     * must have for this design's kernels (e.g. tensors adjacent in the arena
     * so they multiply as one matrix); checked whenever a model binds its
     * layers, so the kernels may rely on it. NULL: any layout. */
    int (*validate_layer)(const al_attn_layer *L, int training, al_err *err);
    /* fills out[0..n) and returns n (<= AL_ATTN_MAX_PARAMS) */
    int (*params)(const al_config *c, al_param_spec *out);
    /* dimensions of the RoPE tables the design rotates with: dims[0] main,
     * dims[1] auxiliary (0: none) */
    void (*rope_dims)(const al_config *c, int dims[2]);
    /* KV-cache values per token per layer (attention.md 3.6) */
    size_t (*cache_values_per_token)(const al_config *c);
    /* floats kept per layer between forward and backward for B x T tokens */
    size_t (*saved_floats)(const al_config *c, int B, int T);
    /* floats of workspace shared by all layers (forward, backward and decode) */
    size_t (*scratch_floats)(const al_config *c, int B, int T);
    /* x[B*T, d] (normed layer input) -> y[B*T, d] (overwritten); x is fp32,
     * or in BF16 training BF16 values (al_acts.acts_bf16), which only the
     * products read (al_matmul_x, al_linear_bwd_ref: the same bits) */
    void (*forward)(const al_attn_layer *L, al_wref x, float *y, float *saved, float *scratch, int B, int T);
    /* dy[B*T, d] -> dx[B*T, d] (accumulated) and L->g[] (accumulated; the
     * grad_written ones written where L->grads_unset) */
    void (*backward)(const al_attn_layer *L, al_wref x, const float *dy, float *dx, const float *saved,
                     float *scratch, int B, int T);
    /* one token: x[d] at position pos -> y[d]; appends its cache entry at
     * value pos * cache_values_per_token of the layer's cache (al_kv_store)
     * and reads entries [0, pos] */
    void (*decode)(const al_attn_layer *L, const float *x, float *y, al_kv cache, int pos, float *scratch);
    /* after forward over one sequence (B = 1) of T tokens at positions
     * 0..T-1: writes their cache entries [0, T) from `saved`, the values
     * decode would have appended one token at a time (a prompt's prefill) */
    void (*cache_fill)(const al_attn_layer *L, const float *saved, int T, al_kv cache);
    /* The effective query and key maps of head h (attention.md 4), for the
     * head-similarity analysis: q_h = Wq_h x and k_h = Wk_h x at relative
     * position 0 (rotations ignored; norms only through their gains), written
     * in double as wq[d_qk, d] and wk[d_qk, d], row-major. Returns d_qk; with
     * wq == wk == NULL writes nothing and only returns d_qk (to size buffers). */
    int (*head_maps)(const al_attn_layer *L, int h, double *wq, double *wk);
    /* head h's rotated queries and keys, as the score kernels see them, of
     * sequence b after a forward that filled `saved` (B x T tokens):
     * q[T, d_qk], k[T, d_qk]. Returns d_qk (NULL q, k: only returns it).
     * Attention maps come from these, one head at a time. */
    int (*head_qk)(const al_attn_layer *L, const float *saved, int B, int T, int b, int h, float *q, float *k);

    /* ---- conversion from MHA/GQA (attnlab convert; convert.h, docs/convert.md) ----
     * Both NULL for a design that cannot be a conversion's target (MHA).
     * convert_shape: fills the target config dst (a copy of the source's with
     * this design's index and the fields the user gave: given[i] for
     * fields[i], num_kv_heads 0 unless --kv-heads was given) with what the
     * conversion needs, and refuses what it cannot honour in one line
     * (al_err). With layers == NULL it only decides from the shapes (before
     * any calibration); with the source's layers (src[0..L)) it may also
     * choose from their calibration activations (MLA: which RoPE pairs stay
     * rotated, through rope_theta). Fields it does not set stay as given. */
    int (*convert_shape)(const struct al_attn_source *layers, const al_config *src, al_config *dst,
                         const unsigned char *given, al_err *err);
    /* Fills the target layer's weights dst->w[] (fp32 arena tensors of the
     * target config) from one source layer, and writes each head's relative
     * Frobenius error of its key and value maps (RoPE at position 0) in
     * k_err[H], v_err[H]. Workspace is its own (conversion is not a kernel). */
    int (*convert)(const struct al_attn_source *src, const al_attn_layer *dst, double *k_err, double *v_err,
                   al_err *err);
    /* The cache row as segments of keys and values for quantised caches
     * (kvq.h): out[0..n), n <= AL_KV_MAX_SEGS returned; latent: MLA's c~
     * per channel or per token (AL_KVQ_LATENT_*, others ignore it). NULL:
     * the design's cache cannot be quantised. */
    int (*cache_segments)(const al_config *c, int latent, al_kv_seg *out);
    /* The shape its forward and backward give the score kernels for B x T
     * tokens, so that an owner can plan their workspace up front
     * (al_attn_reserve; al_model_attn_reserve). */
    al_attn_shape (*score_shape)(const al_config *c, int B, int T);
} al_attn_ops;

/* ---- the registry (registry.c) ----
 * X(ENUM, ops table): one line per design, in the order `--help` lists
 * them; al_config.attention is the design's index. MHA, GQA and MQA share one
 * implementation (mha.c) with three descriptors. */
#define AL_ATTN_DESIGNS(X)                                                                                             \
    X(MHA, al_attn_mha_ops)                                                                                            \
    X(GQA, al_attn_gqa_ops)                                                                                            \
    X(MQA, al_attn_mqa_ops)                                                                                            \
    X(MLA, al_attn_mla_ops)                                                                                            \
    X(LRKV, al_attn_lrkv_ops)

typedef int al_attn_kind; /* a design's index in the registry (al_config.attention) */
#define AL_ATTN_ENUM_(e, ops) AL_ATTN_##e,
enum { AL_ATTN_DESIGNS(AL_ATTN_ENUM_) AL_ATTN_COUNT };
#undef AL_ATTN_ENUM_
#define AL_ATTN_EXTERN_(e, ops) extern const al_attn_ops ops;
AL_ATTN_DESIGNS(AL_ATTN_EXTERN_)
#undef AL_ATTN_EXTERN_

/* The design of index k (NULL if there is none). */
const al_attn_ops *al_attn_design(int k);
/* The design for a config (NULL for an unknown index). */
const al_attn_ops *al_attn_ops_for(const al_config *c);
/* A design's name ("?" for an unknown index) and its index by name (-1: none). */
const char *al_attn_name(int k);
int al_attn_from_name(const char *s, int *k);
/* The descriptor's questions for c's design, with the fallbacks of its
 * optional entries: head widths (head_dim, head_dim), the cache formula
 * ("N values"), the one-line description ("NAME attention (H heads, head
 * dim D)") and the figure title (the design's title). */
void al_attn_head_widths(const al_config *c, int *dk, int *dv);
void al_attn_cache_formula(const al_config *c, char *buf, size_t cap);
void al_attn_describe(const al_config *c, char *buf, size_t cap);
void al_attn_figure_title(const al_config *c, char *buf, size_t cap);
/* "mha, gqa, mqa, mla or lrkv" into buf (for messages); returns buf. */
const char *al_attn_names(char *buf, size_t cap);

/* ---- shared score kernels (score.c) ----
 * Attention over B sequences of T tokens for H query heads sharing G KV heads
 * (head h reads KV head h / (H/G)), causal unless `bidirectional`. Row t of
 * sequence b is row b*T + t of each matrix; head h's vector starts at column
 * h*dk (q, k) or h*dv (v, o) of a row, rows are ld* floats apart.
 *   q[B*T, ldq]  k[B*T, ldk]  v[B*T, ldv]  o[B*T, ldo]  lse[B, H, T]
 * Weights follow attention.md 2 with s = scale * q.k:
 *   softmax  exp(s) / sum          poly     poly_coef * s^poly_power
 *   relu     relu(s) / score_n     sigmoid  sigmoid(s - log score_n)
 * and masked pairs weigh exactly 0. Softmax keeps each row's log-sum-exp in
 * lse so backward can recompute weights instead of storing T x T per head;
 * the other functions need nothing saved (their lse entries are set to 0).
 * The fields after `scale` were appended so that positional initialisers of
 * the first eleven keep working: zeros mean causal softmax. */
typedef struct al_attn_shape {
    int B, T, H, G, dk, dv;
    int ldq, ldk, ldv, ldo;
    float scale;
    int bidirectional;   /* 1: every key is visible to every query (no mask) */
    al_score_kind score; /* AL_SCORE_SOFTMAX (0) unless set */
    int poly_power;      /* poly: integer p >= 1 */
    float poly_coef;     /* poly: c, already resolved ("auto" = 1/sqrt(score_n)) */
    float score_n;       /* relu, sigmoid (and poly "auto"): N */
    int grads_overwrite; /* al_attn_bwd: 1 writes dq, dk, dv (every row's head columns), 0 adds into them */
} al_attn_shape;

/* Copies the config's score function into s (score, poly_power, resolved
 * poly_coef, score_n) and the config's mask (bidirectional for vision);
 * leaves the shape alone. Every
 * design calls this where it builds its shape, and for decode. */
void al_attn_set_score(al_attn_shape *s, const al_config *c);

void al_attn_fwd(const al_attn_shape *s, const float *q, const float *k, const float *v, float *o, float *lse);
/* The kernel set al_attn_fwd / al_attn_bwd run now. F32 products (nn.h's
 * precision): "avx512" (also on the CPU sets above it, core/cpu.h), "avx2"
 * or "generic"; BF16 products: "amx", "avx512-bf16" or "bf16-portable"
 * (docs/kernels.md, "The BF16 kernels"). */
const char *al_attn_kernel_name(void);
/* dq, dk, dv ACCUMULATE, or are written where s->grads_overwrite (then the
 * kernels need not read them: every row's head columns are written, with
 * streaming stores where the rows are whole aligned vectors, so nothing
 * is read from memory before it is overwritten); do[B*T, ldo] (the
 * gradient of o). */
void al_attn_bwd(const al_attn_shape *s, const float *q, const float *k, const float *v, const float *o,
                 const float *lse, const float *dout, float *dq, float *dk, float *dv);
/* Plain reference versions (materialise each head's T x T weights in double), for tests. */
void al_attn_fwd_ref(const al_attn_shape *s, const float *q, const float *k, const float *v, float *o, float *lse);
void al_attn_bwd_ref(const al_attn_shape *s, const float *q, const float *k, const float *v, const float *o,
                     const float *lse, const float *dout, float *dq, float *dk, float *dv);

/* Decode: row[n] holds one query's scaled scores s_j against the n visible
 * keys; replaces them in place with the weights p_j of s's score function
 * (softmax normalises the row; the others map each entry on its own, so a
 * design that streams the row in chunks may call this per chunk for them
 * and simply add the chunks' p.v). Only the score fields of s are read. */
void al_score_row(const al_attn_shape *s, float *row, int n);

/* ---- decode over a cache (decode.c) ----
 * A layer's cache as rows of `row` floats, one per position; key group g of
 * position j at cache + j*row + k_off + g*k_group (dk floats), its value at
 * cache + j*row + v_off + g*v_group (dv floats). */
typedef struct al_decode_view {
    al_kv cache; /* offsets below count values of its dtype */
    size_t row, k_off, k_group, v_off, v_group;
    /* optional per-head parts (LRKV): head h's key goes on with dk2 values
     * at k2_off + h*dk2, its value with dv2 at v2_off + h*dv2 (decode.c) */
    size_t k2_off, v2_off;
    int dk2, dv2;
} al_decode_view;
/* One token: q[H, dk + dk2] against positions [0, n) -> o[H, dv + dv2], with
 * s's H, G, dk, dv, scale and score function; every key/value is read once
 * however many heads share it. scratch: al_attn_decode_scratch(s, dv2, n)
 * floats. */
void al_attn_decode(const al_attn_shape *s, const float *q, const al_decode_view *v, int n, float *o,
                    float *scratch);
size_t al_attn_decode_scratch(const al_attn_shape *s, int dv2, int max_n);
/* Benchmarks: while on, al_attn_decode adds its wall time to a total that
 * al_attn_decode_seconds reads (`bench decode`: the attention's share of a
 * token and the KV cache's own read speed). Turning it on or off zeroes the
 * total; one process-wide total, so for one decoding thread at a time. */
void al_attn_decode_timing(int on);
double al_attn_decode_seconds(void);
/* Tests: al_attn_decode runs al_attn_decode_ref instead (1) or not (0), so
 * a whole model can decode through the reference. */
void al_attn_test_decode_ref(int on);
/* Plain reference (double accumulation), for tests. */
void al_attn_decode_ref(const al_attn_shape *s, const float *q, const al_decode_view *v, int n, float *o);
/* The workspace of al_attn_fwd / al_attn_bwd: one arena per calling
 * thread (packed K/V tiles and per-thread tiles, O(T) per head, never
 * T x T), grown to the largest call and kept between calls. Its owner may
 * plan it up front: al_attn_reserve makes it hold what forward and backward
 * of shape s need with the kernel set and thread count in use (0, or -1
 * with one line in err if memory runs out); al_attn_release frees the
 * calling thread's arena (a thread's arena is also freed when it exits). A
 * call the arena cannot be grown for runs the slower path that needs none,
 * with the same results within fp32 rounding: the kernels never fail.
 * al_attn_workspace_bytes: the bytes the calling thread's arena holds now.
 * al_attn_test_no_workspace(1) makes every call take that path (tests);
 * 0 restores it. Do not flip it while a kernel runs. */
int al_attn_reserve(const al_attn_shape *s, al_err *err);
void al_attn_release(void);
size_t al_attn_workspace_bytes(void);
void al_attn_test_no_workspace(int on);
/* al_attn_test_poison_workspace(1): every call's workspace is filled with
 * NaN bytes first, so a kernel that reads a part it did not write (a
 * padding row it meant to clear) fails its test instead of finding the
 * zeros of fresh pages (tests) */
void al_attn_test_poison_workspace(int on);

/* exp of each element (al_expf of nn/fastmath.h, within ~1.5 ulp). */
void al_expf_inplace(float *x, int n);

#endif
