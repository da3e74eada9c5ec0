/*
 * score_avx512bf16.c: "avx512-bf16", the BF16 attention kernels of
 * score_bf16_kern.h with vdpbf16ps products (_mm512_dpbf16_ps: 16 columns
 * x one bf16 pair per instruction, fp32 accumulators; register blocks of
 * 6 rows x 4 vectors as score_avx512.c). Compiled for AVX-512 F/BW/DQ/VL +
 * BF16 by the target pragma below; score.c calls in only in BF16 mode and
 * when core/cpu.h's set in use is avx512-bf16 (or amx, whose own kernels
 * are score_amx.c).
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
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,fma")

#define AL_VEC_WIDTH 16
#include "../core/vec.h"

typedef __m512i bva; /* one pair, broadcast to every lane */
typedef __m512i bvb; /* 16 column pairs */
#define BRG 6
#define BNC 4
#define BV_A(pair) _mm512_set1_epi32((int)(pair))
#define BV_B(p) _mm512_loadu_si512((const void *)(p))
#define BV_DP(c, a, b) _mm512_dpbf16_ps((c), (__m512bh)(a), (__m512bh)(b))
#define BSFX(name) name##_avx512bf16

#include "score_bf16_kern.h"

#pragma GCC pop_options
