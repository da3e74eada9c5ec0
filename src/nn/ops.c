/*
 * ops.c: the element-wise and row-wise building blocks of the transformer,
 * forward and backward: RMSNorm, rotary position embedding (RoPE), SwiGLU,
 * token embedding and softmax cross-entropy (the matrix products live in
 * linear.c).
 *
 * Conventions follow Hugging Face / PyTorch Llama so that weights and
 * gradients can be compared with a PyTorch reference.
 *
 * Performance: every kernel is a simple loop over a row (or a flat array)
 * that gcc vectorises; rows are spread over OpenMP threads once a call
 * touches more than AL_PAR_MIN elements. exp() goes through al_expf, a
 * branch-free version that gcc can vectorise (glibc's expf is not vectorised
 * without -ffast-math). Reductions along a row use a fixed number of double
 * lanes, combined in a fixed order.
 *
 * Determinism: no result depends on the number of threads. Reductions across
 * rows (RMSNorm weight gradient, embedding gradient, the summed loss) are
 * done in an order fixed by the data shape alone.
 *
 * Aliasing: unless a comment says otherwise, an output may coincide exactly
 * with an input of the same shape (element i read before element i is
 * written), but must not partially overlap one.
 */
#include "nn/nn.h"
#include "nn/fastmath.h"

#include <assert.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Calls touching more elements than this are spread over OpenMP threads. */
#define AL_PAR_MIN 32768
/* Rows per chunk in the RMSNorm weight-gradient reduction (fixed so that the
 * summation order does not depend on the thread count). */
#define AL_RMS_CHUNK 64
/* Columns per block for column-parallel reductions. */
#define AL_COL_BLOCK 128
/* Elements per block for the flat element-wise kernels. */
#define AL_FLAT_BLOCK 8192

/* ------------------------------------------------------------------------ */
/* helpers                                                                   */
/* ------------------------------------------------------------------------ */

/* sum_j x[j]^2 over x[d], in 8 double lanes combined in a fixed order
 * (vectorisable without -ffast-math, and accurate for any d). */
static inline double al_sumsq(const float *restrict x, int d) {
    double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int j = 0;
    for (; j + 8 <= d; j += 8)
        for (int k = 0; k < 8; k++) acc[k] += (double)x[j + k] * (double)x[j + k];
    for (int k = 0; j < d; j++, k++) acc[k] += (double)x[j] * (double)x[j];
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

/* sum_j a[j] * b[j] * c[j] over [d], 8 double lanes as al_sumsq. */
static inline double al_dot3(const float *restrict a, const float *restrict b,
                             const float *restrict c, int d) {
    double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int j = 0;
    for (; j + 8 <= d; j += 8)
        for (int k = 0; k < 8; k++)
            acc[k] += (double)a[j + k] * (double)b[j + k] * (double)c[j + k];
    for (int k = 0; j < d; j++, k++) acc[k] += (double)a[j] * (double)b[j] * (double)c[j];
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

/* ------------------------------------------------------------------------ */
/* RMSNorm                                                                   */
/* ------------------------------------------------------------------------ */

/* RMSNorm's r = 1 / sqrt(mean(xr^2) + eps) of one row, the mean in double. */
static inline float al_rms_r(const float *xr, int d, float eps) {
    const double ms = al_sumsq(xr, d) / (double)d;
    return (float)(1.0 / sqrt(ms + (double)eps));
}

/* yr = w (xr r): the row scaled (the fp32 and BF16 forms share it, so their values agree). */
static inline void al_rms_scale(float *yr, const float *xr, const float *w, float r, int d) {
    for (int j = 0; j < d; j++) yr[j] = w[j] * (xr[j] * r);
}

/* One row of RMSNorm (al_rmsnorm_fwd): yr = w (xr r), *rstd (if not NULL) = r. */
static inline void al_rms_row(float *yr, float *rstd, const float *xr, const float *w, int d, float eps) {
    const float r = al_rms_r(xr, d, eps);
    if (rstd) *rstd = r;
    al_rms_scale(yr, xr, w, r, d);
}

/* y[N,d] = w[d] * (x[N,d] * rstd[n]), rstd[n] = 1/sqrt(mean_j x[n,j]^2 + eps)
 * (HF LlamaRMSNorm order: normalise, then scale). The mean of squares is
 * accumulated in double. rstd[N] is saved for the backward pass; it may be
 * NULL (inference). y may equal x. */
void al_rmsnorm_fwd(float *y, float *rstd, const float *x, const float *w, int N, int d,
                    float eps) {
    if (N <= 0 || d <= 0) return;
    const int par = (size_t)N * (size_t)d > AL_PAR_MIN;
#pragma omp parallel for schedule(static) if (par)
    for (int n = 0; n < N; n++)
        al_rms_row(y + (size_t)n * d, rstd ? rstd + n : NULL, x + (size_t)n * d, w, d, eps);
}

/* Why one pass: the residual stream s is written by the add and read back
 * at once by the norm; row by row it is still in L1 for the second read
 * (a separate add_vec then norm read it from L2 or memory: 1 MB a layer at
 * the study's shape, 3 MB at gpt2's). */
void al_add_rmsnorm_fwd(float *s, float *y, float *rstd, const float *a, const float *b, const float *w, int N, int d,
                        float eps) {
    if (N <= 0 || d <= 0) return;
    const int par = (size_t)N * (size_t)d > AL_PAR_MIN;
#pragma omp parallel for schedule(static) if (par)
    for (int n = 0; n < N; n++) {
        const float *ar = a + (size_t)n * d, *br = b + (size_t)n * d;
        float *sr = s + (size_t)n * d, *yr = y + (size_t)n * d;
        for (int j = 0; j < d; j++) sr[j] = ar[j] + br[j];
        al_rms_row(yr, rstd ? rstd + n : NULL, sr, w, d, eps);
    }
}

/* The ops' BF16 outputs (BF16 training's stored activations, model.c):
 * computed by the fp32 loops in chunks of this many values, which stay in
 * L1, then rounded as the products round an fp32 operand
 * (al_bf16_round_run), so that a product reading them gets the bits it
 * would get from the fp32 values. */
enum { BF16_OUT_CHUNK = 512 };

/* One row of al_rms_row with yr rounded to BF16. */
static void al_rms_row_bf16(uint16_t *yr, float *rstd, const float *xr, const float *w, int d, float eps) {
    float chunk[BF16_OUT_CHUNK];
    const float r = al_rms_r(xr, d, eps);
    if (rstd) *rstd = r;
    for (int j = 0; j < d; j += BF16_OUT_CHUNK) {
        const int len = d - j < BF16_OUT_CHUNK ? d - j : BF16_OUT_CHUNK;
        al_rms_scale(chunk, xr + j, w + j, r, len);
        al_bf16_round_run(yr + j, chunk, (size_t)len);
    }
}

void al_rmsnorm_fwd_bf16(uint16_t *y, float *rstd, const float *x, const float *w, int N, int d, float eps) {
    if (N <= 0 || d <= 0) return;
    const int par = (size_t)N * (size_t)d > AL_PAR_MIN;
#pragma omp parallel for schedule(static) if (par)
    for (int n = 0; n < N; n++) al_rms_row_bf16(y + (size_t)n * d, rstd ? rstd + n : NULL, x + (size_t)n * d, w, d, eps);
}

void al_add_rmsnorm_fwd_bf16(float *s, uint16_t *y, float *rstd, const float *a, const float *b, const float *w, int N,
                             int d, float eps) {
    if (N <= 0 || d <= 0) return;
    const int par = (size_t)N * (size_t)d > AL_PAR_MIN;
#pragma omp parallel for schedule(static) if (par)
    for (int n = 0; n < N; n++) {
        const float *ar = a + (size_t)n * d, *br = b + (size_t)n * d;
        float *sr = s + (size_t)n * d;
        for (int j = 0; j < d; j++) sr[j] = ar[j] + br[j];
        al_rms_row_bf16(y + (size_t)n * d, rstd ? rstd + n : NULL, sr, w, d, eps);
    }
}

/* set by al_rmsnorm_test_no_scratch */
static int al_rms_no_scratch = 0;

/* Forces (on != 0) or releases al_rmsnorm_bwd's no-scratch path, so tests can
 * check it against the normal one. */
void al_rmsnorm_test_no_scratch(int on) { al_rms_no_scratch = on != 0; }

/* dw-partial of rows [r0, r1) for columns [j0, j1):
 * part[j - j0] += dy[n,j] * x[n,j] * rstd[n], rows in order. Shared by the
 * two reduction paths of al_rmsnorm_bwd so both give identical bits. */
static inline void al_rms_dw_rows(float *restrict part, const float *dy, const float *x,
                                  const float *rstd, int r0, int r1, int j0, int j1, int d) {
    for (int n = r0; n < r1; n++) {
        const float *dyr = dy + (size_t)n * d;
        const float *xr = x + (size_t)n * d;
        const float r = rstd[n];
        for (int j = j0; j < j1; j++) part[j - j0] += (dyr[j] * xr[j]) * r;
    }
}

/* dx of one row: dx[j] += r * (dy[j] w[j] - x[j] * r^2 * dot / d),
 * dot = sum_j dy[j] w[j] x[j] (the derivative of y = w x r through r). */
static inline void al_rms_dx_row(float *dxr, const float *dyr, const float *xr, const float *w,
                                 float r, int d) {
    const double dot = al_dot3(dyr, w, xr, d);
    const float c = (float)((double)r * (double)r * dot / (double)d);
    for (int j = 0; j < d; j++) dxr[j] += r * (dyr[j] * w[j] - xr[j] * c);
}

/* Backward of al_rmsnorm_fwd. dx[N,d] += dL/dx, dw[d] += dL/dw from
 * dy[N,d], x[N,d], w[d], rstd[N]. Either dx or dw may be NULL (skipped);
 * dx may equal dy or x. dw sums over rows in fixed chunks of AL_RMS_CHUNK
 * rows: each chunk's partial is formed in row order, then chunks are added in
 * chunk order, so the bits do not depend on the thread count. The partials
 * live in a malloc'd scratch (N/64 x d floats) so that one row pass reads dy
 * and x once for both gradients; if that allocation fails, a column-blocked
 * pass forms the same sums in the same order before dx is touched. */
void al_rmsnorm_bwd(float *dx, float *dw, const float *dy, const float *x, const float *w,
                    const float *rstd, int N, int d) {
    if (N <= 0 || d <= 0) return;
    const int par = (size_t)N * (size_t)d > AL_PAR_MIN;
    const int nch = (N + AL_RMS_CHUNK - 1) / AL_RMS_CHUNK;
    const int nblk = (d + AL_COL_BLOCK - 1) / AL_COL_BLOCK;
    float *scr = dw && !al_rms_no_scratch ? malloc((size_t)nch * (size_t)d * sizeof(float)) : NULL;

    if (dw && !scr) { /* fallback: dw straight from dy and x, column blocks */
#pragma omp parallel for schedule(static) if (par)
        for (int b = 0; b < nblk; b++) {
            const int j0 = b * AL_COL_BLOCK;
            const int j1 = j0 + AL_COL_BLOCK < d ? j0 + AL_COL_BLOCK : d;
            float acc[AL_COL_BLOCK], part[AL_COL_BLOCK];
            for (int j = 0; j < j1 - j0; j++) acc[j] = 0.0f;
            for (int c = 0; c < nch; c++) {
                const int r0 = c * AL_RMS_CHUNK;
                const int r1 = r0 + AL_RMS_CHUNK < N ? r0 + AL_RMS_CHUNK : N;
                for (int j = 0; j < j1 - j0; j++) part[j] = 0.0f;
                al_rms_dw_rows(part, dy, x, rstd, r0, r1, j0, j1, d);
                for (int j = 0; j < j1 - j0; j++) acc[j] += part[j];
            }
            for (int j = j0; j < j1; j++) dw[j] += acc[j - j0];
        }
    }

    /* row pass: per-chunk dw partials (when scratch exists), then dx, row by
     * row while the row is in cache */
    if (dx || scr) {
#pragma omp parallel for schedule(static) if (par)
        for (int c = 0; c < nch; c++) {
            const int r0 = c * AL_RMS_CHUNK;
            const int r1 = r0 + AL_RMS_CHUNK < N ? r0 + AL_RMS_CHUNK : N;
            float *part = scr ? scr + (size_t)c * d : NULL;
            if (part) memset(part, 0, (size_t)d * sizeof(float));
            for (int n = r0; n < r1; n++) {
                if (part) al_rms_dw_rows(part, dy, x, rstd, n, n + 1, 0, d, d);
                if (dx)
                    al_rms_dx_row(dx + (size_t)n * d, dy + (size_t)n * d, x + (size_t)n * d, w,
                                  rstd[n], d);
            }
        }
    }
    if (!scr) return;

    /* column pass: dw[j] += sum over chunks (in chunk order) of the partials */
#pragma omp parallel for schedule(static) if (par)
    for (int b = 0; b < nblk; b++) {
        const int j0 = b * AL_COL_BLOCK;
        const int j1 = j0 + AL_COL_BLOCK < d ? j0 + AL_COL_BLOCK : d;
        float acc[AL_COL_BLOCK];
        for (int j = 0; j < j1 - j0; j++) acc[j] = 0.0f;
        for (int c = 0; c < nch; c++) {
            const float *part = scr + (size_t)c * d + j0;
            for (int j = 0; j < j1 - j0; j++) acc[j] += part[j];
        }
        for (int j = j0; j < j1; j++) dw[j] += acc[j - j0];
    }
    free(scr);
}

/* ------------------------------------------------------------------------ */
/* RoPE                                                                      */
/* ------------------------------------------------------------------------ */

/* Fills cos/sin[max_pos][half], half = dim/2, with angle(p, i) =
 * p * theta^(-2i/dim), computed in double and rounded to float once.
 * Returns -1 on bad arguments (dim odd or < 2, max_pos < 1, theta <= 0) or
 * out of memory, leaving *t empty. */
/* YaRN's yarn_find_correction_dim: the pair index whose wavelength makes
 * `rotations` turns over L positions. */
static double yarn_correction_dim(double rotations, int dim, double theta, double L) {
    return (double)dim * log(L / (rotations * 2.0 * M_PI)) / (2.0 * log(theta));
}

double al_rope_yarn_mscale(double factor, double mscale) {
    return factor <= 1.0 ? 1.0 : 0.1 * mscale * log(factor) + 1.0;
}

double al_rope_attention_factor(const al_rope_scaling *sc) {
    if (!sc || sc->type != AL_ROPE_YARN) return 1.0;
    return al_rope_yarn_mscale(sc->factor, sc->mscale) / al_rope_yarn_mscale(sc->factor, sc->mscale_all_dim);
}

double al_rope_inv_freq(int i, int dim, double theta, const al_rope_scaling *sc) {
    const double f = pow(theta, -2.0 * (double)i / (double)dim);
    if (sc && sc->type == AL_ROPE_YARN) {
        /* DeepseekV2YarnRotaryEmbedding: pairs below the correction range
         * keep f (extrapolation), pairs above it take f / factor
         * (interpolation), a linear ramp in between */
        const double L = (double)sc->original_max_position;
        double lo = floor(yarn_correction_dim(sc->beta_fast, dim, theta, L));
        double hi = ceil(yarn_correction_dim(sc->beta_slow, dim, theta, L));
        lo = lo > 0 ? lo : 0;
        hi = hi < dim - 1 ? hi : dim - 1;
        if (lo == hi) hi += 0.001;
        double ramp = ((double)i - lo) / (hi - lo);
        ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
        return f / sc->factor * ramp + f * (1.0 - ramp);
    }
    if (!sc || sc->type != AL_ROPE_LLAMA3) return f;
    const double L = (double)sc->original_max_position, wavelen = 2.0 * M_PI / f;
    if (wavelen < L / sc->high_freq_factor) return f;           /* high frequencies: kept */
    if (wavelen > L / sc->low_freq_factor) return f / sc->factor; /* low frequencies: divided */
    const double s = (L / wavelen - sc->low_freq_factor) / (sc->high_freq_factor - sc->low_freq_factor);
    return (1.0 - s) * f / sc->factor + s * f;
}

int al_rope_table_init(al_rope_table *t, int max_pos, int dim, double theta) {
    return al_rope_table_init_scaled(t, max_pos, dim, theta, NULL);
}

int al_rope_table_init_scaled(al_rope_table *t, int max_pos, int dim, double theta, const al_rope_scaling *sc) {
    memset(t, 0, sizeof *t);
    if (max_pos < 1 || dim < 2 || dim % 2 != 0 || !(theta > 0.0)) return -1;
    const int half = dim / 2;
    const size_t n = (size_t)max_pos * (size_t)half;
    float *c = malloc(n * sizeof(float));
    float *s = malloc(n * sizeof(float));
    double *inv = malloc((size_t)half * sizeof(double));
    if (!c || !s || !inv) {
        free(c);
        free(s);
        free(inv);
        return -1;
    }
    for (int i = 0; i < half; i++) inv[i] = al_rope_inv_freq(i, dim, theta, sc);
    const double m = al_rope_attention_factor(sc); /* 1 but for yarn */
#pragma omp parallel for schedule(static) if (n > AL_PAR_MIN)
    for (int p = 0; p < max_pos; p++)
        for (int i = 0; i < half; i++) {
            const double a = (double)p * inv[i];
            c[(size_t)p * half + i] = (float)(m * cos(a));
            s[(size_t)p * half + i] = (float)(m * sin(a));
        }
    free(inv);
    t->max_pos = max_pos;
    t->half = half;
    t->cos = c;
    t->sin = s;
    return 0;
}

/* Releases the table; safe on a zeroed or already freed table. */
void al_rope_table_free(al_rope_table *t) {
    free(t->cos);
    free(t->sin);
    memset(t, 0, sizeof *t);
}

/* rotate-half on one vector v[2*half] (pairs i, i+half):
 * lo' = lo cos - hi sin, hi' = hi cos + lo sin, sin pre-multiplied by sign. */
static inline void al_rope_half_vec(float *restrict lo, float *restrict hi, const float *restrict c,
                                    const float *restrict s, float sg, int half) {
    for (int i = 0; i < half; i++) {
        const float a = lo[i], b = hi[i], sn = sg * s[i];
        lo[i] = a * c[i] - b * sn;
        hi[i] = b * c[i] + a * sn;
    }
}

/* interleaved on one vector v[2*half] (pairs 2i, 2i+1). */
static inline void al_rope_inter_vec(float *restrict v, const float *restrict c,
                                     const float *restrict s, float sg, int half) {
    for (int i = 0; i < half; i++) {
        const float a = v[2 * i], b = v[2 * i + 1], sn = sg * s[i];
        v[2 * i] = a * c[i] - b * sn;
        v[2 * i + 1] = b * c[i] + a * sn;
    }
}

/* In place on x: rows[rows] each at x + r*row_stride holding n_vec vectors
 * of dim = 2*half floats; row r at position pos0 + r % T. Rotate-half
 * (HF Llama) pairing; sign -1 applies the inverse (= transpose) rotation. */
void al_rope_half(float *x, int rows, int T, int pos0, int n_vec, int row_stride,
                  const al_rope_table *tab, int sign) {
    if (rows <= 0 || n_vec <= 0) return;
    const int half = tab->half;
    const float sg = sign < 0 ? -1.0f : 1.0f;
    const int par = (size_t)rows * (size_t)n_vec * (size_t)(2 * half) > AL_PAR_MIN;
#pragma omp parallel for schedule(static) if (par)
    for (int r = 0; r < rows; r++) {
        const int pos = pos0 + r % T;
        assert(pos >= 0 && pos < tab->max_pos);
        const float *c = tab->cos + (size_t)pos * half;
        const float *s = tab->sin + (size_t)pos * half;
        float *row = x + (size_t)r * row_stride;
        for (int v = 0; v < n_vec; v++) {
            float *vec = row + (size_t)v * 2 * half;
            al_rope_half_vec(vec, vec + half, c, s, sg, half);
        }
    }
}

/* As al_rope_half with the interleaved (2i, 2i+1) pairing. */
void al_rope_interleaved(float *x, int rows, int T, int pos0, int n_vec, int row_stride,
                         const al_rope_table *tab, int sign) {
    if (rows <= 0 || n_vec <= 0) return;
    const int half = tab->half;
    const float sg = sign < 0 ? -1.0f : 1.0f;
    const int par = (size_t)rows * (size_t)n_vec * (size_t)(2 * half) > AL_PAR_MIN;
#pragma omp parallel for schedule(static) if (par)
    for (int r = 0; r < rows; r++) {
        const int pos = pos0 + r % T;
        assert(pos >= 0 && pos < tab->max_pos);
        const float *c = tab->cos + (size_t)pos * half;
        const float *s = tab->sin + (size_t)pos * half;
        float *row = x + (size_t)r * row_stride;
        for (int v = 0; v < n_vec; v++)
            al_rope_inter_vec(row + (size_t)v * 2 * half, c, s, sg, half);
    }
}

/* ------------------------------------------------------------------------ */
/* SwiGLU                                                                    */
/* ------------------------------------------------------------------------ */

/* h[i] = silu(g[i]) * u[i] over n values (the loop of al_swiglu_fwd). */
static inline void swiglu_run(float *h, const float *g, const float *u, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const float gi = g[i];
        const float sig = 1.0f / (1.0f + al_expf(-gi));
        h[i] = (gi * sig) * u[i];
    }
}

/* dg[i], du[i] of al_swiglu_bwd over n values. */
static inline void swiglu_bwd_run(float *dg, float *du, const float *dh, const float *g, const float *u, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const float gi = g[i], ui = u[i], dhi = dh[i];
        const float sig = 1.0f / (1.0f + al_expf(-gi));
        const float silu = gi * sig;
        dg[i] = dhi * ui * (sig * (1.0f + gi * (1.0f - sig)));
        du[i] = dhi * silu;
    }
}

/* h[n] = silu(g[n]) * u[n], silu(g) = g / (1 + exp(-g)). Flat arrays, split
 * into fixed blocks for the threads. h may equal g or u. */
void al_swiglu_fwd(float *h, const float *g, const float *u, size_t n) {
    const long nb = (long)((n + AL_FLAT_BLOCK - 1) / AL_FLAT_BLOCK);
#pragma omp parallel for schedule(static) if (n > AL_PAR_MIN)
    for (long b = 0; b < nb; b++) {
        const size_t i0 = (size_t)b * AL_FLAT_BLOCK;
        const size_t i1 = i0 + AL_FLAT_BLOCK < n ? i0 + AL_FLAT_BLOCK : n;
        swiglu_run(h + i0, g + i0, u + i0, i1 - i0);
    }
}

/* dg[n] = dh u sig (1 + g (1 - sig)), du[n] = dh silu(g) (written, not
 * accumulated), with sig = sigmoid(g). dg/du may equal dh, g or u. */
void al_swiglu_bwd(float *dg, float *du, const float *dh, const float *g, const float *u,
                   size_t n) {
    const long nb = (long)((n + AL_FLAT_BLOCK - 1) / AL_FLAT_BLOCK);
#pragma omp parallel for schedule(static) if (n > AL_PAR_MIN)
    for (long b = 0; b < nb; b++) {
        const size_t i0 = (size_t)b * AL_FLAT_BLOCK;
        const size_t i1 = i0 + AL_FLAT_BLOCK < n ? i0 + AL_FLAT_BLOCK : n;
        swiglu_bwd_run(dg + i0, du + i0, dh + i0, g + i0, u + i0, i1 - i0);
    }
}

/* ------------------------------------------------------------------------ */
/* embedding                                                                 */
/* ------------------------------------------------------------------------ */

/* x[N,d] = E[tokens[n], :] with E[V,d]. A negative token gives a zero row
 * (the vocabulary size is not known here, so the caller checks the upper
 * bound). */
void al_embed_fwd(float *x, const float *E, const int *tokens, int N, int d) {
    if (N <= 0 || d <= 0) return;
    const int par = (size_t)N * (size_t)d > AL_PAR_MIN;
#pragma omp parallel for schedule(static) if (par)
    for (int n = 0; n < N; n++) {
        float *xr = x + (size_t)n * d;
        const int t = tokens[n];
        if (t < 0)
            memset(xr, 0, (size_t)d * sizeof(float));
        else
            memcpy(xr, E + (size_t)t * d, (size_t)d * sizeof(float));
    }
}

/* dE[tokens[n], :] += dx[n, :] for n in row order (repeated tokens sum in
 * that order, so the bits do not depend on threads). Threads split the d
 * columns into fixed blocks, each walking all rows. Negative tokens are
 * skipped. */
void al_embed_bwd(float *dE, const float *dx, const int *tokens, int N, int d) {
    if (N <= 0 || d <= 0) return;
    const int par = (size_t)N * (size_t)d > AL_PAR_MIN;
    const int nblk = (d + AL_COL_BLOCK - 1) / AL_COL_BLOCK;
#pragma omp parallel for schedule(static) if (par)
    for (int b = 0; b < nblk; b++) {
        const int j0 = b * AL_COL_BLOCK;
        const int j1 = j0 + AL_COL_BLOCK < d ? j0 + AL_COL_BLOCK : d;
        for (int n = 0; n < N; n++) {
            const int t = tokens[n];
            if (t < 0) continue;
            float *er = dE + (size_t)t * d;
            const float *xr = dx + (size_t)n * d;
            for (int j = j0; j < j1; j++) er[j] += xr[j];
        }
    }
}

/* ------------------------------------------------------------------------ */
/* softmax cross-entropy                                                     */
/* ------------------------------------------------------------------------ */

/* max over v[V], NaN entries skipped (a NaN row still yields a NaN loss via
 * the exp sum); 16 float lanes so gcc vectorises it. */
static inline float al_row_max(const float *restrict v, int V) {
    float m[16];
    for (int k = 0; k < 16; k++) m[k] = -INFINITY;
    int j = 0;
    for (; j + 16 <= V; j += 16)
        for (int k = 0; k < 16; k++) m[k] = v[j + k] > m[k] ? v[j + k] : m[k];
    for (int k = 0; j < V; j++, k++) m[k] = v[j] > m[k] ? v[j] : m[k];
    float r = m[0];
    for (int k = 1; k < 16; k++) r = m[k] > r ? m[k] : r;
    return r;
}

/* sum_j exp(v[j] - m), writing each term to out[j]; out and v distinct. */
static inline double al_exp_sum_to(float *restrict out, const float *restrict v, float m, int V) {
    double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int j = 0;
    for (; j + 8 <= V; j += 8)
        for (int k = 0; k < 8; k++) {
            const float e = al_expf(v[j + k] - m);
            out[j + k] = e;
            acc[k] += (double)e;
        }
    for (int k = 0; j < V; j++, k++) {
        const float e = al_expf(v[j] - m);
        out[j] = e;
        acc[k] += (double)e;
    }
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

/* As al_exp_sum_to, overwriting v with the terms (in-place mode). */
static inline double al_exp_sum_inplace(float *restrict v, float m, int V) {
    double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int j = 0;
    for (; j + 8 <= V; j += 8)
        for (int k = 0; k < 8; k++) {
            const float e = al_expf(v[j + k] - m);
            v[j + k] = e;
            acc[k] += (double)e;
        }
    for (int k = 0; j < V; j++, k++) {
        const float e = al_expf(v[j] - m);
        v[j] = e;
        acc[k] += (double)e;
    }
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

/* sum_j exp(v[j] - m) without storing the terms. */
static inline double al_exp_sum(const float *restrict v, float m, int V) {
    double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int j = 0;
    for (; j + 8 <= V; j += 8)
        for (int k = 0; k < 8; k++) acc[k] += (double)al_expf(v[j + k] - m);
    for (int k = 0; j < V; j++, k++) acc[k] += (double)al_expf(v[j] - m);
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

/* One row: returns -log softmax(lg)[t] = m + log(sum exp(lg - m)) - lg[t]
 * (0 for t < 0, NaN for t >= V). If dl != NULL writes
 * dl = (softmax(lg) - onehot(t)) * scale (zeros for an ignored row); dl may
 * equal lg. */
static double al_xent_row(float *dl, const float *lg, int t, int V, float scale) {
    if (t < 0 || t >= V) {
        if (dl) memset(dl, 0, (size_t)V * sizeof(float));
        return t < 0 ? 0.0 : NAN;
    }
    const float m = al_row_max(lg, V);
    const float xt = lg[t]; /* read before an in-place dl overwrites it */
    double sum;
    if (!dl)
        sum = al_exp_sum(lg, m, V);
    else if (dl == lg)
        sum = al_exp_sum_inplace(dl, m, V);
    else
        sum = al_exp_sum_to(dl, lg, m, V);
    if (dl) {
        const float k = (float)((double)scale / sum);
        for (int j = 0; j < V; j++) dl[j] *= k;
        dl[t] -= scale;
    }
    return (double)m + log(sum) - (double)xt;
}

/* Softmax cross-entropy over logits[N,V] with targets[N] (< 0: ignored).
 * Returns the summed loss; writes dlogits[N,V] if non-NULL (may equal
 * logits). Per-row losses go to a scratch array and are summed in row order,
 * so the total does not depend on the thread count. */
double al_xent_fwd_bwd(float *dlogits, const float *logits, const int *targets, int N, int V,
                       float grad_scale) {
    if (N <= 0 || V <= 0) return 0.0;
    double *rl = malloc((size_t)N * sizeof(double));
    double total = 0.0;
    if (!rl) { /* no scratch: same per-row values, summed serially in order */
        for (int n = 0; n < N; n++)
            total += al_xent_row(dlogits ? dlogits + (size_t)n * V : NULL,
                                 logits + (size_t)n * V, targets[n], V, grad_scale);
        return total;
    }
    const int par = (size_t)N * (size_t)V > AL_PAR_MIN;
#pragma omp parallel for schedule(static) if (par)
    for (int n = 0; n < N; n++)
        rl[n] = al_xent_row(dlogits ? dlogits + (size_t)n * V : NULL, logits + (size_t)n * V,
                            targets[n], V, grad_scale);
    for (int n = 0; n < N; n++) total += rl[n];
    free(rl);
    return total;
}

/* ------------------------------------------------------------------------ */
/* GeGLU (Gemma)                                                             */
/* ------------------------------------------------------------------------ */

/* h[n] = gelu_tanh(g[n]) * u[n], gelu_tanh(x) = x/2 (1 + tanh(sqrt(2/pi)
 * (x + 0.044715 x^3))) (PyTorch's gelu(approximate="tanh"), Gemma's
 * gelu_pytorch_tanh), computed as x / (1 + exp(-2z)) (the same function:
 * (1 + tanh z) / 2 = sigmoid(2z)) with al_expf so the loop vectorises and
 * without the cancellation of 1 + tanh z for negative z; z is clamped to
 * +-40, where the sigmoid is 0 or 1 in float. Flat blocks as
 * al_swiglu_fwd; h may equal g or u. */
static inline void geglu_tanh_run(float *h, const float *g, const float *u, size_t n) {
    const float k0 = 0.7978845608028654f, k1 = 0.044715f;
    for (size_t i = 0; i < n; i++) {
        const float x = g[i];
        float z = k0 * (x + k1 * x * x * x);
        z = z > 40.0f ? 40.0f : z < -40.0f ? -40.0f : z; /* keeps exp finite */
        h[i] = (x / (1.0f + al_expf(-2.0f * z))) * u[i];
    }
}

void al_geglu_tanh_fwd(float *h, const float *g, const float *u, size_t n) {
    const long nb = (long)((n + AL_FLAT_BLOCK - 1) / AL_FLAT_BLOCK);
#pragma omp parallel for schedule(static) if (n > AL_PAR_MIN)
    for (long b = 0; b < nb; b++) {
        const size_t i0 = (size_t)b * AL_FLAT_BLOCK;
        const size_t i1 = i0 + AL_FLAT_BLOCK < n ? i0 + AL_FLAT_BLOCK : n;
        geglu_tanh_run(h + i0, g + i0, u + i0, i1 - i0);
    }
}

/* The MLP's gated product h = act(g) * u for act of the config. */
void al_glu_fwd(al_mlp_act act, float *h, const float *g, const float *u, size_t n) {
    if (act == AL_ACT_GELU_TANH) al_geglu_tanh_fwd(h, g, u, n);
    else al_swiglu_fwd(h, g, u, n);
}

/* al_glu_fwd and al_swiglu_bwd with BF16 outputs (BF16_OUT_CHUNK above),
 * in the fp32 forms' flat blocks. */
void al_glu_fwd_bf16(al_mlp_act act, uint16_t *h, const float *g, const float *u, size_t n) {
    const long nb = (long)((n + AL_FLAT_BLOCK - 1) / AL_FLAT_BLOCK);
#pragma omp parallel for schedule(static) if (n > AL_PAR_MIN)
    for (long b = 0; b < nb; b++) {
        const size_t i0 = (size_t)b * AL_FLAT_BLOCK, i1 = i0 + AL_FLAT_BLOCK < n ? i0 + AL_FLAT_BLOCK : n;
        float chunk[BF16_OUT_CHUNK];
        for (size_t i = i0; i < i1; i += BF16_OUT_CHUNK) {
            const size_t len = i1 - i < BF16_OUT_CHUNK ? i1 - i : BF16_OUT_CHUNK;
            if (act == AL_ACT_GELU_TANH) geglu_tanh_run(chunk, g + i, u + i, len);
            else swiglu_run(chunk, g + i, u + i, len);
            al_bf16_round_run(h + i, chunk, len);
        }
    }
}

void al_swiglu_bwd_bf16(uint16_t *dg, uint16_t *du, const float *dh, const float *g, const float *u, size_t n) {
    const long nb = (long)((n + AL_FLAT_BLOCK - 1) / AL_FLAT_BLOCK);
#pragma omp parallel for schedule(static) if (n > AL_PAR_MIN)
    for (long b = 0; b < nb; b++) {
        const size_t i0 = (size_t)b * AL_FLAT_BLOCK, i1 = i0 + AL_FLAT_BLOCK < n ? i0 + AL_FLAT_BLOCK : n;
        float chunk_g[BF16_OUT_CHUNK], chunk_u[BF16_OUT_CHUNK];
        for (size_t i = i0; i < i1; i += BF16_OUT_CHUNK) {
            const size_t len = i1 - i < BF16_OUT_CHUNK ? i1 - i : BF16_OUT_CHUNK;
            swiglu_bwd_run(chunk_g, chunk_u, dh + i, g + i, u + i, len);
            al_bf16_round_run(dg + i, chunk_g, len);
            al_bf16_round_run(du + i, chunk_u, len);
        }
    }
}
