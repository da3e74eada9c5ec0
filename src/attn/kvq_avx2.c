/*
 * kvq_avx2.c: the quantised-cache decode kernels of kvq_kern.h for AVX2 +
 * FMA + F16C (8 lanes: a cell's plane bytes widened 8 at a time).
 */
#include <immintrin.h>

#include "attn.h"
#include "kvq.h"
#include "kvq_internal.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

#define AL_VEC_WIDTH 8
#include "../core/vec.h"

#define KSFX(name) name##_avx2
#include "kvq_kern.h"

#pragma GCC pop_options
