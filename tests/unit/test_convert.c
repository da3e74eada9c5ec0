/*
 * test_convert.c: converting an MHA/GQA model into GQA, MQA, MLA and LRKV
 * (model/convert.c, each design's convert in src/attn/; docs/convert.md):
 *  - exact where nothing is lost: LRKV at r = d_h reproduces the source's
 *    logits; GQA (MQA) from a source whose key and value heads are equal
 *    within each group (all heads) too;
 *  - the errors fall as the rank grows (LRKV's r, MLA's d_c) and reach 0 at
 *    full rank (LRKV; MLA's value maps at d_c = hidden);
 *  - every converted model passes decode == forward (F32 and BF16 caches,
 *    prefill);
 *  - the activation-weighted low-rank fit: orthonormal P, exact at full rank,
 *    its error never above the plain SVD's on the calibration activations;
 *  - refusals (a source that is not MHA/GQA, ranks beyond the shapes, odd
 *    RoPE dims, a target equal to the source, MHA as a target) are one line.
 * The loss of a converted MLA against a random one is measured on a trained
 * model by tests/cli/test_convert.sh.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attn/convert.h"
#include "core/blas.h"
#include "model/convert.h"
#include "test.h"
#include "testutil.h"

enum { T_CTX = 32, N_CAL = 8 * T_CTX + 1, N_HELD = 2 * T_CTX + 1 };

static int cal[N_CAL], held[N_HELD];

/* converts src into dst (to: design index; kv: --kv-heads; one design field
 * at field index f set to v when f >= 0); 0 or -1 with err */
static int convert(const al_model *src, int to, int kv, int f, int v, al_model *dst, al_convert_report *rep,
                   al_err *err) {
    al_config flags = src->cfg, target;
    unsigned char given[AL_ATTN_MAX_FIELDS] = {0};
    if (f >= 0) {
        given[f] = 1;
        *(int *)((char *)&flags + al_attn_design(to)->fields[f].offset) = v;
    }
    if (al_convert_target(&src->cfg, to, kv, &flags, given, &target, err)) return -1;
    const al_convert_opts o = {cal, N_CAL, held, N_HELD, T_CTX, 4};
    return al_model_convert(src, &target, given, &o, dst, rep, err);
}

/* relative error of dst's logits against src's on random tokens */
static double logits_err(const al_model *src, const al_model *dst) {
    int tok[2 * T_CTX];
    al_rng r;
    al_rng_seed(&r, 99);
    tu_random_tokens(tok, 2 * T_CTX, &r);
    float *a = tu_logits(src, tok, 2, T_CTX), *b = tu_logits(dst, tok, 2, T_CTX);
    const double e = a && b ? test_rel_err(b, a, (size_t)2 * T_CTX * 256) : 1.0;
    free(a);
    free(b);
    return e;
}

static double mean(const double *v, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += v[i] / n;
    return s;
}

/* decode == forward on a converted model */
static void check_decode(al_model *m, const char *what) {
    int tok[T_CTX];
    al_rng r;
    al_rng_seed(&r, 5);
    tu_random_tokens(tok, T_CTX, &r);
    const tu_decode d = tu_decode_vs_forward(m, tok, T_CTX);
    CHECK_MSG(d.worst < 1e-4, "%s: decode vs forward rel err %g", what, d.worst);
}

/* the design field index of `name` in design k */
static int field(int k, const char *name) {
    const al_attn_ops *d = al_attn_design(k);
    for (int i = 0; i < d->n_fields; i++)
        if (!strcmp(d->fields[i].name, name)) return i;
    return -1;
}

static void test_exact(const al_model *src) {
    al_model dst;
    al_convert_report rep;
    al_err err;
    /* LRKV at r = d_h: B_K = I */
    CHECK_MSG(convert(src, AL_ATTN_LRKV, 0, field(AL_ATTN_LRKV, "lrkv_rank"), 16, &dst, &rep, &err) == 0, "%s", err.msg);
    if (!dst.w) return;
    double e = logits_err(src, &dst);
    CHECK_MSG(e <= 1e-5, "lrkv r = d_h: logits rel err %g", e);
    CHECK_MSG(mean(rep.k_err, 8) < 1e-6 && mean(rep.v_err, 8) < 1e-6 && rep.out_err[0] < 1e-5 && rep.out_err[1] < 1e-5,
              "lrkv r = d_h: map errors %g %g, output %g", mean(rep.k_err, 8), mean(rep.v_err, 8), rep.out_err[0]);
    CHECK_MSG(fabs(rep.loss_converted - rep.loss_source) < 1e-4, "lrkv r = d_h: loss %g vs %g", rep.loss_converted,
              rep.loss_source);
    check_decode(&dst, "lrkv r = d_h");
    al_model_free(&dst);
    al_convert_report_free(&rep);

    /* a source whose KV heads are equal in pairs (GQA 2) and all equal (MQA) */
    for (int G = 2; G >= 1; G--) {
        al_model eq;
        CHECK(tu_make_model(&eq, &src->cfg, 7, TU_GAINS_ONE) == 0);
        const size_t map = (size_t)16 * 64;
        for (int l = 0; l < 2; l++)
            for (int h = 0; h < 4; h++) {
                const int first = h / (4 / G) * (4 / G);
                for (int t = 1; t <= 2; t++)
                    memcpy(eq.layers[l].attn.w[t] + h * map, eq.layers[l].attn.w[t] + first * map, sizeof(float) * map);
            }
        const int to = G == 2 ? AL_ATTN_GQA : AL_ATTN_MQA;
        CHECK_MSG(convert(&eq, to, G == 2 ? 2 : 0, -1, 0, &dst, &rep, &err) == 0, "%s", err.msg);
        if (dst.w) {
            e = logits_err(&eq, &dst);
            CHECK_MSG(e <= 1e-6, "%s from equal heads: logits rel err %g", al_attn_name(to), e);
            CHECK(mean(rep.k_err, 8) == 0 && mean(rep.v_err, 8) == 0);
            CHECK(dst.cfg.num_kv_heads == G && rep.kv_target == (size_t)2 * G * 16);
            al_model_free(&dst);
            al_convert_report_free(&rep);
        }
        al_model_free(&eq);
    }
}

/* copies rows [r0, r0 + n) of head `from`'s [16, 64] block to every head in a [4 x 16, 64] map */
static void share_rows(float *w, int from, int r0, int n) {
    for (int h = 0; h < 4; h++)
        if (h != from) memcpy(w + ((size_t)h * 16 + r0) * 64, w + ((size_t)from * 16 + r0) * 64, sizeof(float) * n * 64);
}

/* zeroes rows [r0, r0 + n) of every head of a [4 x 16, 64] map */
static void zero_rows(float *w, int r0, int n) {
    for (int h = 0; h < 4; h++) memset(w + ((size_t)h * 16 + r0) * 64, 0, sizeof(float) * n * 64);
}

/* The largest relative error over heads of layer 0's scores q_t . k_s
 * (s <= t) between models a and b on one sequence of random tokens. */
static double scores_err(const al_model *a, const al_model *b) {
    int tok[T_CTX];
    al_rng r;
    al_rng_seed(&r, 8);
    tu_random_tokens(tok, T_CTX, &r);
    const al_model *m[2] = {a, b};
    al_acts acts[2];
    al_err err;
    float q[2][T_CTX * 16], k[2][T_CTX * 16];
    double worst = 0;
    for (int i = 0; i < 2; i++) {
        CHECK(al_acts_create(&acts[i], m[i], 1, T_CTX, &err) == 0);
        al_model_forward(m[i], &acts[i], tok, NULL);
    }
    for (int h = 0; h < 4; h++) {
        double num = 0, den = 0;
        for (int i = 0; i < 2; i++)
            CHECK(m[i]->attn->head_qk(&m[i]->layers[0].attn, al_acts_saved(&acts[i], 0), 1, T_CTX, 0, h, q[i], k[i]) == 16);
        for (int t = 0; t < T_CTX; t++)
            for (int s = 0; s <= t; s++) {
                double sa = 0, sb = 0;
                for (int e = 0; e < 16; e++) sa += q[0][t * 16 + e] * k[0][s * 16 + e], sb += q[1][t * 16 + e] * k[1][s * 16 + e];
                num += (sa - sb) * (sa - sb);
                den += sa * sa;
            }
        worst = fmax(worst, sqrt(num / den));
    }
    for (int i = 0; i < 2; i++) al_acts_free(&acts[i]);
    return worst;
}

/* RoPE through the conversions: LRKV below d_h is exact when the heads' keys
 * differ only on the RoPE pairs its rank keeps at their own frequencies
 * (r = 8 of d_h = 16: pairs 0, 2, 4, 6) and their values not at all; MLA
 * keeps the pairs that carry q.k at the source's frequencies (stride 1, the
 * first dr/2 pairs, needs rope_theta = theta^(1/2); stride 2 keeps theta),
 * so with queries only on those pairs and one shared rope key its layer-0
 * attention scores are the source's. */
static void test_rope(const al_model *src) {
    al_err err;
    al_model eq, dst;
    al_convert_report rep;
    CHECK(tu_make_model(&eq, &src->cfg, 21, TU_GAINS_ONE) == 0);
    for (int l = 0; l < 2; l++) {
        float **w = eq.layers[l].attn.w;
        for (int j = 1; j < 8; j += 2) share_rows(w[1], 0, j, 1), share_rows(w[1], 0, j + 8, 1);
        share_rows(w[2], 0, 0, 16);
    }
    CHECK_MSG(convert(&eq, AL_ATTN_LRKV, 0, field(AL_ATTN_LRKV, "lrkv_rank"), 8, &dst, &rep, &err) == 0, "%s", err.msg);
    if (dst.w) {
        const double e = logits_err(&eq, &dst);
        CHECK_MSG(e <= 1e-5, "lrkv r 8 with keys differing on pairs 0, 2, 4, 6: logits rel err %g", e);
        al_model_free(&dst);
        al_convert_report_free(&rep);
    }
    al_model_free(&eq);
    for (int stride = 1; stride <= 2; stride++) {
        CHECK(tu_make_model(&eq, &src->cfg, 22, TU_GAINS_ONE) == 0);
        for (int l = 0; l < 2; l++) {
            float **w = eq.layers[l].attn.w;
            for (int j = 0; j < 8; j++)
                if (j % stride || j / stride >= 4) zero_rows(w[0], j, 1), zero_rows(w[0], j + 8, 1);
                else share_rows(w[1], 0, j, 1), share_rows(w[1], 0, j + 8, 1);
        }
        CHECK_MSG(convert(&eq, AL_ATTN_MLA, 0, field(AL_ATTN_MLA, "qk_rope_dim"), 8, &dst, &rep, &err) == 0, "%s", err.msg);
        if (dst.w) {
            const double theta = stride == 1 ? sqrt(src->cfg.rope_theta) : src->cfg.rope_theta;
            CHECK_MSG(fabs(dst.cfg.rope_theta / theta - 1) < 1e-9, "mla stride %d: rope_theta %g, want %g", stride,
                      dst.cfg.rope_theta, theta);
            const double e = scores_err(&eq, &dst);
            CHECK_MSG(e <= 1e-5, "mla stride %d: layer-0 scores rel err %g", stride, e);
            al_model_free(&dst);
            al_convert_report_free(&rep);
        }
        al_model_free(&eq);
    }
}

static void test_rank(const al_model *src) {
    al_err err;
    double prev_k = INFINITY, prev_v = INFINITY;
    for (int r = 2; r <= 16; r *= 2) {
        al_model dst;
        al_convert_report rep;
        CHECK_MSG(convert(src, AL_ATTN_LRKV, 0, field(AL_ATTN_LRKV, "lrkv_rank"), r, &dst, &rep, &err) == 0, "%s", err.msg);
        if (!dst.w) continue;
        const double k = mean(rep.k_err, 8), v = mean(rep.v_err, 8);
        CHECK_MSG(k < prev_k && v < prev_v, "lrkv r %d: key err %g (before %g), value err %g (before %g)", r, k, prev_k,
                  v, prev_v);
        if (r == 4) check_decode(&dst, "lrkv r 4");
        prev_k = k, prev_v = v;
        al_model_free(&dst);
        al_convert_report_free(&rep);
    }
    CHECK_MSG(prev_k < 1e-6 && prev_v < 1e-6, "lrkv r = d_h: errors %g %g", prev_k, prev_v);
    prev_k = prev_v = INFINITY;
    double prev_out = INFINITY;
    for (int dc = 4; dc <= 64; dc *= 2) {
        al_model dst;
        al_convert_report rep;
        CHECK_MSG(convert(src, AL_ATTN_MLA, 0, field(AL_ATTN_MLA, "kv_lora_rank"), dc, &dst, &rep, &err) == 0, "%s",
                  err.msg);
        if (!dst.w) continue;
        const double k = mean(rep.k_err, 8), v = mean(rep.v_err, 8), o = mean(rep.out_err, 2);
        CHECK_MSG(k < prev_k && v < prev_v && o < prev_out, "mla d_c %d: key err %g (%g), value err %g (%g), output %g (%g)",
                  dc, k, prev_k, v, prev_v, o, prev_out);
        CHECK(dst.cfg.qk_nope_head_dim + dst.cfg.qk_rope_head_dim == 16 && dst.cfg.v_head_dim == 16);
        if (dc == 16) check_decode(&dst, "mla d_c 16");
        /* d_c = hidden holds the stacked map's full rank: its value maps are exact (tests/ref/test_convert_ref.py
         * checks the same on a worse-conditioned calibration moment) */
        if (dc == 64) CHECK_MSG(v < 1e-6, "mla d_c = hidden: value err %g", v);
        prev_k = k, prev_v = v, prev_out = o;
        al_model_free(&dst);
        al_convert_report_free(&rep);
    }
    /* GQA 2 and MQA from a random MHA: errors positive, MQA's larger; decode == forward */
    double kq[2];
    for (int i = 0; i < 2; i++) {
        al_model dst;
        al_convert_report rep;
        CHECK_MSG(convert(src, i ? AL_ATTN_MQA : AL_ATTN_GQA, i ? 0 : 2, -1, 0, &dst, &rep, &err) == 0, "%s", err.msg);
        if (!dst.w) return;
        kq[i] = mean(rep.k_err, 8);
        check_decode(&dst, i ? "mqa" : "gqa");
        al_model_free(&dst);
        al_convert_report_free(&rep);
    }
    CHECK_MSG(kq[0] > 0.1 && kq[1] > kq[0], "key errors gqa %g, mqa %g", kq[0], kq[1]);
}

/* the low-rank fit on a random map and random activations */
static void test_lowrank(void) {
    enum { m = 6, d = 10, n = 40 };
    double M[m * d], cov[d * d] = {0}, P[m * m], Q[m * d], X[n * d];
    al_rng r;
    al_rng_seed(&r, 3);
    for (int i = 0; i < m * d; i++) M[i] = al_rng_normal(&r);
    for (int i = 0; i < n * d; i++) X[i] = al_rng_normal(&r) * (1 + i % d); /* unequal scales */
    for (int t = 0; t < n; t++)
        for (int a = 0; a < d; a++)
            for (int b = 0; b < d; b++) cov[a * d + b] += X[t * d + a] * X[t * d + b] / n;
    al_err err;
    double plain_err = 0, weighted_err = 0;
    for (int k = 0; k < 2; k++) {
        const int rk = k ? m : 3;
        CHECK(al_cv_lowrank(M, m, d, cov, rk, P, Q, &err) == 0);
        double orth = 0, full = 0;
        for (int a = 0; a < rk; a++)
            for (int b = 0; b < rk; b++) {
                double s = 0;
                for (int i = 0; i < m; i++) s += P[i * rk + a] * P[i * rk + b];
                orth = fmax(orth, fabs(s - (a == b)));
            }
        for (int i = 0; i < m; i++)
            for (int e = 0; e < d; e++) {
                double s = 0;
                for (int j = 0; j < rk; j++) s += P[i * rk + j] * Q[j * d + e];
                full = fmax(full, fabs(s - M[i * d + e]));
            }
        CHECK_MSG(orth < 1e-12, "P^T P - I: %g", orth);
        if (k) CHECK_MSG(full < 1e-12, "full rank P Q - M: %g", full);
    }
    /* rank 3 on the activations: weighted fit <= plain SVD's error on them */
    for (int w = 0; w < 2; w++) {
        CHECK(al_cv_lowrank(M, m, d, w ? cov : NULL, 3, P, Q, &err) == 0);
        double e2 = 0;
        for (int t = 0; t < n; t++)
            for (int i = 0; i < m; i++) {
                double y = 0, yf = 0;
                for (int e = 0; e < d; e++) y += M[i * d + e] * X[t * d + e];
                for (int j = 0; j < 3; j++)
                    for (int e = 0; e < d; e++) yf += P[i * 3 + j] * Q[j * d + e] * X[t * d + e];
                e2 += (y - yf) * (y - yf);
            }
        *(w ? &weighted_err : &plain_err) = e2;
    }
    CHECK_MSG(weighted_err < plain_err, "activation error: weighted %g, plain %g", weighted_err, plain_err);
    CHECK(al_cv_lowrank(M, m, d, NULL, m + 1, P, Q, &err) == -1 && !strchr(err.msg, '\n'));
}

/* a refusal: al_convert_target fails with a one-line message containing want */
static void refused(const al_config *src, int to, int kv, const char *fname, int v, const char *want) {
    al_config flags = *src, target;
    unsigned char given[AL_ATTN_MAX_FIELDS] = {0};
    const int f = fname ? field(to, fname) : -1;
    if (f >= 0) {
        given[f] = 1;
        *(int *)((char *)&flags + al_attn_design(to)->fields[f].offset) = v;
    }
    al_err err = {{0}};
    const int rc = al_convert_target(src, to, kv, &flags, given, &target, &err);
    CHECK_MSG(rc == -1 && strstr(err.msg, want) && !strchr(err.msg, '\n'), "to %s: '%s' (want '%s')",
              al_attn_name(to), err.msg, want);
}

static void test_refusals(const al_config *mha) {
    refused(mha, AL_ATTN_LRKV, 0, "lrkv_rank", 18, "exceeds head_dim");
    refused(mha, AL_ATTN_LRKV, 0, "lrkv_rank", 5, "must be even");
    refused(mha, AL_ATTN_MLA, 0, "qk_rope_dim", 3, "--qk-rope-dim must be even");
    refused(mha, AL_ATTN_MLA, 0, "kv_lora_rank", 65, "--kv-lora-rank must be in 1..64");
    refused(mha, AL_ATTN_MLA, 0, "v_head_dim", 8, "--v-head-dim must be");
    refused(mha, AL_ATTN_GQA, 3, NULL, 0, "gqa needs --kv-heads");
    refused(mha, AL_ATTN_MHA, 0, NULL, 0, "cannot be a conversion's target");
    refused(mha, AL_ATTN_MLA, 2, NULL, 0, "--kv-heads applies only");
    al_config gqa = *mha;
    gqa.num_kv_heads = 2;
    gqa.attention = AL_ATTN_GQA;
    refused(&gqa, AL_ATTN_GQA, 2, NULL, 0, "the target equals the source");
    al_config mla = tu_mla_config(0, 0);
    refused(&mla, AL_ATTN_LRKV, 0, NULL, 0, "conversion starts from mha or gqa");
    al_config biased = *mha;
    biased.qkv_bias = 1;
    refused(&biased, AL_ATTN_GQA, 2, NULL, 0, "not Llama's form");
}

int main(int argc, char **argv) {
    (void)argc;
    al_blas_fix_kernels(argv);
    const al_config c = tu_config(64, 96, 2, 4, 4, 16, T_CTX);
    al_model src;
    if (tu_make_model(&src, &c, 11, TU_GAINS_ONE)) return 1;
    al_rng r;
    al_rng_seed(&r, 1);
    tu_random_tokens(cal, N_CAL, &r);
    tu_random_tokens(held, N_HELD, &r);
    test_lowrank();
    test_exact(&src);
    test_rank(&src);
    test_rope(&src);
    test_refusals(&c);
    al_model_free(&src);
    return TEST_EXIT();
}
