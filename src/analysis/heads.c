/*
 * heads.c: head similarity and effective rank (attention.md 4; see heads.h).
 *
 * Shapes: a head's maps Wq_h, Wk_h are [d_qk, d]; stacked for a layer they are
 * wq, wk [H, d_qk, d] in double. For head i the Gram rows
 *     QQ_i = Wq_i [Wq_i; ..; Wq_{H-1}]^T   [d_qk, (H-i) d_qk]
 *     KK_i = Wk_i [Wk_i; ..; Wk_{H-1}]^T   [d_qk, (H-i) d_qk]
 * give <A_i, A_j>_F = sum over block j of QQ_i * KK_i (element-wise), j >= i,
 * since <Wq_i^T Wk_i, Wq_j^T Wk_j>_F = tr(Wk_i^T Wq_i Wq_j^T Wk_j)
 * = sum_ab (Wq_i Wq_j^T)_ab (Wk_i Wk_j^T)_ab. Cost O(H^2 d_qk^2 d), memory
 * O(H d_qk^2); the d x d forms A_h never exist. Everything runs in double:
 * the result must agree with an explicit float64 computation to 1e-6.
 *
 * The eigenvalues come from a cyclic Jacobi solver (no LAPACK): H is small
 * (tens), G is symmetric, and Jacobi is accurate to a few ulps of ||G||.
 */
#include "heads.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- symmetric eigenvalues (cyclic Jacobi) ---- */

/* Sum of squares of the strictly upper triangle of a[n, n]. */
static double off_norm2(const double *a, int n) {
    double s = 0.0;
    for (int p = 0; p < n; p++)
        for (int q = p + 1; q < n; q++) s += a[(size_t)p * n + q] * a[(size_t)p * n + q];
    return s;
}

/* Applies the rotation that zeroes a[p][q]: A <- J^T A J, V <- V J, with
 * J = I except J_pp = J_qq = c, J_pq = s, J_qp = -s, where t = s / c is the
 * smaller root of t^2 + 2 theta t - 1 = 0, theta = (a_qq - a_pp) / (2 a_pq)
 * (the smaller angle keeps the iteration stable). */
static void jacobi_rotate(double *a, double *v, int n, int p, int q) {
    const double apq = a[(size_t)p * n + q];
    const double theta = (a[(size_t)q * n + q] - a[(size_t)p * n + p]) / (2.0 * apq);
    double t = 1.0 / (fabs(theta) + sqrt(theta * theta + 1.0));
    if (theta < 0) t = -t;
    const double c = 1.0 / sqrt(t * t + 1.0), s = t * c;
    for (int k = 0; k < n; k++) { /* columns p, q: A J */
        const double akp = a[(size_t)k * n + p], akq = a[(size_t)k * n + q];
        a[(size_t)k * n + p] = c * akp - s * akq;
        a[(size_t)k * n + q] = s * akp + c * akq;
    }
    for (int k = 0; k < n; k++) { /* rows p, q: J^T (A J) */
        const double apk = a[(size_t)p * n + k], aqk = a[(size_t)q * n + k];
        a[(size_t)p * n + k] = c * apk - s * aqk;
        a[(size_t)q * n + k] = s * apk + c * aqk;
    }
    a[(size_t)p * n + q] = a[(size_t)q * n + p] = 0.0; /* exactly, not to rounding */
    if (v)
        for (int k = 0; k < n; k++) {
            const double vkp = v[(size_t)k * n + p], vkq = v[(size_t)k * n + q];
            v[(size_t)k * n + p] = c * vkp - s * vkq;
            v[(size_t)k * n + q] = s * vkp + c * vkq;
        }
}

int al_sym_eigen(const double *a, int n, double *eig, double *vecs, al_err *err) {
    if (n <= 0) return 0;
    const size_t nn = (size_t)n * n;
    for (size_t i = 0; i < nn; i++)
        if (!isfinite(a[i])) return al_errf(err, "eigenvalues: matrix has a non-finite entry");
    double *w = malloc(sizeof(double) * nn);
    if (!w) return al_errf(err, "out of memory");
    double total = 0.0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            w[(size_t)i * n + j] = 0.5 * (a[(size_t)i * n + j] + a[(size_t)j * n + i]); /* symmetric part */
            total += w[(size_t)i * n + j] * w[(size_t)i * n + j];
        }
    if (vecs) {
        memset(vecs, 0, sizeof(double) * nn);
        for (int i = 0; i < n; i++) vecs[(size_t)i * n + i] = 1.0;
    }
    /* converged when the off-diagonal mass is at rounding level of ||A||_F;
     * Jacobi converges quadratically, so 100 sweeps is never the limit for
     * finite input */
    int ok = 0;
    for (int sweep = 0; sweep < 100; sweep++) {
        double off = off_norm2(w, n);
        if (off == 0.0 || off <= 1e-32 * total) {
            ok = 1;
            break;
        }
        for (int p = 0; p < n; p++)
            for (int q = p + 1; q < n; q++)
                if (w[(size_t)p * n + q] != 0.0) jacobi_rotate(w, vecs, n, p, q);
    }
    if (!ok) {
        free(w);
        return al_errf(err, "eigenvalues: Jacobi iteration did not converge");
    }
    for (int i = 0; i < n; i++) eig[i] = w[(size_t)i * n + i];
    free(w);
    /* descending order (selection sort: n is the head count), vectors along */
    for (int i = 0; i < n; i++) {
        int best = i;
        for (int j = i + 1; j < n; j++)
            if (eig[j] > eig[best]) best = j;
        if (best == i) continue;
        double t = eig[i];
        eig[i] = eig[best];
        eig[best] = t;
        if (vecs)
            for (int k = 0; k < n; k++) {
                t = vecs[(size_t)k * n + i];
                vecs[(size_t)k * n + i] = vecs[(size_t)k * n + best];
                vecs[(size_t)k * n + best] = t;
            }
    }
    return 0;
}

/* ---- effective rank and the metrics of one G ---- */

/* The eigenvalue kept for the entropy: negatives (rounding, or an indefinite
 * centred matrix) and values at rounding level of the spectrum count as 0. */
static double kept(double l, double floor_) { return l > floor_ ? l : 0.0; }

static double spectrum_floor(const double *eig, int n) {
    double mx = 1.0;
    for (int i = 0; i < n; i++)
        if (fabs(eig[i]) > mx) mx = fabs(eig[i]);
    return 1e-12 * mx;
}

double al_erank_of_spectrum(const double *eig, int n) {
    const double fl = spectrum_floor(eig, n);
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += kept(eig[i], fl);
    if (sum <= 0.0) return 0.0;
    double ent = 0.0;
    for (int i = 0; i < n; i++) {
        const double v = kept(eig[i], fl) / sum;
        if (v > 0.0) ent -= v * log(v);
    }
    return exp(ent);
}

int al_sim_metrics_of(const double *G, int H, al_sim_metrics *m, al_err *err) {
    if (H <= 0) return al_errf(err, "similarity matrix needs at least one head, got %d", H);
    const size_t hh = (size_t)H * H;
    double *eig = calloc((size_t)H, sizeof(double)), *gc = calloc(hh, sizeof(double));
    double *rmean = calloc((size_t)H, sizeof(double)), *cmean = calloc((size_t)H, sizeof(double));
    int rc = -1;
    if (!eig || !gc || !rmean || !cmean) {
        al_errf(err, "out of memory");
        goto done;
    }
    /* uncentered */
    if (al_sym_eigen(G, H, eig, NULL, err)) goto done;
    m->erank_uncentered = al_erank_of_spectrum(eig, H) / H;
    /* double-centred: Gc = G - row means - column means + grand mean */
    double grand = 0.0;
    for (int i = 0; i < H; i++)
        for (int j = 0; j < H; j++) {
            rmean[i] += G[(size_t)i * H + j] / H;
            cmean[j] += G[(size_t)i * H + j] / H;
            grand += G[(size_t)i * H + j] / (double)hh;
        }
    for (int i = 0; i < H; i++)
        for (int j = 0; j < H; j++) gc[(size_t)i * H + j] = G[(size_t)i * H + j] - rmean[i] - cmean[j] + grand;
    if (al_sym_eigen(gc, H, eig, NULL, err)) goto done;
    m->erank_pca = al_erank_of_spectrum(eig, H) / H;
    /* cumulative variance explained, largest eigenvalue first (eig is sorted) */
    const double fl = spectrum_floor(eig, H);
    double sum = 0.0, run = 0.0;
    for (int i = 0; i < H; i++) sum += kept(eig[i], fl);
    for (int i = 0; i < H; i++) {
        run += kept(eig[i], fl);
        m->cumvar[i] = sum > 0.0 ? run / sum : 0.0;
    }
    /* mean off-diagonal similarity */
    double off = 0.0;
    for (int i = 0; i < H; i++)
        for (int j = 0; j < H; j++)
            if (i != j) off += G[(size_t)i * H + j];
    m->mean_offdiag = H > 1 ? off / ((double)H * (H - 1)) : 0.0;
    rc = 0;
done:
    free(eig);
    free(gc);
    free(rmean);
    free(cmean);
    return rc;
}

/* ---- similarity from the maps ---- */

int al_head_similarity_of_maps(const double *wq, const double *wk, int H, int d_qk, int d, double *G, al_err *err) {
    const size_t blk = (size_t)d_qk * d; /* one head's map */
    const int wide = H * d_qk;
    double *qq = malloc(sizeof(double) * (size_t)d_qk * wide), *kk = malloc(sizeof(double) * (size_t)d_qk * wide);
    double *ip = malloc(sizeof(double) * (size_t)H * H); /* <A_i, A_j>_F */
    if (!qq || !kk || !ip) {
        free(qq);
        free(kk);
        free(ip);
        return al_errf(err, "out of memory");
    }
    for (int i = 0; i < H; i++) {
        const int n = (H - i) * d_qk; /* blocks j = i..H-1 */
        /* qq[d_qk, n] = Wq_i[d_qk, d] (rows i.. of wq)[n, d]^T; likewise kk */
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, d_qk, n, d, 1.0, wq + i * blk, d, wq + i * blk, d, 0.0,
                    qq, n);
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, d_qk, n, d, 1.0, wk + i * blk, d, wk + i * blk, d, 0.0,
                    kk, n);
        for (int j = i; j < H; j++) {
            double s = 0.0;
            for (int a = 0; a < d_qk; a++) {
                const double *qa = qq + (size_t)a * n + (size_t)(j - i) * d_qk;
                const double *ka = kk + (size_t)a * n + (size_t)(j - i) * d_qk;
                for (int b = 0; b < d_qk; b++) s += qa[b] * ka[b];
            }
            ip[(size_t)i * H + j] = ip[(size_t)j * H + i] = s;
        }
    }
    for (int i = 0; i < H; i++)
        for (int j = 0; j < H; j++) {
            const double ni = ip[(size_t)i * H + i], nj = ip[(size_t)j * H + j];
            double s;
            if (i == j)
                s = 1.0; /* also for A_i = 0: a head is like itself */
            else if (ni <= 0.0 || nj <= 0.0)
                s = 0.0; /* a zero form is like nothing else */
            else
                s = ip[(size_t)i * H + j] / sqrt(ni * nj);
            G[(size_t)i * H + j] = s > 1.0 ? 1.0 : s < -1.0 ? -1.0 : s; /* Cauchy-Schwarz, up to rounding */
        }
    free(qq);
    free(kk);
    free(ip);
    return 0;
}

int al_head_similarity_layer(const al_model *m, int layer, double *G, al_err *err) {
    const al_config *c = &m->cfg;
    if (layer < 0 || layer >= c->num_layers)
        return al_errf(err, "layer %d does not exist (the model has layers 0..%d)", layer, c->num_layers - 1);
    if (!m->attn->head_maps)
        return al_errf(err, "attention '%s' does not provide head maps", al_attn_name(c->attention));
    const al_attn_layer *L = &m->layers[layer].attn;
    const int H = c->num_heads, d = c->hidden_size, dqk = m->attn->head_maps(L, 0, NULL, NULL);
    const size_t blk = (size_t)dqk * d;
    double *wq = malloc(sizeof(double) * blk * H), *wk = malloc(sizeof(double) * blk * H);
    if (!wq || !wk) {
        free(wq);
        free(wk);
        return al_errf(err, "out of memory");
    }
    for (int h = 0; h < H; h++) m->attn->head_maps(L, h, wq + h * blk, wk + h * blk);
    int rc = al_head_similarity_of_maps(wq, wk, H, dqk, d, G, err);
    free(wq);
    free(wk);
    return rc;
}

/* ---- the whole model ---- */

void al_head_sim_free(al_head_sim *s) {
    free(s->sim);
    free(s->mean_sim);
    free(s->layer);
    free(s->cumvar_block);
    memset(s, 0, sizeof *s);
}

int al_head_sim_compute(const al_model *m, al_head_sim *s, al_err *err) {
    memset(s, 0, sizeof *s);
    const int H = m->cfg.num_heads, L = m->cfg.num_layers;
    const size_t hh = (size_t)H * H;
    s->H = H;
    s->L = L;
    s->d_qk = m->attn->head_maps ? m->attn->head_maps(&m->layers[0].attn, 0, NULL, NULL) : 0;
    s->sim = calloc((size_t)L * hh, sizeof(double));
    s->mean_sim = calloc(hh, sizeof(double));
    s->layer = calloc((size_t)L, sizeof *s->layer);
    s->cumvar_block = calloc((size_t)(L + 2) * H, sizeof(double));
    if (!s->sim || !s->mean_sim || !s->layer || !s->cumvar_block) {
        al_head_sim_free(s);
        return al_errf(err, "out of memory");
    }
    for (int l = 0; l < L; l++) {
        double *G = s->sim + (size_t)l * hh;
        s->layer[l].cumvar = s->cumvar_block + (size_t)l * H;
        if (al_head_similarity_layer(m, l, G, err) || al_sim_metrics_of(G, H, &s->layer[l], err)) {
            al_err_prefix(err, "layer %d", l);
            al_head_sim_free(s);
            return -1;
        }
        for (size_t i = 0; i < hh; i++) s->mean_sim[i] += G[i] / L;
    }
    s->of_mean.cumvar = s->cumvar_block + (size_t)L * H;
    s->avg.cumvar = s->cumvar_block + (size_t)(L + 1) * H;
    if (al_sim_metrics_of(s->mean_sim, H, &s->of_mean, err)) {
        al_err_prefix(err, "mean over layers");
        al_head_sim_free(s);
        return -1;
    }
    for (int l = 0; l < L; l++) {
        s->avg.erank_uncentered += s->layer[l].erank_uncentered / L;
        s->avg.erank_pca += s->layer[l].erank_pca / L;
        s->avg.mean_offdiag += s->layer[l].mean_offdiag / L;
        for (int i = 0; i < H; i++) s->avg.cumvar[i] += s->layer[l].cumvar[i] / L;
    }
    return 0;
}
