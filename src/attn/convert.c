/*
 * convert.c: the pieces that every KV design's conversion from MHA/GQA shares
 * (convert.h): source head maps, the activation-weighted low-rank fit and the
 * relative error of a map.
 *
 * The low-rank fit needs the top eigenvectors of a symmetric m x m matrix.
 * LAPACK's dsyevd (divide and conquer) is in the OpenBLAS attnlab already
 * links (Debian builds it with LAPACK; `nm -D libopenblas.so.0 | grep dsyevd_`):
 * no new dependency, and it scales to real checkpoints (MLA's stacked map of
 * a 7B Llama layer is 8192 x 8192), which a hand-written Jacobi solver would
 * not. Its Fortran symbol is declared here (no lapacke.h needed).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "convert.h"

/* LAPACK: eigenvalues (ascending) and eigenvectors of a symmetric matrix,
 * column-major; the trailing arguments are the hidden lengths of the two
 * character arguments (gfortran's ABI). */
extern void dsyevd_(const char *jobz, const char *uplo, const int *n, double *a, const int *lda, double *w,
                    double *work, const int *lwork, int *iwork, const int *liwork, int *info, size_t jobz_len,
                    size_t uplo_len);

const float *al_cv_head_k(const al_attn_source *s, int h) {
    const al_config *c = s->cfg;
    const int g = h / (c->num_heads / c->num_kv_heads);
    return s->wk + (size_t)g * c->head_dim * c->hidden_size;
}

const float *al_cv_head_v(const al_attn_source *s, int h) {
    const al_config *c = s->cfg;
    const int g = h / (c->num_heads / c->num_kv_heads);
    return s->wv + (size_t)g * c->head_dim * c->hidden_size;
}

double al_cv_rel_err(const float *A, const double *B, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        const double e = (double)A[i] - B[i];
        num += e * e;
        den += (double)A[i] * A[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* S[m, m] = M cov M^T (cov NULL: M M^T), in double; tmp[m, d] workspace. */
static void weighted_gram(const double *M, int m, int d, const double *cov, double *S, double *tmp) {
    if (cov) {
        for (int a = 0; a < m; a++) { /* tmp = M cov (cov symmetric) */
            double *t = tmp + (size_t)a * d;
            memset(t, 0, sizeof(double) * d);
            for (int k = 0; k < d; k++) {
                const double v = M[(size_t)a * d + k];
                if (v == 0) continue;
                const double *ck = cov + (size_t)k * d;
                for (int e = 0; e < d; e++) t[e] += v * ck[e];
            }
        }
    } else {
        memcpy(tmp, M, sizeof(double) * m * d);
    }
    for (int a = 0; a < m; a++)
        for (int b = 0; b <= a; b++) {
            double s = 0;
            for (int e = 0; e < d; e++) s += tmp[(size_t)a * d + e] * M[(size_t)b * d + e];
            S[(size_t)a * m + b] = S[(size_t)b * m + a] = s;
        }
}

int al_cv_lowrank(const double *M, int m, int d, const double *cov, int r, double *P, double *Q, al_err *err) {
    if (r < 0 || r > m) return al_errf(err, "low-rank fit: rank %d outside 0..%d", r, m);
    if (r == 0) return 0;
    double *S = malloc(sizeof(double) * m * m), *tmp = malloc(sizeof(double) * m * d), *w = malloc(sizeof(double) * m);
    double wq;
    int iwq, info = 0, lw = -1, liw = -1;
    double *work = NULL;
    int *iwork = NULL;
    int rc = -1;
    if (!S || !tmp || !w) {
        al_errf(err, "out of memory (low-rank fit of a %d x %d map)", m, d);
        goto done;
    }
    weighted_gram(M, m, d, cov, S, tmp);
    dsyevd_("V", "L", &m, S, &m, w, &wq, &lw, &iwq, &liw, &info, 1, 1); /* workspace query */
    lw = (int)wq + 1;
    liw = iwq + 1;
    work = malloc(sizeof(double) * lw);
    iwork = malloc(sizeof(int) * liw);
    if (info || !work || !iwork) {
        al_errf(err, info ? "LAPACK dsyevd failed (info %d)" : "out of memory (low-rank fit)", info);
        goto done;
    }
    dsyevd_("V", "L", &m, S, &m, w, work, &lw, iwork, &liw, &info, 1, 1);
    if (info) {
        al_errf(err, "LAPACK dsyevd did not converge (info %d)", info);
        goto done;
    }
    /* eigenvalues ascend: the top r are the last r columns (column-major: S + col*m) */
    for (int a = 0; a < m; a++)
        for (int j = 0; j < r; j++) P[(size_t)a * r + j] = S[(size_t)(m - 1 - j) * m + a];
    for (int j = 0; j < r; j++) { /* Q = P^T M */
        double *q = Q + (size_t)j * d;
        memset(q, 0, sizeof(double) * d);
        for (int a = 0; a < m; a++) {
            const double p = P[(size_t)a * r + j];
            for (int e = 0; e < d; e++) q[e] += p * M[(size_t)a * d + e];
        }
    }
    rc = 0;
done:
    free(S);
    free(tmp);
    free(w);
    free(work);
    free(iwork);
    return rc;
}
