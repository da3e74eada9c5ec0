/*
 * score_avx2.c: the attention kernels of score_kern.h for AVX2 + FMA
 * (8 floats per vector, micro-kernel rows of 2 vectors = 16 columns: a 6 x 16
 * accumulator block, 2 B vectors and a broadcast fit the 16 ymm registers).
 * The library's baseline (x86-64-v3) already includes AVX2 and FMA; the
 * pragma states it so this file keeps its meaning if the baseline is lowered.
 */
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "score_internal.h"
#include "../nn/fastmath.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma")

typedef __m256 vf;
typedef __m256 vmask; /* all-ones lanes are active */
#define KW 8
#define KCB 2
#define KSFX(name) name##_avx2

/* the first n lanes (n <= 0: none, n >= 8: all) */
static inline vmask v_mask8(int n) {
    return _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
}

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

/* Sums of 8 vectors in one, lane j = the sum of a[j]: two rounds of
 * horizontal adds per half, then the two 128-bit halves added. */
static inline __m256 v_sum_lanes(const __m256 *a) {
    const __m256 x = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
    const __m256 y = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
    return _mm256_add_ps(_mm256_permute2f128_ps(x, y, 0x20), _mm256_permute2f128_ps(x, y, 0x31));
}
#define V_SUM_SLOT(j) (j)

/* 8 BF16 values widened to float (a BF16 is the top half of a float), or
 * the first n of them (the others 0; AVX2 has no 16-bit masked load, so a
 * tail goes through a zeroed copy and nothing past n is read) */
#define V_LOAD_BF16(p) \
    _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(p))), 16))
static inline __m256 v_loadn_bf16(const uint16_t *p, int n) {
    uint16_t t[8] = {0};
    memcpy(t, p, sizeof(uint16_t) * (size_t)(n < 8 ? n : 8));
    return V_LOAD_BF16(t);
}
#define V_LOADN_BF16(p, n) v_loadn_bf16((p), (n))

#include "score_kern.h"

#pragma GCC pop_options
