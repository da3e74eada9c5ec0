/*
 * precision_internal.h: what linear.c calls of precision.c, and the own
 * BF16 kernels' interface (gemm_avx512bf16.c and its plain reference in
 * precision.c; gemm_amx.c and bf16_tiles.c; tests call them directly).
 *
 * A BF16 product in al_sgemm runs as: one plan per product (the engine, the
 * calling thread's workspace: for onednn and amx the product's operands,
 * rounded or packed whole; for the others one slot per OpenMP thread), then
 * one single-threaded call per tile of C (rows [r0, r1) x columns [c0,
 * c1)), each with its thread's slot.
 *
 * The avx512-bf16 engine's packed blocks (zeros in all padding):
 *   A  mp x kp bf16, row-major (row i at i * kp), mp = mb rounded up to
 *      AL_BF16_PAD_M, kp = kb rounded up to AL_BF16_PAD_K
 *   B  "VNNI" pairs: kp/2 rows of np pairs, element (k, j) at
 *      (k / 2) * 2 np + 2 j + k % 2, np = nb rounded up to AL_BF16_PAD_N
 * which is what vdpbf16ps (one pair of A broadcast against 16 pairs of B)
 * reads. The amx engine packs each operand whole, once per product, into
 * 1 KB tiles (al_bf16_tiles_*, below).
 */
#ifndef AL_PRECISION_INTERNAL_H
#define AL_PRECISION_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "nn.h"

/* The calling thread's room for a compensated product's low parts (linear.c's
 * sgemm_split): `elems` bf16 values, grown on demand and kept like the
 * workspace (freed by al_precision_release or at thread exit); NULL when
 * memory ran out. */
uint16_t *al_bf16_split_room(size_t elems);
/* Test hook: how many compensated products (al_bf16_split) the calling
 * thread has made. */
size_t al_bf16_split_products(void);

/* How al_sgemm cuts one dimension of C (n lines: C's rows or columns) into
 * its tiles (linear.c): `blocks` blocks, block b from line al_cut_start(c,
 * b) to al_cut_start(c, b + 1), the starts at multiples of `quantum` spread
 * evenly. */
typedef struct al_cut {
    int n, quantum, blocks;
} al_cut;

static inline int al_cut_start(al_cut c, int b) {
    const long quanta = (c.n + c.quantum - 1) / c.quantum;
    const long start = (long)c.quantum * (b * quanta / c.blocks);
    return start < c.n ? (int)start : c.n;
}

/* An operand held whole in the engine's input type: element (i, k) of op(X)
 * (for B: i is the column j) at p + (i rs + k cs) elements; or, `blocked`,
 * laid out by C's cut along i (al_cut: the blocks of op(A)'s rows or op(B)'s
 * columns), each block dense with its lines adjacent: in the block of lines
 * [i0, i1), element (i, k) at p + i0 K + k (i1 - i0) + (i - i0), so a
 * tile's view has strides (1, i1 - i0), the layout oneDNN's brgemm kernels
 * take without a copy (gemm_onednn.c). */
typedef struct al_bf16_view {
    const void *p;
    long rs, cs;
    int blocked;
    al_cut cut; /* blocked: the cut */
} al_bf16_view;

/* How a BF16 product runs: planned once per product by the calling thread. */
typedef struct al_bf16_plan {
    al_bf16_engine engine; /* the engine of this product */
    char *ws;              /* the workspace: `slots` slots of slot_bytes (NULL: stack blocks) */
    size_t slot_bytes;
    /* whether al_sgemm may run neighbouring row blocks as one tile, which
     * keeps the bits for emulated on OpenBLAS's exact sets and for onednn
     * on AVX512-BF16 */
    int merge_rows;
    int cols_first; /* whether al_sgemm cuts C's columns before its rows (onednn: each tile re-packs all of its B; amx has its own cut) */
    /* onednn: both operands whole, rounded once for the product (or read in
     * place from a BF16 copy), which every tile reads as a strided view;
     * amx: both packed whole into tiles (p only), of `ksteps` K steps */
    al_bf16_view a, b;
    int ksteps;
} al_bf16_plan;

/* A product's engine and how C is to be cut for it (engine, merge_rows,
 * cols_first; nothing else): the first step of planning. */
void al_bf16_plan_engine(al_bf16_plan *p);
/* Plans a product whose tiles run on `slots` threads (thread t uses slot t),
 * after al_bf16_plan_engine, with al_sgemm_ref's arguments (each operand
 * fp32 or BF16 itself) and C's cut (rows, cols: the tiles' boundaries). For the
 * onednn engine this rounds the operands that have no BF16 copy, once, on
 * `slots` threads (each element alone: the bits do not depend on them),
 * an operand whose lines lie across memory rows laid out blocked by the
 * cut; the engine falls to emulated where no workspace can be had (cut C
 * again then). */
void al_bf16_plan_product(al_bf16_plan *p, int slots, int a_transposed, int b_transposed, int M, int N, int K,
                          al_wref A, int lda, al_wref B, int ldb, al_cut rows, al_cut cols);
/* One tile of al_sgemm_ref's product in BF16 mode, with its arguments;
 * single-threaded, with workspace slot `slot` of the plan. */
void al_sgemm_tile_bf16(const al_bf16_plan *p, int slot, int a_transposed, int b_transposed, int r0, int r1, int c0,
                        int c1, int K, float alpha, al_wref A, int lda, al_wref B, int ldb, float beta, float *C,
                        int ldc);

enum { AL_BF16_PAD_M = 32, AL_BF16_PAD_N = 32, AL_BF16_PAD_K = 32 };
/* C[mb, nb] = alpha A B + beta C (beta 0: C is not read) over packed blocks
 * (layouts above, with kp, np their padded sizes): the avx512-bf16 engine's.
 * The plain reference (fp32 sums of exact products, pair by pair) and the
 * fast kernel, which runs only where core/cpu.h's set in use has its
 * instructions. */
void al_bf16_kernel_ref(int mb, int nb, int kp, int np, float alpha, const uint16_t *Ap, const uint16_t *Bp,
                        float beta, float *C, int ldc);
void al_bf16_kernel_avx512bf16(int mb, int nb, int kp, int np, float alpha, const uint16_t *Ap, const uint16_t *Bp,
                               float beta, float *C, int ldc);
/* The amx engine's operands (bf16_tiles.c has the layout): op(A)'s M rows
 * or op(B)'s N columns ("lines") in groups of 16, K in steps of 32, one
 * 1 KB tile per (group, step), A's tiles in the rows form and B's in the
 * pairs form; AL_TILES_KBLOCK steps of K are summed per pass over C. */
enum { AL_TILE_LINES = 16, AL_TILE_K = 32, AL_TILE_ELEMS = AL_TILE_LINES * AL_TILE_K, AL_TILES_KBLOCK = 32 };
/* Groups (one past the lines', zeros) and steps of an operand of n lines of
 * K values, and its elements. */
size_t al_bf16_tiles_groups(int n);
int al_bf16_tiles_ksteps(int K);
size_t al_bf16_tiles_elems(int n, int K);
/* Packs part `part` of `parts` of the view (line l, value k at X[l rs + k
 * cs], or at Xbf when not NULL: a BF16 source) into dst, tiles in the
 * pairs form (B) or the rows form (A), zeros past the lines and K; the
 * parts together pack every tile once (run them on any threads: each tile
 * depends on the view only). */
void al_bf16_tiles_pack(uint16_t *dst, int pairs, const float *X, const uint16_t *Xbf, size_t rs, size_t cs, int n,
                        int K, int part, int parts);
/* The same in plain C (al_bf16_tiles_pack runs an AVX-512 packer where
 * core/cpu.h's set in use has it: the same bits), and those packers' one
 * tile (lines [l0, l0 + lines), 1 <= lines <= 16, K step s; a view with a
 * unit stride): AVX-512's integer rounding, AVX512-BF16's vcvtne2ps2bf16. */
void al_bf16_tiles_pack_ref(uint16_t *dst, int pairs, const float *X, const uint16_t *Xbf, size_t rs, size_t cs,
                            int n, int K, int part, int parts);
void al_bf16_tiles_pack_tile_avx512(uint16_t *tile, int pairs, const float *X, const uint16_t *Xbf, size_t rs,
                                    size_t cs, int l0, int lines, int K, int s);
void al_bf16_tiles_pack_tile_avx512bf16(uint16_t *tile, int pairs, const float *X, const uint16_t *Xbf, size_t rs,
                                        size_t cs, int l0, int lines, int K, int s);
/* al_bf16_round_run plainly (the reference), and its loops in AVX-512
 * (integer rounding) and AVX512-BF16 (vcvtne2ps2bf16): the same bits;
 * al_bf16_round_run runs the fastest the set in use has. */
void al_bf16_round_run_ref(uint16_t *restrict dst, const float *restrict src, size_t n);
void al_bf16_round_run_avx512(uint16_t *restrict dst, const float *restrict src, size_t n);
void al_bf16_round_run_avx512bf16(uint16_t *restrict dst, const float *restrict src, size_t n);
/* The AVX512-BF16 loop with dst's whole 64-byte lines streamed past the
 * caches (al_bf16_round_stream). */
void al_bf16_round_stream_avx512bf16(uint16_t *restrict dst, const float *restrict src, size_t n);
/* C[r0..r1, c0..c1) = alpha A B + beta C (beta 0: C is not read) over
 * packed operands of `ksteps` steps; r0 and c0 multiples of 16. K blocks of
 * AL_TILES_KBLOCK steps: the first gives alpha S + beta C, each later one
 * adds alpha S. The plain reference, and the AMX kernel (only where core/cpu.h's
 * set in use is amx, which includes the OS's permission for the tiles). */
void al_bf16_tiles_kernel_ref(const uint16_t *Ap, const uint16_t *Bp, int ksteps, int r0, int r1, int c0, int c1,
                              float alpha, float beta, float *C, size_t ldc);
void al_bf16_tiles_kernel_amx(const uint16_t *Ap, const uint16_t *Bp, int ksteps, int r0, int r1, int c0, int c1,
                              float alpha, float beta, float *C, size_t ldc);
/* Test hook: the AMX kernel's passes over a K block take `steps` steps
 * each (0: its default); every split gives the same bits. */
void al_bf16_tiles_set_pass_steps(int steps);
/* Test hook: nonzero makes the avx512-bf16 engine run (on any CPU) with
 * the plain reference in place of its kernel, so the own engines' packing
 * and blocking run where their kernels cannot; 0 restores it. */
void al_bf16_own_test_ref(int on);
/* Test hooks of the amx engine's packed weights (precision.c): 0 stops
 * keeping them (1 resumes; either empties the table); how many are kept. */
void al_bf16_packed_cache(int on);
size_t al_bf16_packed_count(void);
/* Packs op(X)[i0 .. i0+mb, k0 .. k0+kb) (element (i, k) at X[i rs + k cs],
 * or at Xbf, X's BF16 copy, when not NULL) into the own kernels' layouts:
 * A rows, or (al_bf16_pack_vnni) B with i as the column index j. */
void al_bf16_pack_rows(uint16_t *dst, const float *X, const uint16_t *Xbf, size_t rs, size_t cs, int mb, int kb);
void al_bf16_pack_vnni(uint16_t *dst, const float *X, const uint16_t *Xbf, size_t rs, size_t cs, int nb, int kb);
/* f's bits rounded to the nearest bf16 (ties to even; NaN kept, quiet), as
 * the top half of a float's bits: al_f32_to_bf16 without the branch, so that
 * loops over it vectorise. */
static inline uint32_t al_bf16_round_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
    const uint32_t nan = (u | 0x00400000u) & 0xFFFF0000u;
    return (u & 0x7FFFFFFFu) > 0x7F800000u ? nan : rounded;
}

static inline float al_bits_float(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* n rounded up to a multiple of m. */
static inline int al_round_up(int n, int m) { return (n + m - 1) / m * m; }

/* oneDNN (gemm_onednn.c): whether bf16 (or, test_f32, fp32) matmul
 * primitives can be created here (probed once per kind, cached), and one
 * block C[mb, nb] = alpha A B + beta C with A at element strides (ars, acs)
 * (row, k) and B at (brs, bcs) (k, column), both bf16 (fp32 when test_f32). 0, or -1 when
 * a primitive or its memory could not be had (the caller falls back). */
int al_onednn_available(int test_f32);
/* Whether oneDNN's bf16 blocks (test_f32: its fp32 test mode's) give the
 * bits of one taller block for neighbouring row blocks (gemm_onednn.c). */
int al_onednn_rows_merge_exact(int test_f32);
int al_onednn_block(int test_f32, int mb, int nb, int kb, float alpha, const void *A, long ars, long acs, const void *B,
                    long brs, long bcs, float beta, float *C, long ldc);

#endif
