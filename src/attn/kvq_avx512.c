/*
 * kvq_avx512.c: the quantised-cache decode kernels of kvq_kern.h for
 * AVX-512 (16 lanes: a cell's plane bytes widened 16 at a time); decode.c
 * calls in only when core/cpu.h says the CPU has AVX-512.
 */
#include <immintrin.h>

#include "attn.h"
#include "kvq.h"
#include "kvq_internal.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,fma,f16c")

#define AL_VEC_WIDTH 16
#include "../core/vec.h"

#define KSFX(name) name##_avx512
#include "kvq_kern.h"

#pragma GCC pop_options
