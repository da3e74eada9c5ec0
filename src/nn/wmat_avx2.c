/*
 * wmat_avx2.c: the kernels of wmat_kern.h for AVX2 + FMA + F16C (8 floats
 * per vector). The release build's baseline (x86-64-v3) has them; the
 * pragma states it because the sanitizer build is compiled without it.
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "wmat_internal.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

#define AL_VEC_WIDTH 8
#include "../core/vec.h"

#define WSFX(name) name##_avx2
#include "wmat_kern.h"

#pragma GCC pop_options
