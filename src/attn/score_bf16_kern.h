/*
 * score_bf16_kern.h: the BF16 attention kernels (forward and backward, all
 * four score functions, causal or bidirectional, KV groups), written once
 * and compiled three times, one per product engine:
 *   score_bf16.c        "bf16-portable": AVX2 FMAs on the widened bf16
 *                       pairs (exact products, fp32 sums): any CPU attnlab
 *                       runs on (x86-64-v3)
 *   score_avx512bf16.c  "avx512-bf16": vdpbf16ps (_mm512_dpbf16_ps)
 *   score_amx.c         "amx": tdpbf16ps on AMX tiles
 * so the three share their packing, loops and elementwise work and differ
 * only in bmm (the product) below. What they compute is defined by the
 * BF16 reference in score.c: operands of every product rounded to bf16
 * (nearest, ties to even), products summed in fp32, everything else fp32.
 * The including file sets AL_VEC_WIDTH, includes core/vec.h under its target
 * pragma, defines BSFX(name) (the entry points' suffix) and either BF16_AMX
 * or the vector product's vocabulary:
 *   BRG, BNC        rows and vectors (of AL_VW columns) per register block
 *   bva, bvb        an A pair broadcast, a B vector of AL_VW column pairs
 *   BV_A(u32)       the pair (a[2k], a[2k+1]) as bva
 *   BV_B(p)         AL_VW column pairs from p (2 AL_VW bf16) as bvb
 *   BV_DP(c, a, b)  c + a[0] b[.][0] + a[1] b[.][1], per column
 *
 * Data layout (all in the caller's workspace; "pairs" is the VNNI layout
 * both engines read their B operand in: X[K][N] as Xp[K/2][N][2], the two
 * values of a reduction pair next to each other, K padded with zeros):
 *   forward, shared: per key tile of KT keys (zero past T)
 *     kT  [dkp/2][KT][2]  K^T as pairs along d (B of S = Q K^T)
 *     vp  [KT/2][dvp][2]  V as pairs along keys (B of O += P V)
 *   backward, shared: kT as above, vT [dvp/2][KT][2] (B of dP = dO V^T),
 *     k2 [KT/2][dkp][2] (B of dQ += dS K), D [B][H][T], partials
 *   per thread: the item's heads' Q rows [.][dkp] (A operands), scores S
 *     [hpc][RB][KT] fp32, weights P (and dS) in bf16 rows, the item's fp32
 *     sums (O forward, dq backward: the products accumulate into them);
 *     backward also Q^T and dO^T as rows (A of dK^T += Q^T dS, dV^T +=
 *     dO^T P) and the key tile's P and dS as pairs along the query rows
 *     (their B), so nothing is transposed in bf16.
 * dkp, dvp: d_k, d_v rounded up to KP: 32 on AMX (a tile row of bf16), 16
 * on the vector engines (whole vectors where d is a product's N, whole
 * pairs where it is K; zeros there would be work, as they are not on the
 * tiles: docs/kernels.md); rows
 * of every A operand come in blocks of RB = 16 (an AMX tile's rows), their
 * buffers sized for whole blocks.
 *
 * The work split, the item order, the online softmax (with its running max
 * kept at whole numbers, SCORE_INT_MAX), D_i, the partial sums of shared KV
 * heads and their order are those of score_kern.h, so results do not depend
 * on the thread count. AMX: each thread loads one tile configuration (all
 * eight tiles 16 rows x 64 bytes) for its part of a call and releases it
 * after; the heads of an item are multiplied against each loaded K or V
 * tile in turn (up to six heads' accumulators in tiles 0-5), so a KV
 * group's tile is loaded once for all its heads.
 */
#ifndef BSFX
#error "score_bf16_kern.h is included by score_bf16.c, score_avx512bf16.c, score_amx.c only"
#endif

#include <assert.h>

#define SCORE_KERN_ROWS_ONLY
#define SCORE_INT_MAX 1
#define KW AL_VW
#include "score_kern.h"

#ifdef BF16_AMX
enum { RB = 16, KP = 32 };
#else
enum { RB = 16, KP = 16 };
_Static_assert(KP % AL_VW == 0, "a padded d is a whole number of vectors");
#endif

/* n rounded up to a whole number of KP */
static inline int up_kp(int n) { return (n + KP - 1) / KP * KP; }

/* Columns of a key tile that a product over it computes when its first nk
 * keys are visible to the rows at hand (tile_cols: its N), and how far a
 * product reducing over those keys runs (tile_keys: its K): up to the last
 * group of 16 (an AMX column tile, a vector of columns) or KP (an AMX K
 * step, 16 on the vector engines) that holds one. The columns past them
 * are never read unmasked in S and dP, and are 0 in P and dS, so the
 * results are the same bits as over the whole tile: at a sequence's last
 * tile (the ViT's 197 tokens: 5 keys of 64) and on the causal diagonal, a
 * product or a K step fewer per group of 16 or KP not seen. */
static inline int tile_cols(int nk) { return (int)up16((size_t)nk); }
static inline int tile_keys(int nk) { return up_kp(nk); }

/* Keys of the tile from j0 that the last of the R query rows from ia sees
 * (its first keys; <= 0 where causal rows all come before the tile): the nk
 * of tile_cols and tile_keys */
static inline int keys_seen(int T, int causal, int j0, int ia, int R) {
    return imin(KT, causal ? ia + R - j0 : T - j0);
}

/* n bf16 values (rounded up to whole floats) from a workspace cursor */
static uint16_t *take16(float **cur, size_t n) { return (uint16_t *)take(cur, (n + 1) / 2); }

/* ---- rounding to bf16 ---- */

/* AL_VW 16-bit values to p */
#if AL_VW == 16
#define VH_STORE(p, h) _mm256_storeu_si256((__m256i *)(p), (h))
#else
#define VH_STORE(p, h) _mm_storeu_si128((__m128i *)(p), (h))
#endif

/* AL_VW floats to bf16: nearest, ties to even; NaN stays NaN (quiet), as
 * al_f32_to_bf16. Works on the bits, so it needs no bf16 instruction. */
static inline vhalf v_to_bf16(vf x) {
#if AL_VW == 16
    const __m512i u = _mm512_castps_si512(x);
    const __m512i r = _mm512_add_epi32(
        u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1))));
    const __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                  _mm512_set1_epi32(0x7f800000));
    const __m512i h = _mm512_mask_blend_epi32(nan, _mm512_srli_epi32(r, 16),
                                              _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40)));
    return _mm512_cvtepi32_epi16(h);
#else
    const __m256i u = _mm256_castps_si256(x);
    const __m256i r = _mm256_add_epi32(
        u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1))));
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                           _mm256_set1_epi32(0x7f800000));
    const __m256i h = _mm256_blendv_epi8(_mm256_srli_epi32(r, 16),
                                         _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40)), nan);
    return _mm_packus_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
#endif
}

/* x[0..n) *= mul, n a multiple of AL_VW (the score scale is applied after
 * the product, whose operands are the unscaled, rounded q and k; the
 * forward's O sums are rescaled with it when a row's max moves) */
static inline void row_scale(float *restrict x, int n, float mul) {
    const vf m = V_SET1(mul);
    for (int c = 0; c < n; c += KW) V_STORE(x + c, V_MUL(V_LOAD(x + c), m));
}

/* AL_VW floats to bf16 where they are the kernels' own fp32 results (weights
 * P, dS), computed under FTZ/DAZ and so never subnormal: vcvtneps2bf16 where
 * the set has it (nearest, ties to even, NaN made quiet: v_to_bf16's bits
 * for every value but the subnormals it flushes), else v_to_bf16 */
#if defined(__AVX512BF16__) && AL_VW == 16
#define V_TO_BF16_NORMAL(x) ((__m256i)_mm512_cvtneps_pbh(x))
#else
#define V_TO_BF16_NORMAL(x) v_to_bf16(x)
#endif

/* Two vectors of such results stored as 2 AL_VW bf16 at p: one
 * vcvtne2ps2bf16 and one store where the set has it (the same bits) */
static inline void store_p16x2(uint16_t *restrict p, vf lo, vf hi) {
#if defined(__AVX512BF16__) && AL_VW == 16
    _mm512_storeu_si512(p, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
#else
    VH_STORE(p, V_TO_BF16_NORMAL(lo));
    VH_STORE(p + KW, V_TO_BF16_NORMAL(hi));
#endif
}

/* 2^x for the softmax weights, which are rounded to bf16 next (8 bits):
 * 2^x = 2^floor(x) 2^r with r = x - floor(x) in [0, 1) (vreduceps), 2^r
 * from a degree-5 polynomial fitted for minimum relative error there, its
 * constant term 1 (1.4e-7 evaluated in float, against v_exp2's 9.6e-8 with
 * one FMA more: a weight's rounding to bf16 moves it by up to 2e-3), and
 * 2^floor(x) by vscalefps, which floors by itself: per weight three
 * operations and five FMAs where v_exp2 takes four and six. The rows'
 * vector work weighs as much as the tile products on AMX. */
static const float exp2_floor_deg5[6] = {1.0f,
                                         0.69315129518508911f,
                                         0.24016447365283966f,
                                         0.055799797177314758f,
                                         0.0090171946212649345f,
                                         0.001867051818408072f};

static inline vf v_exp2_w(vf x) {
    x = V_EXP2_RANGE(x);
    return V_LDEXP_FLOOR(v_poly(V_FRAC(x), exp2_floor_deg5, 5), x);
}

/* y[0..n) = v_exp2_w(x[0..n)), n a multiple of AL_VW (a test hook:
 * al_attn_exp2_weights_* against exp2 in double) */
void BSFX(al_attn_exp2_weights)(float *y, const float *x, int n) {
    for (int i = 0; i + KW <= n; i += KW) V_STORE(y + i, v_exp2_w(V_LOAD(x + i)));
}

/* ---- a row of KT scores into bf16 weights, in registers ----
 * One pass each over the row, the RV vectors held in registers, the score
 * scale applied inside the exponent's FMA (s mul - m in one rounding; the
 * max taken over the unscaled scores: for mul >= 0 the max of the rounded
 * s mul is the rounded max(s) mul), without the fp32 row written and read
 * back. s: the product's unscaled scores, mul: the score scale (times
 * log2 e for softmax), >= 0; nv: visible lanes. Computes the BF16
 * definition of score.c's reference to fp32 rounding, as the
 * fp32 row functions of score_kern.h do. */
enum { RV = KT / KW };
_Static_assert(RV % 2 == 0, "a row's vectors are rounded to bf16 in pairs");

/* softmax_move_max out of line: the rare path where a row's running max
 * moves (its exp2f call), so the common path keeps no vectors across a call */
static __attribute__((noinline, cold)) float softmax_move_max_cold(vf vmx, float *m, vf *l) {
    return softmax_move_max(vmx, m, l);
}

/* row_softmax_p16 for a row that sees all KT keys of the tile (every row
 * but those on the causal diagonal and at a sequence's end): the same
 * operations in the same order, so the same bits, straight-line and
 * inlined into the tile products' slots. On AMX the rows' vector work does
 * not run beside the tile products (tdpbf16ps holds the vector ports: a
 * step costs about the sum of the two), so its instruction count is the
 * step's: the masked general form, called out of line with its vectors
 * spilled around the exp2f of a moving max, took 1.09x this one's time
 * (paired, AMX, H=12 T=1024 d_h=64: the forward 0.954x, docs/kernels.md). */
static inline __attribute__((always_inline)) float row_softmax_p16_full(const float *restrict s,
                                                                        uint16_t *restrict p, float mul, float *m,
                                                                        vf *l) {
    const vf vmul = V_SET1(mul);
    vf x[RV], vmx = V_SET1(-INFINITY);
#pragma GCC unroll 8
    for (int c = 0; c < RV; c++) x[c] = V_LOAD(s + c * KW), vmx = V_MAX(vmx, x[c]);
    float alpha = 1.0f;
    vmx = V_MUL(vmx, vmul);
    if (__builtin_expect(V_ANY_GT(vmx, V_SET1(*m + (float)LAZY)), 0)) alpha = softmax_move_max_cold(vmx, m, l);
    const vf vnm = V_SET1(-*m);
    vf sum = *l;
#pragma GCC unroll 8
    for (int c = 0; c < RV; c += 2) {
        const vf w0 = v_exp2_w(V_FMA(x[c], vmul, vnm)), w1 = v_exp2_w(V_FMA(x[c + 1], vmul, vnm));
        sum = V_ADD(V_ADD(sum, w0), w1);
        store_p16x2(p + c * KW, w0, w1);
    }
    *l = sum;
    return alpha;
}

/* softmax forward (row_softmax_fwd): p = bf16(2^(s mul - m)); returns
 * alpha. Out of line: only partly visible rows come here. */
static __attribute__((noinline)) float row_softmax_p16(const float *restrict s, uint16_t *restrict p, int nv, float mul, float *m,
                                    vf *l) {
    const vf vmul = V_SET1(mul);
    vf x[RV], vmx = V_SET1(-INFINITY);
    for (int c = 0; c < RV; c++) {
        x[c] = V_LOAD(s + c * KW);
        if (nv >= (c + 1) * KW) vmx = V_MAX(vmx, x[c]);
        else if (nv > c * KW) vmx = V_MAX(vmx, V_SEL(V_MASK(nv - c * KW), x[c], V_SET1(-INFINITY)));
    }
    const float alpha = softmax_move_max(V_MUL(vmx, vmul), m, l);
    const vf vnm = V_SET1(-*m);
    vf sum = *l, w[RV];
    for (int c = 0; c < RV; c++) {
        w[c] = V_ZERO();
        if (nv >= (c + 1) * KW)
            w[c] = v_exp2_w(V_FMA(x[c], vmul, vnm));
        else if (nv > c * KW)
            w[c] = V_SEL(V_MASK(nv - c * KW), v_exp2_w(V_FMA(x[c], vmul, vnm)), V_ZERO());
        sum = V_ADD(sum, w[c]);
    }
    for (int c = 0; c < RV; c += 2) store_p16x2(p + c * KW, w[c], w[c + 1]);
    *l = sum;
    return alpha;
}

/* the other functions forward (row_map_fwd): p = bf16(f(s mul)) */
static inline void row_map_p16(const score_fn *f, const float *restrict s, uint16_t *restrict p, int nv, float mul) {
    const vf vmul = V_SET1(mul);
    vf w[RV];
    for (int c = 0; c < RV; c++) {
        w[c] = V_ZERO();
        if (nv > c * KW) {
            w[c] = v_map_fwd(f, V_MUL(V_LOAD(s + c * KW), vmul));
            if (nv < (c + 1) * KW) w[c] = V_SEL(V_MASK(nv - c * KW), w[c], V_ZERO());
        }
    }
    for (int c = 0; c < RV; c += 2) store_p16x2(p + c * KW, w[c], w[c + 1]);
}

/* softmax's dS = scale w (dP - D) as w (dP scale - D scale): an FMA and a
 * product per vector where the plain form takes three operations (vnds:
 * -(D scale), rounded once per row). The same value within fp32 rounding,
 * rounded to bf16 next. On AMX the rows' vector work does not overlap the
 * tile products (row_softmax_p16_full), so its count is time: the
 * backward's full softmax rows went from 27 vector operations per 32
 * weights to 25, the backward 0.978x the time (H 12 T 1024 d_h 64,
 * paired, 8 of 10 pairs faster). */
static inline vf v_ds_softmax(vf w, vf dp, vf vs, vf vnds) { return V_MUL(w, V_FMA(dp, vs, vnds)); }

/* softmax backward on lanes c KW .. (c + 1) KW of a row (vec_bwd's, with
 * the scale in the exponent's FMA): s unscaled scores, vnl -lse (base 2),
 * g dP, vnds -(D scale) -> *w = 2^(s mul - lse), *d = v_ds_softmax; 0 on
 * masked lanes */
static inline void vec_bwd_softmax(const float *restrict s, const float *restrict g, vf vmul, vf vnl, vf vnds,
                                   vf vs, int nv, int c, vf *w, vf *d) {
    if (nv <= c * KW) {
        *w = *d = V_ZERO();
        return;
    }
    *w = v_exp2_w(V_FMA(V_LOAD(s + c * KW), vmul, vnl));
    *d = v_ds_softmax(*w, V_LOAD(g + c * KW), vs, vnds);
    if (nv < (c + 1) * KW) {
        const vmask mk = V_MASK(nv - c * KW);
        *w = V_SEL(mk, *w, V_ZERO());
        *d = V_SEL(mk, *d, V_ZERO());
    }
}

/* row_bwd_p16 for softmax where the row sees all KT keys of the tile: the
 * same operations, straight-line, inlined (row_softmax_p16_full's reason;
 * the backward 0.975-0.98x, paired) */
static inline __attribute__((always_inline)) void row_bwd_p16_softmax_full(const float *restrict s,
                                                                           const float *restrict dp,
                                                                           uint16_t *restrict p, uint16_t *restrict ds,
                                                                           float mul, float lse, float D,
                                                                           float scale) {
    const vf vmul = V_SET1(mul), vnl = V_SET1(-lse), vnds = V_SET1(-(D * scale)), vs = V_SET1(scale);
#pragma GCC unroll 8
    for (int c = 0; c < RV; c += 2) {
        vf w[2], d[2];
#pragma GCC unroll 2
        for (int u = 0; u < 2; u++) {
            w[u] = v_exp2_w(V_FMA(V_LOAD(s + (c + u) * KW), vmul, vnl));
            d[u] = v_ds_softmax(w[u], V_LOAD(dp + (c + u) * KW), vs, vnds);
        }
        store_p16x2(p + c * KW, w[0], w[1]);
        store_p16x2(ds + c * KW, d[0], d[1]);
    }
}

/* backward (row_bwd): p, ds = bf16 of the weights and of scale dL/ds.
 * Out of line: the other score functions and partly visible rows. */
static __attribute__((noinline)) void row_bwd_p16(const score_fn *f, const float *restrict s, const float *restrict dp,
                               uint16_t *restrict p, uint16_t *restrict ds, int nv, float mul, float lse, float D,
                               float scale) {
    const vf vmul = V_SET1(mul), vnl = V_SET1(-lse), vl = V_SET1(lse), vD = V_SET1(D), vs = V_SET1(scale);
    const vf vnds = V_SET1(-(D * scale));
    for (int c = 0; c < RV; c += 2) { /* two vectors, rounded and stored together */
        vf w[2], d[2];
#pragma GCC unroll 2
        for (int u = 0; u < 2; u++) {
            const int cu = c + u;
            if (f->kind == AL_SCORE_SOFTMAX) vec_bwd_softmax(s, dp, vmul, vnl, vnds, vs, nv, cu, &w[u], &d[u]);
            else vec_bwd(f, V_MUL(V_LOAD(s + cu * KW), vmul), V_LOAD(dp + cu * KW), vl, vD, vs, nv, cu, &w[u], &d[u]);
        }
        store_p16x2(p + c * KW, w[0], w[1]);
        store_p16x2(ds + c * KW, d[0], d[1]);
    }
}

/* ---- packing: fp32 rows (ld apart) into bf16 operands, zero-padded ---- */

/* Where element (r, e) of an np x dp operand goes: (r/2) r2 + (r%2) r1 +
 * (e/2) e2 + (e%2) e1 bf16 values from its start. */
typedef struct layout16 {
    long r2, r1, e2, e1;
} layout16;

/* the four layouts of an np x dp operand X:
 *   rows   X[np][dp]          an A operand reduced over e (pairs along e adjacent)
 *   trows  X^T[dp][np]        an A operand reduced over r (pairs along r adjacent)
 *   pairs  X[np/2][dp][2]     a B operand reduced over r
 *   tpairs X^T[dp/2][np][2]   a B operand reduced over e */
static inline layout16 lay_rows(int np, int dp) { (void)np; return (layout16){2L * dp, dp, 2, 1}; }
static inline layout16 lay_trows(int np, int dp) { (void)dp; return (layout16){2, 1, 2L * np, np}; }
static inline layout16 lay_pairs(int np, int dp) { (void)np; return (layout16){2L * dp, 1, 4, 2}; }
static inline layout16 lay_tpairs(int np, int dp) { (void)dp; return (layout16){4, 2, 2L * np, 1}; }

/* AL_VW floats from memory (q, k, v, dO: any value) to bf16, v_to_bf16's
 * bits: by vcvtneps2bf16 where the set has it and no lane is denormal (it
 * reads those as zero), else v_to_bf16. Half the packers' instructions; the
 * forward and backward at the study's shapes 2-6 % faster (paired runs,
 * docs/kernels.md). */
#if defined(__AVX512BF16__) && AL_VW == 16
static inline vhalf v_to_bf16_in(vf x) {
    const __m512i u = _mm512_castps_si512(x);
    const __mmask16 denormal = _mm512_testn_epi32_mask(u, _mm512_set1_epi32(0x7F800000)) &
                               _mm512_test_epi32_mask(u, _mm512_set1_epi32(0x007FFFFF));
    return denormal ? v_to_bf16(x) : (__m256i)_mm512_cvtneps_pbh(x);
}
#else
#define v_to_bf16_in v_to_bf16
#endif

/* n floats into bf16 as the packers round them (a test hook: their bits
 * against al_f32_to_bf16's, al_attn_round_*) */
void BSFX(al_attn_round)(uint16_t *dst, const float *src, int n) {
    int e = 0;
    for (; e + KW <= n; e += KW) VH_STORE(dst + e, v_to_bf16_in(V_LOAD(src + e)));
    for (; e < n; e++) dst[e] = al_f32_to_bf16(src[e]);
}

/* h[0 .. dp) = bf16(src[0 .. d)), zeros past d (d <= dp; h has room for
 * dp rounded up to AL_VW): whole vectors, the tail read masked */
static inline void row_round_pad(uint16_t *restrict h, const float *restrict src, int d, int dp) {
    int e = 0;
    for (; e + KW <= d; e += KW) VH_STORE(h + e, v_to_bf16_in(V_LOAD(src + e)));
    if (e < d) {
        VH_STORE(h + e, v_to_bf16_in(V_LOADM(src + e, V_MASK(d - e)))); /* masked lanes read as 0 */
        e += KW;
    }
    for (; e < dp; e++) h[e] = 0;
}

/* Row r of an n-row source (rows ld floats apart) into h[0 .. dp): rounded
 * and zero-padded, or all zeros past n; pf floats from the row ROW_PREFETCH
 * ahead prefetched (d, or more or none: pack_tiles). Every packer reads its
 * rows through here. */
static inline void pack_row(uint16_t *restrict h, const float *restrict src, long ld, int r, int n, int d, int dp,
                            int pf) {
    if (pf > 0 && r + ROW_PREFETCH < n) prefetch_row(src + (long)(r + ROW_PREFETCH) * ld, pf);
    if (r < n)
        row_round_pad(h, src + (long)r * ld, d, dp);
    else
        memset(h, 0, sizeof(uint16_t) * (size_t)dp);
}

/* The rows r < np, columns e < dp of an operand in layout L: bf16(src[r][e])
 * (rows ld floats apart) for r < n, e < d, 0 past them (np, dp even), pf
 * floats of each row prefetched ahead (pack_row). The
 * rows layout's rows are rounded in vectors straight into place; the
 * others go two at a time (r even, r + 1), each rounded into h first, then
 * laid out: pairs and trows as one 32-bit word per column (the two rows'
 * values adjacent; trows' words np apart), tpairs as one 64-bit word per
 * column pair (both rows' pairs adjacent). With AVX-512, pairs are
 * interleaved 16 columns at a time and trows, tpairs transposed in
 * registers (pack16_tr). */
enum { PACK_ROW_MAX = 1024 };

#if AL_VW == 16
/* The transposed layouts are dword transposes: tpairs puts the dword (bf16
 * pair) m of source row r at dword r + m np; trows puts the word of rows
 * (2i, 2i + 1) at column e (both values) at dword i + e np / 2. So 32 rows
 * at a time are rounded, the dwords of 16 of their rows (tpairs) or 16 row
 * pairs (trows) are put in 16 registers, transposed there (tr16) and
 * stored 64 bytes at a time, where the element-wise layout stores 4 or 8
 * bytes per column to lines np apart. */
enum { TPACK_MAX = 256 };

/* 16 dwords: a[c] in the low half, b[c] in the high half of dword c */
static inline __m512i words16(const uint16_t *a, const uint16_t *b) {
    const __m512i lo = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)a));
    const __m512i hi = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)b));
    return _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16));
}

/* r[i][j] <- r[j][i], 16 x 16 dwords */
static inline void tr16(__m512i r[16]) {
    __m512i t[16], u[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) { /* u[i + c]: rows i .. i + 3 at column c of each 128-bit lane */
        u[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        u[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        u[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        u[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    for (int c = 0; c < 4; c++) {
        const __m512i v0 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x88), v1 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xdd);
        const __m512i w0 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x88);
        const __m512i w1 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xdd);
        r[c] = _mm512_shuffle_i32x4(v0, w0, 0x88);
        r[8 + c] = _mm512_shuffle_i32x4(v0, w0, 0xdd);
        r[4 + c] = _mm512_shuffle_i32x4(v1, w1, 0x88);
        r[12 + c] = _mm512_shuffle_i32x4(v1, w1, 0xdd);
    }
}

/* pack16 for tpairs (trows 0) or trows (1); np a multiple of 32, dp of 16
 * and at most TPACK_MAX; rows (NULL: not wanted) gets the rows layout too,
 * from the same reading of src */
static void pack16_tr(uint16_t *restrict dst, int trows, uint16_t *restrict rows, const float *restrict src, long ld,
                      int n, int np, int d, int dp, int pf) {
    uint16_t buf[32][TPACK_MAX + KW];
    uint16_t *h[32]; /* the 32 rows at hand: rounded into rows where it is wanted (read back from L1), else buf */
    uint32_t *restrict dw = (uint32_t *)dst;
    for (int r0 = 0; r0 < np; r0 += 32) {
        for (int t = 0; t < 32; t++) {
            const int r = r0 + t;
            h[t] = rows ? rows + (size_t)r * dp : buf[t];
            pack_row(h[t], src, ld, r, n, d, dp, pf);
        }
        __m512i x[16];
        if (trows) {
            for (int e0 = 0; e0 < dp; e0 += 16) {
                for (int i = 0; i < 16; i++) /* the word of rows 2i, 2i + 1 at each column */
                    x[i] = words16(h[2 * i] + e0, h[2 * i + 1] + e0);
                tr16(x);
                for (int c = 0; c < 16; c++) _mm512_storeu_si512(dw + (size_t)(e0 + c) * (np / 2) + r0 / 2, x[c]);
            }
        } else {
            for (int half = 0; half < 32; half += 16)
                for (int m0 = 0; m0 < dp / 2; m0 += 16) {
                    const int nm = imin(16, dp / 2 - m0); /* dwords of each row in this step (8 at dp 16) */
                    const __mmask16 km = (__mmask16)((1u << nm) - 1u);
                    for (int i = 0; i < 16; i++) x[i] = _mm512_maskz_loadu_epi32(km, h[half + i] + 2 * m0);
                    tr16(x);
                    for (int c = 0; c < nm; c++) _mm512_storeu_si512(dw + (size_t)(m0 + c) * np + r0 + half, x[c]);
                }
        }
    }
}
#endif

static void pack16(uint16_t *restrict dst, layout16 L, const float *restrict src, long ld, int n, int np, int d,
                   int dp, int pf) {
    if (dp > PACK_ROW_MAX) { /* wider than the row buffer: element by element */
        for (int r = 0; r < np; r++) {
            uint16_t *restrict row = dst + (r / 2) * L.r2 + (r % 2) * L.r1;
            for (int e = 0; e < dp; e++)
                row[(e / 2) * L.e2 + (e % 2) * L.e1] = r < n && e < d ? al_f32_to_bf16(src[(long)r * ld + e]) : 0;
        }
        return;
    }
    const int is_rows = L.e1 == 1 && L.e2 == 2, is_pairs = L.r1 == 1 && L.e1 == 2;
    const int is_trows = L.r1 == 1 && L.r2 == 2;
    if (is_rows) { /* each row in place: row_round_pad writes no further than dp */
        for (int r = 0; r < np; r++) pack_row(dst + (r / 2) * L.r2 + (r % 2) * L.r1, src, ld, r, n, d, dp, pf);
        return;
    }
#if AL_VW == 16
    if (!is_pairs && np % 32 == 0 && dp % 16 == 0 && dp <= TPACK_MAX) {
        pack16_tr(dst, is_trows, NULL, src, ld, n, np, d, dp, pf);
        return;
    }
#endif
    uint16_t h[2][PACK_ROW_MAX + KW];
    for (int r = 0; r < np; r += 2) {
        for (int t = 0; t < 2; t++) pack_row(h[t], src, ld, r + t, n, d, dp, pf);
        uint16_t *restrict base = dst + (r / 2) * L.r2;
        if (is_pairs) {
            int e = 0;
#if AL_VW == 16
            for (; e + 16 <= dp; e += 16) /* 16 columns: the two rows' values side by side, 64 bytes */
                _mm512_storeu_si512(base + 2 * e, words16(h[0] + e, h[1] + e));
#endif
            for (; e < dp; e++) {
                const uint32_t word = (uint32_t)h[0][e] | (uint32_t)h[1][e] << 16;
                memcpy(base + 2 * e, &word, sizeof word);
            }
        } else if (is_trows) {
            for (int e = 0; e < dp; e++) {
                const uint32_t word = (uint32_t)h[0][e] | (uint32_t)h[1][e] << 16;
                memcpy(base + (size_t)e * L.e1, &word, sizeof word);
            }
        } else { /* tpairs */
            for (int e = 0; e < dp; e += 2) {
                uint16_t quad[4] = {h[0][e], h[0][e + 1], h[1][e], h[1][e + 1]};
                memcpy(base + (e / 2) * L.e2, quad, sizeof quad);
            }
        }
    }
}

/* An n x d source (rows ld apart) as both rows and trows, np x dp: the
 * backward's Q and dO, whose rows then are read from memory once */
static void pack16_rows_trows(uint16_t *rows, uint16_t *trows, const float *src, long ld, int n, int np, int d,
                              int dp) {
#if AL_VW == 16
    if (np % 32 == 0 && dp % 16 == 0 && dp <= TPACK_MAX) {
        pack16_tr(trows, 1, rows, src, ld, n, np, d, dp, d);
        return;
    }
#endif
    pack16(rows, lay_rows(np, dp), src, ld, n, np, d, dp, d);
    pack16(trows, lay_trows(np, dp), src, ld, n, np, d, dp, d);
}

/* The key tiles of every (sequence, KV group) into the operands a kernel
 * uses (NULL: not wanted): kT [dkp/2][KT][2] (K^T as pairs along d), vp
 * [KT/2][dvp][2] (V as pairs along keys), vT [dvp/2][KT][2], k2
 * [KT/2][dkp][2]; zero past T and past d. A work-shared loop (omp for) over
 * the B G ntile tiles: call it inside a parallel region. The group is the
 * loop's fastest index, so a thread packs every group of a tile's rows in
 * turn and reads those rows whole while they are in its caches; group by
 * group along the sequence each pass reads a 4-line piece of every row,
 * which the hardware prefetchers follow poorly (from memory, that read
 * alone is 1.7x slower; the whole forward and backward 2-3 %). A head's
 * piece of a row is a few lines of the row of all G groups, so where the
 * tile's rows of every group stay in L2 with room (WHOLE_ROWS_PF_MAX bytes
 * of k and v), the first unit of a tile that a thread packs prefetches the
 * rest of those rows (its group's columns to the last group's; the first
 * ROW_PREFETCH rows before it starts) and the tile's later groups, whose
 * lines are then on their way, prefetch nothing; beyond it each unit
 * prefetches its own piece. Packing alone after an sgemm (caches dirty, as
 * in a step) took 0.7x the time at the ViT's shapes (rows of 8 groups of 32,
 * 4 of 16), 0.8-1.0x elsewhere; the whole bf16 kernels, paired in one
 * process, 0.966x (forward, 4 groups of 16) to 1.00x (docs/kernels.md). */
enum { WHOLE_ROWS_PF_MAX = 512 << 10 };

/* key tile `tile` of sequence b, KV group g into the operands wanted (NULL:
 * not): kT, vp, vT, k2 point at the tile's place; pk, pv floats of each
 * k, v row prefetched ahead (pack_row) */
static void pack_tile(const al_attn_shape *s, const float *k, const float *v, int b, int g, int tile, int dkp,
                      int dvp, uint16_t *kT, uint16_t *vp, uint16_t *vT, uint16_t *k2, int pk, int pv) {
    const int T = s->T, DK = s->dk, DV = s->dv;
    const size_t row0 = (size_t)b * T + (size_t)tile * KT;
    const int n = imin(KT, T - tile * KT);
    const float *k0 = k + row0 * s->ldk + (size_t)g * DK, *v0 = v + row0 * s->ldv + (size_t)g * DV;
    if (kT) pack16(kT, lay_tpairs(KT, dkp), k0, s->ldk, n, KT, DK, dkp, pk);
    if (vp) pack16(vp, lay_pairs(KT, dvp), v0, s->ldv, n, KT, DV, dvp, pv);
    if (vT) pack16(vT, lay_tpairs(KT, dvp), v0, s->ldv, n, KT, DV, dvp, pv);
    if (k2) pack16(k2, lay_pairs(KT, dkp), k0, s->ldk, n, KT, DK, dkp, pk);
}

/* Every key tile of sequence b, KV group g (a unit) into the operands
 * wanted, each laid out from the unit's tile 0 (kT, vp, vT, k2 of the
 * unit), by the calling thread alone: where a unit's items all run on the
 * thread that packs it (own_units) */
static void pack_unit(const al_attn_shape *s, const float *k, const float *v, int b, int g, int ntile, int dkp,
                      int dvp, uint16_t *kT, uint16_t *vp, uint16_t *vT, uint16_t *k2) {
    for (int t = 0; t < ntile; t++)
        pack_tile(s, k, v, b, g, t, dkp, dvp, kT ? kT + (size_t)t * dkp * KT : NULL,
                  vp ? vp + (size_t)t * KT * dvp : NULL, vT ? vT + (size_t)t * dvp * KT : NULL,
                  k2 ? k2 + (size_t)t * KT * dkp : NULL, s->dk, s->dv);
}

static void pack_tiles(const al_attn_shape *s, const float *k, const float *v, int ntile, int dkp, int dvp,
                       uint16_t *kT, uint16_t *vp, uint16_t *vT, uint16_t *k2) {
    const int T = s->T, G = s->G, DK = s->dk, DV = s->dv;
    const int whole_rows = (size_t)KT * G * (DK + DV) * sizeof(float) <= WHOLE_ROWS_PF_MAX;
    long prev = -2; /* the unit this thread packed last */
#pragma omp for schedule(static)
    for (long u = 0; u < (long)s->B * G * ntile; u++) {
        const int g = (int)(u % G), tile = (int)((u / G) % ntile), b = (int)(u / ((long)ntile * G));
        const long pt = ((long)b * G + g) * ntile + tile; /* the tile's place in the packed arrays */
        const size_t row0 = (size_t)b * T + (size_t)tile * KT;
        const int n = imin(KT, T - tile * KT);
        const float *k0 = k + row0 * s->ldk + (size_t)g * DK, *v0 = v + row0 * s->ldv + (size_t)g * DV;
        int pk = DK, pv = DV; /* floats of each row prefetched ahead */
        if (whole_rows) {
            const int lead = g == 0 || u != prev + 1; /* this thread's first unit of the tile */
            pk = lead ? (G - g) * DK : 0, pv = lead ? (G - g) * DV : 0;
            for (int r = 0; lead && r < imin(ROW_PREFETCH, n); r++)
                prefetch_row(k0 + (size_t)r * s->ldk, pk), prefetch_row(v0 + (size_t)r * s->ldv, pv);
        }
        prev = u;
        pack_tile(s, k, v, b, g, tile, dkp, dvp, kT ? kT + (size_t)pt * dkp * KT : NULL,
                  vp ? vp + (size_t)pt * KT * dvp : NULL, vT ? vT + (size_t)pt * dvp * KT : NULL,
                  k2 ? k2 + (size_t)pt * KT * dkp : NULL, pk, pv);
    }
}

/* ---- the product ----
 * C_h (acc: +=, else =) A_h B for heads h < nh: C_h[r][n] over rows r < R,
 * columns n < N (N a multiple of 16 and of AL_VW), summing k < K (K a
 * multiple of KP): A_h = A + h ahs, bf16 rows lda apart (pairs (2k, 2k+1)
 * adjacent); B(k, n) = B[(k/2) ldb + 2n + k%2] (pairs), shared by the
 * heads; C_h = C + h chs, fp32 rows ldc apart. Rows are taken in blocks of
 * RB: the AMX engine computes (and, acc, reads) every row of the last block
 * up to RB, so A_h and C_h hold whole blocks; the vector engines touch rows
 * < R only. */
#ifdef BF16_AMX

/* tiles 0-5: C of up to six heads; 6: A; 7: B (pairs) */
enum { AMX_HEADS = 6 };

/* Tiles of RB rows x 64 bytes: core/amx_tiles.h's configuration. */
#include "../core/amx_tiles.h"
_Static_assert(RB == 16, "the tile configuration has 16-row tiles");
static void amx_config(void) { AL_TILE_LOADCONFIG(); }

#define BF16_THREAD_BEGIN() amx_config()
#define BF16_THREAD_END() _tile_release()

/* C (acc: +=, else =) A B for C of whole 32 x 32 blocks (R, N multiples of
 * 32): each block's four C tiles over the K loop with two A tiles (rows r0,
 * r0 + 16) and two B tiles (columns n0, n0 + 16), four loads for four
 * products where bmm1 below makes five, and each operand read twice instead
 * of A once and B R / 16 times: the backward's dV^T and dK^T over all query
 * rows, whose operands stream from L2 (backward 2-4 % faster at T = 1024,
 * d_h = 64, paired; neutral at T = 256). K is taken BMM22_PASS steps at a
 * time over a strip's column blocks, so the strip's A for those steps
 * (16 KB) is read from L1 for its second block (as gemm_amx.c's passes;
 * the backward 0.977x the time at T = 1024, paired); C goes to memory and
 * back between passes, which returns the same values. Every C tile sums its
 * K steps in order, as bmm1's: the same bits. */
enum { BMM22_PASS = 8 };
static void bmm22(int R, int N, int K, const uint16_t *A, long lda, const uint16_t *B, long ldb, float *C, long ldc,
                  int acc) {
    for (int r0 = 0; r0 < R; r0 += 32)
        for (int kp = 0; kp < K; kp += BMM22_PASS * KP)
            for (int n0 = 0; n0 < N; n0 += 32) {
                const int kend = K - kp < BMM22_PASS * KP ? K : kp + BMM22_PASS * KP;
                float *c0 = C + (long)r0 * ldc + n0, *c1 = c0 + 16 * ldc;
                const uint16_t *a0 = A + (long)r0 * lda, *a1 = a0 + 16 * lda, *b0 = B + 2 * n0;
                al_tiles_c4_begin(acc || kp > 0, c0, c0 + 16, c1, c1 + 16, ldc);
                for (int k0 = kp; k0 < kend; k0 += KP) {
                    const uint16_t *bk = b0 + (long)(k0 / 2) * ldb;
                    _tile_loadd(4, a0 + k0, lda * 2);
                    _tile_loadd(6, bk, ldb * 2);
                    _tile_dpbf16ps(0, 4, 6);
                    _tile_loadd(7, bk + 32, ldb * 2);
                    _tile_dpbf16ps(1, 4, 7);
                    _tile_loadd(5, a1 + k0, lda * 2);
                    _tile_dpbf16ps(2, 5, 6);
                    _tile_dpbf16ps(3, 5, 7);
                }
                al_tiles_c4_end(4, c0, c0 + 16, c1, c1 + 16, ldc);
            }
}

/* bmm for one head: per block of RB rows and up to 64 columns, the (up to
 * four) C tiles stay in tiles 0-3 over the whole K loop and each A tile is
 * loaded once for all of them (five loads per four products where the heads'
 * loop below needs eight). A alternates between tiles 6 and 7 by K step and
 * B between 4 and 5 by column tile, so a load need not wait for the product
 * still reading the register it would overwrite. C of whole 32 x 32 blocks
 * goes to bmm22 instead. */
static void bmm1(int R, int N, int K, const uint16_t *A, long lda, const uint16_t *B, long ldb, float *C, long ldc,
                 int acc) {
    if (R % 32 == 0 && N % 32 == 0) { /* the backward's dV^T, dK^T (d padded to 32 or 64, KT columns) */
        bmm22(R, N, K, A, lda, B, ldb, C, ldc, acc);
        return;
    }
    for (int r0 = 0; r0 < R; r0 += RB)
        for (int n0 = 0; n0 < N; n0 += 64) {
            const int nt = imin(4, (N - n0) / 16);
            float *c0 = C + (long)r0 * ldc + n0;
            const uint16_t *a0 = A + (long)r0 * lda, *b0 = B + 2 * n0;
/* tile numbers are immediates: one statement per tile */
#define AMX1_INIT(t) \
    if (nt > t) { \
        if (acc) _tile_loadd(t, c0 + 16 * (t), ldc * 4); \
        else _tile_zero(t); \
    }
#define AMX1_DP(t, ta, tb) \
    if (nt > t) { \
        _tile_loadd(tb, b0 + (long)(k0 / 2) * ldb + 32 * (t), ldb * 2); \
        _tile_dpbf16ps(t, ta, tb); \
    }
#define AMX1_STEP(ta) \
    { \
        _tile_loadd(ta, a0 + k0, lda * 2); \
        AMX1_DP(0, ta, 4) AMX1_DP(1, ta, 5) AMX1_DP(2, ta, 4) AMX1_DP(3, ta, 5) \
    }
#define AMX1_STORE(t) \
    if (nt > t) _tile_stored(t, c0 + 16 * (t), ldc * 4);
            AMX1_INIT(0) AMX1_INIT(1) AMX1_INIT(2) AMX1_INIT(3)
            int k0 = 0;
            for (; k0 + 2 * KP <= K; k0 += KP) {
                AMX1_STEP(6)
                k0 += KP;
                AMX1_STEP(7)
            }
            if (k0 < K) AMX1_STEP(6)
            AMX1_STORE(0) AMX1_STORE(1) AMX1_STORE(2) AMX1_STORE(3)
#undef AMX1_INIT
#undef AMX1_DP
#undef AMX1_STEP
#undef AMX1_STORE
        }
}

static void bmm(int nh, int R, int N, int K, const uint16_t *A, long lda, long ahs, const uint16_t *B, long ldb,
                float *C, long ldc, long chs, int acc) {
    /* GCC's tile loads name no memory operand: make every store before them happen first */
    __asm__ volatile("" ::: "memory");
    if (nh == 1) {
        bmm1(R, N, K, A, lda, B, ldb, C, ldc, acc);
        return;
    }
    for (int r0 = 0; r0 < R; r0 += RB)
        for (int n0 = 0; n0 < N; n0 += 16)
            for (int h0 = 0; h0 < nh; h0 += AMX_HEADS) {
                const int hc = imin(AMX_HEADS, nh - h0);
                float *c0 = C + (long)h0 * chs + (long)r0 * ldc + n0;
                const uint16_t *a0 = A + (long)h0 * ahs + (long)r0 * lda;
/* tile numbers are immediates: one statement per tile */
#define AMX_INIT(t) \
    if (hc > t) { \
        if (acc) _tile_loadd(t, c0 + (long)(t) * chs, ldc * 4); \
        else _tile_zero(t); \
    }
#define AMX_DP(t) \
    if (hc > t) { \
        _tile_loadd(6, a0 + (long)(t) * ahs + k0, lda * 2); \
        _tile_dpbf16ps(t, 6, 7); \
    }
#define AMX_STORE(t) \
    if (hc > t) _tile_stored(t, c0 + (long)(t) * chs, ldc * 4);
                AMX_INIT(0) AMX_INIT(1) AMX_INIT(2) AMX_INIT(3) AMX_INIT(4) AMX_INIT(5)
                for (int k0 = 0; k0 < K; k0 += KP) {
                    _tile_loadd(7, B + (long)(k0 / 2) * ldb + 2 * n0, ldb * 2); /* loaded once for all heads */
                    AMX_DP(0) AMX_DP(1) AMX_DP(2) AMX_DP(3) AMX_DP(4) AMX_DP(5)
                }
                AMX_STORE(0) AMX_STORE(1) AMX_STORE(2) AMX_STORE(3) AMX_STORE(4) AMX_STORE(5)
#undef AMX_INIT
#undef AMX_DP
#undef AMX_STORE
            }
}

#else /* the vector engines */

#define BF16_THREAD_BEGIN() ((void)0)
#define BF16_THREAD_END() ((void)0)

/* C[r][0 .. NC AL_VW) (acc: +=, else =) sum over K2 pairs, R <= BRG rows,
 * the R x NC accumulators in registers (R, NC constant after inlining);
 * row r's pair kp of A at A + r lda + 2 kp */
static inline __attribute__((always_inline)) void bk_body(const int R, const int NC, int K2, const uint16_t *restrict A,
                                                          long lda, const uint16_t *restrict B, long ldb,
                                                          float *restrict C, long ldc, int acc) {
    vf c[BRG][BNC];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int j = 0; j < NC; j++) c[r][j] = V_ZERO();
    for (int kp = 0; kp < K2; kp++) {
        bvb b[BNC];
#pragma GCC unroll 8
        for (int j = 0; j < NC; j++) b[j] = BV_B(B + (long)kp * ldb + 2 * j * KW);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            uint32_t pair;
            memcpy(&pair, A + (long)r * lda + 2L * kp, sizeof pair);
            const bva a = BV_A(pair);
#pragma GCC unroll 8
            for (int j = 0; j < NC; j++) c[r][j] = BV_DP(c[r][j], a, b[j]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int j = 0; j < NC; j++) {
            float *cp = C + (long)r * ldc + j * KW;
            V_STORE(cp, acc ? V_ADD(V_LOAD(cp), c[r][j]) : c[r][j]);
        }
}

typedef void (*bk_fn)(int K2, const uint16_t *A, long lda, const uint16_t *B, long ldb, float *C, long ldc, int acc);

/* one out-of-line instance per (rows, vectors) shape */
#define BK_DEF(R, NC)                                                                                         \
    static __attribute__((noinline)) void bk_##R##_##NC(int K2, const uint16_t *A, long lda, const uint16_t *B, \
                                                        long ldb, float *C, long ldc, int acc) {               \
        bk_body(R, NC, K2, A, lda, B, ldb, C, ldc, acc);                                                      \
    }
#if BRG == 6 && BNC == 4
#define BK_ROW(R) BK_DEF(R, 1) BK_DEF(R, 2) BK_DEF(R, 3) BK_DEF(R, 4)
#define BK_TAB(R) {bk_##R##_1, bk_##R##_2, bk_##R##_3, bk_##R##_4}
BK_ROW(1) BK_ROW(2) BK_ROW(3) BK_ROW(4) BK_ROW(5) BK_ROW(6)
static bk_fn const bk_tab[BRG][BNC] = {BK_TAB(1), BK_TAB(2), BK_TAB(3), BK_TAB(4), BK_TAB(5), BK_TAB(6)};
#elif BRG == 4 && BNC == 2
#define BK_ROW(R) BK_DEF(R, 1) BK_DEF(R, 2)
#define BK_TAB(R) {bk_##R##_1, bk_##R##_2}
BK_ROW(1) BK_ROW(2) BK_ROW(3) BK_ROW(4)
static bk_fn const bk_tab[BRG][BNC] = {BK_TAB(1), BK_TAB(2), BK_TAB(3), BK_TAB(4)};
#else
#error "BRG x BNC must be 6 x 4 or 4 x 2"
#endif
#undef BK_TAB
#undef BK_ROW
#undef BK_DEF

static void bmm(int nh, int R, int N, int K, const uint16_t *A, long lda, long ahs, const uint16_t *B, long ldb,
                float *C, long ldc, long chs, int acc) {
    for (int h = 0; h < nh; h++)
        for (int n0 = 0; n0 < N; n0 += BNC * KW) {
            const int nc = imin(BNC, (N - n0) / KW);
            for (int r0 = 0; r0 < R; r0 += BRG)
                bk_tab[imin(BRG, R - r0) - 1][nc - 1](K / 2, A + (long)h * ahs + (long)r0 * lda, lda, B + 2 * n0, ldb,
                                                      C + (long)h * chs + (long)r0 * ldc + n0, ldc, acc);
        }
}

#endif

/* dst[(q/2) 2 nc + 2 c + q%2] = src[q][c], q < nr (even), c < nc: bf16
 * rows interleaved by pairs, the B operand layout of a product reducing over
 * q (dV^T += dO^T P, dK^T += Q^T dS): one 32-bit word per (row pair,
 * column), a loop gcc vectorises */
static void interleave_pairs(uint16_t *restrict dst, const uint16_t *restrict src, int lds, int nr, int nc) {
    for (int q = 0; q < nr; q += 2) {
        const uint16_t *restrict lo = src + (size_t)q * lds, *restrict hi = lo + lds;
        uint32_t *restrict w = (uint32_t *)(dst + (size_t)q * nc);
        for (int c = 0; c < nc; c++) w[c] = (uint32_t)lo[c] | (uint32_t)hi[c] << 16;
    }
}

/* dst[0..n) (add: +=, else =) src[0..n): a product's rows into the caller's
 * strided output, the tail masked (nothing past n is touched) */
static inline void row_out(float *restrict dst, const float *restrict src, int n, int add) {
    int e = 0;
    for (; e + KW <= n; e += KW) V_STORE(dst + e, add ? V_ADD(V_LOAD(dst + e), V_LOAD(src + e)) : V_LOAD(src + e));
    if (e < n) {
        const vmask m = V_MASK(n - e);
        V_STOREM(dst + e, m, add ? V_ADD(V_LOADM(dst + e, m), V_LOADM(src + e, m)) : V_LOADM(src + e, m));
    }
}

/* ---- forward ---- */

/* a step: key tile from j0, query rows r0 .. r0 + R of the item, nk keys
 * of the tile visible to its last row; R = 0: none */
typedef struct fstep {
    int j0, r0, R, nk;
} fstep;

/* the row r of step st: its weights P (bf16) from its scores, O's row
 * rescaled where the running max moved (both forward loops; per head:
 * S, P [RB][KT], mst, lst, Oacc of the item's rows) */
static inline __attribute__((always_inline)) void fwd_row1(const score_fn *f, int softmax, int causal, fstep st,
                                                           int i0, int r, const float *S, uint16_t *P, float kmul,
                                                           float *mst, vf *lst, float *Oacc, int dvp,
                                                           float *alpha_out) {
    const int ia = i0 + st.r0;
    const int nv = causal ? imax(0, imin(st.nk, ia + r - st.j0 + 1)) : st.nk;
    const float *srow = S + (size_t)r * KT;
    uint16_t *prow = P + (size_t)r * KT;
    if (softmax) {
        float *mr = mst + st.r0 + r;
        vf *lr = lst + st.r0 + r;
        const float alpha = nv >= KT ? row_softmax_p16_full(srow, prow, kmul, mr, lr)
                                     : row_softmax_p16(srow, prow, nv, kmul, mr, lr);
        if (alpha_out) alpha_out[r] = st.j0 > 0 ? alpha : 1.0f;
        else if (st.j0 > 0 && alpha != 1.0f) row_scale(Oacc + ((size_t)st.r0 + r) * dvp, dvp, alpha);
    } else row_map_p16(f, srow, prow, nv, kmul);
}

#ifdef BF16_AMX
/* R rows of o from orow (rows ldo floats apart, dv floats each) towards the
 * caches for writing, called as a one-head item reaches its last key tile:
 * fwd_rows_done writes them soon after, and its stores no longer wait for
 * their lines to arrive. Paired in one process against the kernel without
 * it (30-40 pairs, AMX): the forward 0.94-0.96x the time at the language
 * models' shape (B 4, T 256, 8 heads of 32), 0.95-0.97x at the ViTs',
 * 0.99x at T 1024, d 64. Not in the heads' plain loop (GQA chunks: 1.02-1.03x
 * there), and not as the item starts (0-3 % slower: the lines were evicted
 * again or took the bandwidth of the item's own reads). */
static inline void prefetch_o_rows(float *orow, long ldo, int dv, int R) {
    for (int r = 0; r < R; r++) prefetch_row_w(orow + (size_t)r * ldo, dv);
}

/* the step after st in the item's order (key tiles outer, row blocks
 * inner), skipping blocks that see none of the tile; R = 0 after the last */
static fstep fstep_next(fstep st, int i0, int m, int kend, int causal, int T) {
    for (;;) {
        st.r0 += RB;
        if (st.r0 >= m) st.r0 = 0, st.j0 += KT;
        if (st.j0 >= kend) return (fstep){0, 0, 0, 0};
        st.R = imin(RB, m - st.r0);
        const int ia = i0 + st.r0;
        st.nk = keys_seen(T, causal, st.j0, ia, st.R);
        if (st.nk > 0) return st;
    }
}

/* C[RB][0 .. NC) (fp32, rows ldc apart) = A B over K (a multiple of KP),
 * NC a multiple of 16 up to 64: A bf16 rows lda apart, B pairs ldb apart
 * (bmm's operands), in tiles 0-3 (A in 6, B in 4 and 5), the statement
 * WORK after each of the five tile instruction pairs of a K step (5 K / KP
 * times; a column tile past NC skips its product, not its WORK). The
 * software-pipelined kernels below put the vector work of the step before
 * between the product's instructions this way. */
#define AMX_C64_WITH(a0, lda, b0, ldb, K, NC, C, ldc, WORK) AMX_C64_ACC_WITH(a0, lda, b0, ldb, K, NC, C, ldc, 0, WORK)
/* the same with C += A B where acc (C loaded into the tiles first) */
#define AMX_C64_ACC_WITH(a0, lda, b0, ldb, K, NC, C, ldc, acc, WORK)             \
    do {                                                                        \
        const int nt_ = (NC) / 16;                                              \
        al_tiles_c4_begin((acc), (C), (C) + 16, (C) + 32, (C) + 48, (ldc));     \
        for (int k0_ = 0; k0_ < (K); k0_ += KP) {                               \
            const uint16_t *bk_ = (b0) + (long)(k0_ / 2) * (ldb);              \
            _tile_loadd(6, (a0) + k0_, (lda) * 2);                              \
            WORK;                                                               \
            _tile_loadd(4, bk_, (ldb) * 2);                                     \
            _tile_dpbf16ps(0, 6, 4);                                            \
            WORK;                                                               \
            if (nt_ > 1) {                                                      \
                _tile_loadd(5, bk_ + 32, (ldb) * 2);                            \
                _tile_dpbf16ps(1, 6, 5);                                        \
            }                                                                   \
            WORK;                                                               \
            if (nt_ > 2) {                                                      \
                _tile_loadd(4, bk_ + 64, (ldb) * 2);                            \
                _tile_dpbf16ps(2, 6, 4);                                        \
            }                                                                   \
            WORK;                                                               \
            if (nt_ > 3) {                                                      \
                _tile_loadd(5, bk_ + 96, (ldb) * 2);                            \
                _tile_dpbf16ps(3, 6, 5);                                        \
            }                                                                   \
            WORK;                                                               \
        }                                                                       \
        al_tiles_c4_end(nt_, (C), (C) + 16, (C) + 32, (C) + 48, (ldc));         \
    } while (0)
_Static_assert(KT == 64, "AMX_C64_WITH's products are up to KT columns, four 16-column tiles");

/* One head's forward rows on AMX, software-pipelined. The plain loop below
 * runs, per (key tile, block of RB query rows), S = Q K^T on the tiles, the
 * rows' softmax on the vector units, O += P V on the tiles: each phase
 * waits for the one before, so the tile unit idles while the vectors work
 * and the other way round. Here the product S of the next step is issued
 * tile instruction by tile instruction with the current step's rows (the
 * softmax, O's rescale) between them, so the out-of-order core can run
 * both at once; then the current step's P V. Same operations, same order
 * per row, same bits as the plain loop. S is double-buffered: S0, S1
 * [RB][KT]. The overlap is partial: measured (paired runs, causal H=12
 * T=1024 d_h=64) the forward is 4-5 % faster, the backward, pipelined the
 * same way, 1-3 %. Since session 16 a step's P V too is issued beside the
 * next step's rows where d_v pads to 64 (P double-buffered as well): the
 * forward a further 8-10 % faster at that shape, 3 % at T=256 (paired). */

/* 1: one-head items take the pipelined path; 0: the plain loop (a test
 * hook, al_attn_set_pipelined_*: the two must give the same bits) */
static int pipelined = 1;
void BSFX(al_attn_set_pipelined)(int on) { pipelined = on; }

/* P V of step st: the item's O rows of the step += P (bf16) . V_tile
 * (bf16), plainly; bmm orders the rows' stores before its tile loads */
static inline void fwd_pv1(fstep st, const uint16_t *P, const uint16_t *vp, int dvp, float *Oacc) {
    bmm(1, st.R, dvp, tile_keys(st.nk), P, KT, 0, vp + (size_t)(st.j0 / KT) * KT * dvp, 2 * dvp,
        Oacc + (size_t)st.r0 * dvp, dvp, 0, st.j0 > 0);
}

/* one head's item: qr its Q rows [QBK][dkp] (bf16), kT, vp the packed
 * tiles of its sequence and group (from tile 0); S0, S1 and P0, P1 the
 * double buffers of S and P [RB][KT]; mst, lst, Oacc its statistics and
 * sums, initialised by the caller; oi its o rows (ldo apart, d_v = dv),
 * prefetched for writing at the last key tile where prefetch_o (not where
 * fwd_rows_done streams them: the lines are not read). Where d_v pads to 64 (one
 * C64 product) the P V of a step is issued with the next step's rows too,
 * after that step's S: step i's rows run between the instructions of
 * S(i + 1) and of P V(i - 1). P V(i - 1) adds to O rows that step i's rows
 * do not rescale unless both are one block (an item of one block: then it
 * runs first). */
static void fwd_item_amx1(const score_fn *f, int softmax, int causal, int T, int i0, int m, int kend, float kmul,
                          const uint16_t *qr, int dkp, const uint16_t *kT, const uint16_t *vp, int dvp, float *S0,
                          float *S1, uint16_t *P0, uint16_t *P1, float *mst, vf *lst, float *Oacc, float *oi,
                          long ldo, int dv, int prefetch_o) {
    fstep cur = fstep_next((fstep){-KT, QBK, 0, 0}, i0, m, kend, causal, T); /* the first step */
    if (!cur.R) return;
    const int pv_pipelined = dvp == 64;
    float *Scur = S0, *Snext = S1;
    uint16_t *Pcur = P0, *Pprev = P1;
    fstep prev = {0, 0, 0, 0}; /* the step whose P V is still to issue (R = 0: none) */
    bmm(1, cur.R, tile_cols(cur.nk), dkp, qr + (size_t)cur.r0 * dkp, dkp, 0, kT + (size_t)(cur.j0 / KT) * dkp * KT,
        2 * KT, Scur, KT, 0, 0);
    __asm__ volatile("" ::: "memory"); /* the tile stores before the rows read S */
    while (cur.R) {
        const fstep nxt = fstep_next(cur, i0, m, kend, causal, T);
        if (cur.j0 + KT >= kend && prefetch_o) prefetch_o_rows(oi + (size_t)cur.r0 * ldo, ldo, dv, cur.R);
        if (prev.R && prev.r0 == cur.r0) { /* cur's rows may rescale the O rows prev adds to */
            fwd_pv1(prev, Pprev, vp, dvp, Oacc);
            prev.R = 0;
        }
        int pend = 0;                                 /* rows of cur done */
        const int rows_s = prev.R ? cur.R / 2 : cur.R; /* those beside S(nxt); the rest beside P V(prev) */
        if (nxt.R) {
            /* S(nxt) = Q rows K^T, 16 x KT in tiles 0-3, its instructions interleaved with cur's rows */
            const int slots = 5 * (dkp / KP), per = (rows_s + slots - 1) / slots;
            const uint16_t *a0 = qr + (size_t)nxt.r0 * dkp, *b0 = kT + (size_t)(nxt.j0 / KT) * dkp * KT;
            AMX_C64_WITH(a0, dkp, b0, 2 * KT, dkp, tile_cols(nxt.nk), Snext, KT,
                         for (int u = 0; u < per && pend < rows_s; u++, pend++)
                             fwd_row1(f, softmax, causal, cur, i0, pend, Scur, Pcur, kmul, mst, lst, Oacc, dvp, NULL));
        }
        if (prev.R) {
            /* O rows of prev += P(prev) V_tile, 16 x 64 in tiles 0-3, interleaved with cur's other rows */
            const int K = tile_keys(prev.nk), slots = 5 * (K / KP), per = (cur.R - pend + slots - 1) / slots;
            const uint16_t *b0 = vp + (size_t)(prev.j0 / KT) * KT * dvp;
            float *c0 = Oacc + (size_t)prev.r0 * dvp;
            AMX_C64_ACC_WITH(Pprev, KT, b0, 2 * dvp, K, 64, c0, dvp, prev.j0 > 0,
                             for (int u = 0; u < per && pend < cur.R; u++, pend++) fwd_row1(
                                 f, softmax, causal, cur, i0, pend, Scur, Pcur, kmul, mst, lst, Oacc, dvp, NULL));
            prev.R = 0;
        }
        for (; pend < cur.R; pend++)
            fwd_row1(f, softmax, causal, cur, i0, pend, Scur, Pcur, kmul, mst, lst, Oacc, dvp, NULL);
        __asm__ volatile("" ::: "memory"); /* the rows' stores before the tile loads of P V; S(nxt) before its rows */
        if (pv_pipelined) {
            prev = cur;
            uint16_t *t = Pcur;
            Pcur = Pprev, Pprev = t;
        } else fwd_pv1(cur, Pcur, vp, dvp, Oacc);
        float *t = Scur;
        Scur = Snext, Snext = t;
        cur = nxt;
    }
    if (prev.R) fwd_pv1(prev, Pprev, vp, dvp, Oacc);
}

/* The step after st with row blocks outer, key tiles inner (a block's
 * tiles in order, the rows' own order: the same bits), skipping tiles a
 * block does not see; R = 0 after the last */
static fstep fstep_next_by_rows(fstep st, int i0, int m, int kend, int causal, int T) {
    for (;;) {
        st.j0 += KT;
        if (st.j0 >= kend) {
            st.r0 += RB, st.j0 = 0;
            if (st.r0 >= m) return (fstep){0, 0, 0, 0};
        }
        st.R = imin(RB, m - st.r0);
        st.nk = keys_seen(T, causal, st.j0, i0 + st.r0, st.R);
        if (st.nk > 0) return st;
        st.j0 = kend; /* causal: the block sees no later tile either */
    }
}

/* Tiles 0 .. nt - 1, 16 x 16 fp32 each (the O rows of a block), to / from
 * c (rows ldc floats apart), or all four cleared */
static inline void o_tiles_store(int nt, float *c, long ldc) {
    al_tiles_c4_end(nt, c, c + 16, c + 32, c + 48, ldc);
}
static inline void o_tiles_zero(void) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
}
static inline void o_tiles_load(int nt, const float *c, long ldc) {
    _tile_loadd(0, c, ldc * 4);
    if (nt > 1) _tile_loadd(1, c + 16, ldc * 4);
    if (nt > 2) _tile_loadd(2, c + 32, ldc * 4);
    if (nt > 3) _tile_loadd(3, c + 48, ldc * 4);
}

/* O tiles 0 .. nto - 1 (a block's O rows, resident) += P (bf16 rows KT
 * apart) . the value tile at b0 (pairs, 2 dvp apart) over K keys, B in
 * tiles 4, 5, 7, 4 by column tile, the statement WORK after each product
 * (fwd_item_amx_ores: the rows beside P V, or none for the last step) */
#define ORES_PV(P, b0, K, dvp, nto, WORK)                                                                          \
    do {                                                                                                           \
        for (int k0_ = 0; k0_ < (K); k0_ += KP) {                                                                  \
            const uint16_t *bk_ = (b0) + (long)(k0_ / 2) * 2 * (dvp);                                              \
            _tile_loadd(6, (P) + k0_, KT * 2);                                                                     \
            _tile_loadd(4, bk_, 2 * (dvp) * 2);                                                                    \
            _tile_dpbf16ps(0, 6, 4);                                                                               \
            WORK;                                                                                                  \
            if ((nto) > 1) {                                                                                       \
                _tile_loadd(5, bk_ + 32, 2 * (dvp) * 2);                                                           \
                _tile_dpbf16ps(1, 6, 5);                                                                           \
                WORK;                                                                                              \
            }                                                                                                      \
            if ((nto) > 2) {                                                                                       \
                _tile_loadd(7, bk_ + 64, 2 * (dvp) * 2);                                                           \
                _tile_dpbf16ps(2, 6, 7);                                                                           \
                WORK;                                                                                              \
            }                                                                                                      \
            if ((nto) > 3) {                                                                                       \
                _tile_loadd(4, bk_ + 96, 2 * (dvp) * 2);                                                           \
                _tile_dpbf16ps(3, 6, 4);                                                                           \
                WORK;                                                                                              \
            }                                                                                                      \
        }                                                                                                          \
    } while (0)

/* fwd_item_amx1's and fwd_item_amx_ores's signature */
typedef void fwd_item_fn(const score_fn *f, int softmax, int causal, int T, int i0, int m, int kend, float kmul,
                         const uint16_t *qr, int dkp, const uint16_t *kT, const uint16_t *vp, int dvp, float *S0,
                         float *S1, uint16_t *P0, uint16_t *P1, float *mst, vf *lst, float *Oacc, float *oi, long ldo,
                         int dv, int prefetch_o);

/* fwd_item_amx_ores where an item's rows see more keys than this: paired
 * against fwd_item_amx1 (H 12, d_h 64) the forward took 0.90x the time at T
 * 2048, 0.93-0.95x at 1024, 0.97x at 512, but 1.02x at 256 (B 4), where a
 * block runs a few steps and fwd_item_amx1 reads each key tile from L1 for
 * all four of an item's blocks */
enum { ORES_MIN_KEYS = 4 * KT };

/* fwd_item_amx1 with a block's O rows kept in tiles 0-3 over all its key
 * tiles (d_v up to 64), where fwd_item_amx1 loads and stores them at every
 * step: row blocks outer, and S = Q K^T of a step in two halves of 32
 * columns (tiles 4, 5; A in 6, B in 7), P V's B in tiles 4, 5, 7. Per step
 * of 16 x 64 at d 64: 22 tile loads and 4 stores where fwd_item_amx1 makes
 * 24 and 8 (isolated, tiles hot: 0.72x the cycles). The rows record their
 * alpha instead of rescaling O; after the P V of the step before (the
 * pipeline's prev, issued beside the rows), O is stored, the moved rows
 * rescaled and O reloaded: the rare case (the lazy max), the same
 * operations on the same values, so the same bits. The key tiles are read
 * once per block, from L2 (isolated: no slower than hot). */
static void fwd_item_amx_ores(const score_fn *f, int softmax, int causal, int T, int i0, int m, int kend, float kmul,
                              const uint16_t *qr, int dkp, const uint16_t *kT, const uint16_t *vp, int dvp,
                              float *S0, float *S1, uint16_t *P0, uint16_t *P1, float *mst, vf *lst, float *Oacc,
                              float *oi, long ldo, int dv, int prefetch_o) {
    assert(dvp <= 64 && dvp % 16 == 0);
    fstep cur = fstep_next_by_rows((fstep){-KT, 0, 0, 0}, i0, m, kend, causal, T);
    if (!cur.R) return;
    const int nto = dvp / 16; /* O tiles */
    float alpha[RB];
    for (int r = 0; r < RB; r++) alpha[r] = 1.0f;
    float *Scur = S0, *Snext = S1;
    uint16_t *Pcur = P0, *Pprev = P1;
    fstep prev = {0, 0, 0, 0};
    /* S of the first step */
    bmm(1, cur.R, tile_cols(cur.nk), dkp, qr + (size_t)cur.r0 * dkp, dkp, 0, kT + (size_t)(cur.j0 / KT) * dkp * KT,
        2 * KT, Scur, KT, 0, 0);
    o_tiles_zero();
    __asm__ volatile("" ::: "memory");
    while (cur.R) {
        const fstep nxt = fstep_next_by_rows(cur, i0, m, kend, causal, T);
        const int last_of_block = !nxt.R || nxt.r0 != cur.r0;
        if (last_of_block && prefetch_o) prefetch_o_rows(oi + (size_t)cur.r0 * ldo, ldo, dv, cur.R);
        int pend = 0;
        const int rows_s = prev.R ? cur.R / 2 : cur.R;
        if (nxt.R) {
            /* S(nxt), two halves of 32 key columns in tiles 4, 5, beside cur's rows */
            const int nc = tile_cols(nxt.nk) / 16, kst = dkp / KP;
            const int slots = 2 * kst * ((nc + 1) / 2), per = (rows_s + slots - 1) / slots;
            const uint16_t *a0 = qr + (size_t)nxt.r0 * dkp, *b0 = kT + (size_t)(nxt.j0 / KT) * dkp * KT;
#define ROWS_WORK                                                                                                  \
    for (int u = 0; u < per && pend < rows_s; u++, pend++)                                                         \
        fwd_row1(f, softmax, causal, cur, i0, pend, Scur, Pcur, kmul, mst, lst, Oacc, dvp, alpha)
            for (int h = 0; h < 2 && 2 * h < nc; h++) {
                const int two = nc > 2 * h + 1;
                _tile_zero(4);
                if (two) _tile_zero(5);
                for (int k0 = 0; k0 < dkp; k0 += KP) {
                    const uint16_t *bk = b0 + (long)(k0 / 2) * 2 * KT + 64 * h;
                    _tile_loadd(6, a0 + k0, dkp * 2);
                    _tile_loadd(7, bk, 2 * KT * 2);
                    _tile_dpbf16ps(4, 6, 7);
                    ROWS_WORK;
                    if (two) {
                        _tile_loadd(7, bk + 32, 2 * KT * 2);
                        _tile_dpbf16ps(5, 6, 7);
                    }
                    ROWS_WORK;
                }
                _tile_stored(4, Snext + 32 * h, KT * 4);
                if (two) _tile_stored(5, Snext + 32 * h + 16, KT * 4);
            }
#undef ROWS_WORK
        }
        if (prev.R) {
            /* O rows of prev (tiles 0 .. nto - 1) += P(prev) V_tile, beside cur's other rows */
            const int K = tile_keys(prev.nk), slots = nto * (K / KP), per = (cur.R - pend + slots - 1) / slots;
            const uint16_t *b0 = vp + (size_t)(prev.j0 / KT) * KT * dvp;
#define ROWS_WORK                                                                                                  \
    for (int u = 0; u < per && pend < cur.R; u++, pend++)                                                          \
        fwd_row1(f, softmax, causal, cur, i0, pend, Scur, Pcur, kmul, mst, lst, Oacc, dvp, alpha)
            ORES_PV(Pprev, b0, K, dvp, nto, ROWS_WORK);
#undef ROWS_WORK
            if (prev.r0 != cur.r0) { /* prev ended its block: its O rows out, the tiles cleared for cur's */
                o_tiles_store(nto, Oacc + (size_t)prev.r0 * dvp, dvp);
                o_tiles_zero();
            }
            prev.R = 0;
        }
        for (; pend < cur.R; pend++)
            fwd_row1(f, softmax, causal, cur, i0, pend, Scur, Pcur, kmul, mst, lst, Oacc, dvp, alpha);
        if (softmax && cur.j0 > 0) { /* O of cur's block holds all before cur: rescale the rows whose max moved */
            int moved = 0; /* alpha < 1 where the max moved (never above 1, never NaN: softmax_move_max) */
            for (int c = 0; c < RB; c += KW) moved |= V_ANY_GT(V_SET1(1.0f), V_LOAD(alpha + c));
            if (__builtin_expect(moved, 0)) {
                float *c = Oacc + (size_t)cur.r0 * dvp;
                o_tiles_store(nto, c, dvp);
                __asm__ volatile("" ::: "memory");
                for (int r = 0; r < cur.R; r++)
                    if (alpha[r] != 1.0f) row_scale(c + (size_t)r * dvp, dvp, alpha[r]);
                __asm__ volatile("" ::: "memory");
                o_tiles_load(nto, c, dvp);
            }
        }
        __asm__ volatile("" ::: "memory"); /* the rows' stores before the tile loads of P V; S(nxt) before its rows */
        prev = cur;
        uint16_t *t = Pcur;
        Pcur = Pprev, Pprev = t;
        float *ts = Scur;
        Scur = Snext, Snext = ts;
        cur = nxt;
    }
    /* the last step's P V, then its block's O rows out */
    {
        const int K = tile_keys(prev.nk);
        const uint16_t *b0 = vp + (size_t)(prev.j0 / KT) * KT * dvp;
        ORES_PV(Pprev, b0, K, dvp, nto, (void)0);
        o_tiles_store(nto, Oacc + (size_t)prev.r0 * dvp, dvp);
    }
}
#undef ORES_PV
#endif

/* The order of the forward's items. Query blocks outer (every unit's
 * latest block, then the ones before) has each item read its unit's
 * packed key tiles after the other units' items read theirs: from L3 once
 * all of them outgrow L2. By unit (a unit: sequence, KV group, chunk of
 * heads; its query blocks in turn, latest first) the two threads work on
 * one unit at a time and its tiles stay in their caches, where query
 * blocks outer reads neighbouring q rows (other heads' columns) in turn.
 * Paired on AMX: by unit 0.96-0.97x the forward's time at H=12 d_h=64
 * (T=1024 B=1, T=256 B=4: 3 MB of tiles), 0.91x at the ViT's shape (3 MB);
 * 1.04x with 1 MB of tiles (GQA, 4 groups, T=256 B=4). So by unit above
 * this many bytes of packed tiles. */
enum { BY_UNIT_MIN_BYTES = 1 << 20 };

/* Where the forward's units (sequence, KV group) are each one thread's:
 * the thread packs its unit's key tiles into its own buffer and runs all
 * the unit's query blocks against them, which it then reads from its own
 * L2 (and L1) instead of tiles the other threads packed (their caches or
 * L3: the first read of every tile by each thread, which the tile loads
 * wait on). Paired on AMX against all threads packing every tile first
 * (30-40 pairs, same bits): the forward 0.89-0.90x the time at B 1 T 1024
 * H 12 d_h 64, 0.80x at gpt2's shape (B 4 T 256), 0.85-0.89x at the study
 * LMs' (B 4, 8 heads of 32), 0.78x at the ViT's (B 32 T 197, 4 heads of 16),
 * 0.90-0.92x with 4 KV groups. Wanted: one chunk of heads per group (the
 * unit's tiles packed once) and units enough to keep the threads equally
 * busy (a unit's items run on one thread). */
static int own_allowed = 1;
static int own_units(long units, int nch, int nthr) {
    return own_allowed && nch == 1 && (units % nthr == 0 || units >= 8L * nthr);
}

/* 1 (the default): the forward's and backward's units are the threads'
 * own where own_units and the backward's plan allow; 0: never (every tile
 * packed by all threads first). A test hook, al_attn_set_own_units_*: the
 * two give the same bits. */
void BSFX(al_attn_set_own_units)(int on) { own_allowed = on; }

/* The forward's work split (score_kern.h's) and workspace: kT | vp (every
 * unit's key tiles; none where the units are the threads' own) | per
 * thread: Q rows [hpc][QBK][dkp] (bf16), S [max(2, hpc)][RB][KT] (two blocks:
 * fwd_item_amx1's double buffer), P [max(2, hpc)][RB][KT]
 * (bf16), the item's O sums [hpc][QBK][dvp] (fp32, the products add into
 * them: O is written once per item, not read and written per key tile), m
 * [hpc][QBK], l [hpc][QBK] (vectors), and where the units are its own, its
 * unit's kT | vp. */
typedef struct bfwd_plan {
    int ntile, nqb, nch, hpc, dkp, dvp, by_unit, own;
    long ntiles_all, per_qb, items;
    size_t n_k, n_v, unit_k, unit_v, per_thr, floats; /* n_k, n_v, unit_k, unit_v: bf16 values */
} bfwd_plan;

static bfwd_plan bfwd_plan_of(const al_attn_shape *s, int nthr) {
    bfwd_plan p;
    const int pg = s->H / s->G;
    p.dkp = up_kp(s->dk), p.dvp = up_kp(s->dv);
    p.ntile = (s->T + KT - 1) / KT, p.nqb = (s->T + QBK - 1) / QBK;
    split_heads(pg, (long)s->B * s->G * p.nqb, 16, &p.nch, &p.hpc);
    p.ntiles_all = (long)s->B * s->G * p.ntile;
    p.per_qb = (long)s->B * s->G * p.nch, p.items = p.per_qb * p.nqb;
    const size_t units = (size_t)s->B * s->G;
    p.own = own_units((long)units, p.nch, nthr);
    p.unit_k = (size_t)p.ntile * p.dkp * KT, p.unit_v = (size_t)p.ntile * KT * p.dvp;
    p.n_k = p.own ? 0 : units * p.unit_k, p.n_v = p.own ? 0 : units * p.unit_v;
    p.by_unit = units * (p.unit_k + p.unit_v) * sizeof(uint16_t) > BY_UNIT_MIN_BYTES;
    const size_t h = (size_t)p.hpc;
    const size_t h2 = (size_t)imax(2, p.hpc); /* S and P: two blocks at least (fwd_item_amx1) */
    p.per_thr = up16(h * QBK * p.dkp / 2) + up16(h2 * RB * KT) + up16(h2 * RB * KT / 2) + up16(h * QBK * p.dvp) +
                up16(h * QBK) + h * QBK * KW;
    if (p.own) p.per_thr += up16((p.unit_k + 1) / 2) + up16((p.unit_v + 1) / 2);
    p.floats = up16((p.n_k + 1) / 2) + up16((p.n_v + 1) / 2) + (size_t)nthr * p.per_thr;
    return p;
}

size_t BSFX(al_attn_fwd_floats)(const al_attn_shape *s, int nthr) { return bfwd_plan_of(s, nthr).floats; }

/* A thread's buffers for the forward's items (the plan's per-thread part) */
typedef struct bfwd_thread {
    uint16_t *qr, *P;
    float *S, *Oacc, *mst;
    vf *lst;
} bfwd_thread;

/* The work item (query block qb; sequence b, KV group g, chunk ch of its
 * heads) of al_attn_fwd against the unit's packed key tiles ku, vu (kT, vp
 * from its tile 0): the heads' Q rows rounded into the thread's buffer;
 * for each key tile up to the block's last row (causal) or T, for each
 * block of RB rows: S = Q K^T of every head of the chunk (one product, the
 * tile shared), S *= scale (log2 e for softmax), the rows' online softmax
 * (fp32 statistics, whole-number max) or f(S), P rounded to bf16, O_rows =
 * (alpha O_rows | O_rows | 0) + P V in the item's fp32 sums; at the item's
 * end they are written to o, normalised. On AMX most items run head by
 * head through the software-pipelined items instead (see below). */
static void fwd_item(const al_attn_shape *s, const score_fn *f, float kmul, const bfwd_plan *pl, int b, int g,
                     int ch, int qb, const float *q, const uint16_t *ku, const uint16_t *vu, bfwd_thread th,
                     float *o, float *lse) {
    const int T = s->T, DK = s->dk, pg = s->H / s->G, dkp = pl->dkp, dvp = pl->dvp, hpc = pl->hpc;
    const int causal = !s->bidirectional, softmax = f->kind == AL_SCORE_SOFTMAX;
    const int h0 = g * pg + ch * hpc, hn = imin(hpc, pg - ch * hpc);
    const int i0 = qb * QBK, m = imin(QBK, T - i0), kend = causal ? i0 + m : T;
    for (int hh = 0; hh < hn; hh++)
        pack16(th.qr + (size_t)hh * QBK * dkp, lay_rows(QBK, dkp),
               q + ((size_t)b * T + i0) * s->ldq + (size_t)(h0 + hh) * DK, s->ldq, m, QBK, DK, dkp, DK);
    for (int r = 0; r < hn * QBK; r++) th.mst[r] = -INFINITY, th.lst[r] = V_ZERO();
#ifdef BF16_AMX
    /* Head by head, each software-pipelined (the key tiles shared through
     * the caches), where that beats the plain loop's one key tile load for
     * all heads (paired, forward): one head; 4 or more (the study's MQA
     * items of 8 heads 0.94x the time, 4 heads of 32 at B 32 T 197 0.92x); or
     * rows that see more than ORES_MIN_KEYS keys (T 1024 with 2 heads
     * 0.96x, 3 heads 0.88x). Items of 2 or 3 heads over fewer keys stay
     * plain: pipelined, 2 heads of 32 or 64 at T 256 took 1.07-1.08x, 3 of
     * 64 1.01-1.03x. Both give the same bits. */
    if (pipelined && (hn == 1 || hn >= 4 || kend > ORES_MIN_KEYS)) {
        fwd_item_fn *item = dvp <= 64 && kend > ORES_MIN_KEYS ? fwd_item_amx_ores : fwd_item_amx1;
        for (int hh = 0; hh < hn; hh++) {
            float *oi = o + ((size_t)b * T + i0) * s->ldo + (size_t)(h0 + hh) * s->dv; /* the head's o rows */
            item(f, softmax, causal, T, i0, m, kend, kmul, th.qr + (size_t)hh * QBK * dkp, dkp, ku, vu, dvp, th.S,
                 th.S + (size_t)RB * KT, th.P, th.P + (size_t)RB * KT, th.mst + (size_t)hh * QBK,
                 th.lst + (size_t)hh * QBK, th.Oacc + (size_t)hh * QBK * dvp, oi, s->ldo, s->dv,
                 !o_rows_streamable(s, o));
        }
        fwd_rows_done(s, softmax, b, h0, hn, i0, m, th.mst, th.lst, th.Oacc, dvp, o, lse);
        return;
    }
#endif
    for (int j0 = 0; j0 < kend; j0 += KT) {
        const uint16_t *ktile = ku + (size_t)(j0 / KT) * dkp * KT, *vtile = vu + (size_t)(j0 / KT) * KT * dvp;
        for (int r0 = 0; r0 < m; r0 += RB) {
            const int R = imin(RB, m - r0), ia = i0 + r0;
            const int nk = keys_seen(T, causal, j0, ia, R);
            if (nk <= 0) continue; /* every row of the block is before the tile */
            /* S_h[R, KT] = Q_h rows (bf16) . K_tile^T (bf16), every head against the one tile */
            bmm(hn, R, tile_cols(nk), dkp, th.qr + (size_t)r0 * dkp, dkp, (long)QBK * dkp, ktile, 2 * KT, th.S, KT,
                (long)RB * KT, 0);
            const fstep st = {j0, r0, R, nk};
            for (int hh = 0; hh < hn; hh++)
                for (int r = 0; r < R; r++)
                    fwd_row1(f, softmax, causal, st, i0, r, th.S + (size_t)hh * RB * KT, th.P + (size_t)hh * RB * KT,
                             kmul, th.mst + (size_t)hh * QBK, th.lst + (size_t)hh * QBK,
                             th.Oacc + (size_t)hh * QBK * dvp, dvp, NULL);
            /* O_h rows (rescaled above where the running max moved) += P_h (bf16) . V_tile (bf16) */
            bmm(hn, R, dvp, tile_keys(nk), th.P, KT, (long)RB * KT, vtile, 2 * dvp, th.Oacc + (size_t)r0 * dvp, dvp,
                (long)QBK * dvp, j0 > 0);
        }
    }
    fwd_rows_done(s, softmax, b, h0, hn, i0, m, th.mst, th.lst, th.Oacc, dvp, o, lse);
}

/* q[B*T, ldq] k[B*T, ldk] v[B*T, ldv] -> o[B*T, ldo] (head columns only), lse[B, H, T]
 *
 * Where the units are the threads' own (own_units): each thread takes a
 * unit, packs its key tiles (kT, vp, rounded) and runs its query blocks,
 * latest first (fwd_item). Else all threads pack every unit's key tiles
 * first, then take the work items in turn (by unit or query blocks
 * outer). */
void BSFX(al_attn_fwd)(const al_attn_shape *s, const float *q, const float *k, const float *v, float *o, float *lse,
                       float *ws, int nthr) {
    const int G = s->G;
    const score_fn f = al_score_fn_of(s);
    const int softmax = f.kind == AL_SCORE_SOFTMAX;
    const float kmul = softmax ? s->scale * 1.44269504088896341f : s->scale;
    assert(!softmax || !(kmul < 0.0f)); /* softmax rows take the max of the unscaled scores */
    const bfwd_plan pl = bfwd_plan_of(s, nthr);
    const int ntile = pl.ntile, nqb = pl.nqb, nch = pl.nch, hpc = pl.hpc, dkp = pl.dkp, dvp = pl.dvp;
    float *cur = ws;
    uint16_t *kT = take16(&cur, pl.n_k), *vp = take16(&cur, pl.n_v);
    float *const thr_base = cur;
#pragma omp parallel num_threads(nthr)
    {
        const unsigned csr = al_ftz_on();
        BF16_THREAD_BEGIN();
        float *tc = thr_base + (size_t)omp_get_thread_num() * pl.per_thr;
        bfwd_thread th;
        th.qr = take16(&tc, (size_t)hpc * QBK * dkp);
        th.S = take(&tc, (size_t)imax(2, hpc) * RB * KT);     /* two blocks for fwd_item_amx1 */
        th.P = take16(&tc, (size_t)imax(2, hpc) * RB * KT);   /* two blocks for fwd_item_amx1 */
        th.Oacc = take(&tc, (size_t)hpc * QBK * dvp), th.mst = take(&tc, (size_t)hpc * QBK);
        th.lst = (vf *)take(&tc, (size_t)hpc * QBK * KW);
        if (pl.own) {
            uint16_t *ku = take16(&tc, pl.unit_k), *vu = take16(&tc, pl.unit_v);
#pragma omp for schedule(dynamic, 1)
            for (long u = 0; u < (long)s->B * G; u++) {
                const int b = (int)(u / G), g = (int)(u % G);
                pack_unit(s, k, v, b, g, ntile, dkp, dvp, ku, vu, NULL, NULL);
                for (int qb = nqb - 1; qb >= 0; qb--) fwd_item(s, &f, kmul, &pl, b, g, 0, qb, q, ku, vu, th, o, lse);
            }
        } else {
            pack_tiles(s, k, v, ntile, dkp, dvp, kT, vp, NULL, NULL);
#pragma omp for schedule(dynamic, 1)
            for (long it = 0; it < pl.items; it++) {
                /* latest (largest) query blocks first; by unit: a unit's query blocks in turn */
                const int qb = nqb - 1 - (int)(pl.by_unit ? it % nqb : it / pl.per_qb);
                const long rest = pl.by_unit ? it / nqb : it % pl.per_qb;
                const int ch = (int)(rest % nch), g = (int)((rest / nch) % G), b = (int)(rest / ((long)nch * G));
                const size_t toff = (size_t)((long)b * G + g) * ntile;
                fwd_item(s, &f, kmul, &pl, b, g, ch, qb, q, kT + toff * dkp * KT, vp + toff * KT * dvp, th, o, lse);
            }
        }
        _mm_sfence(); /* fwd_rows_done's streaming stores, before the threads join */
        BF16_THREAD_END();
        al_ftz_restore(csr);
    }
}

/* ---- backward ---- */

/* the backward's row r of a block of query rows from ia of one head
 * against the key tile from j0 (nk keys visible to the block's last row):
 * its P, dS rows (bf16, at prow, dsrow) from S, dP */
static inline __attribute__((always_inline)) void bwd_row_at(const score_fn *f, int causal, int softmax,
                                                             const float *S, const float *dP, uint16_t *prow,
                                                             uint16_t *dsrow, int r, int ia, int j0, int nk,
                                                             float kmul, const float *lse_h, const float *D_h,
                                                             float scale) {
    const int nv = causal ? imax(0, imin(nk, ia + r - j0 + 1)) : nk;
    if (softmax && nv >= KT) {
        row_bwd_p16_softmax_full(S + (size_t)r * KT, dP + (size_t)r * KT, prow, dsrow, kmul,
                                 lse_h[ia + r] * 1.44269504088896341f, D_h[ia + r], scale);
        return;
    }
    row_bwd_p16(f, S + (size_t)r * KT, dP + (size_t)r * KT, prow, dsrow, nv, kmul,
                softmax ? lse_h[ia + r] * 1.44269504088896341f : 0.0f, softmax ? D_h[ia + r] : 0.0f, scale);
}

#ifdef BF16_AMX
#if defined(__AVX512BF16__) && AL_VW == 16
/* Rows r, r + 1 of a block that both see the whole key tile, softmax: the
 * operations of row_bwd_p16_softmax_full on each (the same bits), both
 * rows' weights and dS rounded together (vcvtne2ps2bf16 of the two rows'
 * vectors), their words interleaved in the register into the pairs of P2
 * and dS2, and dS's rows stored from the same conversion: the block's P
 * rows are not written and no pass interleaves them afterwards. */
static inline __attribute__((always_inline)) void pair_bwd_softmax_full(const float *restrict s,
                                                                        const float *restrict dp,
                                                                        uint16_t *restrict ds0,
                                                                        uint16_t *restrict ds1,
                                                                        uint16_t *restrict p2,
                                                                        uint16_t *restrict ds2, float mul,
                                                                        float lse0, float lse1, float D0, float D1,
                                                                        float scale) {
    const __m512i il = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                                        21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    const vf vmul = V_SET1(mul), vnl0 = V_SET1(-lse0), vnl1 = V_SET1(-lse1), vs = V_SET1(scale);
    const vf vnds0 = V_SET1(-(D0 * scale)), vnds1 = V_SET1(-(D1 * scale));
#pragma GCC unroll 4
    for (int c = 0; c < RV; c++) {
        const vf w0 = v_exp2_w(V_FMA(V_LOAD(s + c * KW), vmul, vnl0));
        const vf w1 = v_exp2_w(V_FMA(V_LOAD(s + KT + c * KW), vmul, vnl1));
        const vf d0 = v_ds_softmax(w0, V_LOAD(dp + c * KW), vs, vnds0);
        const vf d1 = v_ds_softmax(w1, V_LOAD(dp + KT + c * KW), vs, vnds1);
        const __m512i pw = (__m512i)_mm512_cvtne2ps_pbh(w1, w0), dw = (__m512i)_mm512_cvtne2ps_pbh(d1, d0);
        _mm512_storeu_si512(p2 + 2 * c * KW, _mm512_permutexvar_epi16(il, pw));
        _mm512_storeu_si512(ds2 + 2 * c * KW, _mm512_permutexvar_epi16(il, dw));
        _mm256_storeu_si256((__m256i *)(ds0 + c * KW), _mm512_castsi512_si256(dw));
        _mm256_storeu_si256((__m256i *)(ds1 + c * KW), _mm512_extracti64x4_epi64(dw, 1));
    }
}
#endif

/* The pipelined backward's rows r, r + 1 of a block (r even; r + 1 = R:
 * a row past T, zeros): dS rows at dsb (the block's first row, rows lds
 * apart: the dq product's A), P and dS as pairs along the rows at p2, ds2
 * (the dV^T, dK^T products' B) straight from the rows, where the plain loop
 * writes P, dS rows and interleaves them per query block
 * (interleave_pairs): the same values. ptmp: two rows of scratch. */
static inline __attribute__((always_inline)) void bwd_pair1(const score_fn *f, int causal, int softmax,
                                                            const float *S, const float *dP, uint16_t *dsb,
                                                            long lds, uint16_t *p2, uint16_t *ds2, uint16_t *ptmp,
                                                            int r, int R, int ia, int j0, int nk, float kmul,
                                                            const float *lse_h, const float *D_h, float scale) {
    uint16_t *ds0 = dsb + (size_t)r * lds, *ds1 = ds0 + lds;
    const int two = r + 1 < R;
#if defined(__AVX512BF16__) && AL_VW == 16
    if (softmax && two && (!causal || ia + r - j0 + 1 >= KT) && nk >= KT) { /* both rows see all KT keys */
        pair_bwd_softmax_full(S + (size_t)r * KT, dP + (size_t)r * KT, ds0, ds1, p2, ds2, kmul,
                              lse_h[ia + r] * 1.44269504088896341f, lse_h[ia + r + 1] * 1.44269504088896341f,
                              D_h[ia + r], D_h[ia + r + 1], scale);
        return;
    }
#endif
    bwd_row_at(f, causal, softmax, S, dP, ptmp, ds0, r, ia, j0, nk, kmul, lse_h, D_h, scale);
    if (two) bwd_row_at(f, causal, softmax, S, dP, ptmp + KT, ds1, r + 1, ia, j0, nk, kmul, lse_h, D_h, scale);
    else memset(ptmp + KT, 0, sizeof(uint16_t) * KT), memset(ds1, 0, sizeof(uint16_t) * KT);
    interleave_pairs(p2, ptmp, KT, 2, KT);
    interleave_pairs(ds2, ds0, (int)lds, 2, KT);
}
#endif

/* Key tiles whose dq product runs as one (DQ_TILES; 0: every block's at
 * once, per tile). dq_sums += dS K reduces over keys, but the loop is key
 * tile outer, so each 16-row block's product had K = 64 and loaded and
 * stored its C tiles (4 KB each way) around 8 tile products. On AMX the
 * dS rows of DQ_TILES tiles are kept (dS [hpc][Tq][DQ_TILES x KT]) and the
 * group's product runs at its last tile, K up to DQ_TILES x KT with C in
 * the tiles throughout: the same K steps added in the same order, and C's
 * round trips return the same values, so the same bits. Paired against
 * per-block products (H 12, d_h 64, causal): the backward 0.953-0.955x
 * the time at T 1024, 0.964x at T 512, 0.953x at T 2048, 0.981x at T 4096,
 * 0.972x at B 4 T 256. Larger groups were slower at T 1024 (3 and 4
 * tiles 1.02x and 1.04x the time of 2, 8 and 16 tiles 1.05x and 1.12x of
 * 4: the kept rows outgrow L2). The vector sets keep the product per block
 * (not measured on their CPUs). */
#ifdef BF16_AMX
enum { DQ_TILES = 2 };
#else
enum { DQ_TILES = 0 };
#endif

/* The backward's work split (score_kern.h's) and workspace: kT | vT | k2
 * (bf16; none where an item is a whole unit, own) | D[B][H][T] (softmax) |
 * part (several chunks per group) | per thread, for the item's hpc heads
 * (Tq = T rounded up to QBK): Q rows [hpc][Tq][dkp] and Q^T rows
 * [hpc][dkp][Tq], dO rows [hpc][Tq][dvp] and dO^T rows [hpc][dvp][Tq]
 * (bf16, A operands), the item's dq sums [hpc][Tq][dkp] (fp32), S, dP
 * [hpc][RB][KT], P rows [hpc][QBK][KT] and dS rows
 * [hpc][ds_rows][ds_ld] (bf16; see DQ_TILES), P and dS of the tile as
 * pairs along rows [hpc][Tq/2][KT][2] (bf16), the key tile's dK^T, dV^T
 * sums [dkp][KT], [dvp][KT] and the same transposed [KT][dkp], [KT][dvp]
 * (fp32), and where own the item's unit's kT | vT | k2: the thread packs
 * the tiles it reads, which then come from its own caches, not the other
 * threads' or L3 (own_units' reason; paired on AMX: the backward 0.84x the
 * time at gpt2's shape, B 4 T 256 H 12 d_h 64, 0.87x at the study LMs',
 * 0.83x at the ViT's, 0.95x with 4 KV groups, 0.99x at B 1 T 1024 H 12). */
typedef struct bbwd_plan {
    int ntile, nqb, nch, hpc, dkp, dvp, tq, own;
    int dq_tiles, ds_rows, ds_ld; /* key tiles per dq product (0: one per block), dS rows a head, their length */
    long ntiles_all, items;
    size_t n_k, n_vt, n_d, n_part, per_thr, floats; /* n_k, n_vt: bf16 values */
} bbwd_plan;

static bbwd_plan bbwd_plan_of(const al_attn_shape *s, int nthr) {
    bbwd_plan p;
    const int B = s->B, T = s->T, G = s->G, pg = s->H / G;
    p.dkp = up_kp(s->dk), p.dvp = up_kp(s->dv);
    p.ntile = (T + KT - 1) / KT, p.nqb = (T + QBK - 1) / QBK, p.tq = p.nqb * QBK;
    split_heads(pg, (long)B * G, 8, &p.nch, &p.hpc);
    p.ntiles_all = (long)B * G * p.ntile, p.items = (long)B * G * p.nch;
    p.own = own_allowed && p.nch == 1; /* an item is a whole unit: it packs the unit's key tiles itself */
    p.dq_tiles = DQ_TILES ? imin(DQ_TILES, p.ntile) : 0;
    p.ds_rows = p.dq_tiles ? p.tq : QBK, p.ds_ld = p.dq_tiles ? p.dq_tiles * KT : KT;
    p.n_k = p.own ? 0 : (size_t)p.ntiles_all * p.dkp * KT, p.n_vt = p.own ? 0 : (size_t)p.ntiles_all * p.dvp * KT;
    p.n_d = s->score == AL_SCORE_SOFTMAX ? (size_t)B * s->H * T : 0;
    p.n_part = p.nch > 1 ? (size_t)B * G * p.nch * T * ((size_t)s->dk + s->dv) : 0;
    const size_t h = (size_t)p.hpc, kd = (size_t)KT * p.dkp, vd = (size_t)KT * p.dvp;
    p.per_thr = 2 * up16(h * p.tq * p.dkp / 2) + 2 * up16(h * p.tq * p.dvp / 2) + up16(h * p.tq * p.dkp) +
                2 * up16((size_t)imax(2, p.hpc) * RB * KT) + up16(h * QBK * KT / 2) +
                up16((h * p.ds_rows * p.ds_ld + 1) / 2) + 2 * up16(h * p.tq * KT / 2) +
                2 * up16(kd) + 2 * up16(vd);
    if (p.own) p.per_thr += 2 * up16(((size_t)p.ntile * kd + 1) / 2) + up16(((size_t)p.ntile * vd + 1) / 2);
    p.floats = 2 * up16((p.n_k + 1) / 2) + up16((p.n_vt + 1) / 2) + up16(p.n_d) + up16(p.n_part) +
               (size_t)nthr * p.per_thr;
    return p;
}

size_t BSFX(al_attn_bwd_floats)(const al_attn_shape *s, int nthr) { return bbwd_plan_of(s, nthr).floats; }

/* Where query row i (of the block from i0) of head hh puts its dS row
 * against key tile `tile`: grouped (pl->dq_tiles), row i of all Tq, at the
 * tile's columns in its group from tile g0; else row i - i0 of the block */
static inline uint16_t *ds_row(const bbwd_plan *pl, uint16_t *dS, int hh, int i, int i0, int tile, int g0) {
    const size_t row = pl->dq_tiles ? (size_t)i : (size_t)(i - i0);
    return dS + ((size_t)hh * pl->ds_rows + row) * pl->ds_ld + (pl->dq_tiles ? (size_t)(tile - g0) * KT : 0);
}

/* dq_sums rows += dS . K over the key tiles g0 .. g1 for every 16-row block
 * that sees g0 (grouped dS rows, K the unit's key rows as pairs k2u): each
 * block's K is its tiles' keys, the last seen tile's cut as the per-tile
 * product cut it (tile_keys), so the K steps are those of the per-tile
 * products, in their order. */
static void dq_group(const bbwd_plan *pl, int T, int causal, int hn, int g0, int g1, const uint16_t *dS,
                     const uint16_t *k2u, float *dqs) {
    const int tq = pl->tq, dkp = pl->dkp;
    for (int qb = causal ? g0 * KT / QBK : 0; qb < pl->nqb; qb++) {
        const int i0 = qb * QBK, m = imin(QBK, T - i0);
        for (int r0 = 0; r0 < m; r0 += RB) {
            const int R = imin(RB, m - r0), ia = i0 + r0;
            const int tl = causal ? imin(g1, (ia + R - 1) / KT) : g1; /* the last tile the block sees */
            const int K = (tl - g0) * KT + tile_keys(keys_seen(T, causal, tl * KT, ia, R));
            const long ld = pl->ds_ld;
            bmm(hn, R, dkp, K, dS + (size_t)ia * ld, ld, (long)tq * ld, k2u + (size_t)g0 * KT * dkp, 2 * dkp,
                dqs + (size_t)ia * dkp, dkp, (long)tq * dkp, 1);
        }
    }
}

/* dst[j][e] = src[e][j], e < ne, j < nj (fp32): a key tile's dK^T or dV^T
 * sums into the rows tile_grads_out reads, once per tile and item */
static void transpose_f32(float *restrict dst, int ldd, const float *restrict src, int lds, int ne, int nj) {
#if AL_VW == 16
    if (ne % 16 == 0 && nj % 16 == 0) { /* in 16 x 16 blocks, in registers */
        __m512i x[16];
        for (int e0 = 0; e0 < ne; e0 += 16)
            for (int j0 = 0; j0 < nj; j0 += 16) {
                for (int i = 0; i < 16; i++) x[i] = _mm512_loadu_si512(src + (size_t)(e0 + i) * lds + j0);
                tr16(x);
                for (int i = 0; i < 16; i++) _mm512_storeu_si512(dst + (size_t)(j0 + i) * ldd + e0, x[i]);
            }
        return;
    }
#endif
    for (int j = 0; j < nj; j++)
        for (int e = 0; e < ne; e++) dst[(size_t)j * ldd + e] = src[(size_t)e * lds + j];
}

#if AL_VW == 16
/* A key tile's dK (or dV) rows streamed straight from its transposed sums
 * src [d..][KT] (the products' C, rows KT floats apart) to dst (the tile's
 * first row, rows ld apart): 16 x 16 blocks transposed in registers, each
 * row's piece one whole line, the rows' lines in turn. Where
 * grads_streamed, in place of transpose_f32 and tile_grads_out, whose
 * transposed copy was written and read again (the backward 0.968x the
 * time at H 12 T 1024 d_h 64, AMX, paired, 9 of 12 pairs faster). d a
 * multiple of 16, nkt <= KT keys (the sums' columns up to tile_cols(nkt)
 * are read). */
static void grads_stream_tr(float *restrict dst, long ld, const float *restrict src, int d, int nkt) {
    __m512i x[16];
    for (int j0 = 0; j0 < nkt; j0 += 16) {
        const int nj = imin(16, nkt - j0);
        for (int e0 = 0; e0 < d; e0 += 16) {
            for (int i = 0; i < 16; i++) x[i] = _mm512_loadu_si512(src + (size_t)(e0 + i) * KT + j0);
            tr16(x);
            for (int i = 0; i < nj; i++) _mm512_stream_ps(dst + (size_t)(j0 + i) * ld + e0, _mm512_castsi512_ps(x[i]));
        }
    }
}
#endif

/* q, k, v, o as forward, lse[B, H, T] (softmax only), dout[B*T, ldo]
 *   -> dq[B*T, ldq], dk[B*T, ldk], dv[B*T, ldv], accumulated
 *
 * score_kern.h's backward with bf16 operands: packs kT, vT, k2 (all
 * threads, or each item its unit's where the items are whole units); an
 * item (sequence, KV group, chunk of heads) rounds its heads' Q and dO
 * into rows and transposed rows and computes their D_i = dO_i . O_i (fp32)
 * while the dO rows are in the caches (where all threads computed every
 * D first, reading dO from memory twice: the backward 0.957x the time at
 * H 12 T 1024 d_h 64 on AMX, paired, 9 of 10 pairs faster), then runs key
 * tile outer:
 * per block of RB query rows, S = Q K^T and dP = dO V^T for every head of
 * the chunk (the tile shared), P and dS (row_bwd, fp32) rounded to bf16,
 * dq_sums += dS K (the tile shared; on AMX per DQ_TILES tiles, dq_group);
 * P and dS of each query block laid out as pairs along the rows (on AMX
 * the pipelined path, one head at a time with the next (block, head)'s S
 * and dP issued beside the rows, writes them so from its rows, bwd_pair1:
 * paired against the plain loop for items of 2-4 heads, the backward
 * 0.97-1.00x the time at B 1 T 1024 H 12 G 4 d_h 64, 0.936x at B 4 T 256,
 * 0.975x / 0.956x at the study's GQA / MQA shapes); at the tile's end, per
 * head, dV^T += dO^T P and dK^T += Q^T dS over all the tile's query rows
 * (rows past T are 0): the products reduce over query rows with their A
 * operands packed once per item, so nothing is transposed per block, and
 * their accumulators stay in tiles over the whole reduction. The tile's
 * dK, dV (the sums transposed) then go out; at the item's end dq +=
 * dq_sums. Every row of a query block at or after the tile sees some of it
 * (KT = QBK), so causal blocks start at the tile's own. */
void BSFX(al_attn_bwd)(const al_attn_shape *s, const float *q, const float *k, const float *v, const float *o,
                       const float *lse, const float *dout, float *dq, float *dk, float *dv, float *ws, int nthr) {
    const int T = s->T, H = s->H, G = s->G, DK = s->dk, DV = s->dv, pg = H / G;
    const int causal = !s->bidirectional;
    const score_fn f = al_score_fn_of(s);
    const int softmax = f.kind == AL_SCORE_SOFTMAX;
    const float kmul = softmax ? s->scale * 1.44269504088896341f : s->scale;
    assert(!softmax || !(kmul < 0.0f)); /* softmax rows take the max of the unscaled scores */
    const bbwd_plan pl = bbwd_plan_of(s, nthr);
    const int ntile = pl.ntile, nqb = pl.nqb, nch = pl.nch, hpc = pl.hpc, dkp = pl.dkp, dvp = pl.dvp, tq = pl.tq;
    const int shared = nch > 1;
    /* dq written past the caches where overwritten and whole aligned vectors (tile_grads_out's reason) */
    const int dq_stream = s->grads_overwrite && rows_streamable(dq, s->ldq, DK);
#if AL_VW == 16
    const int kv_stream = grads_streamed(s, nch, dk, dv); /* dk, dv rows straight from the sums (grads_stream_tr) */
#endif
    float *cur = ws;
    uint16_t *kT = take16(&cur, pl.n_k), *vT = take16(&cur, pl.n_vt), *k2 = take16(&cur, pl.n_k);
    float *Dall = take(&cur, pl.n_d), *part = take(&cur, pl.n_part);
    float *const thr_base = cur;
#pragma omp parallel num_threads(nthr)
    {
        const unsigned csr = al_ftz_on();
        BF16_THREAD_BEGIN();
        if (!pl.own) pack_tiles(s, k, v, ntile, dkp, dvp, kT, NULL, vT, k2);
        float *tc = thr_base + (size_t)omp_get_thread_num() * pl.per_thr;
        uint16_t *qr = take16(&tc, (size_t)hpc * tq * dkp), *qT = take16(&tc, (size_t)hpc * tq * dkp);
        uint16_t *dr = take16(&tc, (size_t)hpc * tq * dvp), *dT = take16(&tc, (size_t)hpc * tq * dvp);
        float *dqs = take(&tc, (size_t)hpc * tq * dkp);
        float *S = take(&tc, (size_t)imax(2, hpc) * RB * KT); /* two blocks each for the pipelined path */
        float *dP = take(&tc, (size_t)imax(2, hpc) * RB * KT);
        uint16_t *P = take16(&tc, (size_t)hpc * QBK * KT), *dS = take16(&tc, (size_t)hpc * pl.ds_rows * pl.ds_ld);
        uint16_t *P2 = take16(&tc, (size_t)hpc * tq * KT), *dS2 = take16(&tc, (size_t)hpc * tq * KT);
        float *dKT = take(&tc, (size_t)KT * dkp), *dVT = take(&tc, (size_t)KT * dvp);
        float *dKa = take(&tc, (size_t)KT * dkp), *dVa = take(&tc, (size_t)KT * dvp);
        uint16_t *ukT = NULL, *uvT = NULL, *uk2 = NULL; /* the unit's key tiles, where the thread packs them */
        if (pl.own) {
            ukT = take16(&tc, (size_t)ntile * KT * dkp), uvT = take16(&tc, (size_t)ntile * KT * dvp);
            uk2 = take16(&tc, (size_t)ntile * KT * dkp);
        }
#pragma omp for schedule(dynamic, 1)
        for (long it = 0; it < pl.items; it++) {
            const int ch = (int)(it % nch), g = (int)((it / nch) % G), b = (int)(it / ((long)nch * G));
            const int h0 = g * pg + ch * hpc, hn = imin(hpc, pg - ch * hpc);
            for (int hh = 0; hh < hn; hh++) {
                const float *qh = q + (size_t)b * T * s->ldq + (size_t)(h0 + hh) * DK;
                const float *dh = dout + (size_t)b * T * s->ldo + (size_t)(h0 + hh) * DV;
                pack16_rows_trows(qr + (size_t)hh * tq * dkp, qT + (size_t)hh * tq * dkp, qh, s->ldq, T, tq, DK, dkp);
                pack16_rows_trows(dr + (size_t)hh * tq * dvp, dT + (size_t)hh * tq * dvp, dh, s->ldo, T, tq, DV, dvp);
                /* D_t = dO_t . O_t (fp32), the head's dO rows just read, in the caches */
                if (softmax) softmax_D_head(s, o, dout, b, h0 + hh, Dall + ((size_t)b * H + h0 + hh) * T);
            }
            memset(dqs, 0, sizeof(float) * (size_t)hn * tq * dkp);
            /* the unit's key tiles from its tile 0: the thread's own (packed here) or the shared ones */
            const uint16_t *kTu = ukT, *vTu = uvT, *k2u = uk2;
            if (pl.own) pack_unit(s, k, v, b, g, ntile, dkp, dvp, ukT, NULL, uvT, uk2);
            else {
                const size_t uoff = (size_t)((long)b * G + g) * ntile;
                kTu = kT + uoff * dkp * KT, vTu = vT + uoff * dvp * KT, k2u = k2 + uoff * KT * dkp;
            }
            int g0 = 0; /* the first key tile of the dq product's group */
#ifdef BF16_AMX
            int ready = 0; /* fwd_item_amx1's pipeline: S, dP of the block are made */
            float *Sc = S, *Sn = S + (size_t)RB * KT, *dPc = dP, *dPn = dP + (size_t)RB * KT;
#endif
            for (int tile = 0; tile < ntile; tile++) {
                const int j0 = tile * KT, nkt = imin(KT, T - j0), ncols = tile_cols(nkt);
                const uint16_t *ktile = kTu + (size_t)tile * dkp * KT, *vtile = vTu + (size_t)tile * dvp * KT;
                const uint16_t *krows = k2u + (size_t)tile * KT * dkp;
                const int qb0 = causal ? j0 / QBK : 0, iq0 = qb0 * QBK;
                tile_grads_prefetch(s, b, g, ch, nch, j0, nkt, part, dk, dv);
                for (int qb = qb0; qb < nqb; qb++) {
                    const int i0 = qb * QBK, m = imin(QBK, T - i0);
                    for (int r0 = 0; r0 < m; r0 += RB) {
                        const int R = imin(RB, m - r0), ia = i0 + r0;
                        const int nk = keys_seen(T, causal, j0, ia, R);
#ifdef BF16_AMX
                        if (pipelined) {
                            /* software-pipelined as fwd_item_amx1, one head at a time: S, dP of the next
                             * (block, head) (this block's next head, else the next block's first, in the
                             * next tile after the last) with this one's rows between */
                            for (int hh = 0; hh < hn; hh++) {
                                const uint16_t *qh = qr + (size_t)hh * tq * dkp, *dh = dr + (size_t)hh * tq * dvp;
                                if (!ready) {
                                    bmm(1, R, tile_cols(nk), dkp, qh + (size_t)ia * dkp, dkp, 0, ktile, 2 * KT, Sc, KT,
                                        0, 0);
                                    bmm(1, R, tile_cols(nk), dvp, dh + (size_t)ia * dvp, dvp, 0, vtile, 2 * KT, dPc, KT,
                                        0, 0);
                                    __asm__ volatile("" ::: "memory"); /* the tile stores before the rows read them */
                                }
                                int nh = hh + 1, nt = tile, nqb_ = qb, nr0 = r0; /* the next (block, head) */
                                if (nh == hn) {
                                    nh = 0, nr0 = r0 + RB;
                                    if (nr0 >= m) nr0 = 0, nqb_++;
                                    if (nqb_ >= nqb) nt++, nqb_ = causal ? nt * KT / QBK : 0;
                                }
                                ready = nt < ntile;
                                const float *lse_h = softmax ? lse + ((size_t)b * H + h0 + hh) * T : NULL;
                                const float *D_h = softmax ? Dall + ((size_t)b * H + h0 + hh) * T : NULL;
                                int pend = 0; /* this block's rows done */
                                const size_t prow = (size_t)hh * tq + (size_t)(i0 - iq0 + r0);
                                uint16_t *p2 = P2 + prow * KT, *ds2 = dS2 + prow * KT;
                                uint16_t *dsb = ds_row(&pl, dS, hh, ia, i0, tile, g0);
#define BROWS()                                                                                                     \
    for (int u = 0; u < per && pend < R; u++, pend += 2)                                                           \
    bwd_pair1(&f, causal, softmax, Sc, dPc, dsb, pl.ds_ld, p2 + (size_t)pend * KT, ds2 + (size_t)pend * KT, P, pend, \
              R, ia, j0, nk, kmul, lse_h, D_h, s->scale)
                                if (ready) {
                                    /* row pairs per slot: AMX_C64_WITH has 5 (dkp + dvp) / KP slots for the two */
                                    const int per = ((R + 1) / 2 * KP + 5 * (dkp + dvp) - 1) / (5 * (dkp + dvp));
                                    const int ian = nqb_ * QBK + nr0, Rn = imin(RB, imin(QBK, T - nqb_ * QBK) - nr0);
                                    const int ncn = tile_cols(keys_seen(T, causal, nt * KT, ian, Rn));
                                    const uint16_t *kn = kTu + (size_t)nt * dkp * KT, *vn = vTu + (size_t)nt * dvp * KT;
                                    const uint16_t *qn = qr + (size_t)nh * tq * dkp, *dn = dr + (size_t)nh * tq * dvp;
                                    AMX_C64_WITH(qn + (size_t)ian * dkp, dkp, kn, 2 * KT, dkp, ncn, Sn, KT, BROWS());
                                    AMX_C64_WITH(dn + (size_t)ian * dvp, dvp, vn, 2 * KT, dvp, ncn, dPn, KT, BROWS());
                                }
#undef BROWS
                                for (; pend < R; pend += 2)
                                    bwd_pair1(&f, causal, softmax, Sc, dPc, dsb, pl.ds_ld, p2 + (size_t)pend * KT,
                                              ds2 + (size_t)pend * KT, P, pend, R, ia, j0, nk, kmul, lse_h, D_h,
                                              s->scale);
                                float *t = Sc;
                                Sc = Sn, Sn = t, t = dPc, dPc = dPn, dPn = t;
                            }
                        } else
#endif
                        {
                            /* S_h = Q_h rows K_tile^T ; dP_h = dO_h rows V_tile^T (bf16 operands, the tile shared) */
                            bmm(hn, R, tile_cols(nk), dkp, qr + (size_t)ia * dkp, dkp, (long)tq * dkp, ktile, 2 * KT,
                                S, KT, (long)RB * KT, 0);
                            bmm(hn, R, tile_cols(nk), dvp, dr + (size_t)ia * dvp, dvp, (long)tq * dvp, vtile, 2 * KT,
                                dP, KT, (long)RB * KT, 0);
                            for (int hh = 0; hh < hn; hh++) {
                                const float *lse_h = softmax ? lse + ((size_t)b * H + h0 + hh) * T : NULL;
                                const float *D_h = softmax ? Dall + ((size_t)b * H + h0 + hh) * T : NULL;
                                for (int r = 0; r < R; r++)
                                    bwd_row_at(&f, causal, softmax, S + (size_t)hh * RB * KT,
                                               dP + (size_t)hh * RB * KT, P + ((size_t)hh * QBK + r0 + r) * KT,
                                               ds_row(&pl, dS, hh, ia + r, i0, tile, g0), r, ia, j0, nk, kmul, lse_h,
                                               D_h, s->scale);
                            }
                        }
                        /* dq_sums_h rows += dS_h (bf16) . K_tile (bf16), the tile shared (grouped: dq_group) */
                        if (!pl.dq_tiles)
                            bmm(hn, R, dkp, tile_keys(nk), dS + (size_t)r0 * KT, KT, (long)QBK * KT, krows, 2 * dkp,
                                dqs + (size_t)ia * dkp, dkp, (long)tq * dkp, 1);
                    }
                    /* the block's P and dS as pairs along its QBK rows (rows past T: 0), after the
                     * tile's earlier blocks: the B operands of the tile's dV^T, dK^T products (the
                     * pipelined path wrote its rows' pairs: the pairs past T are cleared) */
#ifdef BF16_AMX
                    if (pipelined) {
                        const int me = (m + 1) / 2 * 2; /* rows in pairs written */
                        for (int hh = 0; hh < hn; hh++) {
                            const size_t at = ((size_t)hh * tq + (size_t)(i0 - iq0 + me)) * KT;
                            memset(P2 + at, 0, sizeof(uint16_t) * (size_t)(QBK - me) * KT);
                            memset(dS2 + at, 0, sizeof(uint16_t) * (size_t)(QBK - me) * KT);
                        }
                        continue;
                    }
#endif
                    for (int hh = 0; hh < hn; hh++) {
                        uint16_t *ph = P + (size_t)hh * QBK * KT, *dsh = ds_row(&pl, dS, hh, i0, i0, tile, g0);
                        memset(ph + (size_t)m * KT, 0, sizeof(uint16_t) * (size_t)(QBK - m) * KT);
                        for (int r = m; r < QBK; r++) memset(dsh + (size_t)r * pl.ds_ld, 0, sizeof(uint16_t) * KT);
                        const size_t at = ((size_t)hh * tq + (i0 - iq0)) * KT;
                        interleave_pairs(P2 + at, ph, KT, QBK, KT);
                        interleave_pairs(dS2 + at, dsh, pl.ds_ld, QBK, KT);
                    }
                }
                /* dV_tile^T = sum over heads of dO^T P ; dK_tile^T = sum of Q^T dS, over the rows from iq0:
                 * one long product each (its C tiles loaded and stored once, not per query block) */
                for (int hh = 0; hh < hn; hh++) {
                    const size_t at = (size_t)hh * tq * KT;
                    bmm(1, dvp, ncols, tq - iq0, dT + (size_t)hh * tq * dvp + iq0, tq, 0, P2 + at, 2 * KT, dVT, KT, 0,
                        hh > 0);
                    bmm(1, dkp, ncols, tq - iq0, qT + (size_t)hh * tq * dkp + iq0, tq, 0, dS2 + at, 2 * KT, dKT, KT, 0,
                        hh > 0);
                }
#if AL_VW == 16
                if (kv_stream) {
                    float *kr, *vr; /* the tile's first rows of dk, dv */
                    tile_grad_rows(s, b, g, ch, nch, j0, part, dk, dv, &kr, &vr);
                    grads_stream_tr(kr, s->ldk, dKT, DK, nkt);
                    grads_stream_tr(vr, s->ldv, dVT, DV, nkt);
                } else
#endif
                {
                    transpose_f32(dKa, dkp, dKT, KT, dkp, ncols); /* the columns the products made */
                    transpose_f32(dVa, dvp, dVT, KT, dvp, ncols);
                    tile_grads_out(s, b, g, ch, nch, j0, nkt, dKa, dkp, dVa, dvp, part, dk, dv);
                }
                if (pl.dq_tiles && (tile + 1 - g0 == pl.dq_tiles || tile + 1 == ntile)) {
                    dq_group(&pl, T, causal, hn, g0, tile, dS, k2u, dqs);
                    g0 = tile + 1;
                }
            }
            /* dq += (overwrite: =) the item's sums; streamed where dq_stream */
            for (int hh = 0; hh < hn; hh++)
                for (int t = 0; t < T; t++) {
                    float *dqr = dq + ((size_t)b * T + t) * s->ldq + (size_t)(h0 + hh) * DK;
                    const float *src = dqs + ((size_t)hh * tq + t) * dkp;
                    if (dq_stream) row_stream(dqr, src, DK);
                    else row_out(dqr, src, DK, !s->grads_overwrite);
                }
        }
        _mm_sfence(); /* the streaming stores of dq, dk, dv before the threads join */
        BF16_THREAD_END();
        if (shared) al_attn_add_partials(s, part, nch, dk, dv); /* in chunk order */
        al_ftz_restore(csr);
    }
}
