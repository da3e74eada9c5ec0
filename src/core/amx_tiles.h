/*
 * amx_tiles.h: the one AMX tile configuration attnlab loads (palette 1,
 * tiles 0-7 each 16 rows x 64 bytes: a C tile of 16 x 16 fp32, an A tile of
 * 16 x 32 bf16, a B tile of 16 rows of 16 bf16 pairs), for the product
 * kernel (nn/gemm_amx.c), the attention kernels (attn/score_bf16_kern.h)
 * and the tile peak (core/ceiling.c).
 *
 * The configuration is a constant in memory, loaded through
 * AL_TILE_LOADCONFIG after a compiler barrier: GCC's _tile_loadconfig names
 * only the first bytes of its 64-byte operand, so a configuration built in
 * a local variable could be partly optimised away (a probe that did so
 * faulted in ldtilecfg). Use inside code compiled for amx-tile.
 */
#ifndef AL_AMX_TILES_H
#define AL_AMX_TILES_H

#include <immintrin.h>
#include <stdint.h>

typedef struct al_tile_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16]; /* bytes per row of tile t */
    uint8_t rows[16];
} al_tile_config;

static const al_tile_config al_tile_config_16x64 __attribute__((aligned(64), unused)) = {
    1, 0, {0}, {64, 64, 64, 64, 64, 64, 64, 64}, {16, 16, 16, 16, 16, 16, 16, 16}};

#define AL_TILE_LOADCONFIG()                                                                                           \
    do {                                                                                                               \
        __asm__ volatile("" ::: "memory");                                                                             \
        _tile_loadconfig(&al_tile_config_16x64);                                                                      \
    } while (0)


/* The four C tiles (tiles 0-3, 16 x 16 fp32 from p0 .. p3, rows ldc floats
 * apart) before a product: loaded to add to (acc), else zeroed; and the
 * first nt of them stored after it. The GEMM kernel and the attention's
 * bmm22 place them as a 2 x 2 block, AMX_C64_ACC_WITH as 1 x 4. */
static inline void al_tiles_c4_begin(int acc, const float *p0, const float *p1, const float *p2, const float *p3,
                                     long ldc) {
    if (acc) {
        _tile_loadd(0, p0, ldc * 4);
        _tile_loadd(1, p1, ldc * 4);
        _tile_loadd(2, p2, ldc * 4);
        _tile_loadd(3, p3, ldc * 4);
    } else {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
    }
}
static inline void al_tiles_c4_end(int nt, float *p0, float *p1, float *p2, float *p3, long ldc) {
    _tile_stored(0, p0, ldc * 4);
    if (nt > 1) _tile_stored(1, p1, ldc * 4);
    if (nt > 2) _tile_stored(2, p2, ldc * 4);
    if (nt > 3) _tile_stored(3, p3, ldc * 4);
}

#endif
