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

#include <stddef.h>
#include <stdint.h>

/* ---- matrix products (CBLAS) ---- */
/* y[N,out] (+)= x[N,in] . W[out,in]^T ; accumulate: 0 overwrite, 1 add */
void al_linear_fwd(float *y, const float *x, const float *W, int N, int in, int out, int accumulate);
/* dx[N,in] += dy[N,out] . W[out,in]   (skipped if dx == NULL)
 * dW[out,in] += dy[N,out]^T . x[N,in] (skipped if dW == NULL) */
void al_linear_bwd(float *dx, float *dW, const float *dy, const float *x, const float *W, int N, int in, int out);

/* ---- RMSNorm: y = x / sqrt(mean(x^2) + eps) * w ---- */
/* y[N,d], rstd[N] (saved for backward), x[N,d], w[d] */
void al_rmsnorm_fwd(float *y, float *rstd, const float *x, const float *w, int N, int d, float eps);
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

#endif
