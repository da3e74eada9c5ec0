/*
 * gemm_amx.c: the amx engine's kernel, C[mb, nb] = alpha A B + beta C over
 * precision_internal.h's packed blocks, on AMX tiles: tdpbf16ps multiplies
 * an A tile (16 rows x 32 bf16) by a B tile (16 VNNI pair rows x 16
 * columns) into a C tile of 16 x 16 fp32 sums.
 *
 * Tiles: C in tmm0-3 as a 2 x 2 block of 32 x 32 outputs, A in tmm4-5 (its
 * two row halves), B in tmm6-7 (its two column halves); K in steps of 32.
 * The packed blocks are padded to multiples of 32 (rows, columns, K) with
 * zeros, so every tile is whole; the sums go through a 32 x 32 buffer into
 * C (alpha, beta, edges). The tile configuration is loaded per call and the
 * state released at its end, so no thread keeps tile state between calls.
 * The tile data state must have been granted by Linux (arch_prctl, asked
 * by core/cpu.c when it detects amx): precision.c calls this only when the
 * set in use is amx, which counts as present only with that permission, so
 * a refusal means the avx512-bf16 or emulated engine, never a fault.
 * Compiled for AMX by the target pragma; kept simple over fast.
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "precision_internal.h"

#pragma GCC push_options
#pragma GCC target("amx-tile,amx-bf16,avx512f")

/* The 64-byte tile configuration of palette 1 (Intel SDM, LDTILECFG). */
typedef struct tile_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16]; /* bytes per row of tile t */
    uint8_t rows[16];
} __attribute__((aligned(64))) tile_config;

void al_bf16_kernel_amx(int mb, int nb, int kp, int np, float alpha, const uint16_t *Ap, const uint16_t *Bp,
                        float beta, float *C, int ldc) {
    tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) cfg.rows[t] = 16, cfg.colsb[t] = 64; /* C: 16 fp32, A: 32 bf16, B: 16 pairs */
    _tile_loadconfig(&cfg);
    float sums[32 * 32];
    const size_t a_stride = (size_t)kp * sizeof(uint16_t), b_stride = (size_t)np * 2 * sizeof(uint16_t);
    for (int i0 = 0; i0 < mb; i0 += 32)
        for (int j0 = 0; j0 < nb; j0 += 32) {
            _tile_zero(0);
            _tile_zero(1);
            _tile_zero(2);
            _tile_zero(3);
            for (int k = 0; k < kp; k += 32) {
                const uint16_t *a = Ap + (size_t)i0 * kp + k, *b = Bp + (size_t)(k / 2) * 2 * np + 2 * j0;
                _tile_loadd(4, a, a_stride);
                _tile_loadd(5, a + (size_t)16 * kp, a_stride);
                _tile_loadd(6, b, b_stride);
                _tile_loadd(7, b + 32, b_stride);
                _tile_dpbf16ps(0, 4, 6);
                _tile_dpbf16ps(1, 4, 7);
                _tile_dpbf16ps(2, 5, 6);
                _tile_dpbf16ps(3, 5, 7);
            }
            _tile_stored(0, sums, 32 * sizeof(float));
            _tile_stored(1, sums + 16, 32 * sizeof(float));
            _tile_stored(2, sums + 16 * 32, 32 * sizeof(float));
            _tile_stored(3, sums + 16 * 32 + 16, 32 * sizeof(float));
            for (int r = 0; r < 32 && i0 + r < mb; r++)
                for (int j = 0; j < 32 && j0 + j < nb; j++) {
                    float *c = C + (size_t)(i0 + r) * ldc + j0 + j;
                    const float s = alpha * sums[r * 32 + j];
                    *c = beta == 0.0f ? s : s + beta * *c;
                }
        }
    _tile_release();
}

#pragma GCC pop_options
