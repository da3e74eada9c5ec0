/*
 * bf16_tiles.c: the amx engine's operand layout, its packer and the plain
 * reference of its kernel (the AMX kernel is gemm_amx.c).
 *
 * Layout ("tiles"): an operand with n lines (A: the M rows i of op(A); B:
 * the N columns j of op(B)) of K values k is cut into groups of 16 lines
 * (n rounded up to 16, plus one group of zeros, so that a kernel stepping
 * 32 lines at a time never reads past the end) and steps of 32 k (K rounded
 * up to 32, zeros). Group g's step s is one tile of 512 bf16 (1 KB) at
 * (g * ksteps + s) * 512:
 *   A ("rows"):  line r, k = 32 s + kk at r * 32 + kk
 *   B ("pairs"): line c, k = 32 s + kk at (kk / 2) * 32 + 2 c + kk % 2
 * which is what tdpbf16ps takes as its A tile (16 rows of 32 bf16) and as
 * its B tile (16 rows of 16 pairs of neighbouring k) at a 64-byte stride, so
 * every tile load reads 1 KB of consecutive memory. The whole operand is
 * packed once per product (precision.c's plan), each tile on its own, so
 * the bits do not depend on how the tiles are shared among threads; every
 * tile of C then reads it in place (oneDNN, in contrast, packs a tile's
 * weights again for every tile of C it is called for).
 *
 * Packing (pack_part) reads the source in its memory order; the plain
 * packer is the reference of the AVX-512 ones (bf16_tiles_avx512.c: integer
 * rounding, or AVX512-BF16's conversion where the set has it), one of which
 * runs wherever the amx engine does.
 */
#include <assert.h>
#include <string.h>

#include "../core/cpu.h"
#include "precision_internal.h"

size_t al_bf16_tiles_groups(int n) { return (size_t)(n + AL_TILE_LINES - 1) / AL_TILE_LINES + 1; }
int al_bf16_tiles_ksteps(int K) { return (K + AL_TILE_K - 1) / AL_TILE_K; }

size_t al_bf16_tiles_elems(int n, int K) {
    return al_bf16_tiles_groups(n) * (size_t)al_bf16_tiles_ksteps(K) * AL_TILE_ELEMS;
}

/* Element (line, k) of the source view: X (fp32) or Xbf (BF16) at line rs +
 * k cs, rounded to bf16. */
static inline uint16_t at_bf16(const float *X, const uint16_t *Xbf, size_t rs, size_t cs, int line, int k) {
    const size_t at = (size_t)line * rs + (size_t)k * cs;
    return Xbf ? Xbf[at] : (uint16_t)(al_bf16_round_bits(X[at]) >> 16);
}

/* The plain packer of one tile: lines [l0, l0 + lines) (lines <= 16, or
 * none: zeros) at k from 32 s on, zeros past the lines and K. */
static void pack_tile(uint16_t *restrict t, int pairs, const float *X, const uint16_t *Xbf, size_t rs, size_t cs,
                      int l0, int lines, int K, int s) {
    memset(t, 0, sizeof(uint16_t) * AL_TILE_ELEMS);
    const int k0 = s * AL_TILE_K, kn = K - k0 < AL_TILE_K ? K - k0 : AL_TILE_K;
    for (int c = 0; c < lines; c++)
        for (int kk = 0; kk < kn; kk++)
            t[pairs ? (kk / 2) * 32 + 2 * c + kk % 2 : c * AL_TILE_K + kk] = at_bf16(X, Xbf, rs, cs, l0 + c, k0 + kk);
}

/* Which packer: the plain one, AVX-512's, AVX512-BF16's. */
enum { PACK_PLAIN, PACK_AVX512, PACK_AVX512BF16 };

/* Tile (g, s) of the view into dst, by the packer `fast` (the vector ones
 * need at least one real line). */
static void pack_one(int fast, uint16_t *dst, int pairs, const float *X, const uint16_t *Xbf, size_t rs, size_t cs,
                     int n, int K, int ksteps, int g, int s) {
    uint16_t *tile = dst + ((size_t)g * ksteps + s) * AL_TILE_ELEMS;
    const int l0 = g * AL_TILE_LINES, lines = n - l0 < AL_TILE_LINES ? (n - l0 > 0 ? n - l0 : 0) : AL_TILE_LINES;
    if (fast == PACK_AVX512BF16 && lines > 0)
        al_bf16_tiles_pack_tile_avx512bf16(tile, pairs, X, Xbf, rs, cs, l0, lines, K, s);
    else if (fast == PACK_AVX512 && lines > 0)
        al_bf16_tiles_pack_tile_avx512(tile, pairs, X, Xbf, rs, cs, l0, lines, K, s);
    else pack_tile(tile, pairs, X, Xbf, rs, cs, l0, lines, K, s);
}

/* Part `part` of `parts` of the packing. A view whose lines run along
 * memory (cs 1) is cut by groups, each group's tiles in K order (each line
 * read in order); one whose lines lie side by side (rs 1: a k's values of
 * all lines contiguous) by steps of K, each step's tiles in group order, so
 * that the 32 memory rows of a step are read once, in order, and stay in
 * cache while every group takes its 16 values from them. */
static void pack_part(int fast, uint16_t *dst, int pairs, const float *X, const uint16_t *Xbf, size_t rs, size_t cs,
                      int n, int K, int part, int parts) {
    const int ksteps = al_bf16_tiles_ksteps(K), groups = (int)al_bf16_tiles_groups(n);
    const int by_steps = cs != 1, units = by_steps ? ksteps : groups;
    const int u0 = (int)((long)units * part / parts), u1 = (int)((long)units * (part + 1) / parts);
    for (int u = u0; u < u1; u++) {
        if (by_steps)
            for (int g = 0; g < groups; g++) pack_one(fast, dst, pairs, X, Xbf, rs, cs, n, K, ksteps, g, u);
        else
            for (int s = 0; s < ksteps; s++) pack_one(fast, dst, pairs, X, Xbf, rs, cs, n, K, ksteps, u, s);
    }
}

void al_bf16_tiles_pack(uint16_t *dst, int pairs, const float *X, const uint16_t *Xbf, size_t rs, size_t cs, int n,
                        int K, int part, int parts) {
    const al_cpu_level level = al_cpu_level_now();
    const int fast = !(cs == 1 || rs == 1)        ? PACK_PLAIN
                     : level >= AL_CPU_AVX512_BF16 ? PACK_AVX512BF16
                     : level >= AL_CPU_AVX512      ? PACK_AVX512
                                                   : PACK_PLAIN;
    pack_part(fast, dst, pairs, X, Xbf, rs, cs, n, K, part, parts);
}

void al_bf16_tiles_pack_ref(uint16_t *dst, int pairs, const float *X, const uint16_t *Xbf, size_t rs, size_t cs,
                            int n, int K, int part, int parts) {
    pack_part(PACK_PLAIN, dst, pairs, X, Xbf, rs, cs, n, K, part, parts);
}

/* The plain reference of al_bf16_tiles_kernel_amx, with the same K blocks
 * and the same way of adding them into C (so it differs from the AMX
 * kernel only in the order of each block's fp32 sums). */
void al_bf16_tiles_kernel_ref(const uint16_t *Ap, const uint16_t *Bp, int ksteps, int r0, int r1, int c0, int c1,
                              float alpha, float beta, float *C, size_t ldc) {
    assert(r0 % AL_TILE_LINES == 0 && c0 % AL_TILE_LINES == 0);
    for (int s0 = 0; s0 < ksteps; s0 += AL_TILES_KBLOCK) {
        const int s1 = ksteps - s0 < AL_TILES_KBLOCK ? ksteps : s0 + AL_TILES_KBLOCK;
        const float keep = s0 == 0 ? beta : 1.0f; /* later K blocks add to C */
        for (int i = r0; i < r1; i++)
            for (int j = c0; j < c1; j++) {
                const uint16_t *a = Ap + (size_t)(i / 16) * ksteps * AL_TILE_ELEMS + (i % 16) * AL_TILE_K;
                const uint16_t *b = Bp + (size_t)(j / 16) * ksteps * AL_TILE_ELEMS + 2 * (j % 16);
                float sum = 0.0f;
                for (int s = s0; s < s1; s++)
                    for (int p = 0; p < AL_TILE_K / 2; p++) {
                        const uint16_t *ap = a + (size_t)s * AL_TILE_ELEMS + 2 * p,
                                       *bp = b + (size_t)s * AL_TILE_ELEMS + p * 32;
                        sum += al_bits_float((uint32_t)ap[0] << 16) * al_bits_float((uint32_t)bp[0] << 16) +
                               al_bits_float((uint32_t)ap[1] << 16) * al_bits_float((uint32_t)bp[1] << 16);
                    }
                float *c = C + (size_t)i * ldc + j;
                *c = keep == 0.0f ? alpha * sum : alpha * sum + keep * *c;
            }
    }
}
