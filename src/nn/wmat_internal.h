/*
 * wmat_internal.h: what wmat.c shares with its SIMD kernel files
 * (wmat_avx512.c, wmat_avx2.c, both built from wmat_kern.h): their entry
 * points, which wmat.c calls only when core/cpu.h's set in use has them.
 *   al_wmat_direct_*  y[n, r] (+)= sum_i W[r, i] x[n, i], rows r in [r0, r1),
 *                     N <= AL_WMAT_SMALL_N rows of x (ldx, ldy apart), W 16-bit
 *                     (F16 if f16, else BF16), row-major with `in` columns
 *   al_wmat_widen_*   dst[n] = src[n] widened to fp32
 *   al_wmat_gemv_f32_*  y[r] (+)= sum_i W[r, i] x[i], rows r in [r0, r1), W fp32
 *                     row-major with `in` columns (one x, no stride)
 */
#ifndef AL_WMAT_INTERNAL_H
#define AL_WMAT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "nn.h"

#define AL_WMAT_SET_DECL(sfx)                                                                                    \
    void al_wmat_direct_##sfx(float *y, int ldy, const float *x, int ldx, const uint16_t *W, int f16, int N,     \
                              int in, int r0, int r1, int accumulate);                                          \
    void al_wmat_widen_##sfx(float *dst, const uint16_t *src, size_t n, int f16);                                \
    void al_wmat_gemv_f32_##sfx(float *y, const float *x, const float *W, int in, int r0, int r1, int accumulate);
AL_WMAT_SET_DECL(avx512)
AL_WMAT_SET_DECL(avx2)
#undef AL_WMAT_SET_DECL

#endif
