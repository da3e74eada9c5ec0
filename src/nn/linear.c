/*
 * linear.c: the dense products of every projection, as CBLAS sgemm calls.
 * Weights are [out, in] row-major (HF), activations [N, in] row-major, so
 * y = x W^T is one sgemm with W transposed. Called outside OpenMP regions:
 * OpenBLAS (OpenMP build) parallelises internally on the same thread pool.
 */
#include <cblas.h>

#include "nn.h"

/* y[N,out] (+)= x[N,in] . W[out,in]^T */
void al_linear_fwd(float *y, const float *x, const float *W, int N, int in, int out, int accumulate) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, out, in, 1.0f, x, in, W, in,
                accumulate ? 1.0f : 0.0f, y, out);
}

/* dx[N,in] += dy[N,out] . W[out,in];  dW[out,in] += dy^T[out,N] . x[N,in] */
void al_linear_bwd(float *dx, float *dW, const float *dy, const float *x, const float *W, int N, int in,
                   int out) {
    if (dx) cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, in, out, 1.0f, dy, out, W, in, 1.0f, dx, in);
    if (dW) cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, N, 1.0f, dy, out, x, in, 1.0f, dW, in);
}
