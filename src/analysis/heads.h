/*
 * heads.h: head similarity and effective rank (attention.md 4; LRKV paper,
 * Eq. 11 and App. C).
 *
 * Per layer and head h, the bilinear form A_h = Wq_h^T Wk_h (d x d) is
 * invariant to coupled rotations of the head's query and key spaces, so its
 * Frobenius cosines compare what heads compute rather than how the weights
 * happen to be parametrised:
 *     s_ij = <A_i, A_j>_F / (||A_i||_F ||A_j||_F),   G = [s_ij]  (H x H).
 * No d x d matrix is ever formed: <A_i, A_j>_F = sum_ab (Wq_i Wq_j^T)_ab
 * (Wk_i Wk_j^T)_ab, the element-wise product of two d_qk x d_qk Gram blocks.
 * The maps come from the design's ops->head_maps (src/attn/), so every KV
 * design (MHA, GQA, MQA, MLA, LRKV) goes through the same code.
 *
 * Summaries of G: effective rank exp(entropy of the normalised clipped
 * eigenvalues) / H, on G itself ("uncentered", in [1/H, 1]) and on the
 * double-centred Gc = G - row means - column means + grand mean ("PCA-based",
 * at most (H-1)/H); the cumulative variance explained by Gc's sorted
 * spectrum; the mean off-diagonal similarity.
 */
#ifndef AL_HEADS_H
#define AL_HEADS_H

#include "../core/core.h"
#include "../model/model.h"

/* Summary numbers of one similarity matrix G [H, H]. */
typedef struct al_sim_metrics {
    double erank_uncentered; /* erank(G) / H */
    double erank_pca;        /* erank(Gc) / H */
    double mean_offdiag;     /* mean of s_ij over i != j (0 when H = 1) */
    double *cumvar;          /* [H]: cumulative fraction of Gc's spectrum, largest first (all 0 if Gc = 0) */
} al_sim_metrics;

/* Everything the analysis gives for one model. */
typedef struct al_head_sim {
    int H, L;                 /* heads, layers */
    int d_qk;                 /* key (and query) dimension of a head */
    double *sim;              /* [L, H, H]: per-layer G */
    double *mean_sim;         /* [H, H]: average of the per-layer G */
    al_sim_metrics *layer;    /* [L]: metrics of each layer's G */
    al_sim_metrics of_mean;   /* metrics of mean_sim */
    al_sim_metrics avg;       /* per-layer metrics averaged over layers (cumvar too) */
    double *cumvar_block;     /* owns every cumvar array: [(L + 2) * H] */
} al_head_sim;

/* Eigen-decomposition of a symmetric n x n matrix a (row-major, read only;
 * only its symmetric part matters) by cyclic Jacobi rotations in double.
 * eig[n]: eigenvalues in descending order; vecs (may be NULL): [n, n] with
 * eigenvector k in column k. Returns 0, or -1 (message in err) when memory
 * runs out or the sweeps do not converge (non-finite input). */
int al_sym_eigen(const double *a, int n, double *eig, double *vecs, al_err *err);

/* exp(-sum v_i log v_i), v_i = max(l_i, 0) / sum max(l, 0), with eigenvalues
 * below 1e-12 x max(1, max |l|) counted as 0; 0 when nothing is left. */
double al_erank_of_spectrum(const double *eig, int n);

/* Metrics of G [H, H]; m->cumvar must point at H doubles. */
int al_sim_metrics_of(const double *G, int H, al_sim_metrics *m, al_err *err);

/* G [H, H] from stacked maps: wq, wk [H, d_qk, d] (head h's map is rows
 * h*d_qk..). Gram blocks by cblas_dgemm, one head's row block at a time
 * (memory d_qk x H d_qk). A head whose A_h is 0 gets s_hh = 1 and 0 elsewhere. */
int al_head_similarity_of_maps(const double *wq, const double *wk, int H, int d_qk, int d, double *G, al_err *err);

/* G [H, H] of one layer of a model, through its design's head_maps. */
int al_head_similarity_layer(const al_model *m, int layer, double *G, al_err *err);

/* The whole analysis of a model: every layer, their mean, all metrics. */
int al_head_sim_compute(const al_model *m, al_head_sim *out, al_err *err);
void al_head_sim_free(al_head_sim *s);

#endif
