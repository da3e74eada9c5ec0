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

#endif
