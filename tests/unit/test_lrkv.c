/*
 * test_lrkv.c: the LRKV design (attention.md 3.3, 3.5) beyond what the
 * PyTorch reference (tests/ref/test_lrkv_grads.py) covers:
 *  - the factored decode, reading only [K_s | V_s | R_K | R_V] per token,
 *    equals the materialised training forward (r = 0, 2, d_h; one config with
 *    tensor sizes that are not multiples of 16 floats), over more tokens than
 *    one kernel block and one decode chunk,
 *    with softmax and with the other score functions;
 *  - the cache is exactly layers x tokens x 2 (d_h + H r) floats;
 *  - r = 0 is MQA: same logits and gradients as an MQA model with
 *    k_proj = W_Ks, v_proj = W_Vs;
 *  - init gives ||B U||_F / ||W_s||_F ~ 0.1 per head;
 *  - bad configs fail with the right one-line message;
 *  - checkpoints keep AttnlabForCausalLM and lrkv_rank (also r = 0, whose
 *    down/up tensors are [0, d] and [H d_h, 0]);
 *  - gradients are bit-identical across thread counts.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/blas.h"
#include "io/io.h"
#include "model/model.h"
#include "test.h"
#include "testutil.h"

static al_config lrkv_config(int d, int H, int dh, int r, int tied, int T) {
    al_config c = tu_config(d, 80, 2, H, H, dh, T);
    c.tie_word_embeddings = tied;
    c.attention = AL_ATTN_LRKV;
    c.lrkv_rank = r;
    return c;
}

static void check_decode(int d, int H, int dh, int r, int tied, int T, al_score_kind score) {
    al_config c = lrkv_config(d, H, dh, r, tied, T);
    c.score = score;
    tu_decode dd;
    if (tu_decode_random_model(&c, (uint64_t)(d * 131 + r * 7 + tied), TU_FLAT, 5, T, &dd)) return;
    const size_t vpt = 2 * ((size_t)dh + (size_t)H * r);
    CHECK_MSG(dd.values_per_token == vpt, "values per token %zu, want %zu", dd.values_per_token, vpt);
    CHECK_MSG(dd.cache_bytes == (size_t)c.num_layers * T * vpt * sizeof(float), "cache bytes %zu", dd.cache_bytes);
    CHECK_MSG(dd.worst < 1e-4, "d=%d H=%d dh=%d r=%d tied=%d score=%s: decode vs forward rel err %g", d, H, dh, r,
              tied, al_score_name(score), dd.worst);
    CHECK(dd.refuses_full);
}

/* The LRKV tensor of an MQA tensor's name: self_attn.k_proj.weight ->
 * self_attn.k_shared_proj.weight (v alike), other names the same. */
static const al_param *lrkv_twin(const al_model *ml, const char *src) {
    char name[96];
    const char *k = strstr(src, "k_proj."), *v = strstr(src, "v_proj.");
    if (k || v)
        snprintf(name, sizeof name, "%.*s%c_shared_proj.weight", (int)((k ? k : v) - src), src, k ? 'k' : 'v');
    else
        snprintf(name, sizeof name, "%s", src);
    return tu_find_param(ml, name);
}

/* LRKV with r = 0 against MQA with the shared maps as its one KV head. */
static void check_mqa_equivalence(void) {
    const int T = 33, B = 2, N = B * T;
    al_config cl = lrkv_config(48, 4, 8, 0, 0, T), cm = cl;
    cm.attention = AL_ATTN_MQA;
    cm.num_kv_heads = 1;
    cm.lrkv_rank = 0;
    al_model ml, mm;
    al_err err;
    if (tu_make_model(&ml, &cl, 77, TU_FLAT) || al_model_create(&mm, &cm, &err)) {
        CHECK(0);
        return;
    }
    for (int i = 0; i < mm.n_params; i++) {
        const char *src = mm.params[i].name;
        const al_param *p = lrkv_twin(&ml, src);
        CHECK_MSG(p && p->numel == mm.params[i].numel, "no LRKV tensor for %s", src);
        if (p) memcpy(mm.w + mm.params[i].offset, ml.w + p->offset, sizeof(float) * p->numel);
    }
    CHECK(al_model_alloc_grads(&ml, &err) == 0 && al_model_alloc_grads(&mm, &err) == 0);
    al_acts al, am;
    CHECK(al_acts_create(&al, &ml, B, T, &err) == 0 && al_acts_create(&am, &mm, B, T, &err) == 0);
    int in[N], tg[N];
    for (int i = 0; i < N; i++) in[i] = (i * 53 + 1) % 256, tg[i] = (i * 29 + 3) % 256;
    double ll = tu_loss_and_grads(&ml, &al, in, tg), lm = tu_loss_and_grads(&mm, &am, in, tg);
    double e = test_rel_err(al.logits, am.logits, (size_t)N * 256);
    CHECK_MSG(e < 1e-5, "r=0 LRKV vs MQA logits rel err %g", e);
    CHECK_CLOSE(ll, lm, 1e-6);
    /* every gradient, matched by name as above */
    double worst = 0;
    for (int i = 0; i < mm.n_params; i++) {
        const al_param *p = lrkv_twin(&ml, mm.params[i].name);
        if (!p) continue;
        double ge = test_rel_err(ml.g + p->offset, mm.g + mm.params[i].offset, p->numel);
        worst = ge > worst ? ge : worst;
    }
    CHECK_MSG(worst < 1e-5, "r=0 LRKV vs MQA gradients rel err %g", worst);
    al_acts_free(&al);
    al_acts_free(&am);
    al_model_free(&ml);
    al_model_free(&mm);
}

static double fro(const double *x, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += x[i] * x[i];
    return sqrt(s);
}

/* ||B[h] U[h]||_F / ||W_s||_F for every head of every layer of a fresh model. */
static void check_init_ratio(int r) {
    al_config c = lrkv_config(256, 8, 32, r, 0, 64);
    c.num_layers = 3;
    al_model m;
    al_err err;
    CHECK(al_model_create(&m, &c, &err) == 0);
    al_model_init_weights(&m, 2024);
    const int d = c.hidden_size, dh = c.head_dim;
    double lo = 1e9, hi = 0;
    double *BU = malloc(sizeof(double) * (size_t)dh * d), *Ws = malloc(sizeof(double) * (size_t)dh * d);
    for (int l = 0; l < c.num_layers; l++)
        for (int kv = 0; kv < 2; kv++) {
            const float *ws = m.layers[l].attn.w[1 + kv], *U = m.layers[l].attn.w[3 + kv], *Bm = m.layers[l].attn.w[5 + kv];
            for (size_t i = 0; i < (size_t)dh * d; i++) Ws[i] = ws[i];
            const double ns = fro(Ws, (size_t)dh * d);
            for (int h = 0; h < c.num_heads; h++) {
                for (int e = 0; e < dh; e++)
                    for (int j = 0; j < d; j++) {
                        double acc = 0;
                        for (int k = 0; k < r; k++)
                            acc += (double)Bm[((size_t)h * dh + e) * r + k] * U[((size_t)h * r + k) * d + j];
                        BU[(size_t)e * d + j] = acc;
                    }
                const double ratio = fro(BU, (size_t)dh * d) / ns;
                lo = ratio < lo ? ratio : lo;
                hi = ratio > hi ? ratio : hi;
            }
        }
    CHECK_MSG(lo >= 0.05 && hi <= 0.2, "r=%d: init ||BU||/||Ws|| in [%g, %g], want within [0.05, 0.2]", r, lo, hi);
    printf("init ratio r=%d: ||B U||_F / ||W_s||_F in [%.3f, %.3f]\n", r, lo, hi);
    free(BU);
    free(Ws);
    al_model_free(&m);
}

static void expect_error(const char *attnlab_block, const char *extra, const char *want, int exact) {
    tu_expect_config_error(want, exact,
                           "{\"architectures\":[\"AttnlabForCausalLM\"],\"hidden_size\":64,\"intermediate_size\":96,"
                           "\"num_hidden_layers\":1,\"num_attention_heads\":2,\"vocab_size\":256%s,"
                           "\"attnlab\":{\"attention\":\"lrkv\"%s}}",
                           extra, attnlab_block);
}

static void check_config_errors(void) {
#define HD32 ",\"head_dim\":32"
    expect_error(",\"lrkv_rank\":3", HD32, "invalid config: lrkv_rank must be even, got 3", 1);
    expect_error(",\"lrkv_rank\":40", HD32, "invalid config: lrkv_rank 40 exceeds head_dim 32", 1);
    expect_error(",\"lrkv_rank\":-2", HD32, "invalid config: lrkv_rank must be non-negative, got -2", 1);
    expect_error(",\"lrkv_rank\":2", ",\"head_dim\":7", "head_dim must be even", 0);
    expect_error(",\"lrkv_rank\":2", HD32 ",\"num_key_value_heads\":1",
                 "invalid config: attention 'lrkv' needs num_key_value_heads == num_attention_heads (2), got 1", 1);
    /* the good ones parse; absent num_key_value_heads means one per head */
    const char *good = "{\"architectures\":[\"AttnlabForCausalLM\"],\"hidden_size\":64,\"intermediate_size\":96,"
                       "\"num_hidden_layers\":1,\"num_attention_heads\":2,\"head_dim\":32,\"vocab_size\":256,"
                       "\"attnlab\":{\"attention\":\"lrkv\",\"lrkv_rank\":32}}";
    al_config c;
    al_err err = {{0}};
    CHECK_MSG(al_config_parse(&c, good, NULL, &err) == 0 && c.attention == AL_ATTN_LRKV && c.lrkv_rank == 32 &&
                  c.num_kv_heads == 2,
              "%s", err.msg);
#undef HD32
}

static void check_roundtrip(const char *dir, int r) {
    al_config c = lrkv_config(32, 2, 8, r, 1, 16);
    al_model a, b;
    al_err err = {{0}};
    CHECK(al_model_create(&a, &c, &err) == 0);
    al_model_init_weights(&a, 9);
    if (tu_save_load(&a, &b, dir, NULL, NULL) == 0) {
        CHECK_MSG(b.cfg.attention == AL_ATTN_LRKV && b.cfg.lrkv_rank == r && b.cfg.num_kv_heads == 2, "r=%d", r);
        const al_param *p = tu_find_param(&b, "model.layers.1.self_attn.k_down_proj.weight");
        CHECK(p && p->shape[0] == 2 * r && p->shape[1] == 32);
        p = tu_find_param(&b, "model.layers.1.self_attn.v_up_proj.weight");
        CHECK(p && p->shape[0] == 16 && p->shape[1] == r);
        al_model_free(&b);
    }
    char *text = tu_read_config(dir);
    CHECK(text && strstr(text, "\"AttnlabForCausalLM\"") && strstr(text, "\"lrkv_rank\"") && strstr(text, "\"lrkv\""));
    free(text);
    al_model_free(&a);
}

/* Forward + backward with 1 and with 2 threads: identical bits. The shape is
 * big enough that the design's parallel loops run in parallel. */
static void check_thread_determinism(void) {
    enum { B = 4, T = 70, N = B * T };
    al_config c = lrkv_config(48, 4, 16, 8, 0, T);
    al_model m;
    al_err err;
    if (tu_make_model(&m, &c, 3, TU_FLAT) || al_model_alloc_grads(&m, &err)) {
        CHECK(0);
        return;
    }
    al_acts a;
    CHECK(al_acts_create(&a, &m, B, T, &err) == 0);
    int in[N], tg[N];
    for (int i = 0; i < N; i++) in[i] = (i * 41 + 7) % 256, tg[i] = (i * 13 + 2) % 256;
    CHECK_MSG(tu_same_bits_1_2_threads(&m, &a, in, tg), "gradients differ between 1 and 2 threads");
    al_acts_free(&a);
    al_model_free(&m);
}

int main(int argc, char **argv) {
    (void)argc;
    al_blas_fix_kernels(argv); /* test the kernels users get */
    /* T > one 64-row kernel block; 300 > one 256-position decode chunk, and
     * the last shape is big enough for the decode's parallel loop */
    const al_score_kind sm = AL_SCORE_SOFTMAX;
    check_decode(48, 4, 8, 0, 0, 72, sm);
    check_decode(48, 4, 8, 2, 1, 300, sm);
    check_decode(48, 4, 8, 8, 0, 72, sm); /* r = d_h */
    check_decode(20, 3, 6, 4, 0, 72, sm); /* 6 x 20 floats: tensors not back to back */
    check_decode(64, 8, 32, 16, 0, 300, sm);
    /* the other score functions: chunks add without a softmax merge */
    check_decode(48, 4, 8, 2, 0, 300, AL_SCORE_POLY);
    check_decode(48, 4, 8, 4, 1, 300, AL_SCORE_RELU);
    check_decode(48, 4, 8, 8, 0, 300, AL_SCORE_SIGMOID);
    check_mqa_equivalence();
    check_init_ratio(16);
    check_init_ratio(2);
    check_config_errors();
    char dir[] = "/tmp/al_test_lrkv_XXXXXX";
    if (!mkdtemp(dir)) return 1;
    check_roundtrip(dir, 4);
    check_roundtrip(dir, 0);
    if (tu_remove_dir(dir)) return 1;
    check_thread_determinism();
    return TEST_EXIT();
}
