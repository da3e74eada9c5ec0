/*
 * score_amx.c: "amx", the BF16 attention kernels of score_bf16_kern.h with
 * their products on AMX tiles (tdpbf16ps: a 16 x 32 bf16 A tile times a
 * 16-pair x 16-column B tile into 16 x 16 fp32 accumulators), the
 * elementwise work in AVX-512. Compiled for AVX-512 F/BW/DQ/VL + BF16 and
 * AMX-TILE + AMX-BF16 by the target pragma below; score.c calls in only in
 * BF16 mode when core/cpu.h's set in use is amx, which it reports only
 * after Linux granted the process the tile state (cpu.c).
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
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,fma,amx-tile,amx-bf16")

#define AL_VEC_WIDTH 16
#include "../core/vec.h"

#define BF16_AMX
#define BSFX(name) name##_amx

#include "score_bf16_kern.h"

#pragma GCC pop_options
