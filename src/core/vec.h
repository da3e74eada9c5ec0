/*
 * vec.h: one vocabulary of float vectors for the SIMD kernels, so that a
 * kernel is written once and compiled once per instruction set (the
 * attention kernels of attn/score_kern.h, the BF16/F16 weight products of
 * nn/wmat_kern.h). The including file sets AL_VEC_WIDTH to 16 (AVX-512: F,
 * BW, DQ, VL) or 8 (AVX2 + FMA + F16C), opens a `#pragma GCC target` for
 * that set (so every inline function here is compiled for it), and then
 * includes this header, once per translation unit. core/cpu.h decides at
 * run time which compiled version runs.
 *
 * Provides:
 *   vf, vmask, AL_VW     the float vector, its lane mask, floats per vector
 *   V_ZERO V_SET1 V_LOAD V_LOADM(p,m) V_STORE V_STOREM(p,m,v) V_ADD V_SUB V_MUL
 *   V_DIV V_FMA(a,b,c)=a*b+c V_MAX V_MIN V_SEL(m,a,b)=m?a:b V_MASK(n) (first n
 *   lanes) V_HMAX V_HSUM V_ROUND (to nearest) V_CMP_POS(x) (x > 0 or NaN)
 *   V_ANY_GT(a,b) (some lane a > b) V_LDEXP(p,n) (p 2^n) V_EXP2_RANGE(x) (the
 *   clamp V_LDEXP needs, or nothing) V_FRAC(x) (x - floor(x), in [0, 1))
 *   V_LDEXP_FLOOR(p,x) (p 2^floor(x); AVX-512: one instruction each)
 *   v_loadn(p, n)        n floats (a whole vector if n >= AL_VW; lanes past n 0)
 *   V_LOAD_BF16(p) V_LOADN_BF16(p, n)   BF16 values widened (the first n)
 *   v_load16(p, n, f16)  n BF16 (or F16) values widened, like v_loadn
 *   v_sum_lanes(a), V_SUM_SLOT(j)       AL_VW horizontal sums in one vector
 * Partial loads never read past their n values.
 */
#ifndef AL_VEC_H
#define AL_VEC_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#if AL_VEC_WIDTH == 16

typedef __m512 vf;
typedef __mmask16 vmask;
typedef __m256i vhalf; /* AL_VW 16-bit values */
#define AL_VW 16

/* the first n lanes (n <= 0: none, n >= 16: all) */
static inline vmask v_mask16(int n) { return (vmask)(n >= 16 ? 0xffffu : n <= 0 ? 0u : (1u << n) - 1u); }

#define V_ZERO() _mm512_setzero_ps()
#define V_SET1(x) _mm512_set1_ps(x)
#define V_LOAD(p) _mm512_loadu_ps(p)
#define V_LOADM(p, m) _mm512_maskz_loadu_ps((m), (p))
#define V_STORE(p, v) _mm512_storeu_ps((p), (v))
#define V_STOREM(p, m, v) _mm512_mask_storeu_ps((p), (m), (v))
#define V_ADD(a, b) _mm512_add_ps((a), (b))
#define V_SUB(a, b) _mm512_sub_ps((a), (b))
#define V_MUL(a, b) _mm512_mul_ps((a), (b))
#define V_DIV(a, b) _mm512_div_ps((a), (b))
#define V_FMA(a, b, c) _mm512_fmadd_ps((a), (b), (c))
#define V_MAX(a, b) _mm512_max_ps((a), (b))
#define V_MIN(a, b) _mm512_min_ps((a), (b))
#define V_SEL(m, a, b) _mm512_mask_blend_ps((m), (b), (a))
#define V_MASK(n) v_mask16(n)
#define V_HMAX(v) _mm512_reduce_max_ps(v)
#define V_HSUM(v) _mm512_reduce_add_ps(v)
#define V_ROUND(x) _mm512_roundscale_ps((x), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define V_CMP_POS(x) _mm512_cmp_ps_mask((x), _mm512_setzero_ps(), _CMP_NLE_UQ)
#define V_ANY_GT(a, b) (_mm512_cmp_ps_mask((a), (b), _CMP_GT_OQ) != 0)
#define V_LDEXP(p, n) _mm512_scalef_ps((p), (n))
#define V_EXP2_RANGE(x) (x)
#define V_FRAC(x) _mm512_reduce_ps((x), _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC)
#define V_LDEXP_FLOOR(p, x) _mm512_scalef_ps((p), (x)) /* vscalefps scales by 2^floor(x) */

/* Sums of 16 vectors in one: lane 4L+t holds the sum of a[4t+L] (L: the
 * 128-bit lane) after four rounds of pairwise folds (two shuffles and an add
 * each, 45 ops for 16 horizontal sums). The caller stores key j's vector in
 * slot V_SUM_SLOT(j) so that lane j ends up holding key j's sum. */
static inline __m512 v_sum_lanes(const __m512 *a) {
    __m512 b[8], c[4], d[2];
    for (int i = 0; i < 8; i++) /* b[i] = [a2i.q0+q2, a2i.q1+q3, a2i+1.q0+q2, a2i+1.q1+q3] */
        b[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0x44),
                             _mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0xEE));
    for (int i = 0; i < 4; i++) /* 128-bit lane L of c[i]: 4 partial sums of a[4i+L] */
        c[i] = _mm512_add_ps(_mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], 0x88),
                             _mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], 0xDD));
    for (int i = 0; i < 2; i++)
        d[i] = _mm512_add_ps(_mm512_shuffle_ps(c[2 * i], c[2 * i + 1], 0x44),
                             _mm512_shuffle_ps(c[2 * i], c[2 * i + 1], 0xEE));
    return _mm512_add_ps(_mm512_shuffle_ps(d[0], d[1], 0x88), _mm512_shuffle_ps(d[0], d[1], 0xDD));
}
#define V_SUM_SLOT(j) (4 * ((j) & 3) + ((j) >> 2))

/* 16-bit values: all 16, or the first n (masked: nothing past n is read);
 * widened from BF16 (the top half of a float) or F16 */
#define VH_LOAD(p) _mm256_loadu_si256((const __m256i *)(p))
#define VH_LOADN(p, n) _mm256_maskz_loadu_epi16(v_mask16(n), (p))
#define VH_BF16(h) _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))
#define VH_F16(h) _mm512_cvtph_ps(h)

#elif AL_VEC_WIDTH == 8

typedef __m256 vf;
typedef __m256 vmask; /* all-ones lanes are active */
typedef __m128i vhalf; /* AL_VW 16-bit values */
#define AL_VW 8

/* the first n lanes (n <= 0: none, n >= 8: all) */
static inline vmask v_mask8(int n) {
    return _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
}

/* largest and sum of the 8 lanes (halves, then pairs, then the last two) */
static inline float v_hmax8(__m256 v) {
    __m128 a = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    a = _mm_max_ps(a, _mm_movehl_ps(a, a));
    a = _mm_max_ss(a, _mm_movehdup_ps(a));
    return _mm_cvtss_f32(a);
}

static inline float v_hsum8(__m256 v) {
    __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    a = _mm_add_ps(a, _mm_movehl_ps(a, a));
    a = _mm_add_ss(a, _mm_movehdup_ps(a));
    return _mm_cvtss_f32(a);
}

#define V_ZERO() _mm256_setzero_ps()
#define V_SET1(x) _mm256_set1_ps(x)
#define V_LOAD(p) _mm256_loadu_ps(p)
#define V_LOADM(p, m) _mm256_maskload_ps((p), _mm256_castps_si256(m))
#define V_STORE(p, v) _mm256_storeu_ps((p), (v))
#define V_STOREM(p, m, v) _mm256_maskstore_ps((p), _mm256_castps_si256(m), (v))
#define V_ADD(a, b) _mm256_add_ps((a), (b))
#define V_SUB(a, b) _mm256_sub_ps((a), (b))
#define V_MUL(a, b) _mm256_mul_ps((a), (b))
#define V_DIV(a, b) _mm256_div_ps((a), (b))
#define V_FMA(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#define V_MAX(a, b) _mm256_max_ps((a), (b))
#define V_MIN(a, b) _mm256_min_ps((a), (b))
#define V_SEL(m, a, b) _mm256_blendv_ps((b), (a), (m))
#define V_MASK(n) v_mask8(n)
#define V_HMAX(v) v_hmax8(v)
#define V_HSUM(v) v_hsum8(v)
#define V_ROUND(x) _mm256_round_ps((x), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define V_POW2I(n) \
    _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23))
#define V_CMP_POS(x) _mm256_cmp_ps((x), _mm256_setzero_ps(), _CMP_NLE_UQ)
#define V_ANY_GT(a, b) (_mm256_movemask_ps(_mm256_cmp_ps((a), (b), _CMP_GT_OQ)) != 0)
#define V_LDEXP(p, n) V_MUL((p), V_POW2I(n))
#define V_EXP2_RANGE(x) V_MIN(V_SET1(127.0f), V_MAX(V_SET1(-126.0f), (x)))
#define V_FRAC(x) V_SUB((x), _mm256_floor_ps(x))
#define V_LDEXP_FLOOR(p, x) V_LDEXP((p), _mm256_floor_ps(x))

/* Sums of 8 vectors in one, lane j = the sum of a[j]: two rounds of
 * horizontal adds per half, then the two 128-bit halves added. */
static inline __m256 v_sum_lanes(const __m256 *a) {
    const __m256 x = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
    const __m256 y = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
    return _mm256_add_ps(_mm256_permute2f128_ps(x, y, 0x20), _mm256_permute2f128_ps(x, y, 0x31));
}
#define V_SUM_SLOT(j) (j)

/* 16-bit values: all 8, or the first n (AVX2 has no 16-bit masked load, so
 * a tail goes through a zeroed copy: nothing past n is read); widened from
 * BF16 (the top half of a float) or F16 */
static inline __m128i vh_loadn8(const uint16_t *p, int n) {
    uint16_t t[8] = {0};
    memcpy(t, p, sizeof(uint16_t) * (size_t)(n < 8 ? n : 8));
    return _mm_loadu_si128((const __m128i *)t);
}
#define VH_LOAD(p) _mm_loadu_si128((const __m128i *)(p))
#define VH_LOADN(p, n) vh_loadn8((p), (n))
#define VH_BF16(h) _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16))
#define VH_F16(h) _mm256_cvtph_ps(h)

#else
#error "set AL_VEC_WIDTH to 16 (AVX-512) or 8 (AVX2) before including core/vec.h"
#endif

/* AL_VW BF16 values widened to float, or the first n of them (the others 0) */
#define V_LOAD_BF16(p) VH_BF16(VH_LOAD(p))
#define V_LOADN_BF16(p, n) VH_BF16(VH_LOADN((p), (n)))

/* n floats from p: a whole vector if n >= AL_VW, else the first n (the
 * other lanes 0) */
static inline __attribute__((always_inline)) vf v_loadn(const float *p, int n) {
    return n >= AL_VW ? V_LOAD(p) : V_LOADM(p, V_MASK(n));
}

/* n 16-bit values from p widened, BF16 or (f16) F16, as v_loadn */
static inline __attribute__((always_inline)) vf v_load16(const uint16_t *p, int n, const int f16) {
    const vhalf h = n >= AL_VW ? VH_LOAD(p) : VH_LOADN(p, n);
    return f16 ? VH_F16(h) : VH_BF16(h);
}

#endif
