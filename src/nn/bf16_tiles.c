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
 * packed once per product (precision.c's plan), each group on its own, so
 * the bits do not depend on how the groups are shared among threads; every
 * tile of C then reads it in place (oneDNN, in contrast, packs a tile's
 * weights again for every tile of C it is called for).
 *
 * Packing reads the source in its memory order: a line whose k run
 * lies contiguous is copied (rounded) as a run; otherwise the k-th values of
 * the group's 16 lines lie contiguous and are copied as such, then spread.
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

/* dst[len] = src (BF16, copied) or srcf rounded to bf16. */
static void run_bf16(uint16_t *restrict dst, const float *restrict srcf, const uint16_t *restrict src, int len) {
    if (src) memcpy(dst, src, sizeof(uint16_t) * (size_t)len);
    else
        for (int i = 0; i < len; i++) dst[i] = (uint16_t)(al_bf16_round_bits(srcf[i]) >> 16);
}

/* Element (line, k) of the source view: X (fp32) or Xbf (BF16) at line rs +
 * k cs, rounded to bf16. */
static inline uint16_t at_bf16(const float *X, const uint16_t *Xbf, size_t rs, size_t cs, int line, int k) {
    const size_t at = (size_t)line * rs + (size_t)k * cs;
    return Xbf ? Xbf[at] : (uint16_t)(al_bf16_round_bits(X[at]) >> 16);
}

enum { CHUNK_K = 256, CHUNK_STEPS = CHUNK_K / AL_TILE_K };

/* One group (lines [l0, l0 + lines), lines <= 16) into its tiles, K in
 * chunks of CHUNK_K: each chunk is gathered in the source's memory order
 * (runs of k per line when cs is 1, runs of lines per k when rs is 1),
 * rounded, zeros past the lines and K, then written out as pairs of
 * neighbouring k (32-bit words): word (line c, pair p) of a tile goes to
 * word p * 16 + c (pairs form) or c * 16 + p (rows form). */
static void pack_group(uint16_t *group, int pairs, const float *X, const uint16_t *Xbf, size_t rs, size_t cs, int l0,
                       int lines, int K, int ksteps) {
    uint16_t by_line[AL_TILE_LINES][CHUNK_K] __attribute__((aligned(64))); /* cs == 1 */
    uint16_t by_k[CHUNK_K][AL_TILE_LINES] __attribute__((aligned(64)));    /* otherwise */
    const int line_runs = cs == 1;
    for (int k0 = 0; k0 < ksteps * AL_TILE_K; k0 += CHUNK_K) {
        const int kn = K - k0 < CHUNK_K ? (K - k0 > 0 ? K - k0 : 0) : CHUNK_K;
        const int steps = ksteps - k0 / AL_TILE_K < CHUNK_STEPS ? ksteps - k0 / AL_TILE_K : CHUNK_STEPS;
        if (line_runs) {
            for (int c = 0; c < AL_TILE_LINES; c++) {
                const size_t at = (size_t)(l0 + c) * rs + (size_t)k0;
                const int n = c < lines ? kn : 0;
                if (n) run_bf16(by_line[c], X ? X + at : NULL, Xbf ? Xbf + at : NULL, n);
                memset(by_line[c] + n, 0, sizeof(uint16_t) * (size_t)(CHUNK_K - n));
            }
        } else {
            for (int kk = 0; kk < CHUNK_K; kk++) {
                memset(by_k[kk], 0, sizeof by_k[kk]);
                if (kk >= kn) continue;
                if (rs == 1) {
                    const size_t at = (size_t)(k0 + kk) * cs + (size_t)l0;
                    run_bf16(by_k[kk], X ? X + at : NULL, Xbf ? Xbf + at : NULL, lines);
                } else { /* no unit stride (not made by al_sgemm): element by element */
                    for (int c = 0; c < lines; c++) by_k[kk][c] = at_bf16(X, Xbf, rs, cs, l0 + c, k0 + kk);
                }
            }
        }
        for (int s = 0; s < steps; s++) {
            uint32_t *tile = (uint32_t *)(group + (size_t)(k0 / AL_TILE_K + s) * AL_TILE_ELEMS);
            for (int c = 0; c < AL_TILE_LINES; c++)
                for (int p = 0; p < AL_TILE_K / 2; p++) {
                    const int kk = s * AL_TILE_K + 2 * p;
                    uint32_t word;
                    if (line_runs) memcpy(&word, by_line[c] + kk, sizeof word);
                    else word = (uint32_t)by_k[kk][c] | (uint32_t)by_k[kk + 1][c] << 16;
                    tile[pairs ? p * 16 + c : c * 16 + p] = word;
                }
        }
    }
}

/* Groups [g0, g1) into dst, each by pack_group or, with `fast`, by the
 * AVX-512 packer (views with a unit stride). */
static void pack_groups(int fast, uint16_t *dst, int pairs, const float *X, const uint16_t *Xbf, size_t rs, size_t cs,
                        int n, int K, int g0, int g1) {
    const int ksteps = al_bf16_tiles_ksteps(K);
    for (int g = g0; g < g1; g++) {
        uint16_t *group = dst + (size_t)g * ksteps * AL_TILE_ELEMS;
        const int l0 = g * AL_TILE_LINES, lines = n - l0 < AL_TILE_LINES ? n - l0 : AL_TILE_LINES;
        if (lines <= 0) /* the zero groups past the end */
            memset(group, 0, sizeof(uint16_t) * (size_t)ksteps * AL_TILE_ELEMS);
        else if (fast) al_bf16_tiles_pack_group_avx512(group, pairs, X, Xbf, rs, cs, l0, lines, K, ksteps);
        else pack_group(group, pairs, X, Xbf, rs, cs, l0, lines, K, ksteps);
    }
}

void al_bf16_tiles_pack(uint16_t *dst, int pairs, const float *X, const uint16_t *Xbf, size_t rs, size_t cs, int n,
                        int K, int g0, int g1) {
    const int fast = al_cpu_level_now() >= AL_CPU_AVX512 && (cs == 1 || rs == 1);
    pack_groups(fast, dst, pairs, X, Xbf, rs, cs, n, K, g0, g1);
}

void al_bf16_tiles_pack_ref(uint16_t *dst, int pairs, const float *X, const uint16_t *Xbf, size_t rs, size_t cs,
                            int n, int K, int g0, int g1) {
    pack_groups(0, dst, pairs, X, Xbf, rs, cs, n, K, g0, g1);
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
