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
 * over it. Within a strip the K block is taken PASS_STEPS steps at a time
 * over all of the chunk's column pairs: the strip's A for those steps
 * (16 KB) stays in L1 for every pair, and only B comes from L2. Each pair's
 * 32 x 32 sums go to C after each pass and come back for the next; an fp32
 * store and load give back the same values, so these passes change no bits.
 * Why: a tile load from L2 costs about as much as a product, and with both
 * operands from L2 (A's 48-64 KB per strip no longer fits L1) the loads
 * bound the kernel at 1.1-1.25 TFLOP/s a thread on the gpt2 step's shapes;
 * with the strip's A in L1, 1.25-1.45 (docs/kernels.md, session 29).
 * Prefetching: while a strip is summed, 4 lines a step of the next strip's
 * A block are fetched into L2 (its 64 KB then arrive spread over the
 * strip's work instead of stalling the next strip's first loads), and the
 * next 32 x 32 block's C rows into L1 (their loads or stores would
 * otherwise wait for memory): 1.06-1.49x on the model's shapes in a
 * same-process A/B, docs/kernels.md.
 * Each K block's sums go into C: straight from the tiles to C where the
 * 16 x 16 tile is whole and alpha is 1 (C loaded into the tiles first when
 * it is to be kept), else through a buffer (alpha, beta, C's edges), the
 * K block's steps then summed in one pass. The order of every sum is fixed
 * by the shape and the tile (r0, c0), so the bits never depend on the
 * thread count.
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

enum { CHUNK_COLS = 256, PASS_STEPS = 8 };

/* The steps of a pass (test hook: any split gives the same bits). */
static int pass_steps = PASS_STEPS;

void al_bf16_tiles_set_pass_steps(int steps) { pass_steps = steps > 0 ? steps : PASS_STEPS; }

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

/* The next strip's A block (two groups of `steps` tiles, the second
 * `group` elements after the first), fetched into L2 four lines a step
 * while the strip is summed (a: NULL, none; `fetched` lines so far). */
typedef struct a_ahead {
    const char *a;
    size_t group;
    int steps, fetched;
} a_ahead;

static inline void a_ahead_step(a_ahead *pa) {
    const int per_group = pa->steps * AL_TILE_LINES, lines = 2 * per_group;
    if (!pa->a || pa->fetched >= lines) return;
    for (int q = pa->fetched; q < pa->fetched + 4 && q < lines; q++) {
        const size_t at = q < per_group ? (size_t)q * 64 : pa->group * sizeof(uint16_t) + (size_t)(q - per_group) * 64;
        _mm_prefetch(pa->a + at, _MM_HINT_T1);
    }
    pa->fetched += 4;
}

/* Steps [t0, t1) of the 32 x 32 block at a (two groups of A) and b (two
 * groups of B) added into tiles 0-3 (A in tiles 4-5, B in 6-7); each step
 * also fetches its share of the next strip's A block (into L2) and of the
 * next block's C rows (into L1; c_next: `rows` rows ldc apart, 16 floats or
 * `wide` 32; NULL: none). */
static inline void block_steps(const uint16_t *a, const uint16_t *b, size_t group, int t0, int t1, a_ahead *pa,
                               const float *c_next, size_t ldc, int rows, int wide) {
    const int rows_step = (32 + (t1 - t0) - 1) / (t1 - t0); /* C's rows spread over the steps */
    for (int s = t0; s < t1; s++) {
        const size_t at = (size_t)s * AL_TILE_ELEMS;
        const int r_first = (s - t0) * rows_step;
        a_ahead_step(pa);
        for (int r = r_first; c_next && r < r_first + rows_step && r < rows; r++) {
            _mm_prefetch((const char *)(c_next + (size_t)r * ldc), _MM_HINT_T0); /* 32 floats: 2 lines */
            if (wide) _mm_prefetch((const char *)(c_next + (size_t)r * ldc + 16), _MM_HINT_T0);
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
}

void al_bf16_tiles_kernel_amx(const uint16_t *Ap, const uint16_t *Bp, int ksteps, int r0, int r1, int c0, int c1,
                              float alpha, float beta, float *C, size_t ldc) {
    assert(r0 % AL_TILE_LINES == 0 && c0 % AL_TILE_LINES == 0);
    AL_TILE_LOADCONFIG(); /* C: 16 fp32, A: 32 bf16, B: 16 pairs a row */
    float buf[4][16 * 16] __attribute__((aligned(64)));
    const size_t group = (size_t)ksteps * AL_TILE_ELEMS;
    const int pass = pass_steps;
    for (int jc = c0; jc < c1; jc += CHUNK_COLS) {
        const int jc1 = c1 - jc < CHUNK_COLS ? c1 : jc + CHUNK_COLS;
        for (int s0 = 0; s0 < ksteps; s0 += AL_TILES_KBLOCK) {
            const int s_end = ksteps - s0 < AL_TILES_KBLOCK ? ksteps : s0 + AL_TILES_KBLOCK;
            const float keep = s0 == 0 ? beta : 1.0f; /* later K blocks add to C */
            const int tiles_to_c = alpha == 1.0f && (keep == 0.0f || keep == 1.0f);
            for (int i = r0; i < r1; i += 32) {
                const uint16_t *a = Ap + (size_t)(i / 16) * group;
                a_ahead pa = {i + 32 < r1 ? (const char *)(a + 2 * group + (size_t)s0 * AL_TILE_ELEMS) : NULL, group,
                              s_end - s0, 0};
                for (int u0 = s0; u0 < s_end; u0 += pass) { /* a pass: steps [u0, u1) over the chunk's pairs */
                    const int u1 = s_end - u0 < pass ? s_end : u0 + pass;
                    for (int j = jc; j < jc1; j += 32) {
                        const int direct = tiles_to_c && r1 - i >= 32 && jc1 - j >= 32;
                        if (!direct && u0 != s0) continue; /* summed whole in the K block's first pass */
                        float *c = C + (size_t)i * ldc + j;
                        /* what comes next: this pass's next pair, else the next pass's (or strip's) first */
                        const int last_pair = j + 32 >= jc1;
                        const int next_i = !last_pair || u1 < s_end ? i : i + 32, next_j = last_pair ? jc : j + 32;
                        const float *c_next = next_i < r1 ? C + (size_t)next_i * ldc + next_j : NULL;
                        float *c_lo = c + 16 * ldc; /* the block's lower 16 rows */
                        al_tiles_c4_begin(direct && (u0 > s0 || keep == 1.0f), c, c + 16, c_lo, c_lo + 16, (long)ldc);
                        block_steps(a, Bp + (size_t)(j / 16) * group, group, direct ? u0 : s0, direct ? u1 : s_end,
                                    &pa, c_next, ldc, r1 - next_i < 32 ? r1 - next_i : 32, jc1 - next_j > 16);
                        if (direct) {
                            al_tiles_c4_end(4, c, c + 16, c_lo, c_lo + 16, (long)ldc);
                            continue;
                        }
                        al_tiles_c4_end(4, buf[0], buf[1], buf[2], buf[3], 16);
                        for (int q = 0; q < 4; q++) { /* the tiles' parts inside C's tile */
                            const int di = (q / 2) * 16, dj = (q % 2) * 16;
                            const int rows = r1 - i - di < 16 ? r1 - i - di : 16;
                            const int cols = jc1 - j - dj < 16 ? jc1 - j - dj : 16;
                            if (rows > 0 && cols > 0)
                                combine(c + (size_t)di * ldc + dj, ldc, buf[q], rows, cols, alpha, keep);
                        }
                    }
                }
            }
        }
    }
    _tile_release();
}

#pragma GCC pop_options
