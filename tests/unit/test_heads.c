/*
 * test_heads.c: the head-similarity analysis (attention.md 4; src/analysis/heads.c).
 *  - for random models of all five KV designs (MLA with and without query
 *    compression and with qk_nope_head_dim = 0, LRKV with r = 0 and r > 0),
 *    s_ij equals a direct float64 computation with explicit d x d forms
 *    A_h = Wq_h^T Wk_h built from the named tensors (not through head_maps),
 *    to 1e-6;
 *  - G is invariant to a coupled rotation of one head's query and key spaces;
 *  - MHA with every head a copy of head 0 gives all ones;
 *  - erank of the identity is 100 % (PCA-based (H-1)/H, the maximum), of
 *    all-ones G is 1/H (PCA-based 0); PCA-based never exceeds (H-1)/H;
 *  - the Jacobi eigen solver on matrices with known spectra, and A V = V diag(l);
 *  - the whole-model summary (mean matrix, averages, cumulative variance) and
 *    the refusal of a layer that does not exist.
 */
#include <stdlib.h>
#include <string.h>

#include "analysis/heads.h"
#include "core/blas.h"
#include "model/model.h"
#include "test.h"

enum { D = 40 };

/* A design-agnostic small config of H heads. */
static al_config base_config(al_attn_kind kind, int H) {
    al_config c;
    al_config_default(&c);
    c.hidden_size = D;
    c.intermediate_size = 64;
    c.num_layers = 2;
    c.num_heads = H;
    c.num_kv_heads = kind == AL_ATTN_MQA ? 1 : kind == AL_ATTN_GQA ? H / 2 : H;
    c.head_dim = 8;
    c.max_position = 16;
    c.attention = kind;
    return c;
}

static al_config mla_config(int H, int dq, int dn) {
    al_config c = base_config(AL_ATTN_MLA, H);
    c.kv_lora_rank = 12;
    c.q_lora_rank = dq;
    c.qk_nope_head_dim = dn;
    c.qk_rope_head_dim = 6;
    c.v_head_dim = 10;
    c.head_dim = dn + 6;
    return c;
}

static al_config lrkv_config(int H, int r) {
    al_config c = base_config(AL_ATTN_LRKV, H);
    c.lrkv_rank = r;
    return c;
}

/* Random weights (std 0.15), gains around 1 (so that they matter). */
static int make_model(al_model *m, const al_config *c, uint64_t seed) {
    al_err err;
    if (al_model_create(m, c, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    al_rng r;
    al_rng_seed(&r, seed);
    for (int i = 0; i < m->n_params; i++) {
        const al_param *p = &m->params[i];
        for (size_t j = 0; j < p->numel; j++)
            m->w[p->offset + j] = (p->ndim == 1 ? 1.0f : 0.0f) + 0.15f * al_rng_normal(&r);
    }
    return 0;
}

/* The weights of "model.layers.<l>.self_attn.<name>.weight". */
static const float *tensor(const al_model *m, int l, const char *name) {
    char full[128];
    snprintf(full, sizeof full, "model.layers.%d.self_attn.%s.weight", l, name);
    for (int i = 0; i < m->n_params; i++)
        if (!strcmp(m->params[i].name, full)) return m->w + m->params[i].offset;
    fprintf(stderr, "no tensor %s\n", full);
    return NULL;
}

/* Reference maps of head h, straight from attention.md 4 and the tensor
 * names: wq, wk [dqk, D] in double. Returns dqk. Written independently of
 * the designs' head_maps. */
static int ref_maps(const al_model *m, int l, int h, double *wq, double *wk) {
    const al_config *c = &m->cfg;
    const int H = c->num_heads;
    if (c->attention == AL_ATTN_MLA) {
        const int dn = c->qk_nope_head_dim, dr = c->qk_rope_head_dim, dk = dn + dr, dv = c->v_head_dim;
        const int dc = c->kv_lora_rank, dq = c->q_lora_rank;
        const float *kva = tensor(m, l, "kv_a_proj_with_mqa"), *g = tensor(m, l, "kv_a_layernorm");
        const float *kvb = tensor(m, l, "kv_b_proj");
        for (int a = 0; a < dk; a++)
            for (int e = 0; e < D; e++) {
                double q = 0.0, k = 0.0;
                if (dq > 0) {
                    const float *qa = tensor(m, l, "q_a_proj"), *gq = tensor(m, l, "q_a_layernorm");
                    const float *qb = tensor(m, l, "q_b_proj");
                    for (int t = 0; t < dq; t++)
                        q += (double)qb[(size_t)(h * dk + a) * dq + t] * gq[t] * qa[(size_t)t * D + e];
                } else {
                    q = tensor(m, l, "q_proj")[(size_t)(h * dk + a) * D + e];
                }
                if (a < dn) {
                    for (int t = 0; t < dc; t++)
                        k += (double)kvb[(size_t)(h * (dn + dv) + a) * dc + t] * g[t] * kva[(size_t)t * D + e];
                } else {
                    k = kva[(size_t)(dc + a - dn) * D + e];
                }
                wq[(size_t)a * D + e] = q;
                wk[(size_t)a * D + e] = k;
            }
        return dk;
    }
    const int dh = c->head_dim;
    const float *q = tensor(m, l, "q_proj");
    for (int a = 0; a < dh; a++)
        for (int e = 0; e < D; e++) {
            double k;
            if (c->attention == AL_ATTN_LRKV) {
                const int r = c->lrkv_rank;
                const float *ks = tensor(m, l, "k_shared_proj"), *U = tensor(m, l, "k_down_proj");
                const float *B = tensor(m, l, "k_up_proj");
                k = ks[(size_t)a * D + e];
                for (int t = 0; t < r; t++) k += (double)B[(size_t)(h * dh + a) * r + t] * U[(size_t)(h * r + t) * D + e];
            } else {
                const int g = h / (H / c->num_kv_heads);
                k = tensor(m, l, "k_proj")[(size_t)(g * dh + a) * D + e];
            }
            wq[(size_t)a * D + e] = q[(size_t)(h * dh + a) * D + e];
            wk[(size_t)a * D + e] = k;
        }
    return dh;
}

/* Direct similarity of layer l with explicit A_h [D, D] in double. */
static void ref_similarity(const al_model *m, int l, double *G) {
    const int H = m->cfg.num_heads;
    double *A = malloc(sizeof(double) * H * D * D), *wq = malloc(sizeof(double) * 64 * D),
           *wk = malloc(sizeof(double) * 64 * D);
    for (int h = 0; h < H; h++) {
        const int dqk = ref_maps(m, l, h, wq, wk);
        double *Ah = A + (size_t)h * D * D;
        for (int a = 0; a < D; a++)
            for (int b = 0; b < D; b++) {
                double s = 0.0;
                for (int r = 0; r < dqk; r++) s += wq[(size_t)r * D + a] * wk[(size_t)r * D + b];
                Ah[a * D + b] = s;
            }
    }
    for (int i = 0; i < H; i++)
        for (int j = 0; j < H; j++) {
            double ij = 0, ii = 0, jj = 0;
            for (int e = 0; e < D * D; e++) {
                const double x = A[(size_t)i * D * D + e], y = A[(size_t)j * D * D + e];
                ij += x * y;
                ii += x * x;
                jj += y * y;
            }
            G[i * H + j] = ij / sqrt(ii * jj);
        }
    free(A);
    free(wq);
    free(wk);
}

/* Similarity of every layer against the direct computation; also checks
 * the matrix is symmetric with a unit diagonal and the values in [-1, 1]. */
static void check_against_reference(const al_config *c, const char *what, uint64_t seed) {
    al_model m;
    if (make_model(&m, c, seed)) {
        CHECK_MSG(0, "%s: model", what);
        return;
    }
    const int H = c->num_heads;
    double *G = malloc(sizeof(double) * H * H), *R = malloc(sizeof(double) * H * H);
    al_err err;
    for (int l = 0; l < c->num_layers; l++) {
        CHECK_MSG(al_head_similarity_layer(&m, l, G, &err) == 0, "%s: %s", what, err.msg);
        ref_similarity(&m, l, R);
        double worst = 0, lo = 1, asym = 0;
        for (int i = 0; i < H * H; i++) {
            worst = fmax(worst, fabs(G[i] - R[i]));
            lo = fmin(lo, G[i]);
        }
        for (int i = 0; i < H; i++) {
            CHECK_CLOSE(G[i * H + i], 1.0, 1e-12);
            for (int j = 0; j < H; j++) asym = fmax(asym, fabs(G[i * H + j] - G[j * H + i]));
        }
        CHECK_MSG(worst <= 1e-6, "%s layer %d: |s - direct| = %g", what, l, worst);
        CHECK_MSG(asym == 0.0, "%s: not symmetric (%g)", what, asym);
        CHECK_MSG(lo >= -1.0, "%s: s below -1", what);
        /* random heads are not all alike: the test would be vacuous otherwise */
        double off = 0;
        for (int i = 0; i < H; i++)
            for (int j = 0; j < H; j++)
                if (i != j) off = fmax(off, fabs(G[i * H + j]));
        CHECK_MSG(off < 0.999, "%s: off-diagonal %g", what, off);
    }
    free(G);
    free(R);
    al_model_free(&m);
}

/* Rotating head 1's query and key spaces together (Wq_1 <- R Wq_1,
 * Wk_1 <- R Wk_1, R orthogonal) leaves A_1 and so G unchanged. MHA only:
 * there the rows of W_q, W_k for head 1 are its whole maps. */
static void check_gauge_invariance(void) {
    al_config c = base_config(AL_ATTN_MHA, 4);
    al_model m;
    if (make_model(&m, &c, 17)) {
        CHECK(0);
        return;
    }
    const int dh = c.head_dim, H = c.num_heads;
    double G0[16], G1[16];
    al_err err;
    CHECK(al_head_similarity_layer(&m, 0, G0, &err) == 0);
    /* R = a product of Givens rotations in planes (a, a+1) */
    float *q = (float *)tensor(&m, 0, "q_proj") + (size_t)dh * D, *k = (float *)tensor(&m, 0, "k_proj") + (size_t)dh * D;
    for (int a = 0; a + 1 < dh; a++) {
        const double th = 0.3 + 0.2 * a, cs = cos(th), sn = sin(th);
        for (float *W = q; W; W = W == q ? k : NULL)
            for (int e = 0; e < D; e++) {
                const double x = W[(size_t)a * D + e], y = W[(size_t)(a + 1) * D + e];
                W[(size_t)a * D + e] = (float)(cs * x - sn * y);
                W[(size_t)(a + 1) * D + e] = (float)(sn * x + cs * y);
            }
    }
    CHECK(al_head_similarity_layer(&m, 0, G1, &err) == 0);
    double worst = 0;
    for (int i = 0; i < H * H; i++) worst = fmax(worst, fabs(G0[i] - G1[i]));
    CHECK_MSG(worst < 1e-5, "coupled rotation changed G by %g (float rounding of the rotated weights only)", worst);
    al_model_free(&m);
}

/* MHA whose heads are all copies of head 0: every s_ij = 1, erank 1/H. */
static void check_identical_heads(void) {
    al_config c = base_config(AL_ATTN_MHA, 4);
    al_model m;
    if (make_model(&m, &c, 23)) {
        CHECK(0);
        return;
    }
    const int dh = c.head_dim, H = c.num_heads;
    for (int l = 0; l < c.num_layers; l++) {
        float *q = (float *)tensor(&m, l, "q_proj"), *k = (float *)tensor(&m, l, "k_proj");
        for (int h = 1; h < H; h++) {
            memcpy(q + (size_t)h * dh * D, q, sizeof(float) * dh * D);
            memcpy(k + (size_t)h * dh * D, k, sizeof(float) * dh * D);
        }
    }
    al_head_sim s;
    al_err err;
    CHECK_MSG(al_head_sim_compute(&m, &s, &err) == 0, "%s", err.msg);
    for (int l = 0; l < c.num_layers; l++)
        for (int i = 0; i < H * H; i++) CHECK_CLOSE(s.sim[(size_t)l * H * H + i], 1.0, 1e-12);
    CHECK_CLOSE(s.avg.erank_uncentered, 1.0 / H, 1e-9);
    CHECK_CLOSE(s.avg.erank_pca, 0.0, 1e-9);
    CHECK_CLOSE(s.avg.mean_offdiag, 1.0, 1e-12);
    al_head_sim_free(&s);
    al_model_free(&m);
}

/* erank of known matrices: identity, all ones, and random Gram-like G. */
static void check_erank(void) {
    for (int H = 1; H <= 18; H += H < 4 ? 1 : 7) {
        double *G = calloc((size_t)H * H, sizeof(double)), cum[32];
        al_sim_metrics mt = {.cumvar = cum};
        al_err err;
        for (int i = 0; i < H; i++) G[i * H + i] = 1.0;
        CHECK(al_sim_metrics_of(G, H, &mt, &err) == 0);
        CHECK_CLOSE(mt.erank_uncentered, 1.0, 1e-12);
        CHECK_CLOSE(mt.erank_pca, (H - 1.0) / H, 1e-12);
        CHECK_CLOSE(mt.mean_offdiag, 0.0, 1e-15);
        if (H > 1) {
            CHECK_CLOSE(cum[0], 1.0 / (H - 1), 1e-12);
            CHECK_CLOSE(cum[H - 2], 1.0, 1e-12);
        }
        CHECK_CLOSE(cum[H - 1], H > 1 ? 1.0 : 0.0, 1e-12);
        for (int i = 0; i < H * H; i++) G[i] = 1.0;
        CHECK(al_sim_metrics_of(G, H, &mt, &err) == 0);
        CHECK_CLOSE(mt.erank_uncentered, 1.0 / H, 1e-12);
        CHECK_CLOSE(mt.erank_pca, 0.0, 1e-12);
        CHECK_CLOSE(mt.mean_offdiag, H > 1 ? 1.0 : 0.0, 1e-15);
        free(G);
    }
    /* random cosine matrices: erank in [1/H, 1], PCA-based at most (H-1)/H */
    al_rng r;
    al_rng_seed(&r, 5);
    for (int trial = 0; trial < 20; trial++) {
        const int H = 2 + trial % 9, k = 1 + trial % 5;
        double X[16 * 8], G[16 * 16], cum[16];
        for (int i = 0; i < H * k; i++) X[i] = al_rng_normal(&r) + (trial % 2 ? 1.0 : 0.0);
        for (int i = 0; i < H; i++)
            for (int j = 0; j < H; j++) {
                double s = 0, a = 0, b = 0;
                for (int t = 0; t < k; t++) {
                    s += X[i * k + t] * X[j * k + t];
                    a += X[i * k + t] * X[i * k + t];
                    b += X[j * k + t] * X[j * k + t];
                }
                G[i * H + j] = s / sqrt(a * b);
            }
        al_sim_metrics mt = {.cumvar = cum};
        al_err err;
        CHECK(al_sim_metrics_of(G, H, &mt, &err) == 0);
        CHECK_MSG(mt.erank_uncentered >= 1.0 / H - 1e-12 && mt.erank_uncentered <= 1 + 1e-12, "erank %g",
                  mt.erank_uncentered);
        /* rank-k cosines: at most k non-zero eigenvalues */
        CHECK_MSG(mt.erank_uncentered * H <= k + 1e-9, "erank %g of rank %d", mt.erank_uncentered * H, k);
        CHECK_MSG(mt.erank_pca >= 0 && mt.erank_pca <= (H - 1.0) / H + 1e-12, "PCA erank %g", mt.erank_pca);
        for (int i = 1; i < H; i++) CHECK(cum[i] >= cum[i - 1] - 1e-15);
        CHECK_CLOSE(cum[H - 1], 1.0, 1e-12);
    }
    /* erank of a spectrum directly: two equal values -> 2; entropy of (3, 1) */
    const double two[] = {1.0, 1.0, 0.0, -1e-3}, tb[] = {3.0, 1.0};
    CHECK_CLOSE(al_erank_of_spectrum(two, 4), 2.0, 1e-12);
    CHECK_CLOSE(al_erank_of_spectrum(tb, 2), exp(-(0.75 * log(0.75) + 0.25 * log(0.25))), 1e-12);
}

/* Checks A V = V diag(eig), V^T V = I, descending order. */
static void check_decomposition(const double *A, int n, const double *eig, const double *V, const char *what) {
    double worst = 0, orth = 0, scale = 1;
    for (int i = 0; i < n * n; i++) scale = fmax(scale, fabs(A[i]));
    for (int i = 0; i < n; i++)
        for (int k = 0; k < n; k++) {
            double av = 0, vv = 0;
            for (int j = 0; j < n; j++) {
                av += A[i * n + j] * V[j * n + k];
                vv += V[j * n + i] * V[j * n + k];
            }
            worst = fmax(worst, fabs(av - eig[k] * V[i * n + k]));
            orth = fmax(orth, fabs(vv - (i == k)));
        }
    CHECK_MSG(worst <= 1e-12 * scale * n, "%s: |A v - l v| = %g", what, worst);
    CHECK_MSG(orth <= 1e-12 * n, "%s: |V^T V - I| = %g", what, orth);
    for (int i = 1; i < n; i++) CHECK_MSG(eig[i] <= eig[i - 1], "%s: not descending", what);
}

static void check_jacobi(void) {
    al_err err;
    double eig[32], V[32 * 32];
    /* diagonal: the entries, sorted */
    const double dg[9] = {2, 0, 0, 0, -1, 0, 0, 0, 5};
    CHECK(al_sym_eigen(dg, 3, eig, V, &err) == 0);
    CHECK(eig[0] == 5 && eig[1] == 2 && eig[2] == -1);
    /* [[2,1],[1,2]]: 3 and 1 */
    const double two[4] = {2, 1, 1, 2};
    CHECK(al_sym_eigen(two, 2, eig, V, &err) == 0);
    CHECK_CLOSE(eig[0], 3.0, 1e-14);
    CHECK_CLOSE(eig[1], 1.0, 1e-14);
    check_decomposition(two, 2, eig, V, "2x2");
    /* the second-difference matrix tridiag(-1, 2, -1): 2 - 2 cos(k pi / (n + 1)) */
    const int n = 17;
    double T[17 * 17] = {0};
    for (int i = 0; i < n; i++) {
        T[i * n + i] = 2;
        if (i + 1 < n) T[i * n + i + 1] = T[(i + 1) * n + i] = -1;
    }
    CHECK(al_sym_eigen(T, n, eig, V, &err) == 0);
    for (int k = 1; k <= n; k++) CHECK_CLOSE(eig[k - 1], 2 - 2 * cos((n + 1 - k) * M_PI / (n + 1)), 1e-13);
    check_decomposition(T, n, eig, V, "tridiagonal");
    /* all ones (a repeated eigenvalue): n, then zeros; eigenvalues only (vecs NULL) */
    double J[17 * 17];
    for (int i = 0; i < n * n; i++) J[i] = 1;
    CHECK(al_sym_eigen(J, n, eig, NULL, &err) == 0);
    CHECK_CLOSE(eig[0], n, 1e-13);
    for (int i = 1; i < n; i++) CHECK_CLOSE(eig[i], 0.0, 1e-13);
    /* Q diag(l) Q^T with a known spectrum, Q from Householder reflections */
    al_rng r;
    al_rng_seed(&r, 11);
    for (int sz = 3; sz <= 32; sz += 29) {
        double Q[32 * 32], M[32 * 32], l[32], u[32];
        for (int i = 0; i < sz * sz; i++) Q[i] = (i / sz == i % sz);
        for (int rep = 0; rep < 3; rep++) { /* Q <- Q (I - 2 u u^T) */
            double nu = 0;
            for (int i = 0; i < sz; i++) {
                u[i] = al_rng_normal(&r);
                nu += u[i] * u[i];
            }
            for (int i = 0; i < sz; i++) {
                double qu = 0;
                for (int j = 0; j < sz; j++) qu += Q[i * sz + j] * u[j];
                for (int j = 0; j < sz; j++) Q[i * sz + j] -= 2 * qu * u[j] / nu;
            }
        }
        for (int i = 0; i < sz; i++) l[i] = sz - 2.5 * i + (i == 1 ? 2.5 : 0); /* l[0] = l[1]: a repeat */
        for (int i = 0; i < sz; i++)
            for (int j = 0; j < sz; j++) {
                double s = 0;
                for (int k = 0; k < sz; k++) s += Q[i * sz + k] * l[k] * Q[j * sz + k];
                M[i * sz + j] = s;
            }
        for (int i = 0; i < sz; i++) /* exactly symmetric */
            for (int j = 0; j < i; j++) M[i * sz + j] = M[j * sz + i];
        CHECK(al_sym_eigen(M, sz, eig, V, &err) == 0);
        for (int i = 0; i < sz; i++) CHECK_CLOSE(eig[i], l[i], 1e-12 * sz);
        check_decomposition(M, sz, eig, V, "random spectrum");
    }
    /* non-finite input: an error, not a hang */
    const double bad[4] = {1, NAN, NAN, 1};
    CHECK(al_sym_eigen(bad, 2, eig, NULL, &err) == -1 && strstr(err.msg, "non-finite"));
}

/* The whole-model summary and its bookkeeping. */
static void check_summary(void) {
    al_config c = mla_config(6, 0, 4);
    c.num_layers = 3;
    al_model m;
    if (make_model(&m, &c, 31)) {
        CHECK(0);
        return;
    }
    al_head_sim s;
    al_err err;
    CHECK_MSG(al_head_sim_compute(&m, &s, &err) == 0, "%s", err.msg);
    const int H = 6;
    CHECK(s.H == 6 && s.L == 3 && s.d_qk == 10);
    double G[36], cum[6];
    for (int l = 0; l < 3; l++) {
        CHECK(al_head_similarity_layer(&m, l, G, &err) == 0);
        CHECK(memcmp(G, s.sim + l * 36, sizeof G) == 0);
    }
    double avg_u = 0;
    for (int i = 0; i < H * H; i++)
        CHECK_CLOSE(s.mean_sim[i], (s.sim[i] + s.sim[36 + i] + s.sim[72 + i]) / 3, 1e-15);
    for (int l = 0; l < 3; l++) avg_u += s.layer[l].erank_uncentered / 3;
    CHECK_CLOSE(s.avg.erank_uncentered, avg_u, 1e-14);
    al_sim_metrics mt = {.cumvar = cum};
    CHECK(al_sim_metrics_of(s.mean_sim, H, &mt, &err) == 0);
    CHECK_CLOSE(s.of_mean.erank_pca, mt.erank_pca, 1e-15);
    CHECK_CLOSE(s.avg.cumvar[H - 1], 1.0, 1e-12);
    /* random heads are far from alike */
    CHECK_MSG(s.avg.erank_uncentered > 0.5, "random MLA erank %g", s.avg.erank_uncentered);
    /* a layer that does not exist */
    CHECK(al_head_similarity_layer(&m, 3, G, &err) == -1 && strstr(err.msg, "layer 3"));
    al_head_sim_free(&s);
    al_model_free(&m);
}

int main(int argc, char **argv) {
    (void)argc;
    al_blas_fix_kernels(argv);
    al_config c;
    c = base_config(AL_ATTN_MHA, 4);
    check_against_reference(&c, "mha", 1);
    c = base_config(AL_ATTN_GQA, 6);
    check_against_reference(&c, "gqa", 2);
    c = base_config(AL_ATTN_MQA, 5);
    check_against_reference(&c, "mqa", 3);
    c = mla_config(4, 0, 8);
    check_against_reference(&c, "mla", 4);
    c = mla_config(4, 10, 8);
    check_against_reference(&c, "mla q_lora", 5);
    c = mla_config(3, 6, 0);
    check_against_reference(&c, "mla dn=0", 6);
    c = lrkv_config(4, 4);
    check_against_reference(&c, "lrkv r=4", 7);
    c = lrkv_config(4, 0);
    check_against_reference(&c, "lrkv r=0", 8);
    c = lrkv_config(3, 8);
    check_against_reference(&c, "lrkv r=dh", 9);
    check_gauge_invariance();
    check_identical_heads();
    check_erank();
    check_jacobi();
    check_summary();
    return TEST_EXIT();
}
