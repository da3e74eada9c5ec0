/*
 * gemm_amx.c: the amx engine's kernel, C[r0..r1, c0..c1) = alpha A B +
 * beta C over operands packed whole into 1 KB tiles (bf16_tiles.c), on AMX:
 * tdpbf16ps multiplies an A tile (16 rows x 32 bf16) by a B tile (16 rows
 * of 16 pairs) into a C tile of 16 x 16 fp32 sums.
 *
 * Registers: C in tmm0-3 as a 2 x 2 block of 32 x 32 outputs, A in tmm4-5
 * (two groups of rows), B in tmm6-7 (two groups of columns); each step of
 * 32 k loads four consecutive 1 KB tiles and issues four products.
 * Blocking: C's columns in chunks of CHUNK_COLS, K in blocks of
 * AL_TILES_KBLOCK steps (1024 k), so that a chunk's B block (256 columns x
 * 1024 k, 512 KB) stays in L2 while every 32-row strip of the tile passes
 * over it; a strip's A block (64 KB) is read once per 32 columns.
 * Prefetching: while a strip's 32 columns are summed, 4 lines a step of the
 * next strip's A block are fetched into L2 (its 64 KB then arrive spread over
 * the strip's column pairs instead of stalling the next strip's first
 * loads), and the next C block's 32 rows into L1 (their loads or stores
 * would otherwise wait for memory): 1.06-1.49x on the model's shapes in a
 * same-process A/B, docs/kernels.md.
 * Each K block's sums go into C: straight from the tiles to C where the
 * 16 x 16 tile is whole and alpha is 1 (C loaded into the tiles first when
 * it is to be kept), else through a buffer (alpha, beta, C's edges). The
 * order of every sum is fixed by the shape and the tile (r0, c0), so the
 * bits never depend on the thread count.
 *
 * The tile configuration (core/amx_tiles.h) is loaded per call and released
 * at its end, so no thread keeps tile state between calls. The tile data
 * state must have been granted by Linux (arch_prctl, asked by core/cpu.c
 * when it detects amx): precision.c calls this only when the set in use is
 * amx, which counts as present only with that permission. Compiled for AMX
 * by the target pragma.
 */
#include <assert.h>
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "../core/amx_tiles.h"
#include "precision_internal.h"

#pragma GCC push_options
#pragma GCC target("amx-tile,amx-bf16,avx512f")

enum { CHUNK_COLS = 256 };

/* C tile at (i, j) of up to rows x cols from the 16 x 16 sums in buf:
 * C = alpha buf + keep C (keep 0: C not read). */
static void combine(float *C, size_t ldc, const float *buf, int rows, int cols, float alpha, float keep) {
    const __mmask16 m = (__mmask16)((1u << cols) - 1u);
    const __m512 va = _mm512_set1_ps(alpha), vk = _mm512_set1_ps(keep);
    for (int r = 0; r < rows; r++) {
        float *c = C + (size_t)r * ldc;
        __m512 v = _mm512_mul_ps(va, _mm512_loadu_ps(buf + r * 16));
        if (keep != 0.0f) v = _mm512_fmadd_ps(vk, _mm512_maskz_loadu_ps(m, c), v);
        _mm512_mask_storeu_ps(c, m, v);
    }
}

/* Lines [line, line + 4) of a strip's A block (two groups of `steps` tiles,
 * the second `group` elements after the first; `lines` in all) into L2. */
static inline void prefetch_a_lines(const char *a, size_t group, int steps, int line, int lines) {
    const int per_group = steps * AL_TILE_LINES;
    for (int q = line; q < line + 4 && q < lines; q++) {
        const char *p = q < per_group ? a + (size_t)q * 64 : a + group * sizeof(uint16_t) + (size_t)(q - per_group) * 64;
        _mm_prefetch(p, _MM_HINT_T1);
    }
}

void al_bf16_tiles_kernel_amx(const uint16_t *Ap, const uint16_t *Bp, int ksteps, int r0, int r1, int c0, int c1,
                              float alpha, float beta, float *C, size_t ldc) {
    assert(r0 % AL_TILE_LINES == 0 && c0 % AL_TILE_LINES == 0);
    AL_TILE_LOADCONFIG(); /* C: 16 fp32, A: 32 bf16, B: 16 pairs a row */
    float buf[4][16 * 16] __attribute__((aligned(64)));
    const size_t group = (size_t)ksteps * AL_TILE_ELEMS, c_stride = ldc * sizeof(float);
    for (int jc = c0; jc < c1; jc += CHUNK_COLS) {
        const int jc1 = c1 - jc < CHUNK_COLS ? c1 : jc + CHUNK_COLS;
        for (int s0 = 0; s0 < ksteps; s0 += AL_TILES_KBLOCK) {
            const int steps = ksteps - s0 < AL_TILES_KBLOCK ? ksteps - s0 : AL_TILES_KBLOCK;
            const float keep = s0 == 0 ? beta : 1.0f; /* later K blocks add to C */
            for (int i = r0; i < r1; i += 32)
                for (int j = jc; j < jc1; j += 32) {
                    const uint16_t *a = Ap + (size_t)(i / 16) * group + (size_t)s0 * AL_TILE_ELEMS;
                    const uint16_t *b = Bp + (size_t)(j / 16) * group + (size_t)s0 * AL_TILE_ELEMS;
                    float *c = C + (size_t)i * ldc + j;
                    const int direct = alpha == 1.0f && (keep == 0.0f || keep == 1.0f) && r1 - i >= 32 && jc1 - j >= 32;
                    /* what comes next: this strip's next column pair, else the next strip's first */
                    const int next_i = j + 32 < jc1 ? i : i + 32, next_j = j + 32 < jc1 ? j + 32 : jc;
                    const float *c_next = next_i < r1 ? C + (size_t)next_i * ldc + next_j : NULL;
                    const int c_next_rows = r1 - next_i < 32 ? r1 - next_i : 32, c_next_wide = jc1 - next_j > 16;
                    const int c_rows_step = (32 + steps - 1) / steps; /* its rows spread over the steps */
                    const char *a_next = i + 32 < r1 ? (const char *)(a + 2 * group) : NULL;
                    const int a_line0 = (j - jc) / 32 * steps * 4, a_lines = 2 * steps * AL_TILE_LINES;
                    if (direct && keep == 1.0f) {
                        _tile_loadd(0, c, c_stride);
                        _tile_loadd(1, c + 16, c_stride);
                        _tile_loadd(2, c + 16 * ldc, c_stride);
                        _tile_loadd(3, c + 16 * ldc + 16, c_stride);
                    } else {
                        _tile_zero(0);
                        _tile_zero(1);
                        _tile_zero(2);
                        _tile_zero(3);
                    }
                    for (int s = 0; s < steps; s++) {
                        const size_t at = (size_t)s * AL_TILE_ELEMS;
                        if (a_next) prefetch_a_lines(a_next, group, steps, a_line0 + 4 * s, a_lines);
                        for (int r = s * c_rows_step; c_next && r < (s + 1) * c_rows_step && r < c_next_rows; r++) {
                            _mm_prefetch((const char *)(c_next + (size_t)r * ldc), _MM_HINT_T0); /* 32 floats: 2 lines */
                            if (c_next_wide) _mm_prefetch((const char *)(c_next + (size_t)r * ldc + 16), _MM_HINT_T0);
                        }
                        _tile_loadd(4, a + at, 64);
                        _tile_loadd(6, b + at, 64);
                        _tile_dpbf16ps(0, 4, 6);
                        _tile_loadd(7, b + group + at, 64);
                        _tile_dpbf16ps(1, 4, 7);
                        _tile_loadd(5, a + group + at, 64);
                        _tile_dpbf16ps(2, 5, 6);
                        _tile_dpbf16ps(3, 5, 7);
                    }
                    if (direct) {
                        _tile_stored(0, c, c_stride);
                        _tile_stored(1, c + 16, c_stride);
                        _tile_stored(2, c + 16 * ldc, c_stride);
                        _tile_stored(3, c + 16 * ldc + 16, c_stride);
                        continue;
                    }
                    _tile_stored(0, buf[0], 64);
                    _tile_stored(1, buf[1], 64);
                    _tile_stored(2, buf[2], 64);
                    _tile_stored(3, buf[3], 64);
                    for (int q = 0; q < 4; q++) { /* the tiles' parts inside C's tile */
                        const int di = (q / 2) * 16, dj = (q % 2) * 16;
                        const int rows = r1 - i - di < 16 ? r1 - i - di : 16, cols = jc1 - j - dj < 16 ? jc1 - j - dj : 16;
                        if (rows > 0 && cols > 0) combine(c + (size_t)di * ldc + dj, ldc, buf[q], rows, cols, alpha, keep);
                    }
                }
        }
    }
    _tile_release();
}

#pragma GCC pop_options
