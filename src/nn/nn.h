/*
 * nn.h: the building blocks of the transformer, forward and backward.
 *
 * Layout: activations are row-major matrices of N rows (N = batch x tokens)
 * of width d; weights are [out, in] (Hugging Face convention, y = W x).
 * Backward functions ACCUMULATE (+=) into parameter gradients and into dx
 * unless said otherwise, so a residual stream can collect several branches.
 *
 * Determinism: every reduction across rows (e.g. a norm's weight gradient) is
 * summed in a fixed order that does not depend on the thread count, so a run
 * repeats bit for bit (resume depends on it).
 */
#ifndef AL_NN_H
#define AL_NN_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>

#include "../core/config.h"
#include "../core/core.h"

/* ---- matrix products (CBLAS) ----
 * All of them give the same bits for any thread count (linear.c says how);
 * call them outside OpenMP regions to use every thread. */
/* C[M, N] = alpha op(A)[M, K] op(B)[K, N] + beta C, row-major with cblas_sgemm's
 * arguments (op: transposed when a_transposed / b_transposed is nonzero). */
void al_sgemm(int a_transposed, int b_transposed, int M, int N, int K, float alpha, const float *A, int lda,
              const float *B, int ldb, float beta, float *C, int ldc);
/* How many blocks of rows (run in parallel) al_sgemm cuts M rows of C into. */
int al_sgemm_row_blocks(int M);
/* y[N,out] (+)= x[N,in] . W[out,in]^T ; accumulate: 0 overwrite, 1 add */
void al_linear_fwd(float *y, const float *x, const float *W, int N, int in, int out, int accumulate);
/* dx[N,in] (+)= dy[N,out] . W[out,in]   (skipped if dx == NULL)
 * dW[out,in] (+)= dy[N,out]^T . x[N,in] (skipped if dW == NULL)
 * each added to (dx_add, dW_add 1) or written (0): writing the first term
 * of a gradient buffer spares its zeroing (and the zeros read back). */
void al_linear_bwd_into(float *dx, int dx_add, float *dW, int dW_add, const float *dy, const float *x, const float *W,
                        int N, int in, int out);

/* ---- precision of the matrix products (precision.c) ----
 * One process-wide mode, like the CPU set of core/cpu.h: every product made
 * through al_sgemm, al_linear_fwd/bwd and al_matmul runs in it.
 *   F32   fp32 operands, fp32 accumulation (OpenBLAS sgemm)
 *   BF16  both operands rounded to bfloat16 (nearest, ties to even), their
 *         products summed in fp32: mixed precision as the matrix units (AMX
 *         tdpbf16ps, AVX512-BF16 vdpbf16ps) and torch.autocast compute it.
 *         Where the CPU has no bf16 products the same values are computed by
 *         rounding the operands and multiplying in fp32 (exact: a product of
 *         two bf16 values fits in fp32), slower than F32: `auto` never picks
 *         it there.
 * Set the mode before a model's work and not while a product runs. The mode
 * does not change anything else: norms, softmax, the loss, gradients and the
 * optimizer stay fp32 whatever it is.
 * Weight arenas can carry a BF16 copy (al_bf16_shadow_*): a product whose
 * operand lies in such an arena reads the copy instead of rounding the fp32
 * values again, so training rounds its weights once per step (refresh after
 * each optimizer step) instead of once per product. */
typedef enum { AL_PREC_F32 = 0, AL_PREC_BF16 = 1 } al_precision;
/* "F32" / "BF16": the spelling of --weights and --kv-dtype in JSON. */
const char *al_precision_name(al_precision p);
/* "f32", "bf16" (any case) into *out, and "auto" into al_precision_auto();
 * 0, or -1 for anything else. */
int al_precision_from_name(const char *name, al_precision *out);
/* What `auto` means here: BF16 where bf16 products outrun fp32's on the CPU
 * set in use (core/cpu.h): amx, or avx512-bf16 on a CPU whose vdpbf16ps is
 * fast (al_cpu_bf16_dot_fast: AMD's); else F32 (Intel's avx512-bf16 without
 * AMX ran the bf16 step at 0.8x fp32's). */
al_precision al_precision_auto(void);
/* The same rule for a given set (an al_cpu_level) and vendor answer. */
al_precision al_precision_auto_for(int cpu_level, int bf16_dot_fast);
void al_precision_set(al_precision p);
al_precision al_precision_now(void);
/* What BF16 products run on now, for reports: al_bf16_engine_name of
 * al_bf16_engine_now() ("onednn", "amx", "avx512-bf16" or "emulated"). */
const char *al_precision_engine(void);

/* The engines BF16 products can run on (precision.c; docs/kernels.md):
 *   emulated     operands rounded to bf16 values in fp32, OpenBLAS sgemm
 *                (exact products, fp32 sums): every CPU
 *   onednn       oneDNN's bf16 matmul primitives (libdnnl): AVX512-BF16/AMX
 *   avx512-bf16  attnlab's own vdpbf16ps kernel (gemm_avx512bf16.c)
 *   amx          attnlab's own AMX tile kernel, tdpbf16ps (gemm_amx.c), over
 *                operands packed whole once per product (bf16_tiles.c)
 * The engine in use: al_bf16_engine_force's, else the environment variable
 * ATTNLAB_BF16_ENGINE=onednn|own|amx|avx512-bf16|emulated ("own": amx where
 * it runs, else avx512-bf16), else AL_BF16_DEFAULT (amx: 1.2-2.0x oneDNN's
 * products and a 1.2-1.5x faster gpt2 training step on a shared AMX host,
 * docs/bench.md); a choice that cannot run here falls to the next that can
 * (amx -> onednn -> avx512-bf16 -> emulated: oneDNN measured faster than the
 * own vdpbf16ps kernel on Zen 4). An engine runs where the CPU set in use
 * (core/cpu.h, ATTNLAB_CPU) has its instructions and, for onednn, where a
 * bf16 matmul primitive can be created (probed once, cached). */
#define AL_BF16_ENGINES(X) X(EMULATED, "emulated") X(ONEDNN, "onednn") X(AVX512BF16, "avx512-bf16") X(AMX, "amx")
#define AL_BF16_ENGINE_ENUM(id, name) AL_BF16_##id,
typedef enum { AL_BF16_ENGINES(AL_BF16_ENGINE_ENUM) AL_BF16_ENGINE_COUNT } al_bf16_engine;
#undef AL_BF16_ENGINE_ENUM
#define AL_BF16_DEFAULT AL_BF16_AMX
/* "emulated", "onednn", ... ("?" out of range). */
const char *al_bf16_engine_name(al_bf16_engine e);
/* A name (as above, or "own") into *out: 0, or -1 for an unknown name. "own"
 * gives the best own kernel this CPU set runs (amx, else avx512-bf16). */
int al_bf16_engine_of_name(const char *name, al_bf16_engine *out);
/* Whether engine e can run now (CPU set in use, library, OS permission). */
int al_bf16_engine_runs(al_bf16_engine e);
/* The engine BF16 products use now (after the fallbacks above). */
al_bf16_engine al_bf16_engine_now(void);
/* Forces engine e (lowered as above if it cannot run) for this process; -1
 * returns to automatic. Returns the engine now in effect. Not while a
 * product runs (tests compare engines in one process). */
al_bf16_engine al_bf16_engine_force(int e);
/* The BF16 products' workspace: each thread that calls al_sgemm in BF16
 * mode owns one buffer. For the onednn engine it holds the product's two
 * operands rounded to BF16 (those without a BF16 copy: activations; its size
 * follows the largest product, e.g. 6 MB for 1024 x 3072), for the amx
 * engine both operands packed into tiles (likewise; 116 MB for a
 * Llama-7B-shaped MLP product of 1200 tokens), for the others
 * one slot per OpenMP thread of rounded operand blocks of one tile (sized by
 * the engine's block sizes: at most a few MB per thread). al_precision_reserve
 * plans the slots for the calling thread, the engine in use and the thread
 * count now (0, or -1 with one line in err when out of memory; nothing for
 * onednn and amx, whose room is sized by the first products); a buffer too small
 * grows at first use, and if memory runs out there the product runs the
 * emulated engine on small stack blocks (slower; the same values within fp32
 * rounding). al_precision_release frees the calling thread's buffer (a
 * thread's is also freed when it exits). */
int al_precision_reserve(al_err *err);
void al_precision_release(void);
/* Test hook: nonzero makes the onednn engine build fp32 primitives fed with
 * operands rounded to bf16 values (the products and sums of the bf16 engine,
 * on CPUs whose oneDNN has no bf16 matmul), so its plumbing (primitive
 * cache, strides, alpha, beta, workspace) runs anywhere; 0 restores bf16. */
void al_bf16_onednn_test_f32(int on);
/* A BF16 copy of the fp32 arena w[n] (weights), read by products in BF16
 * mode in place of w. 0, or -1 with err (out of memory; too many arenas). */
int al_bf16_shadow_attach(const float *w, size_t n, al_err *err);
/* Re-rounds the copy of the arena starting at w (after w changed). */
void al_bf16_shadow_refresh(const float *w);
/* The copy of the arena starting at w, for an owner that rounds each new
 * value into it as it stores it (al_bf16_round_run, while the values are
 * in cache) instead of a later al_bf16_shadow_refresh; NULL when w has
 * none. The products' packed forms of the old values are dropped. */
uint16_t *al_bf16_shadow_write(const float *w);
/* dst[n] = src[n] rounded to BF16, nearest even (the copies' rounding). */
void al_bf16_round_run(uint16_t *restrict dst, const float *restrict src, size_t n);
/* The same bits, the stores streamed past the caches where the CPU allows
 * (for a large destination read back much later: the weights' copy). */
void al_bf16_round_stream(uint16_t *restrict dst, const float *restrict src, size_t n);
/* Drops the copy of the arena starting at w (no-op if none). */
void al_bf16_shadow_detach(const float *w);
/* The BF16 copy of element p of an attached arena, or NULL. */
const uint16_t *al_bf16_shadow_of(const float *p);

/* Compensated BF16 products, for the few products a design measured its
 * bf16 quality to hinge on (attn/mla.c: the up-projections out of its
 * normalised latents; docs/study.md). While the calling thread's flag is
 * set, each product it makes that would run on the BF16 engines splits
 * every fp32 operand X into hi = bf16(X) and lo = bf16(X - hi), 16
 * significant bits together, and sums lo_A hi_B + hi_A lo_B + hi_A hi_B:
 * three BF16 products on the same engine (still the matrix units, about
 * three times the work), within 3 x 2^-18 (1.2e-5) of sum |a b| of the
 * fp32 product, where a plain BF16 one may be off by 2^-8 (lo_A lo_B is
 * left out and each lo rounded). F32 products, and BF16
 * operands (their own hi), are as without it. Sets the flag to `on` and
 * returns what it was, for the caller to restore. */
int al_bf16_split(int on);

/* ---- weights in their checkpoint dtype (wmat.c) ----
 * A weight reference: W[out, in] row-major at p, elements of dtype dt (F32,
 * BF16 or F16). attnlab's own models are F32 arenas; Hugging Face checkpoints
 * stay memory-mapped in their file dtype (docs/hf-models.md). */
typedef struct al_wref {
    const void *p;
    al_dtype dt;
} al_wref;
static inline al_wref al_wref_f32(const float *p) { return (al_wref){p, AL_DT_F32}; }
/* The same data from element `elems` on (e.g. row r of W[out, in]: r * in). */
static inline al_wref al_wref_at(al_wref w, size_t elems) {
    return (al_wref){(const char *)w.p + elems * al_dtype_size(w.dt), w.dt};
}
/* al_sgemm with each operand F32 or BF16 (al_wref: a memory-mapped BF16
 * checkpoint's weights; an activation that BF16 training stores rounded,
 * model.h's al_acts.acts_bf16). A BF16 operand takes the product to BF16 whatever the
 * precision mode: the fp32 operands rounded to bf16, the BF16 ones read as
 * they are, fp32 sums; the same bits as al_sgemm in BF16 mode over the
 * widened values. */
void al_sgemm_ref(int a_transposed, int b_transposed, int M, int N, int K, float alpha, al_wref A, int lda, al_wref B,
                  int ldb, float beta, float *C, int ldc);
/* al_linear_bwd_into with dy and x each F32 or BF16 (W fp32, as training's). */
void al_linear_bwd_ref(float *dx, int dx_add, float *dW, int dW_add, al_wref dy, al_wref x, const float *W, int N,
                       int in, int out);
/* x[n] rounded to BF16 once, for several BF16 products that read the same
 * fp32 operand (a linear's dy, read by its dx and dW products), in a buffer
 * of the calling thread's that stays valid until its next call; NULL where
 * the products had better round it themselves (not in BF16 mode, or on an
 * engine other than onednn) or memory ran out. The products then read the
 * very values they would have rounded: the same bits. */
const uint16_t *al_bf16_round_shared(const float *x, size_t n);
/* Products with at most this many rows of x take the direct (matrix-vector)
 * kernel for 16-bit weights; more rows widen W panel by panel for sgemm. */
enum { AL_WMAT_SMALL_N = 4 };
/* y[N, out] (+)= x[N, in] . W[out, in]^T, rows of x ldx floats apart and of
 * y ldy apart. F32: the sgemm of al_linear_fwd (identical bits). */
void al_matmul(float *y, int ldy, const float *x, int ldx, al_wref W, int N, int in, int out, int accumulate);
/* al_matmul with x F32 or BF16 (BF16 training's stored activations, whose
 * weights are fp32: then al_sgemm_ref, the bits of al_matmul in BF16 mode). */
void al_matmul_x(float *y, int ldy, al_wref x, int ldx, al_wref W, int N, int in, int out, int accumulate);
/* An F32 reference's values (asserts the dtype). */
static inline const float *al_wref_f32_p(al_wref x) {
    assert(x.dt == AL_DT_F32);
    return (const float *)x.p;
}
/* y[out] (+)= W[out, in] x[in]  (F32: wmat.c's own kernel, or cblas_sgemv
 * under ATTNLAB_MATVEC=blas / al_wmat_matvec_blas(1)) */
void al_matvec(float *y, const float *x, al_wref W, int out, int in, int accumulate);
/* y[in] (+)= W[out, in]^T x[out]  (F32: cblas_sgemv, transposed) */
void al_matvec_t(float *y, const float *x, al_wref W, int out, int in, int accumulate);
/* Plain reference of al_matmul: double sums, scalar widening (for tests). */
void al_matmul_ref(float *y, int ldy, const float *x, int ldx, al_wref W, int N, int in, int out, int accumulate);
/* Elements [off, off + n) of W widened to fp32 / double; one element. */
void al_wread(float *dst, al_wref W, size_t off, size_t n);
void al_wread_f64(double *dst, al_wref W, size_t off, size_t n);
float al_wget(al_wref W, size_t i);
/* Kernel selection: the direct kernel and the widening use the set of
 * core/cpu.h in use (AVX-512 for avx512 and above, AVX2 + F16C, or plain C
 * for generic), which ATTNLAB_CPU or al_cpu_force lower for every kernel
 * family at once. AL_WMAT_PANEL_ROWS=n (environment) or al_wmat_panel_rows(n)
 * (tests) sends every product with 16-bit weights through the panel path
 * with panels of n rows (n <= 0: automatic). Do not call it while a kernel
 * runs. al_wmat_kernel_name: the set the products use now ("avx512",
 * "avx2" or "generic"). */
void al_wmat_panel_rows(int rows);
const char *al_wmat_kernel_name(void);
/* F32 al_matvec through cblas_sgemv (on != 0) or attnlab's own kernel (0,
 * the default; the environment's ATTNLAB_MATVEC=blas|own sets the start).
 * Not while a kernel runs. al_wmat_matvec_name: "blas" or "own". */
void al_wmat_matvec_blas(int on);
const char *al_wmat_matvec_name(void);

/* ---- RMSNorm: y = x / sqrt(mean(x^2) + eps) * w ---- */
/* y[N,d], rstd[N] (saved for backward), x[N,d], w[d] */
void al_rmsnorm_fwd(float *y, float *rstd, const float *x, const float *w, int N, int d, float eps);
/* The residual add and the next norm in one pass: s[N,d] = a + b, then y, rstd
 * = al_rmsnorm_fwd of s, each row normalised while it is in L1 (the same bits
 * as the two calls). s may equal a or b; y must not overlap s, a or b. */
void al_add_rmsnorm_fwd(float *s, float *y, float *rstd, const float *a, const float *b, const float *w, int N, int d,
                        float eps);
/* The two with y rounded to BF16 (as al_bf16_round_run rounds), for BF16
 * training, whose products read it (model.c). */
void al_rmsnorm_fwd_bf16(uint16_t *y, float *rstd, const float *x, const float *w, int N, int d, float eps);
void al_add_rmsnorm_fwd_bf16(float *s, uint16_t *y, float *rstd, const float *a, const float *b, const float *w, int N,
                             int d, float eps);
/* dx[N,d] += , dw[d] += ; dy[N,d], x[N,d], w[d], rstd[N] */
void al_rmsnorm_bwd(float *dx, float *dw, const float *dy, const float *x, const float *w,
                    const float *rstd, int N, int d);
/* Test hook: nonzero makes al_rmsnorm_bwd take the path it falls back to when
 * its scratch allocation fails (same results bit for bit); 0 restores the
 * normal path. Do not flip it while a kernel runs. */
void al_rmsnorm_test_no_scratch(int on);

/* ---- RoPE ----
 * A table of cos/sin for positions [0, max_pos) and frequency index
 * i in [0, half): angle = pos * theta^(-2i/(2*half)). */
typedef struct al_rope_table {
    int max_pos, half;
    float *cos, *sin; /* [max_pos][half] */
} al_rope_table;
int al_rope_table_init(al_rope_table *t, int max_pos, int dim, double theta); /* 0 ok, -1 OOM */
/* al_rope_scaling (core/config.h): Llama 3's frequency scaling or none. */
/* As al_rope_table_init with each inverse frequency scaled as transformers'
 * _compute_llama3_parameters does (sc NULL or AL_ROPE_DEFAULT: unscaled):
 * wavelength w = 2 pi / f; w < L / high_freq_factor: f kept; w > L /
 * low_freq_factor: f / factor; between: (1 - s) f / factor + s f with
 * s = (L / w - low_freq_factor) / (high_freq_factor - low_freq_factor),
 * L = original_max_position. Computed in double. */
int al_rope_table_init_scaled(al_rope_table *t, int max_pos, int dim, double theta, const al_rope_scaling *sc);
/* The inverse frequency of pair i of a dim-dimensional rotation (half of
 * them), with sc's scaling: what the table's angles are pos times. */
double al_rope_inv_freq(int i, int dim, double theta, const al_rope_scaling *sc);
/* YaRN (sc type AL_ROPE_YARN), as DeepseekV2YarnRotaryEmbedding: with the
 * correction range [lo, hi] = [floor(c(beta_fast)), ceil(c(beta_slow))]
 * clipped to [0, dim - 1], c(r) = dim ln(L / (2 pi r)) / (2 ln theta),
 * L = original_max_position, and ramp(i) = clamp((i - lo) / (hi - lo), 0, 1),
 * inv_freq(i) = f / factor * ramp + f * (1 - ramp). The table's cos and sin
 * are then multiplied by al_rope_attention_factor(sc) =
 * mscale(factor, mscale) / mscale(factor, mscale_all_dim), with
 * al_rope_yarn_mscale(s, m) = 1 for s <= 1, else 0.1 m ln(s) + 1 (such a
 * table rotates and scales: inference only). 1 for other scalings. */
double al_rope_yarn_mscale(double factor, double mscale);
double al_rope_attention_factor(const al_rope_scaling *sc);
void al_rope_table_free(al_rope_table *t);
/* In place on x: rows r = 0..rows-1, row r starts at x + r*row_stride and
 * holds n_vec vectors of dimension dim (= 2*tab->half) contiguously; row r is
 * at position pos0 + (r % T). sign = +1 rotates by +angle (forward); sign = -1
 * rotates by -angle, which is the backward pass (rotation is orthogonal).
 * al_rope_half pairs element i with i + dim/2 (HF Llama "rotate_half");
 * al_rope_interleaved pairs 2i with 2i+1 (DeepSeek/Meta original). */
void al_rope_half(float *x, int rows, int T, int pos0, int n_vec, int row_stride,
                  const al_rope_table *tab, int sign);
void al_rope_interleaved(float *x, int rows, int T, int pos0, int n_vec, int row_stride,
                         const al_rope_table *tab, int sign);

/* ---- SwiGLU: h = silu(g) * u, silu(g) = g * sigmoid(g) ---- */
void al_swiglu_fwd(float *h, const float *g, const float *u, size_t n);
/* writes (does not accumulate) dg, du from dh */
void al_swiglu_bwd(float *dg, float *du, const float *dh, const float *g, const float *u, size_t n);

/* ---- embedding: x[N,d] = E[tokens[n]] ---- */
void al_embed_fwd(float *x, const float *E, const int *tokens, int N, int d);
/* dE[tokens[n]] += dx[n] (deterministic order) */
void al_embed_bwd(float *dE, const float *dx, const int *tokens, int N, int d);

/* ---- softmax cross-entropy over V classes ----
 * Returns the SUM over rows of -log softmax(logits[n])[targets[n]] (double).
 * If dlogits != NULL writes dlogits[n] = (softmax(logits[n]) - onehot) * grad_scale;
 * dlogits may equal logits (in place). targets[n] < 0 means "ignore this row"
 * (no loss, zero gradient). */
double al_xent_fwd_bwd(float *dlogits, const float *logits, const int *targets, int N, int V,
                       float grad_scale);

/* ---- GeGLU (Gemma): h = gelu_tanh(g) * u, inference only ---- */
void al_geglu_tanh_fwd(float *h, const float *g, const float *u, size_t n);
/* h = act(g) * u: al_swiglu_fwd or al_geglu_tanh_fwd */
void al_glu_fwd(al_mlp_act act, float *h, const float *g, const float *u, size_t n);
/* al_glu_fwd and al_swiglu_bwd with their outputs rounded to BF16 (as
 * al_bf16_round_run rounds), for BF16 training, whose products read them
 * (model.c); the outputs do not overlap the inputs. */
void al_glu_fwd_bf16(al_mlp_act act, uint16_t *h, const float *g, const float *u, size_t n);
void al_swiglu_bwd_bf16(uint16_t *dg, uint16_t *du, const float *dh, const float *g, const float *u, size_t n);

#endif
