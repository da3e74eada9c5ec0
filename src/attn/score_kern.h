/*
 * score_kern.h: the register-blocked attention kernels (forward and
 * backward, all four score functions, causal or bidirectional), written once
 * over the vector vocabulary of core/vec.h and compiled twice: score_avx512.c
 * (16-wide __m512, 4 vectors per micro-kernel row) and score_avx2.c (8-wide
 * __m256, 2 vectors per row). The including file sets the vector width,
 * includes core/vec.h under its target pragma, and defines
 *   KW, KCB            floats per vector (AL_VW); vectors per micro-kernel row
 *   KSFX(name)         name##_avx512 / name##_avx2 (the exported entry points)
 *
 * Data layout (see docs/kernels.md), all in the workspace the caller passes
 * (ws, KSFX(al_attn_fwd_floats) / KSFX(al_attn_bwd_floats) floats for nthr
 * threads: O(T); score.c keeps it in the calling thread's arena):
 *   kt  [B][G][ntile][dk][KT]  K^T of each key tile of KT = 64 keys, times
 *       `scale` (softmax: times scale log2 e, so it runs in base 2),
 *       zero-padded past T: packed once per call by all threads, then read
 *       by every query block and every head of the KV group (GQA/MQA reuse
 *       a packed tile across their heads);
 *   vp  [B][G][ntile][KT][dv]  V rows, contiguous (forward, for P V);
 *   vt  [B][G][ntile][dv][KT]  V^T (backward, for dP = dO V^T);
 *   kp  [B][G][ntile][KT][dk]  K rows, unscaled (backward, for dq += dS K);
 *   per thread: S (and dP) [RG][KT], one row group's scores; forward: the
 *       rows' running max m [hpc][QB] and sums l [hpc][QB] (one vector of
 *       partial sums each); backward: P, dS [QB][KT] of a query block, the
 *       key tile's dK, dV accumulators [KT][dk], [KT][dv], and the item's
 *       heads' Q [hpc][T][dk] and dO [hpc][T][dv] rows, contiguous.
 * Q (forward), O and dq are read and written in place through their
 * strides (6 rows at a time: no cache-set conflicts at that count).
 *
 * One micro-kernel does every product: C[R][N] (=, +=, or alpha_r C +)
 * sum_k A[r sar + k sak] B[k ldb + n] for R <= RG = 6 rows and N <= KCB*KW
 * columns, the R*KCB accumulators in registers; each A element is broadcast
 * (strides let the same kernel read P or dS transposed for dV = P^T dO and
 * dK = dS^T Q without a transpose), each B row loaded once per k.
 */
#if !defined(KSFX) && !defined(SCORE_KERN_ROWS_ONLY)
#error "score_kern.h is included by score_avx512.c / score_avx2.c (and, rows only, score_bf16_kern.h)"
#endif
/* SCORE_KERN_ROWS_ONLY: only the vector helpers (exp2, the score functions
 * on rows, the workspace cursor and the work split), for the BF16 kernels of
 * score_bf16_kern.h, which bring their own products. SCORE_INT_MAX: the
 * online softmax keeps its running max at whole numbers (see
 * row_softmax_fwd); 0 unless the includer sets it. */
#ifndef SCORE_INT_MAX
#define SCORE_INT_MAX 0
#endif

enum { KT = 64, QBK = 64, RG = 6 };

/* ---- exp2 and exp, 16 (8) lanes at a time ---- */

/* c[0] + c[1] r + ... + c[degree] r^degree, by Horner's rule */
static inline __attribute__((always_inline)) vf v_poly(vf r, const float *c, int degree) {
    vf p = V_SET1(c[degree]);
#pragma GCC unroll 8
    for (int k = degree - 1; k >= 0; k--) p = V_FMA(p, r, V_SET1(c[k]));
    return p;
}

/* v_exp2's coefficients of 2^r on [-1/2, 1/2], constant term first */
static const float exp2_deg6[7] = {1.0f,
                                   6.931471824645996e-1f,
                                   2.4022646248340607e-1f,
                                   5.550328642129898e-2f,
                                   9.618489071726799e-3f,
                                   1.3399930903688073e-3f,
                                   1.5345810970757157e-4f};

/* 2^x = 2^n 2^r with n = round(x), r = x - n in [-1/2, 1/2] (exact), 2^r
 * from a degree-6 polynomial fitted for minimum relative error on that
 * interval (9.6e-8, about 1.6 ulp, evaluated in float), and 2^n applied by
 * V_LDEXP (AVX-512: vscalefps, which also gives exact 0 / inf far out of
 * range; AVX2: exponent bits, after V_EXP2_RANGE clamps x to [-126, 127]).
 * NaN stays NaN. Softmax works in base 2 throughout (its packed keys carry
 * log2 e), so its exp is one exp2; exp(x) for sigmoid is exp2(x log2 e). */
static inline vf v_exp2(vf x) {
    x = V_EXP2_RANGE(x);
    const vf n = V_ROUND(x);
    return V_LDEXP(v_poly(V_SUB(x, n), exp2_deg6, 6), n);
}

/* e^x = 2^(x log2 e): for sigmoid (softmax works in base 2 directly) */
static inline vf v_exp(vf x) { return v_exp2(V_MUL(x, V_SET1(1.44269504088896341f))); }

#ifndef SCORE_KERN_ROWS_ONLY
/* ---- the micro-kernel ----
 * C[r][0..ncols) for r < R (R, NC compile-time after inlining):
 *   mode 0: C  = A B      mode 1: C += A B      mode 2: C = alpha[r] C + A B
 * A[R, K] read as A[r*sar + k*sak] (broadcast), B[K, ncols] rows ldb apart
 * (B16: BF16 values, widened as loaded; the decode kernel's cached values),
 * C rows ldc apart; the last of the NC vectors of a row is loaded and stored
 * through `last` (the tail of ncols, nlast lanes), so nothing past ncols is
 * touched. */
static inline __attribute__((always_inline)) void mk_body(const int R, const int NC, const int B16, int K,
                                                          const float *restrict A, long sar, long sak,
                                                          const void *restrict B, long ldb, float *restrict C,
                                                          long ldc, vmask last, int nlast, int mode,
                                                          const float *restrict alpha) {
    vf acc[RG][KCB];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int c = 0; c < NC; c++) acc[r][c] = V_ZERO();
    for (int k = 0; k < K; k++) {
        const float *restrict a = A + (long)k * sak;
        vf bv[KCB];
        if (B16) {
            const uint16_t *restrict b = (const uint16_t *)B + (long)k * ldb;
#pragma GCC unroll 8
            for (int c = 0; c < NC; c++) bv[c] = c == NC - 1 ? V_LOADN_BF16(b + c * KW, nlast) : V_LOAD_BF16(b + c * KW);
        } else {
            const float *restrict b = (const float *)B + (long)k * ldb;
#pragma GCC unroll 8
            for (int c = 0; c < NC; c++) bv[c] = c == NC - 1 ? V_LOADM(b + c * KW, last) : V_LOAD(b + c * KW);
        }
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            const vf av = V_SET1(a[(long)r * sar]);
#pragma GCC unroll 8
            for (int c = 0; c < NC; c++) acc[r][c] = V_FMA(av, bv[c], acc[r][c]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
        float *restrict cr = C + (long)r * ldc;
#pragma GCC unroll 8
        for (int c = 0; c < NC; c++) {
            vf x = acc[r][c];
            if (c == NC - 1) {
                if (mode == 1) x = V_ADD(V_LOADM(cr + c * KW, last), x);
                else if (mode == 2) x = V_FMA(V_LOADM(cr + c * KW, last), V_SET1(alpha[r]), x);
                V_STOREM(cr + c * KW, last, x);
            } else {
                if (mode == 1) x = V_ADD(V_LOAD(cr + c * KW), x);
                else if (mode == 2) x = V_FMA(V_LOAD(cr + c * KW), V_SET1(alpha[r]), x);
                V_STORE(cr + c * KW, x);
            }
        }
    }
}

typedef void (*mk_fn)(int K, const float *A, long sar, long sak, const float *B, long ldb, float *C, long ldc,
                      vmask last, int mode, const float *alpha);

/* one out-of-line instance per (rows, vectors) shape */
#define MK_DEF(R, NC)                                                                                       \
    static __attribute__((noinline)) void mk_##R##_##NC(int K, const float *A, long sar, long sak,          \
                                                        const float *B, long ldb, float *C, long ldc,       \
                                                        vmask last, int mode, const float *alpha) {         \
        mk_body(R, NC, 0, K, A, sar, sak, B, ldb, C, ldc, last, 0, mode, alpha);                            \
    }                                                                                                       \
    static __attribute__((noinline)) void mk16_##R##_##NC(int K, const float *A, long sar, long sak,        \
                                                          const uint16_t *B, long ldb, float *C, long ldc,  \
                                                          vmask last, int nlast) {                          \
        mk_body(R, NC, 1, K, A, sar, sak, B, ldb, C, ldc, last, nlast, 0, NULL);                            \
    }
#if KCB == 4
#define MK_ROW(R) MK_DEF(R, 1) MK_DEF(R, 2) MK_DEF(R, 3) MK_DEF(R, 4)
#define MK_TAB(R) {mk_##R##_1, mk_##R##_2, mk_##R##_3, mk_##R##_4}
#define MK16_TAB(R) {mk16_##R##_1, mk16_##R##_2, mk16_##R##_3, mk16_##R##_4}
#elif KCB == 2
#define MK_ROW(R) MK_DEF(R, 1) MK_DEF(R, 2)
#define MK_TAB(R) {mk_##R##_1, mk_##R##_2}
#define MK16_TAB(R) {mk16_##R##_1, mk16_##R##_2}
#else
#error "KCB must be 2 or 4"
#endif
MK_ROW(1) MK_ROW(2) MK_ROW(3) MK_ROW(4) MK_ROW(5) MK_ROW(6)

static mk_fn const mk_tab[RG][KCB] = {MK_TAB(1), MK_TAB(2), MK_TAB(3), MK_TAB(4), MK_TAB(5), MK_TAB(6)};
typedef void (*mk16_fn)(int K, const float *A, long sar, long sak, const uint16_t *B, long ldb, float *C, long ldc,
                        vmask last, int nlast);
static mk16_fn const mk16_tab[RG][KCB] = {MK16_TAB(1), MK16_TAB(2), MK16_TAB(3),
                                          MK16_TAB(4), MK16_TAB(5), MK16_TAB(6)};
#undef MK16_TAB
#undef MK_TAB
#undef MK_ROW
#undef MK_DEF

/* C[M, N] (mode) A[M, K] B[K, N], A and C as in mk_body: row groups of RG,
 * column blocks of KCB vectors, each one micro-kernel call. */
static void mm(int M, int N, int K, const float *A, long sar, long sak, const float *B, long ldb, float *C, long ldc,
               int mode, const float *alpha) {
    for (int n0 = 0; n0 < N; n0 += KCB * KW) {
        const int nb = N - n0 < KCB * KW ? N - n0 : KCB * KW, nc = (nb + KW - 1) / KW;
        const vmask last = V_MASK(nb - (nc - 1) * KW);
        for (int r0 = 0; r0 < M; r0 += RG) {
            const int R = M - r0 < RG ? M - r0 : RG;
            mk_tab[R - 1][nc - 1](K, A + (long)r0 * sar, sar, sak, B + n0, ldb, C + (long)r0 * ldc + n0, ldc, last,
                                  mode, alpha ? alpha + r0 : NULL);
        }
    }
}

/* C[M, N] = A[M, K] B[K, N] with B in BF16 (mode 0 of mm) */
static void mm16(int M, int N, int K, const float *A, long sar, long sak, const uint16_t *B, long ldb, float *C,
                 long ldc) {
    for (int n0 = 0; n0 < N; n0 += KCB * KW) {
        const int nb = N - n0 < KCB * KW ? N - n0 : KCB * KW, nc = (nb + KW - 1) / KW, nlast = nb - (nc - 1) * KW;
        for (int r0 = 0; r0 < M; r0 += RG) {
            const int R = M - r0 < RG ? M - r0 : RG;
            mk16_tab[R - 1][nc - 1](K, A + (long)r0 * sar, sar, sak, B + n0, ldb, C + (long)r0 * ldc + n0, ldc,
                                    V_MASK(nlast), nlast);
        }
    }
}
#endif /* SCORE_KERN_ROWS_ONLY */

/* ---- score functions on vectors ---- */

/* x^p by squaring (p >= 1) */
static inline vf v_powi(vf x, int p) {
    vf r = x;
    p--;
    for (; p; p >>= 1, x = V_MUL(x, x))
        if (p & 1) r = V_MUL(r, x);
    return r;
}

/* weights f(s) of the elementwise functions (not softmax) */
static inline vf v_map_fwd(const score_fn *f, vf x) {
    switch (f->kind) {
    case AL_SCORE_POLY:
        return V_MUL(V_SET1(f->c), v_powi(x, f->p));
    case AL_SCORE_RELU:
        return V_SEL(V_CMP_POS(x), V_MUL(x, V_SET1(f->inv_n)), V_ZERO());
    case AL_SCORE_SIGMOID:
        return V_DIV(V_SET1(1.0f), V_ADD(V_SET1(1.0f), v_exp(V_SUB(V_SET1(f->log_n), x))));
    default:
        return x;
    }
}

/* weights f(s) into *p, and f'(s) g into the return value */
static inline vf v_map_bwd(const score_fn *f, vf x, vf g, vf *p) {
    switch (f->kind) {
    case AL_SCORE_POLY: {
        if (f->p == 1) {
            *p = V_MUL(V_SET1(f->c), x);
            return V_MUL(V_SET1(f->c), g);
        }
        const vf sp1 = v_powi(x, f->p - 1);
        *p = V_MUL(V_SET1(f->c), V_MUL(sp1, x));
        return V_MUL(V_SET1(f->c * (float)f->p), V_MUL(sp1, g));
    }
    case AL_SCORE_RELU: {
        const vmask pos = V_CMP_POS(x);
        const vf inv = V_SET1(f->inv_n);
        *p = V_SEL(pos, V_MUL(x, inv), V_ZERO());
        return V_SEL(pos, V_MUL(g, inv), V_ZERO());
    }
    case AL_SCORE_SIGMOID: {
        const vf one = V_SET1(1.0f);
        const vf w = V_DIV(one, V_ADD(one, v_exp(V_SUB(V_SET1(f->log_n), x))));
        *p = w;
        return V_MUL(g, V_MUL(w, V_SUB(one, w)));
    }
    default:
        *p = x;
        return g;
    }
}

/* ---- one row of a score tile ----
 * s[0..nw): scores of one query row against a key tile (nw a multiple of KW;
 * lanes at or past nv may hold anything), the first nv visible. */

/* softmax forward (online, base 2: s = log2(e) x the scaled score), with
 * lazy rescaling: the row's reference max m only moves when a visible score
 * exceeds it by more than LAZY (so weights stay below 2^LAZY, far from
 * overflow), which after the first tiles is rare: most tiles then need one
 * vector compare instead of a horizontal max, no exp of m and no rescale of
 * the output. s <- 2^(s - m) on visible lanes, 0 on the others; *l, the
 * row's sum as one vector of partial sums, is rescaled with the output;
 * returns alpha = 2^(m_old - m_new) (1: m unchanged). The result does not
 * depend on m (it cancels in O / l and in lse = m + log2 l). With
 * SCORE_INT_MAX (the BF16 kernels) m is the ceiling of the max, a whole
 * number: weights for different m then differ by exact powers of two, so
 * their BF16 rounding does not depend on when m moved (nor on the tile
 * order), and the reference can round the same values. */
enum { LAZY = 8 };

/* The lazy move of a row's reference max *m given vmx, the lanes' max of
 * its visible scores in this tile: *l rescaled with it; returns alpha. */
static inline float softmax_move_max(vf vmx, float *m, vf *l) {
    const float m_old = *m;
    float alpha = 1.0f;
    if (V_ANY_GT(vmx, V_SET1(m_old + (float)LAZY))) { /* also the first visible tile: m_old = -inf */
        const float m_new = SCORE_INT_MAX ? ceilf(V_HMAX(vmx)) : V_HMAX(vmx);
        alpha = m_old == -INFINITY ? 0.0f : exp2f(m_old - m_new);
        *m = m_new;
        *l = V_MUL(*l, V_SET1(alpha));
    }
    return alpha;
}

static inline float row_softmax_fwd(float *restrict s, int nw, int nv, float *m, vf *l) {
    vf vmx = V_SET1(-INFINITY);
    for (int c = 0; c * KW < nv; c++) {
        const vf x = V_LOAD(s + c * KW);
        vmx = V_MAX(vmx, nv >= (c + 1) * KW ? x : V_SEL(V_MASK(nv - c * KW), x, V_SET1(-INFINITY)));
    }
    const float alpha = softmax_move_max(vmx, m, l);
    const vf vm = V_SET1(*m);
    vf sum = *l;
    for (int c = 0; c * KW < nw; c++) {
        vf p;
        if (nv >= (c + 1) * KW) p = v_exp2(V_SUB(V_LOAD(s + c * KW), vm));
        else if (nv > c * KW) p = V_SEL(V_MASK(nv - c * KW), v_exp2(V_SUB(V_LOAD(s + c * KW), vm)), V_ZERO());
        else p = V_ZERO();
        sum = V_ADD(sum, p);
        V_STORE(s + c * KW, p);
    }
    *l = sum;
    return alpha;
}

/* elementwise functions forward: s <- f(s) on visible lanes, 0 elsewhere */
static inline void row_map_fwd(const score_fn *f, float *restrict s, int nw, int nv) {
    for (int c = 0; c * KW < nw; c++) {
        vf p = V_ZERO();
        if (nv > c * KW) {
            p = v_map_fwd(f, V_LOAD(s + c * KW));
            if (nv < (c + 1) * KW) p = V_SEL(V_MASK(nv - c * KW), p, V_ZERO());
        }
        V_STORE(s + c * KW, p);
    }
}

/* row_bwd on the vector of lanes c KW .. (c + 1) KW of a row: x scores, g
 * dP -> *w weights, *d dS (vl, vD, vs: lse, D, scale broadcast) */
static inline void vec_bwd(const score_fn *f, vf x, vf g, vf vl, vf vD, vf vs, int nv, int c, vf *w, vf *d) {
    if (nv <= c * KW) {
        *w = *d = V_ZERO();
        return;
    }
    if (f->kind == AL_SCORE_SOFTMAX) {
        *w = v_exp2(V_SUB(x, vl));
        *d = V_MUL(*w, V_SUB(g, vD));
    } else {
        *d = v_map_bwd(f, x, g, w);
    }
    *d = V_MUL(*d, vs);
    if (nv < (c + 1) * KW) {
        const vmask mk = V_MASK(nv - c * KW);
        *w = V_SEL(mk, *w, V_ZERO());
        *d = V_SEL(mk, *d, V_ZERO());
    }
}

/* backward: s (scores), dp (dL/dp = dO . v_j) -> p (weights) and ds = scale
 * dL/ds, both 0 on masked lanes; softmax (base 2: s and lse carry log2 e):
 * p = 2^(s - lse), ds = scale p (dp - D) with D = dO . O; the others:
 * p = f(s), ds = scale f'(s) dp. */
static inline void row_bwd(const score_fn *f, const float *restrict s, const float *restrict dp, float *restrict p,
                           float *restrict ds, int nw, int nv, float lse, float D, float scale) {
    const vf vl = V_SET1(lse), vD = V_SET1(D), vs = V_SET1(scale);
    for (int c = 0; c * KW < nw; c++) {
        vf w, d;
        vec_bwd(f, V_LOAD(s + c * KW), V_LOAD(dp + c * KW), vl, vD, vs, nv, c, &w, &d);
        V_STORE(p + c * KW, w);
        V_STORE(ds + c * KW, d);
    }
}

#ifndef SCORE_KERN_ROWS_ONLY
/* Transposed tile: dst[e][j] = mul * src[(j0 + j) * ld + e] for e < d,
 * j < KT (0 past T); src points at row j0 of the head's columns. */
static void pack_t(float *restrict dst, const float *restrict src, long ld, int T, int j0, int d, float mul) {
    const int n = T - j0 < KT ? T - j0 : KT;
    for (int e = 0; e < d; e++) {
        float *restrict row = dst + (size_t)e * KT;
        for (int j = 0; j < n; j++) row[j] = mul * src[(long)j * ld + e];
        for (int j = n; j < KT; j++) row[j] = 0.0f;
    }
}

/* Row-major copy of n rows: dst[j][e] = src[j * ld + e], e < d. Tiles read
 * in place would sit ld floats apart (3-9 KB in the fused qkv layout), which
 * maps a 64-row tile onto a quarter of L1's sets; packed, it is contiguous. */
static void pack_rows(float *restrict dst, const float *restrict src, long ld, int n, int d) {
    for (int j = 0; j < n; j++) memcpy(dst + (size_t)j * d, src + (long)j * ld, sizeof(float) * d);
}
#endif

/* Takes n floats from a workspace cursor, keeping 64-byte alignment. */
static float *take(float **cur, size_t n) {
    float *p = *cur;
    *cur += (n + 15) & ~(size_t)15;
    return p;
}

/* n rounded up to 16 floats (one cache line): the workspace's unit */
static inline size_t up16(size_t n) { return (n + 15) & ~(size_t)15; }

/* small integer helpers; round_kw: n rounded up to whole vectors */
static inline int imin(int a, int b) { return a < b ? a : b; }
static inline int imax(int a, int b) { return a > b ? a : b; }
static inline int round_kw(int n) { return (n + KW - 1) / KW * KW; }

/* Heads of a KV group per work item: all pg of them (one packed K/V tile
 * read by all) unless that leaves fewer than `want` items (units items per
 * chunk of heads) to spread over the threads. *nch chunks of *hpc heads. */
static inline void split_heads(int pg, long units, long want, int *nch, int *hpc) {
    int n = 1;
    while (n < pg && units * n < want) n++;
    *hpc = (pg + n - 1) / n;
    *nch = (pg + *hpc - 1) / *hpc;
}

/* Whether the head columns of an output (d floats a head from p, rows ld
 * floats apart: o, dq, dk, dv) are whole aligned vectors, so they can be
 * written with streaming stores */
static inline int rows_streamable(const float *p, long ld, int d) {
    return d % KW == 0 && ld % KW == 0 && (uintptr_t)p % (sizeof(float) * KW) == 0;
}
static inline int o_rows_streamable(const al_attn_shape *s, const float *o) { return rows_streamable(o, s->ldo, s->dv); }

/* AL_VW floats to p (aligned) past the caches: vmovntps */
#if AL_VW == 16
#define V_STREAM(p, x) _mm512_stream_ps((p), (x))
#else
#define V_STREAM(p, x) _mm256_stream_ps((p), (x))
#endif

/* dst[0..n) = src[0..n) past the caches (rows_streamable's rows: n a
 * multiple of AL_VW, dst aligned); the caller fences before its threads
 * join */
static inline void row_stream(float *restrict dst, const float *restrict src, int n) {
    for (int e = 0; e < n; e += KW) V_STREAM(dst + e, V_LOAD(src + e));
}

/* The end of a forward item: rows [i0, i0 + m) of heads h0 .. h0 + hn of
 * sequence b. Softmax: o rows = sums / l, lse = (m + log2 l) ln 2 (natural
 * log; mst, lst: each row's base-2 running max and vector of partial sums,
 * [hn][QBK]); the others: o rows = sums, lse = 0. The sums are o's rows
 * themselves (acc NULL) or the item's own, acc[hn][QBK][ldacc] (one pass
 * over o's rows, which are written, not read: with streaming stores where
 * o_rows_streamable, so the lines are not read from memory before being
 * written; the caller fences before its threads join). Paired on AMX at
 * H=12 T=1024 d_h=64 with o cold: the BF16 forward 0.95-0.97x. */
static void fwd_rows_done(const al_attn_shape *s, int softmax, int b, int h0, int hn, int i0, int m, const float *mst,
                          const vf *lst, const float *acc, int ldacc, float *o, float *lse) {
    const int T = s->T, DV = s->dv, stream = acc && o_rows_streamable(s, o);
    for (int hh = 0; hh < hn; hh++) {
        const int h = h0 + hh;
        for (int r = 0; r < m; r++) {
            float *orow = o + ((size_t)b * T + i0 + r) * s->ldo + (size_t)h * DV;
            const float *src = acc ? acc + ((size_t)hh * QBK + r) * ldacc : orow;
            float l = 1.0f;
            if (softmax) {
                l = V_HSUM(lst[hh * QBK + r]);
                if (lse) lse[((size_t)b * s->H + h) * T + i0 + r] = (mst[hh * QBK + r] + log2f(l)) * 0.693147180559945309f;
            } else if (lse) {
                lse[((size_t)b * s->H + h) * T + i0 + r] = 0.0f;
            }
            if (!softmax && !acc) continue;
            const vf inv = V_SET1(1.0f / l);
            int e = 0;
            if (stream) {
                for (; e < DV; e += KW) V_STREAM(orow + e, softmax ? V_MUL(V_LOAD(src + e), inv) : V_LOAD(src + e));
                continue;
            }
            for (; e + KW <= DV; e += KW) V_STORE(orow + e, softmax ? V_MUL(V_LOAD(src + e), inv) : V_LOAD(src + e));
            if (e < DV) {
                const vmask mk = V_MASK(DV - e);
                const vf x = V_LOADM(src + e, mk);
                V_STOREM(orow + e, mk, softmax ? V_MUL(x, inv) : x);
            }
        }
    }
}

/* Rows this far ahead of the one being read are prefetched where a loop
 * walks the rows of a [B*T][ld] activation (q, k, v, o, dO: a head's row is
 * a few cache lines, the next one ld floats on, usually in another page,
 * where the hardware prefetcher does not follow): such loops ran at the
 * latency of memory without it. */
enum { ROW_PREFETCH = 16 };

/* n floats from p towards the caches (L2), one prefetch per cache line;
 * prefetch_row_w for rows about to be written */
static inline void prefetch_row(const float *p, int n) {
    for (int e = 0; e < n; e += 16) __builtin_prefetch(p + e, 0, 2);
}
static inline void prefetch_row_w(float *p, int n) {
    for (int e = 0; e < n; e += 16) __builtin_prefetch(p + e, 1, 2);
}

/* D_t = dO_t . O_t (fp32) for the T rows of sequence b, head h into
 * D[0 .. T): the derivative of softmax's normalisation, for backward */
static void softmax_D_head(const al_attn_shape *s, const float *o, const float *dout, int b, int h, float *D) {
    const int T = s->T, DV = s->dv;
    for (int t = 0; t < T; t++) {
        const float *a = dout + ((size_t)b * T + t) * s->ldo + (size_t)h * DV;
        const float *c = o + ((size_t)b * T + t) * s->ldo + (size_t)h * DV;
        if (t + ROW_PREFETCH < T) {
            prefetch_row(a + (size_t)ROW_PREFETCH * s->ldo, DV);
            prefetch_row(c + (size_t)ROW_PREFETCH * s->ldo, DV);
        }
        vf acc = V_ZERO();
        int e = 0;
        for (; e + KW <= DV; e += KW) acc = V_FMA(V_LOAD(a + e), V_LOAD(c + e), acc);
        if (e < DV) {
            const vmask mk = V_MASK(DV - e);
            acc = V_FMA(V_LOADM(a + e, mk), V_LOADM(c + e, mk), acc);
        }
        D[t] = V_HSUM(acc);
    }
}

#ifndef SCORE_KERN_ROWS_ONLY
/* softmax_D_head for every (sequence, head) into D[B][H][T]. A work-shared
 * loop (omp for): call it inside a parallel region. (The BF16 kernels call
 * softmax_D_head per item instead, right after reading the head's dO
 * rows.) */
static void softmax_D(const al_attn_shape *s, const float *o, const float *dout, float *D) {
#pragma omp for schedule(static)
    for (long bh = 0; bh < (long)s->B * s->H; bh++)
        softmax_D_head(s, o, dout, (int)(bh / s->H), (int)(bh % s->H), D + bh * s->T);
}
#endif

/* Where tile_grads_out puts row t's dK and dV of an item: the rows of dk,
 * dv (one chunk), or its chunk's partial row */
static inline void tile_grad_rows(const al_attn_shape *s, int b, int g, int ch, int nch, int t, float *part, float *dk,
                                  float *dv, float **kr, float **vr) {
    const size_t T = (size_t)s->T;
    if (nch > 1) {
        *kr = part + ((((size_t)b * s->G + g) * nch + ch) * T + t) * ((size_t)s->dk + s->dv);
        *vr = *kr + s->dk;
    } else {
        *kr = dk + ((size_t)b * T + t) * s->ldk + (size_t)g * s->dk;
        *vr = dv + ((size_t)b * T + t) * s->ldv + (size_t)g * s->dv;
    }
}

/* Whether tile_grads_out streams its rows: it writes dk, dv (overwrite,
 * one chunk) and their rows are whole aligned vectors. The backward's dk,
 * dv (and dq) are cold in a step (written by nothing since the forward);
 * added to, each line is read from memory first, which took 0.12 of the
 * BF16 backward's time at H=12 T=1024 d_h=64 (AMX); streamed, nothing is
 * read: 0.89x the time with dq streamed too (paired, in one process). */
static inline int grads_streamed(const al_attn_shape *s, int nch, const float *dk, const float *dv) {
    return s->grads_overwrite && nch == 1 && rows_streamable(dk, s->ldk, s->dk) && rows_streamable(dv, s->ldv, s->dv);
}

/* A key tile's dK, dV sums (rows ldka, ldva floats apart) out of an item:
 * added into (s->grads_overwrite: written to, streamed where
 * grads_streamed) dk, dv of KV head g (the item is the whole group), or
 * written as chunk ch's partials (part[B][G][nch][T][dk + dv], added in
 * chunk order by al_attn_add_partials). Rows j0 .. j0 + nkt of sequence b;
 * a streaming caller fences before its threads join. */
static void tile_grads_out(const al_attn_shape *s, int b, int g, int ch, int nch, int j0, int nkt, const float *dKa,
                           int ldka, const float *dVa, int ldva, float *part, float *dk, float *dv) {
    const int DK = s->dk, DV = s->dv, stream = grads_streamed(s, nch, dk, dv);
    for (int j = 0; j < nkt; j++) {
        const float *a = dKa + (size_t)j * ldka, *c = dVa + (size_t)j * ldva;
        float *kr, *vr;
        tile_grad_rows(s, b, g, ch, nch, j0 + j, part, dk, dv, &kr, &vr);
        if (stream) {
            row_stream(kr, a, DK);
            row_stream(vr, c, DV);
        } else if (nch > 1 || s->grads_overwrite) {
            memcpy(kr, a, sizeof(float) * DK);
            memcpy(vr, c, sizeof(float) * DV);
        } else {
            for (int e = 0; e < DK; e++) kr[e] += a[e];
            for (int e = 0; e < DV; e++) vr[e] += c[e];
        }
    }
}

/* the rows tile_grads_out will write, towards the caches: called as a
 * tile's work starts, so the strided rows of dk, dv arrive during it (not
 * where it streams them) */
static void tile_grads_prefetch(const al_attn_shape *s, int b, int g, int ch, int nch, int j0, int nkt, float *part,
                                float *dk, float *dv) {
    if (grads_streamed(s, nch, dk, dv)) return;
    for (int j = 0; j < nkt; j++) {
        float *kr, *vr;
        tile_grad_rows(s, b, g, ch, nch, j0 + j, part, dk, dv, &kr, &vr);
        prefetch_row_w(kr, s->dk);
        prefetch_row_w(vr, s->dv);
    }
}

#ifndef SCORE_KERN_ROWS_ONLY
/* The forward's work split and workspace: items are (query block, sequence,
 * KV group, chunk of hpc of its heads); the workspace is kt | vp | per
 * thread: S[RG][KT], m[hpc][QBK], l[hpc][QBK] (vectors). */
typedef struct fwd_plan {
    int ntile, nqb, nch, hpc;
    long ntiles_all, per_qb, items;
    size_t n_kt, n_vp, per_thr, floats;
} fwd_plan;

static fwd_plan fwd_plan_of(const al_attn_shape *s, int nthr) {
    fwd_plan p;
    const int pg = s->H / s->G;
    p.ntile = (s->T + KT - 1) / KT, p.nqb = (s->T + QBK - 1) / QBK;
    split_heads(pg, (long)s->B * s->G * p.nqb, 16, &p.nch, &p.hpc);
    p.ntiles_all = (long)s->B * s->G * p.ntile;
    p.per_qb = (long)s->B * s->G * p.nch, p.items = p.per_qb * p.nqb;
    p.n_kt = (size_t)p.ntiles_all * s->dk * KT, p.n_vp = (size_t)p.ntiles_all * KT * s->dv;
    p.per_thr = up16((size_t)RG * KT) + up16((size_t)p.hpc * QBK) + (size_t)p.hpc * QBK * KW;
    p.floats = up16(p.n_kt) + up16(p.n_vp) + (size_t)nthr * p.per_thr;
    return p;
}

size_t KSFX(al_attn_fwd_floats)(const al_attn_shape *s, int nthr) { return fwd_plan_of(s, nthr).floats; }

/* q[B*T, ldq] k[B*T, ldk] v[B*T, ldv] -> o[B*T, ldo] (head columns only), lse[B, H, T]
 *
 * Packs first (all threads): kt = K^T tiles times scale (softmax: times
 * scale log2 e, so it runs in base 2), vp = V tiles row-major. Then work
 * item (query block qb, sequence b, KV head g, chunk of its heads): for each
 * key tile up to the block's last row (causal) or T, for each head of the
 * chunk, for each row group of RG rows: S = Q_rows K_tile^T, the rows'
 * online-softmax update (or f(S)), O_rows = alpha O_rows + P V_tile straight
 * into o. Row groups skip key tiles (and key vectors) that all of their rows
 * are masked from, so the diagonal tiles cost about half. Items run largest
 * query block first (dynamic schedule) for causal balance. */
void KSFX(al_attn_fwd)(const al_attn_shape *s, const float *q, const float *k, const float *v, float *o, float *lse,
                       float *ws, int nthr) {
    const int T = s->T, H = s->H, G = s->G, DK = s->dk, DV = s->dv, pg = H / G;
    const int causal = !s->bidirectional;
    const score_fn f = al_score_fn_of(s);
    const int softmax = f.kind == AL_SCORE_SOFTMAX;
    const float kmul = softmax ? s->scale * 1.44269504088896341f : s->scale;
    const fwd_plan pl = fwd_plan_of(s, nthr);
    const int ntile = pl.ntile, nqb = pl.nqb, nch = pl.nch, hpc = pl.hpc;
    const long ntiles_all = pl.ntiles_all, per_qb = pl.per_qb, items = pl.items;
    const size_t per_thr = pl.per_thr;
    float *cur = ws;
    float *kt = take(&cur, pl.n_kt), *vp = take(&cur, pl.n_vp);
    float *const thr_base = cur;
#pragma omp parallel num_threads(nthr)
    {
        const unsigned csr = al_ftz_on();
#pragma omp for schedule(static)
        for (long pt = 0; pt < ntiles_all; pt++) {
            const int tile = (int)(pt % ntile), g = (int)((pt / ntile) % G), b = (int)(pt / ((long)ntile * G));
            const size_t row0 = (size_t)b * T + (size_t)tile * KT;
            pack_t(kt + (size_t)pt * DK * KT, k + row0 * s->ldk + (size_t)g * DK, s->ldk, T, tile * KT, DK, kmul);
            pack_rows(vp + (size_t)pt * KT * DV, v + row0 * s->ldv + (size_t)g * DV, s->ldv, imin(KT, T - tile * KT),
                      DV);
        }
        float *tc = thr_base + (size_t)omp_get_thread_num() * per_thr;
        float *S = take(&tc, (size_t)RG * KT), *mst = take(&tc, (size_t)hpc * QBK);
        vf *lst = (vf *)tc;
        float alpha[RG];
#pragma omp for schedule(dynamic, 1)
        for (long it = 0; it < items; it++) {
            const int qb = nqb - 1 - (int)(it / per_qb); /* latest (largest) query blocks first */
            const long rest = it % per_qb;
            const int ch = (int)(rest % nch), g = (int)((rest / nch) % G), b = (int)(rest / ((long)nch * G));
            const int h0 = g * pg + ch * hpc, hn = imin(hpc, pg - ch * hpc);
            const int i0 = qb * QBK, m = imin(QBK, T - i0), kend = causal ? i0 + m : T;
            for (int r = 0; r < hn * QBK; r++) mst[r] = -INFINITY, lst[r] = V_ZERO();
            for (int j0 = 0; j0 < kend; j0 += KT) {
                const size_t toff = (size_t)((long)b * G + g) * ntile + j0 / KT;
                const float *ktile = kt + toff * DK * KT, *vtile = vp + toff * KT * DV;
                for (int hh = 0; hh < hn; hh++) {
                    const int h = h0 + hh;
                    for (int r0 = 0; r0 < m; r0 += RG) {
                        const int R = imin(RG, m - r0), ia = i0 + r0;
                        const int nk = imin(KT, causal ? ia + R - j0 : T - j0);
                        if (nk <= 0) continue; /* every row of the group is before the tile */
                        const int nw = round_kw(nk);
                        /* S[R, nk] = Q_rows[R, dk] (kmul K_tile)^T */
                        mm(R, nk, DK, q + ((size_t)b * T + ia) * s->ldq + (size_t)h * DK, s->ldq, 1, ktile, KT, S,
                           KT, 0, NULL);
                        int rescale = 0;
                        for (int r = 0; r < R; r++) {
                            const int nv = causal ? imax(0, imin(nk, ia + r - j0 + 1)) : nk;
                            if (softmax) {
                                alpha[r] = row_softmax_fwd(S + r * KT, nw, nv, mst + hh * QBK + r0 + r,
                                                           lst + hh * QBK + r0 + r);
                                rescale |= alpha[r] != 1.0f;
                            } else {
                                row_map_fwd(&f, S + r * KT, nw, nv);
                            }
                        }
                        /* O_rows[R, dv] = (alpha O_rows | O_rows | 0) + P[R, nk] V_tile[nk, dv] */
                        mm(R, DV, nk, S, KT, 1, vtile, DV, o + ((size_t)b * T + ia) * s->ldo + (size_t)h * DV, s->ldo,
                           j0 == 0 ? 0 : rescale ? 2 : 1, alpha);
                    }
                }
            }
            fwd_rows_done(s, softmax, b, h0, hn, i0, m, mst, lst, NULL, 0, o, lse);
        }
        al_ftz_restore(csr);
    }
}

/* The backward's work split and workspace: items are (sequence, KV group,
 * chunk of hpc of its heads); the workspace is kt | vt | kp | D[B][H][T]
 * (softmax) | part[B][G][nch][T][dk + dv] (several chunks per group only) |
 * per thread: S, dP [RG][KT], P, dS [QB][KT], dK [KT][dk], dV [KT][dv], the
 * item's Q [hpc][T][dk] and dO [hpc][T][dv]. */
typedef struct bwd_plan {
    int ntile, nqb, nch, hpc;
    long ntiles_all, items;
    size_t n_kt, n_vt, n_d, n_part, per_thr, floats;
} bwd_plan;

static bwd_plan bwd_plan_of(const al_attn_shape *s, int nthr) {
    bwd_plan p;
    const int B = s->B, T = s->T, G = s->G, DK = s->dk, DV = s->dv, pg = s->H / G;
    p.ntile = (T + KT - 1) / KT, p.nqb = (T + QBK - 1) / QBK;
    split_heads(pg, (long)B * G, 8, &p.nch, &p.hpc);
    p.ntiles_all = (long)B * G * p.ntile, p.items = (long)B * G * p.nch;
    p.n_kt = (size_t)p.ntiles_all * DK * KT, p.n_vt = (size_t)p.ntiles_all * DV * KT;
    p.n_d = s->score == AL_SCORE_SOFTMAX ? (size_t)B * s->H * T : 0;
    p.n_part = p.nch > 1 ? (size_t)B * G * p.nch * T * ((size_t)DK + DV) : 0;
    p.per_thr = 2 * up16((size_t)RG * KT) + 2 * up16((size_t)QBK * KT) + up16((size_t)KT * DK) +
                up16((size_t)KT * DV) + up16((size_t)p.hpc * T * DK) + up16((size_t)p.hpc * T * DV);
    p.floats = 2 * up16(p.n_kt) + up16(p.n_vt) + up16(p.n_d) + up16(p.n_part) + (size_t)nthr * p.per_thr;
    return p;
}

size_t KSFX(al_attn_bwd_floats)(const al_attn_shape *s, int nthr) { return bwd_plan_of(s, nthr).floats; }

/* q, k, v, o as forward, lse[B, H, T] (softmax only), dout[B*T, ldo]
 *   -> dq[B*T, ldq], dk[B*T, ldk], dv[B*T, ldv], accumulated
 *
 * Packs first (all threads): kt = K^T tiles times scale (log2 e for
 * softmax), vt = V^T tiles, kp = K tiles row-major (for dq += dS K), and
 * D_i = dO_i . O_i (softmax). Work item (sequence b, KV head g, chunk of its
 * heads) packs its heads' Q and dO rows, then runs key tile outer: the tile's
 * dK, dV accumulate in the thread's buffers over every head of the chunk and
 * every query block that sees the tile, in a fixed order; per row group:
 * S = Q K^T, dP = dO V^T, P and dS (row_bwd), dq_rows += dS K; per query
 * block: dV_tile += P^T dO, dK_tile += dS^T Q (keys as rows, reading P and dS
 * through transposed strides, causal rows only). A chunk that is a whole KV
 * group adds its tile straight into dk, dv; several chunks per group (too
 * few groups to keep the threads busy, e.g. MQA) write partials that a last
 * loop adds in chunk order, so results never depend on the thread count. */
void KSFX(al_attn_bwd)(const al_attn_shape *s, const float *q, const float *k, const float *v, const float *o,
                       const float *lse, const float *dout, float *dq, float *dk, float *dv, float *ws, int nthr) {
    const int T = s->T, H = s->H, G = s->G, DK = s->dk, DV = s->dv, pg = H / G;
    const int causal = !s->bidirectional;
    const score_fn f = al_score_fn_of(s);
    const int softmax = f.kind == AL_SCORE_SOFTMAX;
    const float kmul = softmax ? s->scale * 1.44269504088896341f : s->scale;
    const bwd_plan pl = bwd_plan_of(s, nthr);
    const int ntile = pl.ntile, nqb = pl.nqb, nch = pl.nch, hpc = pl.hpc;
    const int shared = nch > 1;
    const size_t per_thr = pl.per_thr;
    const long ntiles_all = pl.ntiles_all, items = pl.items;
    float *cur = ws;
    float *kt = take(&cur, pl.n_kt), *vt = take(&cur, pl.n_vt), *kp = take(&cur, pl.n_kt);
    float *Dall = take(&cur, pl.n_d), *part = take(&cur, pl.n_part);
    float *const thr_base = cur;
#pragma omp parallel num_threads(nthr)
    {
        const unsigned csr = al_ftz_on();
#pragma omp for schedule(static)
        for (long pt = 0; pt < ntiles_all; pt++) {
            const int tile = (int)(pt % ntile), g = (int)((pt / ntile) % G), b = (int)(pt / ((long)ntile * G));
            const size_t row0 = (size_t)b * T + (size_t)tile * KT;
            const float *k0 = k + row0 * s->ldk + (size_t)g * DK;
            pack_t(kt + (size_t)pt * DK * KT, k0, s->ldk, T, tile * KT, DK, kmul);
            pack_t(vt + (size_t)pt * DV * KT, v + row0 * s->ldv + (size_t)g * DV, s->ldv, T, tile * KT, DV, 1.0f);
            pack_rows(kp + (size_t)pt * KT * DK, k0, s->ldk, imin(KT, T - tile * KT), DK);
        }
        if (softmax) softmax_D(s, o, dout, Dall); /* D_i = dO_i . O_i = sum_j p_ij dP_ij */
        float *tc = thr_base + (size_t)omp_get_thread_num() * per_thr;
        float *S = take(&tc, (size_t)RG * KT), *dP = take(&tc, (size_t)RG * KT);
        float *Pb = take(&tc, (size_t)QBK * KT), *dSb = take(&tc, (size_t)QBK * KT);
        float *dKa = take(&tc, (size_t)KT * DK), *dVa = take(&tc, (size_t)KT * DV);
        /* the item's heads' Q and dO rows, contiguous: qp[hpc][T][dk], dop[hpc][T][dv] */
        float *qp = take(&tc, (size_t)hpc * T * DK), *dop = take(&tc, (size_t)hpc * T * DV);
        float lse2[RG], Dr[RG];
#pragma omp for schedule(dynamic, 1)
        for (long it = 0; it < items; it++) {
            const int ch = (int)(it % nch), g = (int)((it / nch) % G), b = (int)(it / ((long)nch * G));
            const int h0 = g * pg + ch * hpc, hn = imin(hpc, pg - ch * hpc);
            for (int hh = 0; hh < hn; hh++) {
                pack_rows(qp + (size_t)hh * T * DK, q + (size_t)b * T * s->ldq + (size_t)(h0 + hh) * DK, s->ldq, T, DK);
                pack_rows(dop + (size_t)hh * T * DV, dout + (size_t)b * T * s->ldo + (size_t)(h0 + hh) * DV, s->ldo, T,
                          DV);
            }
            for (int tile = 0; tile < ntile; tile++) {
                const int j0 = tile * KT, nkt = imin(KT, T - j0), nwt = round_kw(nkt);
                const size_t toff = (size_t)((long)b * G + g) * ntile + tile;
                const float *ktile = kt + toff * DK * KT, *vtile = vt + toff * DV * KT, *krows = kp + toff * KT * DK;
                tile_grads_prefetch(s, b, g, ch, nch, j0, nkt, part, dk, dv);
                memset(dKa, 0, sizeof(float) * (size_t)nkt * DK);
                memset(dVa, 0, sizeof(float) * (size_t)nkt * DV);
                for (int hh = 0; hh < hn; hh++) {
                    const int h = h0 + hh;
                    const float *lse_h = softmax ? lse + ((size_t)b * H + h) * T : NULL;
                    const float *D_h = softmax ? Dall + ((size_t)b * H + h) * T : NULL;
                    for (int qb = causal ? j0 / QBK : 0; qb < nqb; qb++) {
                        const int i0 = qb * QBK, m = imin(QBK, T - i0);
                        const int rs = causal ? imax(0, j0 - i0) : 0; /* rows before the tile see none of it */
                        const float *q_b = qp + ((size_t)hh * T + i0) * DK;
                        const float *do_b = dop + ((size_t)hh * T + i0) * DV;
                        float *dq_b = dq + ((size_t)b * T + i0) * s->ldq + (size_t)h * DK;
                        for (int r0 = rs; r0 < m; r0 += RG) {
                            const int R = imin(RG, m - r0), ia = i0 + r0;
                            const int nk = causal ? imin(nkt, ia + R - j0) : nkt;
                            /* S[R, nk] = Q_rows (kmul K_tile)^T ; dP[R, nk] = dO_rows V_tile^T */
                            mm(R, nk, DK, q_b + (size_t)r0 * DK, DK, 1, ktile, KT, S, KT, 0, NULL);
                            mm(R, nk, DV, do_b + (size_t)r0 * DV, DV, 1, vtile, KT, dP, KT, 0, NULL);
                            for (int r = 0; r < R; r++) {
                                lse2[r] = softmax ? lse_h[ia + r] * 1.44269504088896341f : 0.0f;
                                Dr[r] = softmax ? D_h[ia + r] : 0.0f;
                            }
                            for (int r = 0; r < R; r++) {
                                const int nv = causal ? imax(0, imin(nk, ia + r - j0 + 1)) : nk;
                                row_bwd(&f, S + r * KT, dP + r * KT, Pb + (r0 + r) * KT, dSb + (r0 + r) * KT, nwt, nv,
                                        lse2[r], Dr[r], s->scale);
                            }
                            /* dq_rows[R, dk] += dS[R, nk] K_tile[nk, dk] (dS carries the scale); = at tile 0,
                             * which every row sees, where the gradients are overwritten */
                            mm(R, DK, nk, dSb + r0 * KT, KT, 1, krows, DK, dq_b + (size_t)r0 * s->ldq, s->ldq,
                               tile > 0 || !s->grads_overwrite, NULL);
                        }
                        /* dV_tile[nkt, dv] += P^T dO_blk ; dK_tile[nkt, dk] += dS^T Q_blk, over the rows that
                         * see each key group (causal: rows i >= its first key) */
                        for (int jr = 0; jr < nkt; jr += RG) {
                            const int R = imin(RG, nkt - jr), ks = causal ? imax(rs, j0 + jr - i0) : 0;
                            if (ks >= m) break;
                            mm(R, DV, m - ks, Pb + ks * KT + jr, 1, KT, do_b + (size_t)ks * DV, DV,
                               dVa + (size_t)jr * DV, DV, 1, NULL);
                            mm(R, DK, m - ks, dSb + ks * KT + jr, 1, KT, q_b + (size_t)ks * DK, DK,
                               dKa + (size_t)jr * DK, DK, 1, NULL);
                        }
                    }
                }
                tile_grads_out(s, b, g, ch, nch, j0, nkt, dKa, DK, dVa, DV, part, dk, dv);
            }
        }
        if (shared) al_attn_add_partials(s, part, nch, dk, dv); /* in chunk order */
        _mm_sfence(); /* tile_grads_out's streaming stores, before the threads join */
        al_ftz_restore(csr);
    }
}

/* ---- decode: one chunk of cached positions for the heads of one KV group ----
 * The one-token attention of decode.c (al_attn_decode) in work items of up
 * to a chunk of positions x one KV group. Keys and values stay where the
 * cache has them (rows `row` values apart, F32 or BF16): decode reads each of
 * them once per token, so packing them as the prefill kernels do would cost
 * a second pass. Scores are therefore dot products along a key row, KW keys
 * at a time (one vector of products per key, their lane sums folded into one
 * vector by v_sum_lanes), and P V is the micro-kernel with the weights
 * broadcast and the value rows read in place (BF16 widened as loaded).
 *   Q[pg][ldq]  head i's query: dk floats, then dk2 for its own key part
 *   key j of head i:   K + j row (dk values) ++ K2 + j row + i dk2 (dk2)
 *   value j of head i: V + j row (dv values) ++ V2 + j row + i dv2 (dv2)
 *   S[pg][lds]  out: softmax: exp(s - cmax[i]) with csum[i] their sum;
 *               the other functions f(s) (cmax, csum untouched); s = scale q.k
 *   P[pg][ldp]  out: sum_j S[i][j] value_j (dv + dv2 floats per head)
 * n <= lds, lds a multiple of KW; K, K2, V, V2 count values of the cache's
 * dtype (B16: BF16). */

/* key/value element i of a cache span, one vector (or its first n lanes) */
#define KV_AT(B16, p, i) ((B16) ? (const void *)((const uint16_t *)(p) + (i)) : (const void *)((const float *)(p) + (i)))
#define KV_LOAD(B16, p) ((B16) ? V_LOAD_BF16((const uint16_t *)(p)) : V_LOAD((const float *)(p)))
#define KV_LOADN(B16, p, n, m) ((B16) ? V_LOADN_BF16((const uint16_t *)(p), n) : V_LOADM((const float *)(p), m))

/* Prefetches the cache lines of n bytes at p into L1. With several KV
 * groups an item reads a few hundred bytes of each row, rows kilobytes
 * apart (one group of [K groups | V groups]), a pattern the hardware
 * prefetchers, which follow streams within a 4 KB page, barely help with:
 * without this a BF16 cache decoded no faster than an F32 one (its loads
 * waited on memory). Where an item reads most of each row (MQA, MLA, LRKV)
 * the hardware streams it and the extra instructions only cost (measured:
 * LRKV 30 % slower), so the kernel prefetches only sparse reads. */
static inline void prefetch_span(const void *p, size_t n) {
    const uintptr_t a = (uintptr_t)p & ~(uintptr_t)63, end = (uintptr_t)p + n;
    for (uintptr_t l = a; l < end; l += 64) __builtin_prefetch((const void *)l, 0, 3);
}

static inline __attribute__((always_inline)) void
decode_group_body(const int B16, const al_attn_shape *s, int pg, const float *Q, int ldq, const void *K,
                  const void *K2, int dk2, const void *V, const void *V2, int dv2, size_t row, int n, float *S,
                  int lds, float *P, int ldp, float *cmax, float *csum) {
    const score_fn f = al_score_fn_of(s);
    const int dk = s->dk, dv = s->dv, nw = (n + KW - 1) / KW * KW;
    const vmask ktail = V_MASK(dk % KW), k2tail = V_MASK(dk2 % KW);
    const vf vscale = V_SET1(s->scale);
    const size_t esz = B16 ? 2 : 4;
    const int sparse = 2 * ((size_t)dk + dv + (size_t)pg * (dk2 + dv2)) <= row; /* reads at most half a row */
    /* S[i][j0 .. j0+KW) = scale * (q_i . key_j), KW keys per vector of sums */
    for (int j0 = 0; j0 < n; j0 += KW) {
        const int nb = imin(KW, n - j0);
        /* the next block's keys and this block's values (read by P V below) */
        for (int jj = 0; sparse && jj < KW && j0 + KW + jj < n; jj++) {
            const size_t r = (size_t)(j0 + KW + jj) * row;
            prefetch_span(KV_AT(B16, K, r), esz * dk);
            if (dk2 > 0) prefetch_span(KV_AT(B16, K2, r), esz * (size_t)pg * dk2);
        }
        for (int jj = 0; sparse && jj < nb; jj++) {
            const size_t r = (size_t)(j0 + jj) * row;
            prefetch_span(KV_AT(B16, V, r), esz * dv);
            if (dv2 > 0) prefetch_span(KV_AT(B16, V2, r), esz * (size_t)pg * dv2);
        }
        for (int i = 0; i < pg; i++) {
            const float *q = Q + (size_t)i * ldq;
            vf acc[KW];
#pragma GCC unroll 16
            for (int jj = 0; jj < KW; jj++) {
                vf a = V_ZERO();
                if (jj < nb) {
                    const void *k = KV_AT(B16, K, (size_t)(j0 + jj) * row);
                    int c = 0;
                    for (; c + KW <= dk; c += KW) a = V_FMA(V_LOAD(q + c), KV_LOAD(B16, KV_AT(B16, k, c)), a);
                    if (c < dk) a = V_FMA(V_LOADM(q + c, ktail), KV_LOADN(B16, KV_AT(B16, k, c), dk - c, ktail), a);
                    if (dk2 > 0) {
                        const void *k2 = KV_AT(B16, K2, (size_t)(j0 + jj) * row + (size_t)i * dk2);
                        const float *q2 = q + dk;
                        for (c = 0; c + KW <= dk2; c += KW)
                            a = V_FMA(V_LOAD(q2 + c), KV_LOAD(B16, KV_AT(B16, k2, c)), a);
                        if (c < dk2)
                            a = V_FMA(V_LOADM(q2 + c, k2tail), KV_LOADN(B16, KV_AT(B16, k2, c), dk2 - c, k2tail), a);
                    }
                }
                acc[V_SUM_SLOT(jj)] = a;
            }
            V_STORE(S + (size_t)i * lds + j0, V_MUL(v_sum_lanes(acc), vscale));
        }
    }
    /* weights, 0 past n */
    for (int i = 0; i < pg; i++) {
        float *r = S + (size_t)i * lds;
        if (f.kind != AL_SCORE_SOFTMAX) {
            row_map_fwd(&f, r, nw, n);
            continue;
        }
        vf vmx = V_SET1(-INFINITY), sum = V_ZERO();
        for (int c = 0; c < nw; c += KW)
            vmx = V_MAX(vmx, c + KW <= n ? V_LOAD(r + c) : V_SEL(V_MASK(n - c), V_LOAD(r + c), V_SET1(-INFINITY)));
        const float mx = V_HMAX(vmx);
        const vf vm = V_SET1(mx);
        for (int c = 0; c < nw; c += KW) {
            vf p = v_exp(V_SUB(V_LOAD(r + c), vm));
            if (c + KW > n) p = V_SEL(V_MASK(n - c), p, V_ZERO());
            sum = V_ADD(sum, p);
            V_STORE(r + c, p);
        }
        cmax[i] = mx;
        csum[i] = V_HSUM(sum);
    }
    /* P[pg][0..dv) = S[pg][n] V[n][dv]; each head's own part, one row at a time */
    if (B16) mm16(pg, dv, n, S, lds, 1, (const uint16_t *)V, (long)row, P, ldp);
    else mm(pg, dv, n, S, lds, 1, (const float *)V, (long)row, P, ldp, 0, NULL);
    for (int i = 0; i < pg && dv2 > 0; i++) {
        float *pi = P + (size_t)i * ldp + dv;
        if (B16) mm16(1, dv2, n, S + (size_t)i * lds, lds, 1, (const uint16_t *)V2 + (size_t)i * dv2, (long)row, pi, ldp);
        else mm(1, dv2, n, S + (size_t)i * lds, lds, 1, (const float *)V2 + (size_t)i * dv2, (long)row, pi, ldp, 0, NULL);
    }
}
#undef KV_AT
#undef KV_LOAD
#undef KV_LOADN

static __attribute__((noinline)) void decode_group_f32(const al_attn_shape *s, int pg, const float *Q, int ldq,
                                                       const void *K, const void *K2, int dk2, const void *V,
                                                       const void *V2, int dv2, size_t row, int n, float *S, int lds,
                                                       float *P, int ldp, float *cmax, float *csum) {
    decode_group_body(0, s, pg, Q, ldq, K, K2, dk2, V, V2, dv2, row, n, S, lds, P, ldp, cmax, csum);
}

static __attribute__((noinline)) void decode_group_bf16(const al_attn_shape *s, int pg, const float *Q, int ldq,
                                                        const void *K, const void *K2, int dk2, const void *V,
                                                        const void *V2, int dv2, size_t row, int n, float *S, int lds,
                                                        float *P, int ldp, float *cmax, float *csum) {
    decode_group_body(1, s, pg, Q, ldq, K, K2, dk2, V, V2, dv2, row, n, S, lds, P, ldp, cmax, csum);
}

void KSFX(al_attn_decode_group)(const al_attn_shape *s, int pg, const float *Q, int ldq, al_dtype dt, const void *K,
                                const void *K2, int dk2, const void *V, const void *V2, int dv2, size_t row, int n,
                                float *S, int lds, float *P, int ldp, float *cmax, float *csum) {
    const unsigned csr = al_ftz_on();
    (dt == AL_DT_BF16 ? decode_group_bf16 : decode_group_f32)(s, pg, Q, ldq, K, K2, dk2, V, V2, dv2, row, n, S, lds,
                                                              P, ldp, cmax, csum);
    al_ftz_restore(csr);
}
#endif /* SCORE_KERN_ROWS_ONLY */
