/*
 * score_avx2.c: the attention kernels of score_kern.h for AVX2 + FMA
 * (8 floats per vector, micro-kernel rows of 2 vectors = 16 columns: a 6 x 16
 * accumulator block, 2 B vectors and a broadcast fit the 16 ymm registers).
 * The library's baseline (x86-64-v3) already includes AVX2 and FMA; the
 * pragma states it so this file keeps its meaning if the baseline is lowered
 * (the sanitizer build has none). The vector vocabulary is core/vec.h's.
 */
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "score_internal.h"
#include "../nn/fastmath.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

#define AL_VEC_WIDTH 8
#include "../core/vec.h"

#define KW AL_VW
#define KCB 2
#define KSFX(name) name##_avx2

#include "score_kern.h"

#pragma GCC pop_options
