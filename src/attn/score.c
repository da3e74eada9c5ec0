/*
 * score.c: the shared causal attention kernels every KV design calls.
 *
 * Softmax attention, flash-style in memory: the forward keeps only each row's
 * log-sum-exp (lse), and the backward recomputes a block of weights from it,
 * so activation memory is O(T) per head, never T x T per head. Work is cut
 * into blocks of QB query rows; a block's scores against its keys [0, i1)
 * (causal) live in a per-thread QB x T scratch and are produced and consumed
 * by single-threaded sgemm calls (OpenBLAS runs one thread inside an OpenMP
 * region, so threads never nest).
 *
 * Forward parallelises over (sequence, head, query block); backward over
 * (sequence, KV group), because the key/value gradients of a group are summed
 * over its heads and query blocks and this keeps that sum race-free and in a
 * fixed order (deterministic for any thread count).
 */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "../nn/fastmath.h"

enum { QB = 64 };

/* exp over a row, vectorised through al_expf (fastmath.h). */
void al_expf_inplace(float *restrict x, int n) {
    for (int i = 0; i < n; i++) x[i] = al_expf(x[i]);
}

/* Row r of a block: exponentiate the first n valid scores after subtracting
 * `shift`, zero the rest up to `width`. */
static void exp_row_masked(float *row, int n, int width, float shift) {
    for (int j = 0; j < n; j++) row[j] -= shift;
    al_expf_inplace(row, n);
    for (int j = n; j < width; j++) row[j] = 0.0f;
}

void al_attn_fwd(const al_attn_shape *s, const float *q, const float *k, const float *v, float *o, float *lse) {
    const int T = s->T, H = s->H, per_group = s->H / s->G, nqb = (T + QB - 1) / QB;
    const long items = (long)s->B * H * nqb;
#pragma omp parallel
    {
        float *S = malloc(sizeof(float) * QB * (size_t)T);
#pragma omp for schedule(dynamic, 1)
        for (long it = 0; it < items; it++) {
            /* biggest (latest) query blocks first: better load balance */
            int qb = nqb - 1 - (int)(it % nqb);
            int h = (int)((it / nqb) % H), b = (int)(it / ((long)nqb * H)), g = h / per_group;
            int i0 = qb * QB, i1 = i0 + QB < T ? i0 + QB : T, m = i1 - i0, kn = i1;
            const float *qb_p = q + (size_t)(b * T + i0) * s->ldq + (size_t)h * s->dk;
            const float *k_p = k + (size_t)b * T * s->ldk + (size_t)g * s->dk;
            const float *v_p = v + (size_t)b * T * s->ldv + (size_t)g * s->dv;
            /* S[m, kn] = scale * Q_blk[m, dk] . K[kn, dk]^T */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, kn, s->dk, s->scale, qb_p, s->ldq, k_p, s->ldk,
                        0.0f, S, kn);
            float *lse_p = lse + ((size_t)b * H + h) * T + i0;
            for (int r = 0; r < m; r++) {
                float *row = S + (size_t)r * kn;
                int n = i0 + r + 1;
                float mx = row[0];
                for (int j = 1; j < n; j++) mx = row[j] > mx ? row[j] : mx;
                exp_row_masked(row, n, kn, mx);
                float sum = 0.0f;
                for (int j = 0; j < n; j++) sum += row[j];
                float inv = 1.0f / sum;
                for (int j = 0; j < n; j++) row[j] *= inv;
                lse_p[r] = mx + logf(sum);
            }
            /* O_blk[m, dv] = P[m, kn] . V[kn, dv] */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, s->dv, kn, 1.0f, S, kn, v_p, s->ldv, 0.0f,
                        o + (size_t)(b * T + i0) * s->ldo + (size_t)h * s->dv, s->ldo);
        }
        free(S);
    }
}

void al_attn_bwd(const al_attn_shape *s, const float *q, const float *k, const float *v, const float *o,
                 const float *lse, const float *dout, float *dq, float *dk, float *dv) {
    const int T = s->T, H = s->H, G = s->G, per_group = H / G, nqb = (T + QB - 1) / QB;
    const int items = s->B * G;
#pragma omp parallel
    {
        float *P = malloc(sizeof(float) * QB * (size_t)T);
        float *dS = malloc(sizeof(float) * QB * (size_t)T);
        float Drow[QB];
#pragma omp for schedule(dynamic, 1)
        for (int it = 0; it < items; it++) {
            int b = it / G, g = it % G;
            const float *k_p = k + (size_t)b * T * s->ldk + (size_t)g * s->dk;
            const float *v_p = v + (size_t)b * T * s->ldv + (size_t)g * s->dv;
            float *dk_p = dk + (size_t)b * T * s->ldk + (size_t)g * s->dk;
            float *dv_p = dv + (size_t)b * T * s->ldv + (size_t)g * s->dv;
            for (int h = g * per_group; h < (g + 1) * per_group; h++) {
                for (int qb = 0; qb < nqb; qb++) {
                    int i0 = qb * QB, i1 = i0 + QB < T ? i0 + QB : T, m = i1 - i0, kn = i1;
                    size_t row0 = (size_t)(b * T + i0);
                    const float *q_p = q + row0 * s->ldq + (size_t)h * s->dk;
                    const float *o_p = o + row0 * s->ldo + (size_t)h * s->dv;
                    const float *do_p = dout + row0 * s->ldo + (size_t)h * s->dv;
                    const float *lse_p = lse + ((size_t)b * H + h) * T + i0;
                    /* recompute P[m, kn] = exp(scale Q K^T - lse) */
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, kn, s->dk, s->scale, q_p, s->ldq, k_p,
                                s->ldk, 0.0f, P, kn);
                    for (int r = 0; r < m; r++) exp_row_masked(P + (size_t)r * kn, i0 + r + 1, kn, lse_p[r]);
                    /* dP[m, kn] = dO[m, dv] . V[kn, dv]^T */
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, kn, s->dv, 1.0f, do_p, s->ldo, v_p,
                                s->ldv, 0.0f, dS, kn);
                    /* D_i = dO_i . O_i ; dS = P * (dP - D) */
                    for (int r = 0; r < m; r++) {
                        float acc = 0.0f;
                        for (int c = 0; c < s->dv; c++) acc += do_p[(size_t)r * s->ldo + c] * o_p[(size_t)r * s->ldo + c];
                        Drow[r] = acc;
                    }
                    for (int r = 0; r < m; r++) {
                        float *ds = dS + (size_t)r * kn;
                        const float *p = P + (size_t)r * kn;
                        for (int j = 0; j < kn; j++) ds[j] = p[j] * (ds[j] - Drow[r]);
                    }
                    /* dQ[m, dk] += scale dS . K ; dK[kn, dk] += scale dS^T . Q ; dV[kn, dv] += P^T . dO */
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, s->dk, kn, s->scale, dS, kn, k_p, s->ldk,
                                1.0f, dq + row0 * s->ldq + (size_t)h * s->dk, s->ldq);
                    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, kn, s->dk, m, s->scale, dS, kn, q_p, s->ldq,
                                1.0f, dk_p, s->ldk);
                    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, kn, s->dv, m, 1.0f, P, kn, do_p, s->ldo, 1.0f,
                                dv_p, s->ldv);
                }
            }
        }
        free(P);
        free(dS);
    }
}

/* ---- plain references: one head at a time, full T x T weights, doubles ---- */

static void ref_weights(const al_attn_shape *s, const float *q, const float *k, int b, int h, double *W, float *lse) {
    const int T = s->T, g = h / (s->H / s->G);
    for (int i = 0; i < T; i++) {
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j <= i; j++) {
            double acc = 0;
            for (int c = 0; c < s->dk; c++)
                acc += (double)q[(size_t)(b * T + i) * s->ldq + h * s->dk + c] * k[(size_t)(b * T + j) * s->ldk + g * s->dk + c];
            W[(size_t)i * T + j] = acc * s->scale;
            if (W[(size_t)i * T + j] > mx) mx = W[(size_t)i * T + j];
        }
        for (int j = 0; j <= i; j++) sum += exp(W[(size_t)i * T + j] - mx);
        for (int j = 0; j < T; j++) W[(size_t)i * T + j] = j <= i ? exp(W[(size_t)i * T + j] - mx) / sum : 0.0;
        if (lse) lse[((size_t)b * s->H + h) * T + i] = (float)(mx + log(sum));
    }
}

void al_attn_fwd_ref(const al_attn_shape *s, const float *q, const float *k, const float *v, float *o, float *lse) {
    const int T = s->T;
    double *W = malloc(sizeof(double) * (size_t)T * T);
    for (int b = 0; b < s->B; b++)
        for (int h = 0; h < s->H; h++) {
            int g = h / (s->H / s->G);
            ref_weights(s, q, k, b, h, W, lse);
            for (int i = 0; i < T; i++)
                for (int c = 0; c < s->dv; c++) {
                    double acc = 0;
                    for (int j = 0; j < T; j++) acc += W[(size_t)i * T + j] * v[(size_t)(b * T + j) * s->ldv + g * s->dv + c];
                    o[(size_t)(b * T + i) * s->ldo + h * s->dv + c] = (float)acc;
                }
        }
    free(W);
}

void al_attn_bwd_ref(const al_attn_shape *s, const float *q, const float *k, const float *v, const float *o,
                     const float *lse, const float *dout, float *dq, float *dk, float *dv) {
    (void)o;
    (void)lse;
    const int T = s->T;
    double *W = malloc(sizeof(double) * (size_t)T * T);
    double *dW = malloc(sizeof(double) * (size_t)T * T);
    for (int b = 0; b < s->B; b++)
        for (int h = 0; h < s->H; h++) {
            int g = h / (s->H / s->G);
            ref_weights(s, q, k, b, h, W, NULL);
            const float *dO = dout + (size_t)b * T * s->ldo + h * s->dv;
            /* dW = dO V^T ; dS = W * (dW - rowsum(W * dW)) */
            for (int i = 0; i < T; i++) {
                double dot = 0;
                for (int j = 0; j < T; j++) {
                    double acc = 0;
                    for (int c = 0; c < s->dv; c++)
                        acc += (double)dO[(size_t)i * s->ldo + c] * v[(size_t)(b * T + j) * s->ldv + g * s->dv + c];
                    dW[(size_t)i * T + j] = acc;
                    dot += acc * W[(size_t)i * T + j];
                }
                for (int j = 0; j < T; j++) dW[(size_t)i * T + j] = W[(size_t)i * T + j] * (dW[(size_t)i * T + j] - dot);
            }
            for (int i = 0; i < T; i++)
                for (int j = 0; j < T; j++) {
                    double ds = dW[(size_t)i * T + j] * s->scale, w = W[(size_t)i * T + j];
                    for (int c = 0; c < s->dk; c++) {
                        dq[(size_t)(b * T + i) * s->ldq + h * s->dk + c] += (float)(ds * k[(size_t)(b * T + j) * s->ldk + g * s->dk + c]);
                        dk[(size_t)(b * T + j) * s->ldk + g * s->dk + c] += (float)(ds * q[(size_t)(b * T + i) * s->ldq + h * s->dk + c]);
                    }
                    for (int c = 0; c < s->dv; c++)
                        dv[(size_t)(b * T + j) * s->ldv + g * s->dv + c] += (float)(w * dO[(size_t)i * s->ldo + c]);
                }
        }
    free(W);
    free(dW);
}
