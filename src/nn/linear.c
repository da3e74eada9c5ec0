/*
 * linear.c: the dense products of every projection, as CBLAS sgemm calls.
 * Weights are [out, in] row-major (HF), activations [N, in] row-major, so
 * y = x W^T is one sgemm with W transposed.
 *
 * Every product goes through al_sgemm, whose bits do not depend on the thread
 * count. OpenBLAS's own threading cuts a product into one piece per thread,
 * and its AVX2 kernels (Haswell, Zen) round the pieces' edges differently, so
 * a 2-thread sgemm of 280 x 48 x 48 differs from the 1-thread one in a quarter
 * of its elements. al_sgemm instead cuts C's rows into blocks that depend on
 * the shape only and runs each block as one single-threaded OpenBLAS call
 * inside an OpenMP loop. Block boundaries are multiples of 48 rows: on
 * OpenBLAS's SSE3, AVX and AVX2 kernels such blocks give the very bits of
 * one whole single-threaded call, so any thread count now computes what one
 * thread computed before.
 */
#include <cblas.h>

#include "nn.h"

/* How C's rows are cut: into a power of two of blocks, at most 16, each of
 * at least 96 rows on average (every block re-packs op(B), a few percent of
 * its time below that), with boundaries at multiples of 48 rows spread
 * evenly. A function of M only, never of the thread count; even block
 * counts keep 2, 4, 8 and 16 threads equally busy. */
enum { ROW_QUANTUM = 48, MIN_BLOCK_ROWS = 96, MAX_BLOCKS = 16 };

static int block_count(int M) {
    int blocks = 1;
    while (blocks < MAX_BLOCKS && M / (2 * blocks) >= MIN_BLOCK_ROWS) blocks *= 2;
    return blocks;
}

/* First row of block b of `blocks` (b = blocks: M). */
static int block_start(int M, int blocks, int b) {
    const long quanta = (M + ROW_QUANTUM - 1) / ROW_QUANTUM;
    const long row = ROW_QUANTUM * (b * quanta / blocks);
    return row < M ? (int)row : M;
}

/* C[M, N] = alpha op(A)[M, K] op(B)[K, N] + beta C, row-major (cblas_sgemm's
 * arguments), the same bits for any thread count. */
void al_sgemm(int a_transposed, int b_transposed, int M, int N, int K, float alpha, const float *A, int lda,
              const float *B, int ldb, float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    const int blocks = block_count(M);
    /* No if() clause even for one block: inside an active parallel region
     * OpenBLAS runs single-threaded, outside one it would thread the call. */
#pragma omp parallel for schedule(dynamic, 1)
    for (int b = 0; b < blocks; b++) {
        const int r0 = block_start(M, blocks, b), m = block_start(M, blocks, b + 1) - r0;
        if (m <= 0) continue;
        const float *A_rows = A + (a_transposed ? (size_t)r0 : (size_t)r0 * lda);
        cblas_sgemm(CblasRowMajor, a_transposed ? CblasTrans : CblasNoTrans, b_transposed ? CblasTrans : CblasNoTrans,
                    m, N, K, alpha, A_rows, lda, B, ldb, beta, C + (size_t)r0 * ldc, ldc);
    }
}

/* y[N,out] (+)= x[N,in] . W[out,in]^T */
void al_linear_fwd(float *y, const float *x, const float *W, int N, int in, int out, int accumulate) {
    al_sgemm(0, 1, N, out, in, 1.0f, x, in, W, in, accumulate ? 1.0f : 0.0f, y, out);
}

/* dx[N,in] += dy[N,out] . W[out,in];  dW[out,in] += dy^T[out,N] . x[N,in] */
void al_linear_bwd(float *dx, float *dW, const float *dy, const float *x, const float *W, int N, int in,
                   int out) {
    if (dx) al_sgemm(0, 0, N, in, out, 1.0f, dy, out, W, in, 1.0f, dx, in);
    if (dW) al_sgemm(1, 0, out, in, N, 1.0f, dy, out, x, in, 1.0f, dW, in);
}
