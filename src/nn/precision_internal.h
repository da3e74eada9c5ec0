/*
 * precision_internal.h: what linear.c calls of precision.c, and the own
 * BF16 kernels' interface (gemm_avx512bf16.c, gemm_amx.c, the plain
 * reference in precision.c; tests call them directly).
 *
 * A BF16 product in al_sgemm runs as: one plan per product (the engine, the
 * calling thread's workspace cut into one slot per OpenMP thread), then one
 * single-threaded call per tile of C (rows [r0, r1) x columns [c0, c1)),
 * each with its thread's slot.
 *
 * The own kernels' packed blocks (zeros in all padding):
 *   A  mp x kp bf16, row-major (row i at i * kp), mp = mb rounded up to
 *      AL_BF16_PAD_M, kp = kb rounded up to AL_BF16_PAD_K
 *   B  "VNNI" pairs: kp/2 rows of np pairs, element (k, j) at
 *      (k / 2) * 2 np + 2 j + k % 2, np = nb rounded up to AL_BF16_PAD_N
 * which is what vdpbf16ps (one pair of A broadcast against 16 pairs of B)
 * and AMX's tdpbf16ps (A tiles of 16 rows x 32 bf16, B tiles of 16 pair
 * rows x 16 columns) read.
 */
#ifndef AL_PRECISION_INTERNAL_H
#define AL_PRECISION_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "nn.h"

/* An operand held whole in the engine's input type: element (i, k) of op(X)
 * (for B: i is the column j) at p + (i rs + k cs) elements. */
typedef struct al_bf16_view {
    const void *p;
    long rs, cs;
} al_bf16_view;

/* How a BF16 product runs: planned once per product by the calling thread. */
typedef struct al_bf16_plan {
    al_bf16_engine engine; /* the engine of this product */
    char *ws;              /* the workspace: `slots` slots of slot_bytes (NULL: stack blocks) */
    size_t slot_bytes;
    int merge_rows; /* whether al_sgemm may run neighbouring row blocks as one tile (emulated only) */
    int cols_first; /* whether al_sgemm cuts C's columns before its rows (onednn: each tile re-packs its B) */
    /* onednn: both operands whole, rounded once for the product (or read in
     * place from a BF16 copy), which every tile reads as a strided view */
    al_bf16_view a, b;
} al_bf16_plan;

/* Plans a product whose tiles run on `slots` threads (thread t uses slot t),
 * with al_sgemm's arguments (B fp32, or BF16 itself in Bbf). For the onednn
 * engine this rounds the operands that have no BF16 copy, once, on `slots`
 * threads (each element alone: the bits do not depend on them). */
void al_bf16_plan_product(al_bf16_plan *p, int slots, int a_transposed, int b_transposed, int M, int N, int K,
                          const float *A, int lda, const float *B, const uint16_t *Bbf, int ldb);
/* One tile of al_sgemm's product in BF16 mode, with al_sgemm's arguments;
 * single-threaded, with workspace slot `slot` of the plan. B is fp32 (B,
 * Bbf NULL) or BF16 itself (Bbf, B NULL: al_sgemm_bf16_b). */
void al_sgemm_tile_bf16(const al_bf16_plan *p, int slot, int a_transposed, int b_transposed, int r0, int r1, int c0,
                        int c1, int K, float alpha, const float *A, int lda, const float *B, const uint16_t *Bbf, int ldb,
                        float beta, float *C, int ldc);

enum { AL_BF16_PAD_M = 32, AL_BF16_PAD_N = 32, AL_BF16_PAD_K = 32 };
/* C[mb, nb] = alpha A B + beta C (beta 0: C is not read) over packed blocks
 * (layouts above, with kp, np their padded sizes). The plain reference (fp32
 * sums of exact products, pair by pair) and the two fast kernels, which run
 * only where core/cpu.h's set in use has their instructions. The AMX one
 * returns -1 (doing nothing) if the tile state cannot be configured. */
void al_bf16_kernel_ref(int mb, int nb, int kp, int np, float alpha, const uint16_t *Ap, const uint16_t *Bp,
                        float beta, float *C, int ldc);
void al_bf16_kernel_avx512bf16(int mb, int nb, int kp, int np, float alpha, const uint16_t *Ap, const uint16_t *Bp,
                               float beta, float *C, int ldc);
void al_bf16_kernel_amx(int mb, int nb, int kp, int np, float alpha, const uint16_t *Ap, const uint16_t *Bp,
                        float beta, float *C, int ldc);
/* Test hook: nonzero makes the avx512-bf16 engine run (on any CPU) with
 * the plain reference in place of its kernel, so the own engines' packing
 * and blocking run where their kernels cannot; 0 restores it. */
void al_bf16_own_test_ref(int on);
/* Packs op(X)[i0 .. i0+mb, k0 .. k0+kb) (element (i, k) at X[i rs + k cs],
 * or at Xbf, X's BF16 copy, when not NULL) into the own kernels' layouts:
 * A rows, or (al_bf16_pack_vnni) B with i as the column index j. */
void al_bf16_pack_rows(uint16_t *dst, const float *X, const uint16_t *Xbf, size_t rs, size_t cs, int mb, int kb);
void al_bf16_pack_vnni(uint16_t *dst, const float *X, const uint16_t *Xbf, size_t rs, size_t cs, int nb, int kb);
/* n rounded up to a multiple of m. */
static inline int al_round_up(int n, int m) { return (n + m - 1) / m * m; }

/* oneDNN (gemm_onednn.c): whether bf16 (or, test_f32, fp32) matmul
 * primitives can be created here (probed once per kind, cached), and one
 * block C[mb, nb] = alpha A B + beta C with A at element strides (ars, acs)
 * (row, k) and B at (brs, bcs) (k, column), both bf16 (fp32 when test_f32). 0, or -1 when
 * a primitive or its memory could not be had (the caller falls back). */
int al_onednn_available(int test_f32);
int al_onednn_block(int test_f32, int mb, int nb, int kb, float alpha, const void *A, long ars, long acs, const void *B,
                    long brs, long bcs, float beta, float *C, long ldc);

#endif
