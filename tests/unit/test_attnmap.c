/*
 * test_attnmap.c: the weights `attnlab attnmap` shows are the weights the
 * model uses. For MHA/GQA models with each score function, causal and
 * bidirectional, P from al_attnmap_weights (built from head_qk) times the
 * head's values must give the head's attention output that the training
 * kernels saved during the forward (o = P V). Softmax rows also sum to 1,
 * masked pairs are 0, and the statistics agree with direct computation.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/attnmap.h"
#include "core/blas.h"
#include "testutil.h"

/* bidirectional: a small vision transformer (8 x 8 images, 2 x 2 patches:
 * T = 17, token 0 the CLS token), else a language model over 70 bytes */
static void check_design(al_score_kind score, int G, int bidirectional) {
    const int H = 4, dh = 8;
    al_config c = tu_config(32, 48, 2, H, G, dh, 70);
    if (bidirectional) {
        al_config_vision_default(&c);
        c.image_size = 8;
        c.hidden_size = 32;
        c.intermediate_size = 48;
        c.num_layers = 2;
        c.num_heads = H;
        c.num_kv_heads = G;
        c.head_dim = dh;
        c.attention = G == H ? AL_ATTN_MHA : AL_ATTN_GQA;
        al_config_vision_derive(&c, 1);
    } else {
        c.score_n = 70;
    }
    const int T = c.max_position;
    c.score = score;
    c.poly_power = 3;
    al_model m;
    al_acts a;
    al_err err;
    if (tu_make_model(&m, &c, 7 + (uint64_t)score * 3 + (uint64_t)G, TU_GAINS_ONE)) {
        CHECK(0);
        return;
    }
    al_rng r;
    al_rng_seed(&r, 5);
    if (bidirectional) {
        float img[64];
        tu_fill(img, 64, &r, 1.0f);
        CHECK(al_vit_acts_create(&a, &m, 1, &err) == 0 && a.T == T);
        al_vit_forward(&m, &a, img, NULL);
    } else {
        int tok[70];
        tu_random_tokens(tok, T, &r);
        CHECK(al_acts_create(&a, &m, 1, T, &err) == 0);
        al_model_forward(&m, &a, tok, NULL);
    }
    float *P = malloc(sizeof(float) * T * T), *o = malloc(sizeof(float) * T * dh);
    const int w = (H + 2 * G) * dh; /* mha.c's saved block: qkv[T, w] | o[T, H dh] | lse */
    for (int layer = 0; layer < 2; layer++)
        for (int h = 0; h < H; h++) {
            CHECK(al_attnmap_weights(&m, &a, layer, h, P, &err) == 0);
            const float *saved = a.attn_saved + (size_t)layer * a.attn_saved_per_layer;
            const float *v = saved + (size_t)(H + G) * dh + (size_t)(h / (H / G)) * dh;
            const float *o_saved = saved + (size_t)T * w + (size_t)h * dh;
            double worst = 0, rowsum_err = 0, masked = 0;
            for (int i = 0; i < T; i++) {
                double sum = 0;
                for (int e = 0; e < dh; e++) {
                    double acc = 0;
                    for (int j = 0; j < T; j++) acc += (double)P[i * T + j] * v[(size_t)j * w + e];
                    o[i * dh + e] = (float)acc;
                }
                for (int j = 0; j < T; j++) {
                    sum += P[i * T + j];
                    if (!bidirectional && j > i) masked += fabs(P[i * T + j]);
                }
                if (score == AL_SCORE_SOFTMAX) rowsum_err = fmax(rowsum_err, fabs(sum - 1));
                for (int e = 0; e < dh; e++) {
                    double ref = o_saved[(size_t)i * H * dh + e];
                    worst = fmax(worst, fabs(o[i * dh + e] - ref) / (1e-3 + fabs(ref)));
                }
            }
            CHECK_MSG(worst < 1e-3, "score %d G %d bidir %d layer %d head %d: P V vs saved o: %g", score, G,
                      bidirectional, layer, h, worst);
            CHECK(rowsum_err < 1e-5);
            CHECK(masked == 0);
            if (layer == 1 && h == 1) {
                al_head_stats st;
                CHECK(al_head_stats_of(P, T, 5, bidirectional, &st, NULL) == 0);
                double sink = 0;
                int rows = 0;
                for (int i = 0; i < T; i++) { /* rows without any weight (relu) are skipped */
                    double mass = 0;
                    for (int j = 0; j < T; j++) mass += fabs(P[i * T + j]);
                    if (mass > 0) sink += P[i * T], rows++;
                }
                CHECK_CLOSE(st.sink_mass, rows ? sink / rows : 0, 1e-6);
                if (score == AL_SCORE_SOFTMAX) CHECK_CLOSE(st.row_sum, 1.0, 1e-5);
                CHECK(st.topk_mass > 0 && st.topk_mass <= 1 + 1e-9);
                double budget = 0;
                for (int i = 0; i < T; i++) {
                    int n = bidirectional ? T : i + 1, b = al_mass_budget_ref(P + (size_t)i * T, n, 0.95);
                    budget += b;
                }
                CHECK_CLOSE(st.budget95, rows ? budget / rows : 0, 1e-9);
                CHECK(st.budget95 >= 1 && st.budget95_frac > 0 && st.budget95_frac <= 1);
            }
        }
    CHECK(al_attnmap_weights(&m, &a, 2, 0, P, &err) == -1 && strstr(err.msg, "layer 2"));
    CHECK(al_attnmap_weights(&m, &a, 0, H, P, &err) == -1 && strstr(err.msg, "head 4"));
    free(P);
    free(o);
    al_acts_free(&a);
    al_model_free(&m);
}

/* The mass budget (fewest keys holding 95 % of a row's |p|): a hand-made
 * row, then the bucketed al_mass_budget against the sorting reference on
 * random rows of odd lengths: softmax-like, signed, with zeros and ties,
 * all equal, sorted either way. */
static void check_mass_budget(void) {
    float *s = malloc(sizeof(float) * 1001), *row = malloc(sizeof(float) * 1001);
    CHECK(s && row);
    if (!s || !row) return;
    const float hand[4] = {0.05f, 0.5f, 0.15f, 0.3f};
    CHECK(al_mass_budget(hand, 4, 0.95, s) == 3 && al_mass_budget_ref(hand, 4, 0.95) == 3);
    CHECK(al_mass_budget(hand, 4, 0.45, s) == 1 && al_mass_budget(hand, 4, 0.5, s) == 2 && al_mass_budget(hand, 4, 1.0, s) == 4);
    const float zero[3] = {0, 0, 0};
    CHECK(al_mass_budget(zero, 3, 0.95, s) == 0 && al_mass_budget_ref(zero, 3, 0.95) == 0);
    al_rng r;
    al_rng_seed(&r, 7);
    const int lens[] = {1, 3, 17, 129, 511, 1001};
    for (int li = 0; li < 6; li++)
        for (int kind = 0; kind < 7; kind++) {
            int n = lens[li];
            double z = 0;
            for (int j = 0; j < n; j++) {
                float x = al_rng_normal(&r) * 3.0f;
                row[j] = kind == 0 ? expf(x) : kind == 1 ? x : kind == 2 ? (j % 3 ? 0.0f : expf(x))
                       : kind == 3 ? (float)(1 + (j % 4)) /* ties */
                       : kind == 4 ? 0.25f                 /* all equal */
                       : kind == 5 ? (float)(j + 1) : (float)(n - j); /* sorted up, down */
                z += fabsf(row[j]);
            }
            if (kind == 0)
                for (int j = 0; j < n; j++) row[j] = (float)(row[j] / z);
            int ref = al_mass_budget_ref(row, n, AL_MASS_BUDGET_SHARE);
            CHECK(ref >= 1 && ref <= n);
            CHECK(al_mass_budget(row, n, AL_MASS_BUDGET_SHARE, s) == ref);
        }
    free(s);
    free(row);
}

int main(int argc, char **argv) {
    (void)argc;
    al_blas_fix_kernels(argv);
    for (int s = 0; s < AL_SCORE_COUNT; s++)
        for (int bidir = 0; bidir < 2; bidir++) {
            check_design((al_score_kind)s, 4, bidir);
            check_design((al_score_kind)s, 2, bidir);
        }
    check_mass_budget();
    char title[96];
    al_config c;
    al_config_default(&c);
    c.score = AL_SCORE_POLY;
    c.poly_scale_auto = 1;
    c.score_n = 196;
    al_score_title(&c, title, sizeof title);
    CHECK(strcmp(title, "Attention with (1/14)x^3") == 0);
    c.score = AL_SCORE_SOFTMAX;
    al_score_title(&c, title, sizeof title);
    CHECK(strcmp(title, "Attention with softmax") == 0);
    return TEST_EXIT();
}
