/*
 * wmat.c: matrix products with weights kept in their checkpoint dtype.
 *
 * A Hugging Face checkpoint stores its matrices as BF16 (or F16, F32) and
 * attnlab memory-maps them (src/io/ckpt.c) instead of widening a 7B model to
 * 28 GB of fp32. The data structure is the weight reference al_wref (nn.h):
 * a pointer to W[out, in] row-major plus its dtype. Every product that reads
 * such a matrix goes through one of the entries here:
 *
 *   al_matmul    y[N, out] (+)= x[N, in] W[out, in]^T     (rows ldx / ldy apart)
 *   al_matvec    y[out]    (+)= W[out, in] x[in]
 *   al_matvec_t  y[in]     (+)= W[out, in]^T x[out]
 *
 * F32 weights go straight to CBLAS for al_matmul (the very al_sgemm call of
 * al_linear_fwd, so prefill computes bit for bit as before) and al_matvec_t
 * (sgemv, transposed). F32 al_matvec, the product that bounds decode speed,
 * has its own kernel (gemv_f32: four rows of W at a time, rows split between
 * threads in one parallel region, prefetched 16 rows ahead), which streams W near
 * the memory bandwidth where OpenBLAS's sgemv reached about half of it;
 * ATTNLAB_MATVEC=blas (or al_wmat_matvec_blas) puts sgemv back. BF16 and F16:
 *   - N <= AL_WMAT_SMALL_N (decode, a few rows): a direct kernel widens W in
 *     registers and keeps N dot products per output row (four rows of W at a
 *     time), parallel over output rows with OpenMP; W is read once, which is
 *     what bounds decode speed;
 *   - larger N (prefill, evaluation): W is widened to fp32 panel by panel
 *     (a few dozen to 256 rows, about 1 MiB) into a per-thread buffer that
 *     stays in cache, and each panel is one single-threaded sgemm against all
 *     N rows of x inside an OpenMP loop over panels, so the conversion costs
 *     out x in once per call, amortised over N; a small matrix (<= 8 MiB as
 *     fp32) is widened whole and multiplied by one al_sgemm (linear.c) when
 *     x has rows enough for al_sgemm to cut them (192 and more).
 * The direct kernel, the F32 matrix-vector kernel and the widening have
 * three implementations: AVX-512 and AVX2 + F16C, one source (wmat_kern.h
 * over core/vec.h's vectors) compiled twice, and plain C here that the
 * compiler vectorises (the fallback the others are checked against);
 * core/cpu.h's set in use picks one per call (avx512 and above, avx2,
 * generic), as for every kernel family. They agree within fp32 rounding
 * (the sums are grouped differently); al_matmul_ref is the double-precision
 * reference the tests compare all three against.
 *
 * Every reduction runs in a fixed order that does not depend on the number
 * of threads (each output element is one thread's loop), so results repeat.
 * Call these outside OpenMP parallel regions (OpenBLAS and the kernels
 * parallelise inside).
 */
#include <cblas.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "nn.h"
#include "wmat_internal.h"
#include "../core/cpu.h"

/* ---- configuration: panel size ---- */

static int panel_cfg_ready = 0;    /* the environment has been read */
static int forced_panel_rows = 0; /* > 0: always the panel path with this many rows */
static int matvec_blas = 0;       /* F32 al_matvec through cblas_sgemv, not gemv_f32 */

/* Products below this many weights run on the calling thread (the fork
 * and join would cost more than the second thread saves). */
#define AL_WMAT_GEMV_PARALLEL 32768L

/* Reads the environment once: AL_WMAT_PANEL_ROWS, the hook that lets the
 * reference tests run a model through the panel path with small panels,
 * and ATTNLAB_MATVEC=blas|own, the F32 matrix-vector product (own kernel by
 * default; blas keeps OpenBLAS's sgemv for comparison; other values: own). */
static void wmat_init(void) {
    if (panel_cfg_ready) return;
    const char *p = getenv("AL_WMAT_PANEL_ROWS");
    long v = 0;
    if (p && al_parse_int(p, &v) == 0 && v > 0 && v <= 4096) forced_panel_rows = (int)v;
    const char *m = getenv("ATTNLAB_MATVEC");
    matvec_blas = m && !strcmp(m, "blas");
    panel_cfg_ready = 1;
}

void al_wmat_matvec_blas(int on) {
    wmat_init();
    matvec_blas = on != 0;
}

const char *al_wmat_matvec_name(void) {
    wmat_init();
    return matvec_blas ? "blas" : "own";
}

void al_wmat_panel_rows(int rows) {
    wmat_init();
    forced_panel_rows = rows > 0 ? rows : 0;
}

/* ---- widening ---- */

static inline float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* One BF16 or F16 value as fp32, exactly, without branches (bit masks, so
 * loops over it vectorise): F16 normals rebias the exponent (15 -> 127),
 * subnormals are m * 2^-24 (exact in fp32), inf/NaN keep their payload. */
static inline float widen1(uint16_t v, int f16) {
    if (!f16) return bits_f32((uint32_t)v << 16);
    const uint32_t s = (uint32_t)(v & 0x8000u) << 16, e = (v >> 10) & 0x1Fu, m = v & 0x3FFu;
    const uint32_t normal = ((e + 112u) << 23) | (m << 13);
    const uint32_t sub = f32_bits((float)(int32_t)m * 0x1p-24f);
    const uint32_t special = 0x7F800000u | (m << 13);
    const uint32_t is_sub = 0u - (uint32_t)(e == 0), is_special = 0u - (uint32_t)(e == 31);
    return bits_f32(s | (sub & is_sub) | (special & is_special) | (normal & ~(is_sub | is_special)));
}

/* dst[n] = src[n] widened (plain C). */
static void widen_portable(float *restrict dst, const uint16_t *restrict src, size_t n, int f16) {
    if (f16)
        for (size_t i = 0; i < n; i++) dst[i] = widen1(src[i], 1);
    else
        for (size_t i = 0; i < n; i++) dst[i] = bits_f32((uint32_t)src[i] << 16);
}

/* ---- direct kernel: N <= AL_WMAT_SMALL_N rows of x ----
 * y[n, r] (+)= sum_i W[r, i] x[n, i] for rows r in [r0, r1), 16-bit W. */

/* Plain C: four rows of W at a time (four memory streams), each widened 256
 * values at a time into a stack buffer, then eight running sums per (row of
 * W, row of x) (vectorisable), added up at the end. */
static void direct_portable(float *y, int ldy, const float *x, int ldx, const uint16_t *W, int f16, int N, int in,
                            int r0, int r1, int accumulate) {
    enum { CH = 256, RQ = 4 };
    float wb[RQ][CH];
    for (int r = r0; r < r1; r += RQ) {
        const int nq = r1 - r < RQ ? r1 - r : RQ;
        float s[RQ][AL_WMAT_SMALL_N][8] = {{{0}}};
        for (int i0 = 0; i0 < in; i0 += CH) {
            const int len = in - i0 < CH ? in - i0 : CH, len8 = len & ~7;
            for (int q = 0; q < nq; q++) widen_portable(wb[q], W + (size_t)(r + q) * in + i0, (size_t)len, f16);
            for (int n = 0; n < N; n++) {
                const float *xn = x + (size_t)n * ldx + i0;
                for (int q = 0; q < nq; q++) {
                    float *sn = s[q][n];
                    const float *wq = wb[q];
                    for (int i = 0; i < len8; i += 8)
                        for (int l = 0; l < 8; l++) sn[l] += wq[i + l] * xn[i + l];
                    for (int i = len8; i < len; i++) sn[i & 7] += wq[i] * xn[i];
                }
            }
        }
        for (int q = 0; q < nq; q++)
            for (int n = 0; n < N; n++) {
                const float *t = s[q][n];
                const float v = ((t[0] + t[1]) + (t[2] + t[3])) + ((t[4] + t[5]) + (t[6] + t[7]));
                float *yo = y + (size_t)n * ldy + r + q;
                *yo = accumulate ? *yo + v : v;
            }
    }
}

/* ---- F32 matrix-vector kernel ----
 * y[r] (+)= sum_i W[r, i] x[i] for rows r in [r0, r1), fp32 W. */

/* Plain C, the same order as wmat_kern.h's AVX2 kernel: per row two
 * 8-lane partial sums over steps of 16 columns (lane l of the first takes
 * columns 16k + l, of the second 16k + 8 + l), added lane by lane, then the
 * 8 lanes pairwise (fused multiply-adds aside: C11 does not contract). */
static void gemv_f32_portable(float *y, const float *x, const float *W, int in, int r0, int r1, int accumulate) {
    enum { RQ = 4, L = 8 };
    for (int r = r0; r < r1; r += RQ) {
        const int nq = r1 - r < RQ ? r1 - r : RQ;
        float a[RQ][2][L] = {{{0}}};
        for (int q = 0; q < nq; q++) {
            const float *w = W + (size_t)(r + q) * in;
            float *a0 = a[q][0], *a1 = a[q][1];
            int i = 0;
            for (; i + 2 * L <= in; i += 2 * L)
                for (int l = 0; l < L; l++) {
                    a0[l] += w[i + l] * x[i + l];
                    a1[l] += w[i + L + l] * x[i + L + l];
                }
            for (int j = 0; i + j < in; j++) a[q][j / L][j % L] += w[i + j] * x[i + j];
        }
        for (int q = 0; q < nq; q++) {
            float t[L];
            for (int l = 0; l < L; l++) t[l] = a[q][0][l] + a[q][1][l];
            const float v = ((t[0] + t[4]) + (t[2] + t[6])) + ((t[1] + t[5]) + (t[3] + t[7]));
            y[r + q] = accumulate ? y[r + q] + v : v;
        }
    }
}

/* ---- the kernel sets: plain C here, AVX2 and AVX-512 from wmat_kern.h ---- */

/* A kernel set: its widening, its direct kernel and its F32 matrix-vector
 * kernel, and the core/cpu.h set it needs (whose name it reports). */
typedef struct wmat_set {
    void (*widen)(float *dst, const uint16_t *src, size_t n, int f16);
    void (*direct)(float *y, int ldy, const float *x, int ldx, const uint16_t *W, int f16, int N, int in, int r0,
                   int r1, int accumulate);
    al_cpu_level needs;
    void (*gemv_f32)(float *y, const float *x, const float *W, int in, int r0, int r1, int accumulate);
} wmat_set;

static const wmat_set sets[] = {
    {widen_portable, direct_portable, AL_CPU_GENERIC, gemv_f32_portable},
    {al_wmat_widen_avx2, al_wmat_direct_avx2, AL_CPU_AVX2, al_wmat_gemv_f32_avx2},
    {al_wmat_widen_avx512, al_wmat_direct_avx512, AL_CPU_AVX512, al_wmat_gemv_f32_avx512},
};

/* The best set core/cpu.h's set in use runs (ATTNLAB_CPU and al_cpu_force
 * lower it for every kernel family). */
static const wmat_set *set_now(void) {
    const al_cpu_level l = al_cpu_level_now();
    int k = 0;
    while (k + 1 < (int)(sizeof sets / sizeof sets[0]) && sets[k + 1].needs <= l) k++;
    return &sets[k];
}

const char *al_wmat_kernel_name(void) { return al_cpu_level_name(set_now()->needs); }

/* dst[n] = elements [off, off + n) of W as fp32 (any float dtype), with set k. */
static void widen_any(const wmat_set *k, float *dst, al_wref W, size_t off, size_t n) {
    if (W.dt == AL_DT_F32) {
        memcpy(dst, (const float *)W.p + off, n * sizeof(float));
        return;
    }
    k->widen(dst, (const uint16_t *)W.p + off, n, W.dt == AL_DT_F16);
}

void al_wread(float *dst, al_wref W, size_t off, size_t n) {
    widen_any(set_now(), dst, W, off, n);
}

void al_wread_f64(double *dst, al_wref W, size_t off, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = al_wget(W, off + i);
}

float al_wget(al_wref W, size_t i) {
    switch (W.dt) {
    case AL_DT_F16: return al_f16_to_f32(((const uint16_t *)W.p)[i]);
    case AL_DT_BF16: return al_bf16_to_f32(((const uint16_t *)W.p)[i]);
    default: return ((const float *)W.p)[i];
    }
}

/* This thread's rows [r0, r1) of out: one contiguous run of blocks of 16
 * rows counted from row 0 (a multiple of the kernels' four, so a row is
 * summed the same way whatever the threads); 0 if it has none. */
static int thread_rows(int out, int *r0, int *r1) {
    enum { RB = 16 };
    const long nb = (out + RB - 1) / RB, t = omp_get_thread_num(), T = omp_get_num_threads();
    const long a = nb * t / T * RB, b = nb * (t + 1) / T * RB;
    *r0 = (int)a, *r1 = (int)(b < out ? b : out);
    return a < out;
}

/* The direct kernel over all rows: one contiguous run of 16-row blocks per
 * thread, one kernel call each, so that the kernel's prefetch runs across
 * blocks (each element is one thread's sum, the blocks counted from row 0:
 * the result does not depend on the threads). */
static void direct(const wmat_set *k, float *y, int ldy, const float *x, int ldx, al_wref W, int N, int in, int out, int accumulate) {
    const uint16_t *w = (const uint16_t *)W.p;
    const int f16 = W.dt == AL_DT_F16;
#pragma omp parallel if ((long)out * in > 65536)
    {
        int r0, r1;
        if (thread_rows(out, &r0, &r1)) k->direct(y, ldy, x, ldx, w, f16, N, in, r0, r1, accumulate);
    }
}

/* ---- panel path: N > AL_WMAT_SMALL_N ---- */

/* Rows per panel: about 1 MiB of fp32 per thread (16..256 rows, a multiple
 * of 16), unless a test forced a size. */
static int panel_rows(int in) {
    if (forced_panel_rows) return forced_panel_rows;
    int p = (int)((1 << 18) / (in > 0 ? in : 1));
    p = p < 16 ? 16 : p > 256 ? 256 : p;
    return p & ~15;
}

static void panels(const wmat_set *k, float *y, int ldy, const float *x, int ldx, al_wref W, int N, int in, int out, int accumulate) {
    const float beta = accumulate ? 1.0f : 0.0f;
    /* a small matrix: widen it whole (in parallel), then one al_sgemm, if
     * that runs in parallel (enough rows of x); otherwise panels */
    if (!forced_panel_rows && (size_t)out * in <= ((size_t)8 << 20) / sizeof(float) && al_sgemm_row_blocks(N) > 1) {
        float *Wf = al_alloc(sizeof(float) * (size_t)out * in);
        if (Wf) {
#pragma omp parallel for schedule(static) if ((long)out * in > 65536)
            for (int r = 0; r < out; r++) widen_any(k, Wf + (size_t)r * in, W, (size_t)r * in, (size_t)in);
            al_sgemm(0, 1, N, out, in, 1.0f, x, ldx, Wf, in, beta, y, ldy);
            al_free(Wf);
            return;
        }
    }
    const int P = panel_rows(in), np = (out + P - 1) / P;
#pragma omp parallel
    {
        /* one buffer per thread; if it cannot be had, this thread's panels
         * take the direct kernel (same results within rounding, slower) */
        float *buf = al_alloc(sizeof(float) * (size_t)P * in);
#pragma omp for schedule(dynamic)
        for (int p = 0; p < np; p++) {
            const int r0 = p * P, rows = out - r0 < P ? out - r0 : P;
            if (!buf) {
                for (int n0 = 0; n0 < N; n0 += AL_WMAT_SMALL_N) {
                    const int nn = N - n0 < AL_WMAT_SMALL_N ? N - n0 : AL_WMAT_SMALL_N;
                    const float *xs = x + (size_t)n0 * ldx;
                    float *ys = y + (size_t)n0 * ldy;
                    k->direct(ys, ldy, xs, ldx, W.p, W.dt == AL_DT_F16, nn, in, r0, r0 + rows, accumulate);
                }
                continue;
            }
            widen_any(k, buf, W, (size_t)r0 * in, (size_t)rows * in);
            /* y[N, r0 .. r0+rows) = x[N, in] . panel[rows, in]^T (single-threaded inside the region) */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, rows, in, 1.0f, x, ldx, buf, in, beta, y + r0,
                        ldy);
        }
        al_free(buf);
    }
}

/* ---- the entries ---- */

void al_matmul(float *y, int ldy, const float *x, int ldx, al_wref W, int N, int in, int out, int accumulate) {
    if (N <= 0 || out <= 0) return;
    if (W.dt == AL_DT_F32) {
        al_sgemm(0, 1, N, out, in, 1.0f, x, ldx, (const float *)W.p, in, accumulate ? 1.0f : 0.0f, y, ldy);
        return;
    }
    wmat_init();
    if (in <= 0) { /* an empty product: y = 0 (or unchanged) */
        for (int n = 0; n < N && !accumulate; n++) memset(y + (size_t)n * ldy, 0, sizeof(float) * (size_t)out);
        return;
    }
    const wmat_set *k = set_now();
    if (N <= AL_WMAT_SMALL_N && !forced_panel_rows) direct(k, y, ldy, x, ldx, W, N, in, out, accumulate);
    else if (W.dt == AL_DT_BF16 && al_precision_now() == AL_PREC_BF16) /* BF16 weights feed the BF16 engine */
        al_sgemm_ref(0, 1, N, out, in, 1.0f, al_wref_f32(x), ldx, W, in, accumulate ? 1.0f : 0.0f, y, ldy);
    else panels(k, y, ldy, x, ldx, W, N, in, out, accumulate);
}

void al_matmul_x(float *y, int ldy, al_wref x, int ldx, al_wref W, int N, int in, int out, int accumulate) {
    if (x.dt == AL_DT_F32) {
        al_matmul(y, ldy, (const float *)x.p, ldx, W, N, in, out, accumulate);
        return;
    }
    assert(x.dt == AL_DT_BF16 && W.dt == AL_DT_F32);
    al_sgemm_ref(0, 1, N, out, in, 1.0f, x, ldx, W, in, accumulate ? 1.0f : 0.0f, y, ldy);
}

/* y[out] (+)= W x for fp32 W with set k's kernel: each thread's rows
 * (thread_rows) in one parallel region, one kernel call each (each thread
 * streams one stretch of W and prefetches across its blocks); small
 * products stay on the calling thread. */
static void gemv_f32(const wmat_set *k, float *y, const float *x, const float *W, int out, int in, int accumulate) {
#pragma omp parallel if ((long)out * in > AL_WMAT_GEMV_PARALLEL)
    {
        int r0, r1;
        if (thread_rows(out, &r0, &r1)) k->gemv_f32(y, x, W, in, r0, r1, accumulate);
    }
}

void al_matvec(float *y, const float *x, al_wref W, int out, int in, int accumulate) {
    if (out <= 0) return;
    if (W.dt == AL_DT_F32) {
        wmat_init();
        if (matvec_blas)
            cblas_sgemv(CblasRowMajor, CblasNoTrans, out, in, 1.0f, (const float *)W.p, in, x, 1,
                        accumulate ? 1.0f : 0.0f, y, 1);
        else if (in <= 0) {
            if (!accumulate) memset(y, 0, sizeof(float) * (size_t)out);
        } else gemv_f32(set_now(), y, x, (const float *)W.p, out, in, accumulate);
        return;
    }
    if (in <= 0) {
        if (!accumulate) memset(y, 0, sizeof(float) * (size_t)out);
        return;
    }
    direct(set_now(), y, out, x, in, W, 1, in, out, accumulate);
}

void al_matvec_t(float *y, const float *x, al_wref W, int out, int in, int accumulate) {
    if (in <= 0) return;
    if (W.dt == AL_DT_F32) {
        cblas_sgemv(CblasRowMajor, CblasTrans, out, in, 1.0f, (const float *)W.p, in, x, 1,
                    accumulate ? 1.0f : 0.0f, y, 1);
        return;
    }
    /* y[j] = sum_r x[r] W[r, j]: column blocks in parallel, rows in order
     * inside each (widened 256 at a time), so every sum has one fixed order */
    enum { CB = 256 };
    const int nb = (in + CB - 1) / CB;
    const wmat_set *k = set_now();
#pragma omp parallel for schedule(static) if ((long)out * in > 65536)
    for (int b = 0; b < nb; b++) {
        const int j0 = b * CB, len = in - j0 < CB ? in - j0 : CB;
        float acc[CB], wb[CB];
        for (int j = 0; j < len; j++) acc[j] = accumulate ? y[j0 + j] : 0.0f;
        for (int r = 0; r < out; r++) {
            widen_any(k, wb, W, (size_t)r * in + j0, (size_t)len);
            const float xr = x[r];
            for (int j = 0; j < len; j++) acc[j] += xr * wb[j];
        }
        memcpy(y + j0, acc, sizeof(float) * (size_t)len);
    }
}

void al_matmul_ref(float *y, int ldy, const float *x, int ldx, al_wref W, int N, int in, int out, int accumulate) {
    for (int n = 0; n < N; n++)
        for (int r = 0; r < out; r++) {
            double s = accumulate ? (double)y[(size_t)n * ldy + r] : 0.0;
            for (int i = 0; i < in; i++) s += (double)al_wget(W, (size_t)r * in + i) * (double)x[(size_t)n * ldx + i];
            y[(size_t)n * ldy + r] = (float)s;
        }
}
