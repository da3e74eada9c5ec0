/*
 * test_model.c: model-level invariants that the PyTorch reference does not
 * cover: checkpoint round trip, config validation messages, bitwise
 * determinism of a training step, gradients written over garbage, the lr
 * schedule and parameter counting.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/model.h"
#include "core/blas.h"
#include "test.h"
#include "testutil.h"
#include "train/train.h"

/* d 32, MLP 64, 2 layers, 4 heads of 8 in 2 KV groups (GQA), 16 positions */
static al_config tiny(void) {
    return tu_config(32, 64, 2, 4, 2, 8, 16);
}

static void test_roundtrip(const char *dir) {
    al_config c = tiny();
    al_model a, b;
    al_err err;
    CHECK(al_model_create(&a, &c, &err) == 0);
    al_model_init_weights(&a, 5);
    char *extra = NULL;
    int loaded = tu_save_load(&a, &b, dir, "{\"note\": \"x\"}", &extra) == 0;
    CHECK(extra && strstr(extra, "\"note\"") && strstr(extra, "\"gqa\""));
    CHECK(loaded && b.cfg.num_kv_heads == 2 && b.cfg.head_dim == 8 && b.cfg.attention == AL_ATTN_GQA);
    free(extra);
    al_model_free(&a);
    if (loaded) al_model_free(&b);
}

static void test_config_errors(void) {
    const char *base = "\"hidden_size\":32,\"intermediate_size\":64,\"num_hidden_layers\":1,\"vocab_size\":256";
#define BAD(extra, word) tu_expect_config_error(word, 0, "{%s,%s}", base, extra)
    BAD("\"num_attention_heads\":4,\"num_key_value_heads\":3", "divide");
    BAD("\"num_attention_heads\":4,\"head_dim\":7", "even");
    BAD("\"num_attention_heads\":5", "divisible");
    BAD("\"num_attention_heads\":0", "positive");
    BAD("\"num_attention_heads\":4,\"max_position_embeddings\":-1", "positive");
    BAD("\"num_attention_heads\":4,\"head_dim\":2.5", "integer");
    BAD("\"num_attention_heads\":4,\"attnlab\":{\"attention\":\"mqa\"}", "mqa");
    BAD("\"num_attention_heads\":4,\"attnlab\":{\"attention\":\"bogus\"}", "unknown attention");
    BAD("\"num_attention_heads\":4,\"architectures\":[\"GPT2LMHeadModel\"]", "unsupported architecture");
#undef BAD
    tu_expect_config_error("JSON object", 0, "[1,2]");
    tu_expect_config_error("JSON object", 0, "{\"hidden_size\": ");
}

/* Two identical steps (forward + backward) must give bit-identical grads. */
static void test_determinism(void) {
    al_config c = tiny();
    al_model m;
    al_acts a;
    al_err err;
    CHECK(al_model_create(&m, &c, &err) == 0 && al_model_alloc_grads(&m, &err) == 0);
    al_model_init_weights(&m, 11);
    CHECK(al_acts_create(&a, &m, 3, 16, &err) == 0);
    int in[48], tg[48];
    for (int i = 0; i < 48; i++) in[i] = (i * 37) % 256, tg[i] = (i * 91 + 5) % 256;
    float *g1 = malloc(m.n_floats * sizeof(float));
    double l1 = tu_loss_and_grads(&m, &a, in, tg);
    memcpy(g1, m.g, m.n_floats * sizeof(float));
    /* NaN in every gradient: al_model_zero_grads zeroes those the backward
     * adds into, the backward writes the rest */
    memset(m.g, 0xff, m.n_floats * sizeof(float));
    double l2 = tu_loss_and_grads(&m, &a, in, tg);
    CHECK(l1 == l2 && memcmp(g1, m.g, m.n_floats * sizeof(float)) == 0);
    CHECK_CLOSE(l1, log(256.0), 0.05); /* small init: close to uniform over bytes */
    /* a few AdamW steps on one batch lower its loss */
    al_train_opts o;
    al_train_opts_default(&o);
    float *m1 = calloc(m.n_floats, 4), *m2 = calloc(m.n_floats, 4);
    for (int s = 1; s <= 20; s++) {
        tu_loss_and_grads(&m, &a, in, tg);
        al_adamw_update(&m, m1, m2, 1e-2, &o, s, 1.0f);
    }
    double l3 = al_model_forward(&m, &a, in, tg);
    CHECK_MSG(l3 < l1 - 1.0, "loss %g -> %g after 20 steps", l1, l3);
    free(m1), free(m2), free(g1);
    al_acts_free(&a);
    al_model_free(&m);
}

/* Gradients from al_model_zero_grads over NaN garbage: the same bits as
 * from zeros, for every design (the backward writes some gradients whole,
 * al_param.grad_written, and adds into the rest), and the flags are where
 * the designs' backwards write. Then a second backward without zeroing
 * adds: twice the gradient. */
static void test_grads_written(void) {
    al_config cases[6];
    cases[0] = tu_config(32, 64, 2, 4, 4, 8, 16); /* MHA */
    cases[1] = tiny();                             /* GQA */
    cases[2] = tu_config(32, 64, 2, 4, 1, 8, 16); /* MQA */
    cases[3] = tu_mla_config(16, 0);
    cases[4] = tu_mla_config(0, 1);
    cases[5] = tu_config(32, 64, 2, 4, 4, 8, 16);
    cases[5].attention = AL_ATTN_LRKV;
    cases[5].lrkv_rank = 4;
    for (int ci = 0; ci < 6; ci++) {
        al_model m;
        al_acts a;
        al_err err;
        CHECK(al_model_create(&m, &cases[ci], &err) == 0 && al_model_alloc_grads(&m, &err) == 0);
        al_model_init_weights(&m, 5 + ci);
        const int T = cases[ci].max_position;
        CHECK(al_acts_create(&a, &m, 2, T, &err) == 0);
        int in[64], tg[64];
        for (int i = 0; i < 2 * T; i++) in[i] = (i * 53 + ci) % 256, tg[i] = (i * 29 + 7) % 256;
        int written = 0;
        for (int i = 0; i < m.n_params; i++) written += m.params[i].grad_written;
        CHECK_MSG(written > 0, "case %d: no gradient written whole", ci);
        const size_t bytes = sizeof(float) * m.n_floats;
        float *g0 = malloc(bytes);
        memset(m.g, 0, bytes);
        al_model_forward(&m, &a, in, tg);
        al_model_backward(&m, &a); /* no al_model_zero_grads: adds into the zeros */
        memcpy(g0, m.g, bytes);
        memset(m.g, 0xff, bytes);
        tu_loss_and_grads(&m, &a, in, tg);
        CHECK_MSG(memcmp(g0, m.g, bytes) == 0, "case %d (%s): gradients over NaN differ from those over zeros", ci,
                  al_attn_name(cases[ci].attention));
        al_model_forward(&m, &a, in, tg);
        al_model_backward(&m, &a); /* adds: 2 g0 (up to rounding where a gradient sums several terms: a tied head) */
        float big = 0.0f;
        for (size_t j = 0; j < m.n_floats; j++) big = fmaxf(big, fabsf(g0[j]));
        int twice = 1; /* not added: off by |g0| */
        for (size_t j = 0; j < m.n_floats; j++)
            twice &= fabsf(m.g[j] - 2.0f * g0[j]) <= 1e-4f * fabsf(g0[j]) + 1e-6f * big;
        CHECK_MSG(twice, "case %d: a second backward did not add to every gradient", ci);
        free(g0);
        al_acts_free(&a);
        al_model_free(&m);
    }
}

static void test_schedule_and_counts(void) {
    al_train_opts o;
    al_train_opts_default(&o);
    o.lr = 1.0;
    o.warmup = 10;
    o.steps = 110;
    o.min_lr_ratio = 0.1;
    CHECK_CLOSE(al_lr_at(&o, 0), 0.1, 1e-12);
    CHECK_CLOSE(al_lr_at(&o, 9), 1.0, 1e-12);
    CHECK_CLOSE(al_lr_at(&o, 60), 0.55, 1e-12); /* half way down the cosine */
    CHECK_CLOSE(al_lr_at(&o, 110), 0.1, 1e-12);
    al_config c = tiny();
    al_model m;
    al_err err;
    CHECK(al_model_create(&m, &c, &err) == 0);
    /* per layer: q 32x32, k,v 16x32, o 32x32, 3 MLP 64x32 ; head 256x32 */
    size_t per_layer = 32 * 32 * 2 + 16 * 32 * 2 + 3 * 64 * 32;
    CHECK(al_model_matmul_params(&m) == 2 * per_layer + 256 * 32);
    al_model_free(&m);
}

int main(int argc, char **argv) {
    (void)argc;
    al_blas_fix_kernels(argv); /* test the kernels users get */
    char dir[] = "/tmp/al_test_model_XXXXXX";
    if (!mkdtemp(dir)) return 1;
    test_roundtrip(dir);
    test_config_errors();
    test_determinism();
    test_grads_written();
    test_schedule_and_counts();
    if (tu_remove_dir(dir)) return 1;
    return TEST_EXIT();
}
