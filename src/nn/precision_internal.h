/*
 * precision_internal.h: what linear.c calls of precision.c. One tile of
 * al_sgemm's product in BF16 mode, rows [r0, r1) x columns [c0, c1) of C,
 * with al_sgemm's arguments; single-threaded (al_sgemm runs tiles in
 * parallel).
 */
#ifndef AL_PRECISION_INTERNAL_H
#define AL_PRECISION_INTERNAL_H

void al_sgemm_tile_bf16_emulated(int a_transposed, int b_transposed, int r0, int r1, int c0, int c1, int K,
                                 float alpha, const float *A, int lda, const float *B, int ldb, float beta, float *C,
                                 int ldc);

#endif
