/*
 * convert.h: what a KV design's conversion (al_attn_ops.convert) receives and
 * the pieces every design's conversion shares (convert.c): one source layer's
 * attention maps widened to fp32, its calibration activations, a low-rank fit
 * weighted by those activations (LAPACK's dsyevd from the OpenBLAS attnlab
 * already links), and the relative error of a map.
 *
 * Data: an al_attn_source is one layer of an MHA/GQA model (rotate-half RoPE
 * over d_h, G = cfg->num_kv_heads KV heads, query head h reads KV head
 * h / (H/G)) as row-major fp32 matrices, plus the layer's input (after
 * input_layernorm) on the calibration tokens, x[n, d], and its second moment
 * cov = x^T x / n in double.
 */
#ifndef AL_ATTN_CONVERT_H
#define AL_ATTN_CONVERT_H

#include <stddef.h>

#include "attn.h"

typedef struct al_attn_source {
    const al_config *cfg;            /* the source model's config (MHA or GQA, no biases or q/k norms) */
    const float *wq, *wk, *wv, *wo; /* [H dh, d], [G dh, d], [G dh, d], [d, H dh] */
    const float *x;                  /* [n, d] the layer's normed input on calibration text */
    size_t n;
    const double *cov;               /* [d, d] x^T x / n */
} al_attn_source;

/* Key (or value) map of query head h in the source: [dh, d] rows of wk (wv). */
const float *al_cv_head_k(const al_attn_source *s, int h);
const float *al_cv_head_v(const al_attn_source *s, int h);

/* The best rank-r approximation of the map M[m, d] on the calibration
 * activations: P[m, r] with orthonormal columns and Q = P^T M [r, d] such
 * that E ||M x - P Q x||^2 over x ~ cov is least (P: the top r eigenvectors
 * of M cov M^T; cov NULL: the identity, a plain truncated SVD). r <= m. At
 * r = rank(M) the product is M exactly (no division by singular values).
 * Returns 0, or -1 with one line in err (memory, LAPACK failure). */
int al_cv_lowrank(const double *M, int m, int d, const double *cov, int r, double *P, double *Q, al_err *err);

/* ||A - B||_F / ||A||_F over n values (0 when both are 0; A in fp32, B double). */
double al_cv_rel_err(const float *A, const double *B, size_t n);

#endif
