/*
 * wmat_avx512.c: the kernels of wmat_kern.h for AVX-512 (F, BW, DQ, VL: 16
 * floats per vector, BF16 widened by a 16-bit shift, F16 by vcvtph2ps).
 * Compiled for AVX-512 by the target pragma while the library stays at
 * x86-64-v3; wmat.c calls in only when core/cpu.h's set is avx512 or above.
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "wmat_internal.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,fma")

#define AL_VEC_WIDTH 16
#include "../core/vec.h"

#define WSFX(name) name##_avx512
#include "wmat_kern.h"

#pragma GCC pop_options
