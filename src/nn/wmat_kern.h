/*
 * wmat_kern.h: the SIMD kernels of the products over 16-bit weights
 * (wmat.c), written once over core/vec.h's vocabulary and compiled twice:
 * wmat_avx512.c (16 lanes) and wmat_avx2.c (8 lanes, F16C for F16). The
 * including file opens its target pragma, includes core/vec.h at its width
 * and defines WSFX(name) (name##_avx512 / name##_avx2, the exported entry
 * points, declared in wmat_internal.h).
 *
 * The direct kernel: y[n, r] (+)= sum_i W[r, i] x[n, i] for rows r in
 * [r0, r1) and N <= AL_WMAT_SMALL_N rows of x. Four rows of W at a time:
 * AL_VW weights of each widened once and used by every row of x, whose
 * AL_VW values are loaded once for the four rows (four independent streams
 * of W keep the memory system busy: about twice the bandwidth of one row at
 * a time on a Xeon), the rows GEMV_PF_ROWS ahead prefetched into L2;
 * leftover rows one at a time. Specialised per N and per F16/BF16
 * (constants at each call site).
 *
 * The F32 matrix-vector kernel (decode's products over attnlab's own fp32
 * weights): y[r] (+)= W[r, :] x, four rows at a time, described below.
 */
#ifndef WSFX
#error "wmat_kern.h is included by wmat_avx512.c / wmat_avx2.c only"
#endif

/* Rows ahead of the four being read that the kernels prefetch into L2
 * (prefetcht1). Measured on the 12 x 768 model's 340 MB of weights, 2
 * threads (AVX2, Zen 4): no prefetch 31 GB/s, the next 4 rows into L1
 * (prefetcht0) 33, 8 rows ahead into L2 40-50, 12 rows 48-56, 16 rows 49-58
 * (triad 47-63); into L1 at 8 or 12 rows ahead, 29-32. */
enum { GEMV_PF_ROWS = 16 };

static inline __attribute__((always_inline)) void direct_n(float *y, int ldy, const float *x, int ldx,
                                                           const uint16_t *W, const int F16, const int NN, int in,
                                                           int r0, int r1, int accumulate) {
    int r = r0;
    for (; r + 4 <= r1; r += 4) {
        const uint16_t *w = W + (size_t)r * in;
        vf s[4][AL_WMAT_SMALL_N];
        for (int q = 0; q < 4; q++)
            for (int n = 0; n < NN; n++) s[q][n] = V_ZERO();
        for (int i = 0; i < in; i += AL_VW) {
            const int len = in - i;
            if (!(i & 31) && r + GEMV_PF_ROWS + 4 <= r1) /* rows ahead: one 64-byte line each per 32 columns */
                for (int q = 0; q < 4; q++)
                    _mm_prefetch((const char *)(w + (size_t)(q + GEMV_PF_ROWS) * in + i), _MM_HINT_T1);
            const vf w0 = v_load16(w + i, len, F16), w1 = v_load16(w + (size_t)in + i, len, F16);
            const vf w2 = v_load16(w + 2 * (size_t)in + i, len, F16), w3 = v_load16(w + 3 * (size_t)in + i, len, F16);
            for (int n = 0; n < NN; n++) {
                const vf xv = v_loadn(x + (size_t)n * ldx + i, len);
                s[0][n] = V_FMA(w0, xv, s[0][n]);
                s[1][n] = V_FMA(w1, xv, s[1][n]);
                s[2][n] = V_FMA(w2, xv, s[2][n]);
                s[3][n] = V_FMA(w3, xv, s[3][n]);
            }
        }
        for (int q = 0; q < 4; q++)
            for (int n = 0; n < NN; n++) {
                const float v = V_HSUM(s[q][n]);
                float *yo = y + (size_t)n * ldy + r + q;
                *yo = accumulate ? *yo + v : v;
            }
    }
    for (; r < r1; r++) {
        const uint16_t *w = W + (size_t)r * in;
        vf s0[AL_WMAT_SMALL_N];
        for (int n = 0; n < NN; n++) s0[n] = V_ZERO();
        for (int i = 0; i < in; i += AL_VW) {
            const int len = in - i;
            const vf w0 = v_load16(w + i, len, F16);
            for (int n = 0; n < NN; n++) s0[n] = V_FMA(w0, v_loadn(x + (size_t)n * ldx + i, len), s0[n]);
        }
        for (int n = 0; n < NN; n++) {
            const float v = V_HSUM(s0[n]);
            float *yo = y + (size_t)n * ldy + r;
            *yo = accumulate ? *yo + v : v;
        }
    }
}

void WSFX(al_wmat_direct)(float *y, int ldy, const float *x, int ldx, const uint16_t *W, int f16, int N, int in,
                          int r0, int r1, int accumulate) {
#define DIRECT_CASE(NN, F)                                                                                         \
    direct_n(y, ldy, x, ldx, W, F, NN, in, r0, r1, accumulate);                                                    \
    break;
    if (f16) {
        switch (N) {
        case 1: DIRECT_CASE(1, 1)
        case 2: DIRECT_CASE(2, 1)
        case 3: DIRECT_CASE(3, 1)
        default: DIRECT_CASE(4, 1)
        }
    } else {
        switch (N) {
        case 1: DIRECT_CASE(1, 0)
        case 2: DIRECT_CASE(2, 0)
        case 3: DIRECT_CASE(3, 0)
        default: DIRECT_CASE(4, 0)
        }
    }
#undef DIRECT_CASE
}

/* The F32 matrix-vector kernel: y[r] (+)= sum_i W[r, i] x[i] for rows r in
 * [r0, r1), W fp32 row-major with `in` columns. RQ rows at a time (4, the
 * leftovers 1), two vectors of each per step: 2 RQ independent FMA chains
 * and RQ streams of W, each x vector loaded once for the RQ rows; the same
 * columns GEMV_PF_ROWS rows further on (inside [r0, r1)) are prefetched as
 * this step reads its rows, so memory stays busy across row and block ends.
 * Every row is summed in the same order whatever RQ (two accumulators, the
 * tail masked into them, added and reduced at the end), so a row's bits do
 * not depend on how the rows were split between threads. */
static inline __attribute__((always_inline)) void gemv_rows(float *y, const float *x, const float *W, const int RQ,
                                                            int in, int r, int r1, int accumulate) {
    const float *w = W + (size_t)r * in;
    const int pf = r + GEMV_PF_ROWS + RQ <= r1; /* the rows to prefetch are this call's */
    vf a0[4], a1[4];
    for (int q = 0; q < RQ; q++) a0[q] = a1[q] = V_ZERO();
    int i = 0;
    for (; i + 2 * AL_VW <= in; i += 2 * AL_VW) {
        if (pf)
            for (int q = 0; q < RQ; q++)
                for (int o = 0; o < 2 * AL_VW; o += 16) /* 16 floats: one line */
                    _mm_prefetch((const char *)(w + (size_t)(q + GEMV_PF_ROWS) * in + i + o), _MM_HINT_T1);
        const vf x0 = V_LOAD(x + i), x1 = V_LOAD(x + i + AL_VW);
        for (int q = 0; q < RQ; q++) {
            a0[q] = V_FMA(V_LOAD(w + (size_t)q * in + i), x0, a0[q]);
            a1[q] = V_FMA(V_LOAD(w + (size_t)q * in + i + AL_VW), x1, a1[q]);
        }
    }
    if (i < in) { /* the tail: up to two partial vectors (lanes past `in` are 0) */
        const int len = in - i;
        const vf x0 = v_loadn(x + i, len), x1 = v_loadn(x + i + AL_VW, len - AL_VW);
        for (int q = 0; q < RQ; q++) {
            a0[q] = V_FMA(v_loadn(w + (size_t)q * in + i, len), x0, a0[q]);
            a1[q] = V_FMA(v_loadn(w + (size_t)q * in + i + AL_VW, len - AL_VW), x1, a1[q]);
        }
    }
    for (int q = 0; q < RQ; q++) {
        const float v = V_HSUM(V_ADD(a0[q], a1[q]));
        y[r + q] = accumulate ? y[r + q] + v : v;
    }
}

void WSFX(al_wmat_gemv_f32)(float *y, const float *x, const float *W, int in, int r0, int r1, int accumulate) {
    int r = r0;
    for (; r + 4 <= r1; r += 4) gemv_rows(y, x, W, 4, in, r, r1, accumulate);
    for (; r < r1; r++) gemv_rows(y, x, W, 1, in, r, r1, accumulate);
}

/* dst[n] = src[n] widened, AL_VW values at a time (the tail masked). */
static inline __attribute__((always_inline)) void widen_n(float *dst, const uint16_t *src, size_t n, const int F16) {
    size_t i = 0;
    for (; i + AL_VW <= n; i += AL_VW) V_STORE(dst + i, v_load16(src + i, AL_VW, F16));
    if (i < n) V_STOREM(dst + i, V_MASK((int)(n - i)), v_load16(src + i, (int)(n - i), F16));
}

void WSFX(al_wmat_widen)(float *dst, const uint16_t *src, size_t n, int f16) {
    if (f16) widen_n(dst, src, n, 1);
    else widen_n(dst, src, n, 0);
}
