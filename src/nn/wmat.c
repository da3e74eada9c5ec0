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
 * F32 weights go straight to CBLAS (al_matmul is then the very al_sgemm call
 * of al_linear_fwd, al_matvec / al_matvec_t the sgemv calls the decoders make),
 * so attnlab's own fp32 models compute bit for bit as before. BF16 and F16:
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
 * The direct kernel and the widening have three implementations: AVX-512
 * (F, BW, VL; chosen at run time with __builtin_cpu_supports), AVX2 + F16C
 * intrinsics (the build's baseline, so always available; chosen where
 * AVX-512 is not) and plain C that the compiler vectorises (the fallback the
 * others are checked against). They agree within fp32 rounding (the sums are
 * grouped differently); al_matmul_ref is the double-precision reference the
 * tests compare all three against.
 *
 * Every reduction runs in a fixed order that does not depend on the number
 * of threads (each output element is one thread's loop), so results repeat.
 * Call these outside OpenMP parallel regions (OpenBLAS and the kernels
 * parallelise inside).
 */
#include <cblas.h>
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include "../io/io.h"
#include "nn.h"

/* ---- configuration: kernel choice, panel size, test hooks ---- */

/* The direct kernel and the widening come in three sets: plain C (the
 * fallback the others are checked against), AVX2 + F16C (the release
 * build's baseline, x86-64-v3, so every CPU that runs it has them) and
 * AVX-512; the best the CPU has is chosen at run time. */
enum { K_PORTABLE = 0, K_AVX2 = 1, K_AVX512 = 2 };

static int cfg_ready = 0;       /* the environment has been read */
static int kernel = K_PORTABLE; /* the set in use */
static int forced_panel_rows = 0; /* > 0: always the panel path with this many rows */

static int best_kernel(void) {
    const int avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                       __builtin_cpu_supports("avx512vl");
    const int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    return avx512 ? K_AVX512 : avx2 ? K_AVX2 : K_PORTABLE;
}

/* Reads AL_WMAT_KERNEL (portable | avx2 | avx512 | auto) and AL_WMAT_PANEL_ROWS
 * once: the hooks that let the reference tests run the same model through
 * each kernel set and the panel path. A set above what the CPU has is lowered. */
static void wmat_init(void) {
    if (cfg_ready) return;
    const char *k = getenv("AL_WMAT_KERNEL");
    kernel = best_kernel();
    if (k && strcmp(k, "portable") == 0) kernel = K_PORTABLE;
    else if (k && strcmp(k, "avx2") == 0 && kernel > K_AVX2) kernel = K_AVX2;
    const char *p = getenv("AL_WMAT_PANEL_ROWS");
    long v = 0;
    if (p && al_parse_int(p, &v) == 0 && v > 0 && v <= 4096) forced_panel_rows = (int)v;
    cfg_ready = 1;
}

int al_wmat_configure(int set, int panel_rows) {
    wmat_init();
    const int best = best_kernel();
    kernel = set == AL_WMAT_PORTABLE ? K_PORTABLE : set == AL_WMAT_AVX2 && best > K_AVX2 ? K_AVX2 : best;
    forced_panel_rows = panel_rows > 0 ? panel_rows : 0;
    return kernel == K_AVX512;
}

const char *al_wmat_kernel_name(void) {
    wmat_init();
    return kernel == K_AVX512 ? "avx512" : kernel == K_AVX2 ? "avx2" : "portable";
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

/* 16 values from p (the lanes of mask m; the others 0) as fp32. */
__attribute__((target("avx512f,avx512bw,avx512vl"), always_inline)) static inline __m512
widen16(const uint16_t *p, __mmask16 m, int f16) {
    const __m256i h = m == 0xFFFF ? _mm256_loadu_si256((const __m256i *)p) : _mm256_maskz_loadu_epi16(m, p);
    if (f16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* dst[n] = src[n] widened (AVX-512). */
__attribute__((target("avx512f,avx512bw,avx512vl"))) static void widen_avx512(float *dst, const uint16_t *src,
                                                                              size_t n, int f16) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, widen16(src + i, 0xFFFF, f16));
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(dst + i, m, widen16(src + i, m, f16));
    }
}

/* The AVX2 functions carry their target (like the AVX-512 ones): the
 * sanitizer build is compiled without -march=x86-64-v3. */
#define AL_AVX2_TARGET __attribute__((target("avx2,fma,f16c")))

/* The first n (<= 8) values from p as fp32 (the other lanes 0): AVX2 has no
 * 16-bit masked load, so a tail goes through a zeroed copy. */
AL_AVX2_TARGET static inline __m256 widen8(const uint16_t *p, int n, int f16) {
    __m128i h;
    if (n >= 8) {
        h = _mm_loadu_si128((const __m128i *)p);
    } else {
        uint16_t t[8] = {0};
        memcpy(t, p, sizeof(uint16_t) * (size_t)n);
        h = _mm_loadu_si128((const __m128i *)t);
    }
    if (f16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* lanes [0, n) of an AVX2 mask */
AL_AVX2_TARGET static inline __m256i mask8(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* dst[n] = src[n] widened (AVX2 + F16C). */
AL_AVX2_TARGET static void widen_avx2(float *dst, const uint16_t *src, size_t n, int f16) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, widen8(src + i, 8, f16));
    if (i < n) _mm256_maskstore_ps(dst + i, mask8((int)(n - i)), widen8(src + i, (int)(n - i), f16));
}

/* dst[n] = elements [off, off + n) of W as fp32 (any float dtype). */
static void widen_any(float *dst, al_wref W, size_t off, size_t n) {
    if (W.dt == AL_DT_F32) {
        memcpy(dst, (const float *)W.p + off, n * sizeof(float));
        return;
    }
    const uint16_t *src = (const uint16_t *)W.p + off;
    if (kernel == K_AVX512) widen_avx512(dst, src, n, W.dt == AL_DT_F16);
    else if (kernel == K_AVX2) widen_avx2(dst, src, n, W.dt == AL_DT_F16);
    else widen_portable(dst, src, n, W.dt == AL_DT_F16);
}

void al_wread(float *dst, al_wref W, size_t off, size_t n) {
    wmat_init();
    widen_any(dst, W, off, n);
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

/* AVX-512, specialised per N (NN is a constant at each call site). Four rows
 * of W at a time: 16 weights of each widened once and used by every row of
 * x, whose 16 values are loaded once for the four rows (four independent
 * streams of W keep the memory system busy: about twice the bandwidth of one
 * row at a time on a Xeon); leftover rows one at a time. */
__attribute__((target("avx512f,avx512bw,avx512vl"), always_inline)) static inline void
direct_avx512_n(float *y, int ldy, const float *x, int ldx, const uint16_t *W, int f16, const int NN, int in, int r0,
                int r1, int accumulate) {
    int r = r0;
    for (; r + 4 <= r1; r += 4) {
        const uint16_t *w = W + (size_t)r * in;
        __m512 s[4][AL_WMAT_SMALL_N];
        for (int q = 0; q < 4; q++)
            for (int n = 0; n < NN; n++) s[q][n] = _mm512_setzero_ps();
        for (int i = 0; i < in; i += 16) {
            const __mmask16 m = in - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (in - i)) - 1);
            if (!(i & 31) && r + 8 <= r1) /* the next four rows, one 64-byte line each per 32 columns */
                for (int q = 4; q < 8; q++) _mm_prefetch((const char *)(w + (size_t)q * in + i), _MM_HINT_T0);
            const __m512 w0 = widen16(w + i, m, f16), w1 = widen16(w + (size_t)in + i, m, f16);
            const __m512 w2 = widen16(w + 2 * (size_t)in + i, m, f16), w3 = widen16(w + 3 * (size_t)in + i, m, f16);
            for (int n = 0; n < NN; n++) {
                const __m512 xv = _mm512_maskz_loadu_ps(m, x + (size_t)n * ldx + i);
                s[0][n] = _mm512_fmadd_ps(w0, xv, s[0][n]);
                s[1][n] = _mm512_fmadd_ps(w1, xv, s[1][n]);
                s[2][n] = _mm512_fmadd_ps(w2, xv, s[2][n]);
                s[3][n] = _mm512_fmadd_ps(w3, xv, s[3][n]);
            }
        }
        for (int q = 0; q < 4; q++)
            for (int n = 0; n < NN; n++) {
                const float v = _mm512_reduce_add_ps(s[q][n]);
                float *yo = y + (size_t)n * ldy + r + q;
                *yo = accumulate ? *yo + v : v;
            }
    }
    for (; r < r1; r++) {
        const uint16_t *w = W + (size_t)r * in;
        __m512 s0[AL_WMAT_SMALL_N];
        for (int n = 0; n < NN; n++) s0[n] = _mm512_setzero_ps();
        for (int i = 0; i < in; i += 16) {
            const __mmask16 m = in - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (in - i)) - 1);
            const __m512 w0 = widen16(w + i, m, f16);
            for (int n = 0; n < NN; n++)
                s0[n] = _mm512_fmadd_ps(w0, _mm512_maskz_loadu_ps(m, x + (size_t)n * ldx + i), s0[n]);
        }
        for (int n = 0; n < NN; n++) {
            const float v = _mm512_reduce_add_ps(s0[n]);
            float *yo = y + (size_t)n * ldy + r;
            *yo = accumulate ? *yo + v : v;
        }
    }
}

__attribute__((target("avx512f,avx512bw,avx512vl"))) static void direct_avx512(float *y, int ldy, const float *x,
                                                                               int ldx, const uint16_t *W, int f16,
                                                                               int N, int in, int r0, int r1,
                                                                               int accumulate) {
#define AL_DIRECT_CASE(NN, F16)                                                                                    \
    direct_avx512_n(y, ldy, x, ldx, W, F16, NN, in, r0, r1, accumulate);                                           \
    break;
    if (f16) {
        switch (N) {
        case 1: AL_DIRECT_CASE(1, 1)
        case 2: AL_DIRECT_CASE(2, 1)
        case 3: AL_DIRECT_CASE(3, 1)
        default: AL_DIRECT_CASE(4, 1)
        }
    } else {
        switch (N) {
        case 1: AL_DIRECT_CASE(1, 0)
        case 2: AL_DIRECT_CASE(2, 0)
        case 3: AL_DIRECT_CASE(3, 0)
        default: AL_DIRECT_CASE(4, 0)
        }
    }
#undef AL_DIRECT_CASE
}

/* AVX2 + F16C: the AVX-512 kernel's structure at 8 lanes (four rows of W at
 * a time, each 8-value piece widened once for every row of x, the next four
 * rows prefetched). */
AL_AVX2_TARGET static inline __attribute__((always_inline)) float hsum8(__m256 v) {
    __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    a = _mm_add_ps(a, _mm_movehl_ps(a, a));
    return _mm_cvtss_f32(_mm_add_ss(a, _mm_movehdup_ps(a)));
}

AL_AVX2_TARGET static inline __attribute__((always_inline)) void direct_avx2_n(float *y, int ldy, const float *x, int ldx,
                                                                const uint16_t *W, int f16, const int NN, int in,
                                                                int r0, int r1, int accumulate) {
    int r = r0;
    for (; r + 4 <= r1; r += 4) {
        const uint16_t *w = W + (size_t)r * in;
        __m256 s[4][AL_WMAT_SMALL_N];
        for (int q = 0; q < 4; q++)
            for (int n = 0; n < NN; n++) s[q][n] = _mm256_setzero_ps();
        for (int i = 0; i < in; i += 8) {
            const int len = in - i < 8 ? in - i : 8;
            if (!(i & 31) && r + 8 <= r1)
                for (int q = 4; q < 8; q++) _mm_prefetch((const char *)(w + (size_t)q * in + i), _MM_HINT_T0);
            const __m256 w0 = widen8(w + i, len, f16), w1 = widen8(w + (size_t)in + i, len, f16);
            const __m256 w2 = widen8(w + 2 * (size_t)in + i, len, f16), w3 = widen8(w + 3 * (size_t)in + i, len, f16);
            for (int n = 0; n < NN; n++) {
                const float *xp = x + (size_t)n * ldx + i;
                const __m256 xv = len == 8 ? _mm256_loadu_ps(xp) : _mm256_maskload_ps(xp, mask8(len));
                s[0][n] = _mm256_fmadd_ps(w0, xv, s[0][n]);
                s[1][n] = _mm256_fmadd_ps(w1, xv, s[1][n]);
                s[2][n] = _mm256_fmadd_ps(w2, xv, s[2][n]);
                s[3][n] = _mm256_fmadd_ps(w3, xv, s[3][n]);
            }
        }
        for (int q = 0; q < 4; q++)
            for (int n = 0; n < NN; n++) {
                const float v = hsum8(s[q][n]);
                float *yo = y + (size_t)n * ldy + r + q;
                *yo = accumulate ? *yo + v : v;
            }
    }
    for (; r < r1; r++) {
        const uint16_t *w = W + (size_t)r * in;
        __m256 s0[AL_WMAT_SMALL_N];
        for (int n = 0; n < NN; n++) s0[n] = _mm256_setzero_ps();
        for (int i = 0; i < in; i += 8) {
            const int len = in - i < 8 ? in - i : 8;
            const __m256 w0 = widen8(w + i, len, f16);
            for (int n = 0; n < NN; n++) {
                const float *xp = x + (size_t)n * ldx + i;
                s0[n] = _mm256_fmadd_ps(w0, len == 8 ? _mm256_loadu_ps(xp) : _mm256_maskload_ps(xp, mask8(len)), s0[n]);
            }
        }
        for (int n = 0; n < NN; n++) {
            const float v = hsum8(s0[n]);
            float *yo = y + (size_t)n * ldy + r;
            *yo = accumulate ? *yo + v : v;
        }
    }
}

AL_AVX2_TARGET static void direct_avx2(float *y, int ldy, const float *x, int ldx, const uint16_t *W, int f16, int N, int in, int r0,
                        int r1, int accumulate) {
    switch (N) {
    case 1: direct_avx2_n(y, ldy, x, ldx, W, f16, 1, in, r0, r1, accumulate); break;
    case 2: direct_avx2_n(y, ldy, x, ldx, W, f16, 2, in, r0, r1, accumulate); break;
    case 3: direct_avx2_n(y, ldy, x, ldx, W, f16, 3, in, r0, r1, accumulate); break;
    default: direct_avx2_n(y, ldy, x, ldx, W, f16, 4, in, r0, r1, accumulate); break;
    }
}

/* One set's direct kernel over rows [r0, r1). */
static void direct_rows(float *y, int ldy, const float *x, int ldx, const uint16_t *W, int f16, int N, int in, int r0,
                        int r1, int accumulate) {
    if (kernel == K_AVX512) direct_avx512(y, ldy, x, ldx, W, f16, N, in, r0, r1, accumulate);
    else if (kernel == K_AVX2) direct_avx2(y, ldy, x, ldx, W, f16, N, in, r0, r1, accumulate);
    else direct_portable(y, ldy, x, ldx, W, f16, N, in, r0, r1, accumulate);
}

/* The direct kernel over all rows, parallel over blocks of output rows (each
 * element is one thread's sum: the result does not depend on the threads). */
static void direct(float *y, int ldy, const float *x, int ldx, al_wref W, int N, int in, int out, int accumulate) {
    const uint16_t *w = (const uint16_t *)W.p;
    const int f16 = W.dt == AL_DT_F16;
    enum { RB = 16 };
    const int nb = (out + RB - 1) / RB;
    /* dynamic: a thread that loses its core (a busy machine) does not hold the others up */
#pragma omp parallel for schedule(dynamic, 4) if ((long)out * in > 65536)
    for (int b = 0; b < nb; b++) {
        const int r0 = b * RB, r1 = r0 + RB < out ? r0 + RB : out;
        direct_rows(y, ldy, x, ldx, w, f16, N, in, r0, r1, accumulate);
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

static void panels(float *y, int ldy, const float *x, int ldx, al_wref W, int N, int in, int out, int accumulate) {
    const float beta = accumulate ? 1.0f : 0.0f;
    /* a small matrix: widen it whole (in parallel), then one al_sgemm, if
     * that runs in parallel (enough rows of x); otherwise panels */
    if (!forced_panel_rows && (size_t)out * in <= ((size_t)8 << 20) / sizeof(float) && al_sgemm_row_blocks(N) > 1) {
        float *Wf = al_alloc(sizeof(float) * (size_t)out * in);
        if (Wf) {
#pragma omp parallel for schedule(static) if ((long)out * in > 65536)
            for (int r = 0; r < out; r++) widen_any(Wf + (size_t)r * in, W, (size_t)r * in, (size_t)in);
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
                    direct_rows(ys, ldy, xs, ldx, W.p, W.dt == AL_DT_F16, nn, in, r0, r0 + rows, accumulate);
                }
                continue;
            }
            widen_any(buf, W, (size_t)r0 * in, (size_t)rows * in);
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
    if (N <= AL_WMAT_SMALL_N && !forced_panel_rows) direct(y, ldy, x, ldx, W, N, in, out, accumulate);
    else panels(y, ldy, x, ldx, W, N, in, out, accumulate);
}

void al_matvec(float *y, const float *x, al_wref W, int out, int in, int accumulate) {
    if (out <= 0) return;
    if (W.dt == AL_DT_F32) {
        cblas_sgemv(CblasRowMajor, CblasNoTrans, out, in, 1.0f, (const float *)W.p, in, x, 1,
                    accumulate ? 1.0f : 0.0f, y, 1);
        return;
    }
    wmat_init();
    if (in <= 0) {
        if (!accumulate) memset(y, 0, sizeof(float) * (size_t)out);
        return;
    }
    direct(y, out, x, in, W, 1, in, out, accumulate);
}

void al_matvec_t(float *y, const float *x, al_wref W, int out, int in, int accumulate) {
    if (in <= 0) return;
    if (W.dt == AL_DT_F32) {
        cblas_sgemv(CblasRowMajor, CblasTrans, out, in, 1.0f, (const float *)W.p, in, x, 1,
                    accumulate ? 1.0f : 0.0f, y, 1);
        return;
    }
    wmat_init();
    /* y[j] = sum_r x[r] W[r, j]: column blocks in parallel, rows in order
     * inside each (widened 256 at a time), so every sum has one fixed order */
    enum { CB = 256 };
    const int nb = (in + CB - 1) / CB;
#pragma omp parallel for schedule(static) if ((long)out * in > 65536)
    for (int b = 0; b < nb; b++) {
        const int j0 = b * CB, len = in - j0 < CB ? in - j0 : CB;
        float acc[CB], wb[CB];
        for (int j = 0; j < len; j++) acc[j] = accumulate ? y[j0 + j] : 0.0f;
        for (int r = 0; r < out; r++) {
            widen_any(wb, W, (size_t)r * in + j0, (size_t)len);
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
