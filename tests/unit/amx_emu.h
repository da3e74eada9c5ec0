/*
 * amx_emu.h: a plain-C model of the eight AMX tile registers and of the
 * tile instructions attnlab's AMX code uses, for tests that compile that
 * code a second time over it (test_attn_bf16.c: score_bf16_kern.h's AMX
 * branch; test_precision.c: nn/gemm_amx.c), so its indexing, blocking and
 * edges run and are checked on CPUs without AMX too. The model: tiles of 16
 * rows x 64 bytes (core/amx_tiles.h's one configuration, so loadconfig and
 * release do nothing); tdpbf16ps C[m][n] += A[m][2k+1] B[k][2n+1], then +=
 * A[m][2k] B[k][2n], in fp32 over k < 16 (the products of two bf16 values
 * are exact in fp32). Include it after <immintrin.h> and before the code
 * under test: it replaces the intrinsics' macros with its own.
 */
#ifndef AL_TEST_AMX_EMU_H
#define AL_TEST_AMX_EMU_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "core/dtype.h"

static _Thread_local unsigned char emu_tmm[8][16][64]; /* the tile registers, 16 rows x 64 bytes */

static void emu_loadd(int t, const void *base, long stride) {
    for (int r = 0; r < 16; r++) memcpy(emu_tmm[t][r], (const char *)base + r * stride, 64);
}

static void emu_stored(int t, void *base, long stride) {
    for (int r = 0; r < 16; r++) memcpy((char *)base + r * stride, emu_tmm[t][r], 64);
}

/* the bf16 values of tile t, widened: x[16][32] */
static void emu_widen(int t, float x[16][32]) {
    for (int r = 0; r < 16; r++)
        for (int e = 0; e < 32; e++) {
            uint16_t h;
            memcpy(&h, emu_tmm[t][r] + 2 * e, 2);
            x[r][e] = al_bf16_to_f32(h);
        }
}

static void emu_dpbf16ps(int c, int a, int b) {
    float A[16][32], B[16][32], C[16][16];
    emu_widen(a, A);
    emu_widen(b, B);
    memcpy(C, emu_tmm[c], sizeof C);
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 16; n++)
            for (int k = 0; k < 16; k++) {
                C[m][n] += A[m][2 * k + 1] * B[k][2 * n + 1];
                C[m][n] += A[m][2 * k] * B[k][2 * n];
            }
    memcpy(emu_tmm[c], C, sizeof C);
}

#undef _tile_loadconfig
#undef _tile_release
#undef _tile_loadd
#undef _tile_stored
#undef _tile_zero
#undef _tile_dpbf16ps
#define _tile_loadconfig(cfg) ((void)(cfg))
#define _tile_release() ((void)0)
#define _tile_loadd(t, base, stride) emu_loadd(t, base, stride)
#define _tile_stored(t, base, stride) emu_stored(t, base, stride)
#define _tile_zero(t) memset(emu_tmm[t], 0, sizeof emu_tmm[t])
#define _tile_dpbf16ps(c, a, b) emu_dpbf16ps(c, a, b)

#endif
