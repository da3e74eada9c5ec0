/*
 * linear.c: the dense products of every projection, as CBLAS sgemm calls.
 * Weights are [out, in] row-major (HF), activations [N, in] row-major, so
 * y = x W^T is one sgemm with W transposed.
 *
 * Every product goes through al_sgemm, whose bits do not depend on the thread
 * count. OpenBLAS's own threading cuts a product into one piece per thread,
 * and its AVX2 kernels (Haswell, Zen) round the pieces' edges differently, so
 * a 2-thread sgemm of 280 x 48 x 48 differs from the 1-thread one in a quarter
 * of its elements. al_sgemm instead cuts C into blocks that depend on
 * the shape only and runs each block as one single-threaded OpenBLAS call
 * inside an OpenMP loop. Row blocks are cut at multiples of 48 rows: on
 * OpenBLAS's SSE3, AVX and AVX2 kernels such blocks give the very bits of
 * one whole single-threaded call, so there fewer threads than blocks may run
 * neighbouring blocks as one call. On its AVX-512 kernels they do only where
 * every block is large enough for OpenBLAS's packed path (a smaller block's
 * shape can move it to its small-matrix or direct path, which sum in other
 * orders), so there the smaller products run the shape's blocks as they are
 * at every thread count (al_blas_row_merge_exact).
 *
 * In BF16 mode (nn.h's precision) the same tiles run precision.c's BF16
 * product instead of OpenBLAS, each single-threaded, over a workspace planned
 * once per product (oneDNN: the operands rounded once; the other engines: a
 * slot of blocks per thread), whatever the engine (oneDNN included: it is
 * called per tile, one OpenMP thread, rather than for the whole product on
 * all threads): a tile's bits depend on its shape only, so BF16 products
 * give the same bits for any thread count too. Neighbouring row blocks are
 * merged only where the engine's bits allow (the plan's merge_rows): the
 * emulated engine (OpenBLAS underneath, rows at multiples of 48, where its
 * kernels allow) and onednn on AVX512-BF16 without AMX, whose kernels sum
 * each element of C the same for any rows (gemm_onednn.c); the amx and own
 * engines always run the shape's tiles.
 *
 * A product made while the calling thread's al_bf16_split flag is set runs
 * compensated: three BF16 products over its operands' high and low parts
 * (sgemm_split, below), the same bits at any thread count as well.
 */
#include <assert.h>
#include <cblas.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "../core/blas.h"
#include "nn.h"
#include "precision_internal.h"

/* How C is cut: its rows into a power of two of blocks, at most 16, of at
 * least 96 rows on average (every block re-packs op(B), a few percent of its
 * time below that), boundaries at multiples of 48 rows (32 for the amx
 * and onednn engines, below) spread evenly; then,
 * only where that leaves fewer than 16 blocks and C is wide (a product of
 * few rows, e.g. a short prompt), its columns likewise, in blocks of at least
 * 512 columns (each re-packs op(A)) cut at multiples of 64. The cut is a
 * function of the shape; with fewer threads than blocks, neighbouring row
 * blocks run as one call where that changes no bits (al_blas_row_merge_exact:
 * rows cut at multiples of 48 give those of one whole call; on AVX-512 only
 * past AL_BLAS_PACKED_MNK), then column blocks likewise (on AVX-512 only:
 * al_blas_col_merge_exact), which saves re-packing: on an AVX-512 Xeon (2
 * threads, fp32, alternated with the build that never merged there) the
 * gpt2 prefill took 0.906x the time with rows merged, 0.926x of that again
 * with columns too, and its training step 0.858x. Even block counts keep 2,
 * 4, 8 and 16 threads equally busy.
 * The onednn BF16 engine cuts the other way round (columns first, blocks
 * of at least 256): every tile reads all of its op(B) (the weights), which
 * oneDNN re-packs per tile, so few row blocks read each weight few times (a
 * Llama-7B-shaped prefill of 1200 tokens: 8 row blocks made oneDNN 1.15x
 * slower); but it cuts rows only where op(B) is shallow against C's rows
 * (product_cut), since a tile narrower than C costs oneDNN a copy of its C.
 * The amx engine has a cut of its own (amx_cut, below). */
enum { ROW_QUANTUM = 48, MIN_BLOCK_ROWS = 96, COL_QUANTUM = 64, MIN_BLOCK_COLS = 512, MAX_BLOCKS = 16 };
enum { COLS_FIRST_MIN_BLOCK_COLS = 256, ROWS_ONLY_MIN_BLOCKS = 8 };
/* The onednn engine merges row blocks (where its plan allows: AVX512-BF16)
 * up to this many rows: on an AMX Xeon with that set forced (a stand-in for
 * Zen 4's kernels; alternated pairs) merging made the study mha step 0.968x
 * the time, the gpt2 step 0.987x, the 512-token prefill 0.984x, while the
 * ViT's 12,544-row products merged to 2 blocks of 6,272 trained 1.02-1.03x
 * slower (2 pairs, noisy); oneDNN packs op(B) once per call, which matters
 * less against taller blocks. */
enum { ONEDNN_MERGE_MAX_ROWS = 1024 };
/* The amx engine's kernel runs C in strips of 32 rows (nn/gemm_amx.c): row
 * blocks cut at multiples of 48 leave a half strip at the end of most blocks
 * (1024 rows in 8 blocks: 36 strips where 32 do), each as slow as a whole
 * one and summed through a buffer, so its cut is at multiples of 32: the
 * kernel 1.08-1.09x as fast over 1024-row products (K 256, 688; alternated,
 * one thread, docs/kernels.md). The onednn engine's too: at 48, 1024 rows
 * in 8 blocks are 96 to 144 rows, which two threads finish in the time of
 * 544 rows, not 512; at 32 every block is 128 (a study model's bf16 step
 * 1.6 % faster on Zen 4, 5 of 6 alternated pairs). */
enum { BF16_ROW_QUANTUM = 32 };

/* Halve n into blocks of at least min_size while fewer than `most`. */
static int block_count(int n, int min_size, int most) {
    int blocks = 1;
    while (blocks < most && n / (2 * blocks) >= min_size) blocks *= 2;
    return blocks;
}

int al_sgemm_row_blocks(int M) { return block_count(M, MIN_BLOCK_ROWS, MAX_BLOCKS); }

/* The amx engine's cut: few large tiles, as many as the threads can share
 * evenly. Its kernel gives the same bits for any cut whose row blocks start
 * at multiples of 32 and column blocks at multiples of 64 (every sum's
 * order is fixed by the element's place: whole 32 x 32 blocks of C are
 * summed in the tiles onto C, the partial ones at C's own edges through a
 * buffer, wherever the tiles' edges fall; nn/gemm_amx.c), so this one, alone
 * of the cuts, may depend on the thread count. Each row block streams every
 * column of its tiles' op(B) through L2 once and each tile starts cold, so
 * at most 2 x threads tiles (a power of two), row blocks of at least 256
 * rows, at most half of them, then column blocks of at least 512. Against
 * the shape's cut (16 tiles: 2 x 8 or 8 x 2), alternated in one process on
 * the gpt2 step's eleven product shapes (2 threads, AMX, median of 30
 * pairs): 0.88-0.98x the time each, the `bench train --preset gpt2
 * --precision bf16` step 0.949x and 0.954x (6 of 6 pairs in both runs;
 * docs/kernels.md). But an op(B) of more than AMX_B_ROWS_MAX bytes of bf16
 * (a Llama-7B weight, 32-90 MB, where gpt2's largest is 3.5 MB) comes from
 * memory for every tile: those products keep the shape's columns-first cut
 * (columns in up to 16 blocks of at least 256, rows in as many as keep 16
 * tiles), under which the 7B attention map took 11.0-11.2 s as before,
 * against 11.2-11.8 s with the few large tiles (alternated runs). */
enum { AMX_MIN_BLOCK_ROWS = 256, AMX_MIN_BLOCK_COLS = 512 };

/* The columns-first cut's blocks (above): columns in up to MAX_BLOCKS of
 * at least COLS_FIRST_MIN_BLOCK_COLS, rows in as many as keep MAX_BLOCKS
 * tiles in all; returns the row blocks. */
static int cols_first_blocks(int M, int N, int *col_blocks) {
    *col_blocks = block_count(N, COLS_FIRST_MIN_BLOCK_COLS, MAX_BLOCKS);
    return block_count(M, MIN_BLOCK_ROWS, MAX_BLOCKS / *col_blocks);
}

#define AMX_B_ROWS_MAX ((size_t)8 << 20)
static void amx_cut(int M, int N, int K, int threads, al_cut *rows, al_cut *cols) {
    if ((size_t)N * (size_t)K * sizeof(uint16_t) > AMX_B_ROWS_MAX) {
        int col_blocks;
        const int row_blocks = cols_first_blocks(M, N, &col_blocks);
        *rows = (al_cut){M, BF16_ROW_QUANTUM, row_blocks};
        *cols = (al_cut){N, COL_QUANTUM, col_blocks};
        return;
    }
    int most = 2;
    while (most < 2 * threads && most < 1024) most *= 2;
    int min_rows = AMX_MIN_BLOCK_ROWS, min_cols = AMX_MIN_BLOCK_COLS, row_blocks, col_blocks;
    for (;;) { /* smaller blocks only where the large ones leave threads idle */
        row_blocks = block_count(M, min_rows, most / 2);
        col_blocks = block_count(N, min_cols, most / row_blocks);
        if (row_blocks * col_blocks >= threads || min_rows <= BF16_ROW_QUANTUM) break;
        min_rows /= 2, min_cols /= 2;
    }
    *rows = (al_cut){M, BF16_ROW_QUANTUM, row_blocks};
    *cols = (al_cut){N, COL_QUANTUM, col_blocks};
}

/* The smallest block of cut c. */
static int cut_smallest(al_cut c) {
    int least = c.n;
    for (int b = 0; b < c.blocks; b++) {
        const int w = al_cut_start(c, b + 1) - al_cut_start(c, b);
        if (w < least) least = w;
    }
    return least;
}

/* Halves *blocks (neighbours merged: every boundary stays one of the
 * shape's cut) while they are even, times the other dimension's `other`
 * more than the threads, and the merged blocks at most max_width of the
 * n rows or columns wide. */
static void merge_blocks(int *blocks, int other, int threads, int n, int max_width) {
    while (*blocks > 1 && *blocks * other > threads && *blocks % 2 == 0 && n / (*blocks / 2) <= max_width) *blocks /= 2;
}

/* Where row blocks merge on the onednn engine (its AVX512-BF16 kernels,
 * whose bits no cut of C changes: merge_rows), whether C cut by rows only
 * moves fewer bytes than the columns-first cut, on these threads. Each
 * row block packs all of its op(B) inside oneDNN (N K bf16, read and
 * written), so rows only packs op(B) `rows_only` merged times against the
 * columns-first cut's merged row blocks; but a column tile narrower than C
 * is computed dense and copied into C (M N fp32, read and written; read
 * in first where beta is not 0). So rows only where (R - r) K <= 2 M, 4 M
 * with beta, and its merged blocks still keep every thread busy. On the
 * AMX Xeon with that set forced (one thread per tile, 2 threads, best of
 * 15 alternations) the gpt2 step's deep products took 0.963-0.994x the
 * time cut by rows: dx of 1024 x 768 over K 2,048 (beta 0 and 1) and
 * 2,304, dW of 768 x 2,048 and 768 x 768 over 1,024 tokens; a scan of 800
 * products cut both ways (M 768-2,048, N 300-2,048, K 1,000-4,096, every
 * transposition, beta 0 and 1) gave the same bits. */
static int rows_only_cheaper(int M, int K, int threads, int rows_only, int col_rows, int col_blocks, int beta_reads) {
    int R = rows_only, r = col_rows;
    merge_blocks(&R, 1, threads, M, ONEDNN_MERGE_MAX_ROWS);
    merge_blocks(&r, col_blocks, threads, M, ONEDNN_MERGE_MAX_ROWS);
    return R >= threads && (long)(R - r) * K <= (beta_reads ? 4L : 2L) * M;
}

/* C's cut (rows, then columns) for a product of M x N on `threads` threads
 * (plan: the BF16 plan, NULL for F32; beta_reads: C is read, beta not 0):
 * see above. Threads matter only where row blocks may merge, which changes
 * no bits (nor, there, does onednn's choice of rows only:
 * rows_only_cheaper), and for the amx engine (amx_cut). */
static void product_cut(const al_bf16_plan *plan, int M, int N, int K, int threads, int beta_reads, al_cut *rows,
                        al_cut *cols) {
    if (plan && plan->engine == AL_BF16_AMX) {
        amx_cut(M, N, K, threads, rows, cols);
        return;
    }
    int shape_rows = al_sgemm_row_blocks(M), col_blocks = block_count(N, MIN_BLOCK_COLS, MAX_BLOCKS / shape_rows);
    if (plan && plan->cols_first) { /* each tile reads its whole op(B): few row blocks, many column blocks */
        shape_rows = cols_first_blocks(M, N, &col_blocks);
        if (plan->engine == AL_BF16_ONEDNN && col_blocks > 1) {
            /* oneDNN computes a C tile narrower than C into a dense block
             * copied back (gemm_onednn.c: M N fp32 in and out), while each
             * row block packs all of op(B) (N K) again inside oneDNN. Rows
             * only unless op(B) is deep against C's rows (rows-only blocks
             * times K over 8 M). Measured on Zen 4 (alternated pairs): the
             * gpt2 step (8 x 768 = 6 M) 0.944x the time, a study model's (8
             * x 256 = 2 M) 0.918x, the ViT's (16 x 256: 0.3 M) 0.93-0.995x;
             * a Llama-7B layer's 1,200-token prefill (8 x 4,096 = 27 M)
             * 0.996x, and on AMX 1.15x slower cut by rows (docs). And only
             * where that still makes 8 tiles (M >= 768): a short prompt's
             * few rows would otherwise be one tile on one thread (the cut
             * may not depend on the thread count: it decides the bits).
             * Where row blocks merge, no cut decides the bits, and a deeper
             * op(B) too is cut by rows where that moves fewer bytes on
             * these threads (rows_only_cheaper: the gpt2 step's deep dx and
             * dW products, on 2 threads). */
            const int rows_only = block_count(M, MIN_BLOCK_ROWS, MAX_BLOCKS);
            if (rows_only >= ROWS_ONLY_MIN_BLOCKS &&
                ((long)rows_only * K <= 8L * M ||
                 (plan->merge_rows && rows_only_cheaper(M, K, threads, rows_only, shape_rows, col_blocks, beta_reads))))
                col_blocks = 1, shape_rows = rows_only;
        }
    }
    /* Fewer threads than row blocks: merge neighbouring row blocks (halving
     * keeps every boundary a boundary of the shape's cut, at a multiple of
     * 48 rows), so each thread re-packs op(B) fewer times, where OpenBLAS's
     * kernels give the bits of one whole call for such cuts (above: every
     * block's calls, the smallest row block by the narrowest column block,
     * past the AVX-512 sets' small paths). A BF16 engine merges where its
     * plan says that keeps the bits (merge_rows: the emulated engine on
     * OpenBLAS's exact sets; onednn on AVX512-BF16, where two threads then
     * run 2 tiles of a 1,024-row product, not 8, and oneDNN packs each
     * op(B) twice, not 8 times; blocks of at most ONEDNN_MERGE_MAX_ROWS);
     * the others keep the shape's tiles. */
    int row_blocks = shape_rows;
    if (plan) {
        const int widest = plan->engine == AL_BF16_ONEDNN ? ONEDNN_MERGE_MAX_ROWS : M;
        if (plan->merge_rows) merge_blocks(&row_blocks, col_blocks, threads, M, widest);
    } else {
        const int min_rows = cut_smallest((al_cut){M, ROW_QUANTUM, shape_rows}),
                  min_cols = cut_smallest((al_cut){N, COL_QUANTUM, col_blocks});
        if (al_blas_row_merge_exact(min_rows, min_cols, K)) merge_blocks(&row_blocks, col_blocks, threads, M, M);
        /* then columns likewise, where that too keeps the bits (the AVX-512
         * sets past their small paths; halving keeps the boundaries at
         * multiples of 64): each column block re-packs op(A), which made a
         * 2-thread fp32 prefill of 512 tokens, 4 column tiles, 1.08x the
         * time of 2 (median of 6 alternated pairs) */
        if (al_blas_col_merge_exact(min_rows, min_cols, K)) merge_blocks(&col_blocks, row_blocks, threads, N, N);
    }
    const int bf16_rows = plan && plan->engine == AL_BF16_ONEDNN;
    *rows = (al_cut){M, bf16_rows ? BF16_ROW_QUANTUM : ROW_QUANTUM, row_blocks};
    *cols = (al_cut){N, COL_QUANTUM, col_blocks};
}

/* Rows [r0, r1) x columns [c0, c1) of al_sgemm's product: one OpenBLAS call
 * (F32), or precision.c's BF16 product of that tile (plan: NULL for F32). */
static void sgemm_tile(const al_bf16_plan *plan, int slot, int a_transposed, int b_transposed, int r0, int r1, int c0,
                       int c1, int K, float alpha, al_wref A, int lda, al_wref B, int ldb, float beta, float *C,
                       int ldc) {
    if (plan) {
        al_sgemm_tile_bf16(plan, slot, a_transposed, b_transposed, r0, r1, c0, c1, K, alpha, A, lda, B, ldb, beta, C,
                           ldc);
        return;
    }
    assert(A.dt == AL_DT_F32 && B.dt == AL_DT_F32); /* a BF16 operand always brings a plan */
    const float *A_rows = (const float *)A.p + (a_transposed ? (size_t)r0 : (size_t)r0 * lda);
    const float *B_cols = (const float *)B.p + (b_transposed ? (size_t)c0 * ldb : (size_t)c0);
    cblas_sgemm(CblasRowMajor, a_transposed ? CblasTrans : CblasNoTrans, b_transposed ? CblasTrans : CblasNoTrans,
                r1 - r0, c1 - c0, K, alpha, A_rows, lda, B_cols, ldb, beta, C + (size_t)r0 * ldc + c0, ldc);
}

/* ---- compensated BF16 products (nn.h: al_bf16_split) ----
 * The calling thread's flag; while it is set, a product that would run on
 * the BF16 engines runs as three of them (sgemm_split). */
static _Thread_local int split_on;
static _Thread_local size_t split_products; /* made by this thread: al_bf16_split_products */

size_t al_bf16_split_products(void) { return split_products; }

int al_bf16_split(int on) {
    const int was = split_on;
    split_on = on != 0;
    return was;
}

/* x rounded to bf16 (nearest, ties to even) and back: the high part the
 * engines multiply in place of an fp32 operand. Finite x only matters: a NaN
 * or infinity reaches C through the high parts' own product anyway. */
static inline float bf16_high(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    float h;
    memcpy(&h, &u, sizeof h);
    return h;
}

/* lo[rows][cols] (dense) = bf16(X - bf16(X)) of X[rows][cols] stored ld
 * floats apart: what rounding X to bf16 left out, itself rounded to bf16. */
static void split_low(uint16_t *lo, const float *X, int ld, int rows, int cols) {
    for (int r = 0; r < rows; r++) {
        const float *x = X + (size_t)r * ld;
        uint16_t *l = lo + (size_t)r * cols;
        for (int c = 0; c < cols; c++) {
            uint32_t u;
            const float rest = bf16_high(x[c] - bf16_high(x[c]));
            memcpy(&u, &rest, sizeof u);
            l[c] = (uint16_t)(u >> 16);
        }
    }
}

/* The low parts of an operand of a compensated product: lo[i][j] of the
 * stored matrix (its own orientation), ld values apart; lo NULL where the
 * operand has none (BF16 values: lo 0). */
typedef struct split_low_part {
    const uint16_t *lo;
    int ld;
} split_low_part;

/* C = alpha op(A) op(B) + beta C to about fp32's accuracy on the BF16
 * engines, given the operands' low parts: each fp32 operand X is hi + lo
 * (hi = bf16(X), lo = bf16(X - hi): 16 significant bits together), and C =
 * beta C + alpha (lo_A hi_B + hi_A lo_B + hi_A hi_B), the small terms
 * first, each an ordinary BF16 product (so the bits do not depend on the
 * thread count either); lo_A lo_B, below 2^-18 of the product, is left
 * out. A missing low part's term is skipped (a BF16 operand is its own hi;
 * where memory for the low parts ran out the product is the plain one). */
static void sgemm_split_parts(int a_transposed, int b_transposed, int M, int N, int K, float alpha, al_wref A,
                              int lda, split_low_part a_low, al_wref B, int ldb, split_low_part b_low, float beta,
                              float *C, int ldc) {
    split_products++;
    split_on = 0; /* the products below are plain BF16 ones */
    if (a_low.lo) {
        al_sgemm_ref(a_transposed, b_transposed, M, N, K, alpha, (al_wref){a_low.lo, AL_DT_BF16}, a_low.ld, B, ldb,
                     beta, C, ldc);
        beta = 1.0f;
    }
    if (b_low.lo) {
        al_sgemm_ref(a_transposed, b_transposed, M, N, K, alpha, A, lda, (al_wref){b_low.lo, AL_DT_BF16}, b_low.ld,
                     beta, C, ldc);
        beta = 1.0f;
    }
    al_sgemm_ref(a_transposed, b_transposed, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    split_on = 1;
}

/* The low parts of X[rows][cols] (ld apart) at *room, moved past them; none
 * for a BF16 operand or without room. */
static split_low_part split_low_of(al_wref X, int ld, int rows, int cols, uint16_t **room) {
    if (X.dt != AL_DT_F32 || !*room) return (split_low_part){NULL, 0};
    uint16_t *lo = *room;
    split_low(lo, X.p, ld, rows, cols);
    *room += (size_t)rows * cols;
    return (split_low_part){lo, cols};
}

/* sgemm_split_parts with the low parts made here, in the calling thread's
 * room (al_bf16_split_room). */
static void sgemm_split(int a_transposed, int b_transposed, int M, int N, int K, float alpha, al_wref A, int lda,
                        al_wref B, int ldb, float beta, float *C, int ldc) {
    /* the stored shapes: op(A) is A[M][K] or, transposed, A[K][M]; op(B) is B[K][N] or B[N][K] */
    const int a_rows = a_transposed ? K : M, a_cols = a_transposed ? M : K;
    const int b_rows = b_transposed ? N : K, b_cols = b_transposed ? K : N;
    const size_t a_lo = A.dt == AL_DT_F32 ? (size_t)a_rows * a_cols : 0;
    const size_t b_lo = B.dt == AL_DT_F32 ? (size_t)b_rows * b_cols : 0;
    uint16_t *room = al_bf16_split_room(a_lo + b_lo);
    const split_low_part a_low = split_low_of(A, lda, a_rows, a_cols, &room);
    const split_low_part b_low = split_low_of(B, ldb, b_rows, b_cols, &room);
    sgemm_split_parts(a_transposed, b_transposed, M, N, K, alpha, A, lda, a_low, B, ldb, b_low, beta, C, ldc);
}

/* C[M, N] = alpha op(A)[M, K] op(B)[K, N] + beta C, row-major (cblas_sgemm's
 * arguments), the same bits for any thread count; an operand given as BF16
 * values takes the product to the BF16 engines whatever the mode. OpenBLAS
 * threads a call only outside an active parallel region and when the
 * calling task's OpenMP thread count is above 1, so each call below sets
 * that count to 1 first (a setting of the calling task alone, restored or
 * dropped at the end). */
void al_sgemm_ref(int a_transposed, int b_transposed, int M, int N, int K, float alpha, al_wref A, int lda, al_wref B,
                  int ldb, float beta, float *C, int ldc) {
    assert((A.dt == AL_DT_F32 || A.dt == AL_DT_BF16) && (B.dt == AL_DT_F32 || B.dt == AL_DT_BF16));
    if (M <= 0 || N <= 0) return;
    if (split_on && K > 0 && (A.dt == AL_DT_F32 || B.dt == AL_DT_F32) &&
        (A.dt == AL_DT_BF16 || B.dt == AL_DT_BF16 || al_precision_now() == AL_PREC_BF16)) {
        sgemm_split(a_transposed, b_transposed, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    /* inside a parallel region (e.g. per-head products) the tiles run on
     * this thread alone: a nested region gets one thread */
    const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
    al_bf16_plan bf16;
    const al_bf16_plan *plan = NULL;
    al_cut rows, cols;
    if (A.dt == AL_DT_BF16 || B.dt == AL_DT_BF16 || al_precision_now() == AL_PREC_BF16) {
        /* the engine first: the cut depends on it, and the plan lays the operands out by the cut */
        al_bf16_plan_engine(&bf16);
        const al_bf16_engine chosen = bf16.engine;
        product_cut(&bf16, M, N, K, threads, beta != 0.0f, &rows, &cols);
        al_bf16_plan_product(&bf16, threads, a_transposed, b_transposed, M, N, K, A, lda, B, ldb, rows, cols);
        plan = &bf16;
        if (bf16.engine != chosen) /* no workspace: the stack blocks */
            product_cut(plan, M, N, K, threads, beta != 0.0f, &rows, &cols);
    } else product_cut(NULL, M, N, K, threads, beta != 0.0f, &rows, &cols);
    const int row_blocks = rows.blocks, col_blocks = cols.blocks, tiles = row_blocks * col_blocks;
    if (tiles == 1 || threads == 1) { /* on this thread: no team to start */
        const int max_threads = omp_get_max_threads();
        omp_set_num_threads(1);
        for (int t = 0; t < tiles; t++) {
            const int rb = t / col_blocks, cb = t % col_blocks;
            sgemm_tile(plan, 0, a_transposed, b_transposed, al_cut_start(rows, rb), al_cut_start(rows, rb + 1),
                       al_cut_start(cols, cb), al_cut_start(cols, cb + 1), K, alpha, A, lda, B, ldb, beta, C, ldc);
        }
        omp_set_num_threads(max_threads);
        return;
    }
#pragma omp parallel num_threads(threads)
    {
        omp_set_num_threads(1); /* this thread's implicit task only */
        const int slot = omp_get_thread_num();
#pragma omp for schedule(dynamic, 1)
        for (int t = 0; t < tiles; t++) {
            const int rb = t / col_blocks, cb = t % col_blocks;
            const int r0 = al_cut_start(rows, rb), r1 = al_cut_start(rows, rb + 1);
            const int c0 = al_cut_start(cols, cb), c1 = al_cut_start(cols, cb + 1);
            if (r1 > r0 && c1 > c0)
                sgemm_tile(plan, slot, a_transposed, b_transposed, r0, r1, c0, c1, K, alpha, A, lda, B, ldb, beta, C,
                           ldc);
        }
    }
}

void al_sgemm(int a_transposed, int b_transposed, int M, int N, int K, float alpha, const float *A, int lda,
              const float *B, int ldb, float beta, float *C, int ldc) {
    al_sgemm_ref(a_transposed, b_transposed, M, N, K, alpha, al_wref_f32(A), lda, al_wref_f32(B), ldb, beta, C, ldc);
}

/* y[N,out] (+)= x[N,in] . W[out,in]^T */
void al_linear_fwd(float *y, const float *x, const float *W, int N, int in, int out, int accumulate) {
    al_sgemm(0, 1, N, out, in, 1.0f, x, in, W, in, accumulate ? 1.0f : 0.0f, y, out);
}

/* dx[N,in] (+)= dy[N,out] . W[out,in];  dW[out,in] (+)= dy^T[out,N] . x[N,in]
 * Both products read dy: where BF16 products would each round an fp32 dy
 * whole (al_bf16_round_shared), it is rounded once for both. */
void al_linear_bwd_ref(float *dx, int dx_add, float *dW, int dW_add, al_wref dy, al_wref x, const float *W, int N,
                       int in, int out) {
    if (split_on && dx && dW && dy.dt == AL_DT_F32 && N > 0 && in > 0 && out > 0 &&
        al_precision_now() == AL_PREC_BF16) {
        /* compensated: dy's low parts made once for both products */
        const size_t x_lo = x.dt == AL_DT_F32 ? (size_t)N * in : 0;
        uint16_t *room = al_bf16_split_room((size_t)N * out + (size_t)out * in + x_lo);
        const split_low_part dy_low = split_low_of(dy, out, N, out, &room);
        const split_low_part w_low = split_low_of(al_wref_f32(W), in, out, in, &room);
        const split_low_part x_low = split_low_of(x, in, N, in, &room);
        sgemm_split_parts(0, 0, N, in, out, 1.0f, dy, out, dy_low, al_wref_f32(W), in, w_low, dx_add ? 1.0f : 0.0f, dx,
                          in);
        sgemm_split_parts(1, 0, out, in, N, 1.0f, dy, out, dy_low, x, in, x_low, dW_add ? 1.0f : 0.0f, dW, in);
        return;
    }
    if (dx && dW && dy.dt == AL_DT_F32 && N > 0 && !split_on) { /* split products need dy's fp32 values */
        const uint16_t *dy_bf16 = al_bf16_round_shared(dy.p, (size_t)N * out);
        if (dy_bf16) dy = (al_wref){dy_bf16, AL_DT_BF16};
    }
    if (dx) al_sgemm_ref(0, 0, N, in, out, 1.0f, dy, out, al_wref_f32(W), in, dx_add ? 1.0f : 0.0f, dx, in);
    if (dW) al_sgemm_ref(1, 0, out, in, N, 1.0f, dy, out, x, in, dW_add ? 1.0f : 0.0f, dW, in);
}

void al_linear_bwd_into(float *dx, int dx_add, float *dW, int dW_add, const float *dy, const float *x, const float *W,
                        int N, int in, int out) {
    al_linear_bwd_ref(dx, dx_add, dW, dW_add, al_wref_f32(dy), al_wref_f32(x), W, N, in, out);
}
