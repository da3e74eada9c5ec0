/*
 * score_bf16.c: "bf16-portable", the BF16 attention kernels of
 * score_bf16_kern.h with AVX2 + FMA products (8 floats per vector, register
 * blocks of 4 rows x 2 vectors: 8 accumulators, a pair of each B vector and
 * of the A broadcast fit the 16 ymm registers). Each pair of bf16 values is
 * widened (a shift, a mask) and multiplied by two FMAs, odd element first as
 * vdpbf16ps does: the products of two bf16 values are exact in fp32, so
 * this sums what the bf16 instructions sum, in fp32, on any CPU attnlab
 * runs on (x86-64-v3). core/cpu.h's avx2 set or above; score.c runs it in
 * BF16 mode below avx512-bf16.
 */
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "score_internal.h"
#include "../core/dtype.h"
#include "../nn/fastmath.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

#define AL_VEC_WIDTH 8
#include "../core/vec.h"

/* a pair (A broadcast) or AL_VW column pairs (B), split into the even and
 * the odd element of each pair, widened to fp32 */
typedef struct bv2 {
    vf e, o;
} bv2;
typedef bv2 bva;
typedef bv2 bvb;

static inline bva bv_a(uint32_t pair) {
    const uint32_t e = pair << 16, o = pair & 0xffff0000u;
    float fe, fo;
    memcpy(&fe, &e, sizeof fe);
    memcpy(&fo, &o, sizeof fo);
    return (bva){V_SET1(fe), V_SET1(fo)};
}

static inline bvb bv_b(const uint16_t *p) {
    const __m256i x = _mm256_loadu_si256((const __m256i *)p);
    return (bvb){_mm256_castsi256_ps(_mm256_slli_epi32(x, 16)),
                 _mm256_castsi256_ps(_mm256_and_si256(x, _mm256_set1_epi32((int)0xffff0000u)))};
}

#define BRG 4
#define BNC 2
#define BV_A(pair) bv_a(pair)
#define BV_B(p) bv_b(p)
#define BV_DP(c, a, b) V_FMA((a).e, (b).e, V_FMA((a).o, (b).o, (c)))
#define BSFX(name) name##_bf16

#include "score_bf16_kern.h"

#pragma GCC pop_options
