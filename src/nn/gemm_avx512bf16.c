/*
 * gemm_avx512bf16.c: the avx512-bf16 engine's kernel, C[mb, nb] = alpha A B
 * + beta C over precision_internal.h's packed blocks, with vdpbf16ps: one
 * pair of A (two bf16 of a row, broadcast) times 16 pairs of B (the VNNI
 * rows) adds both products into 16 fp32 sums at once.
 *
 * Register block: 4 rows x 32 columns (8 accumulators of 16 floats); the
 * packed blocks are padded (rows to 32, columns to 32, K to 32) with zeros,
 * so the loops run whole register blocks and only the store looks at mb and
 * nb (masked). Compiled for AVX-512 + AVX512_BF16 by the target pragma while
 * the library stays at x86-64-v3; precision.c calls it only when core/cpu.h's
 * set in use is avx512-bf16 or above. Kept simple over fast (no prefetching,
 * no K unrolling): the next session on such a CPU measures it against oneDNN.
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "precision_internal.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,fma")

enum { MR = 4, NV = 2 }; /* rows x vectors of 16 columns */

/* Rows [i0, i0 + MR) x columns [j0, j0 + 16 NV) of the sums into C. */
static void store_block(const __m512 acc[MR][NV], int i0, int j0, int mb, int nb, float alpha, float beta, float *C,
                        int ldc) {
    const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    for (int r = 0; r < MR && i0 + r < mb; r++)
        for (int v = 0; v < NV; v++) {
            const int j = j0 + 16 * v, n = nb - j < 16 ? nb - j : 16;
            if (n <= 0) break;
            const __mmask16 m = (__mmask16)((1u << n) - 1u);
            float *c = C + (size_t)(i0 + r) * ldc + j;
            __m512 y = _mm512_mul_ps(va, acc[r][v]);
            if (beta != 0.0f) y = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m, c), y);
            _mm512_mask_storeu_ps(c, m, y);
        }
}

void al_bf16_kernel_avx512bf16(int mb, int nb, int kp, int np, float alpha, const uint16_t *Ap, const uint16_t *Bp,
                               float beta, float *C, int ldc) {
    for (int i0 = 0; i0 < mb; i0 += MR)
        for (int j0 = 0; j0 < nb; j0 += 16 * NV) {
            __m512 acc[MR][NV];
            for (int r = 0; r < MR; r++)
                for (int v = 0; v < NV; v++) acc[r][v] = _mm512_setzero_ps();
            for (int k = 0; k < kp; k += 2) {
                const uint16_t *brow = Bp + (size_t)(k / 2) * 2 * np + 2 * j0;
                __m512bh b[NV];
                for (int v = 0; v < NV; v++) b[v] = (__m512bh)_mm512_loadu_si512(brow + 32 * v);
                for (int r = 0; r < MR; r++) {
                    int32_t pair;
                    memcpy(&pair, Ap + (size_t)(i0 + r) * kp + k, sizeof pair);
                    const __m512bh a = (__m512bh)_mm512_set1_epi32(pair);
                    for (int v = 0; v < NV; v++) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], a, b[v]);
                }
            }
            store_block((const __m512(*)[NV])acc, i0, j0, mb, nb, alpha, beta, C, ldc);
        }
}

#pragma GCC pop_options
