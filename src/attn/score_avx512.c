/*
 * score_avx512.c: the attention kernels of score_kern.h for AVX-512
 * (16 floats per vector, micro-kernel rows of 4 vectors = 64 columns, so a
 * 6 x 64 accumulator block fills 24 of the 32 zmm registers). Every function
 * here is compiled for avx512f/bw/dq/vl + fma by the target pragma below
 * while the rest of the library stays at x86-64-v3; al_attn_fwd/bwd
 * (score.c) call in only when core/cpu.h says the CPU has AVX-512. The
 * vector vocabulary is core/vec.h's.
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

#define AL_VEC_WIDTH 16
#include "../core/vec.h"

#define KW AL_VW
#define KCB 4
#define KSFX(name) name##_avx512

#include "score_kern.h"

#pragma GCC pop_options
