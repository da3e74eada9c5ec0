/*
 * score_avx512.c: the attention kernels of score_kern.h for AVX-512
 * (16 floats per vector, micro-kernel rows of 4 vectors = 64 columns, so a
 * 6 x 64 accumulator block fills 24 of the 32 zmm registers). Every function
 * here is compiled for avx512f/bw/dq/vl + fma by the target pragma below
 * while the rest of the library stays at x86-64-v3; al_attn_fwd/bwd
 * (score.c) call in only when core/cpu.h says the CPU has AVX-512.
 */
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "score_internal.h"
#include "../nn/fastmath.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,fma")

typedef __m512 vf;
typedef __mmask16 vmask;
#define KW 16
#define KCB 4
#define KSFX(name) name##_avx512

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

/* 16 BF16 values widened to float (a BF16 is the top half of a float), or
 * the first n of them (the others 0; nothing past n is read) */
#define V_LOAD_BF16(p) \
    _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(p))), 16))
#define V_LOADN_BF16(p, n) \
    _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(v_mask16(n), (p))), 16))

#include "score_kern.h"

#pragma GCC pop_options
