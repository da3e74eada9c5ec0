/*
 * test_api.c: the public API (include/attnlab.h) on checkpoints saved by the
 * library: the model facts against their closed forms (parameters from the
 * config's shapes, KV bytes per token from each design's cache formula),
 * al_logits against the model's own forward (the same bits), al_generate
 * greedy against choosing the argmax of a full al_logits recompute at every
 * step (the KV-cache decode against the plain forward), sampling repeatable
 * by seed, and each refusal: a directory that is no model, a vision model,
 * empty or too long inputs, bytes outside a smaller vocabulary, bytes
 * generated from a model whose tokens are not bytes; the message in the
 * caller's buffer (truncated to its length, or none without one).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnlab.h"
#include "test.h"
#include "testutil.h"

/* Parameters of a tu_config language model, from its shapes: embeddings,
 * per layer two norms, W_q, W_k, W_v, W_o and the SwiGLU MLP, the final norm
 * and (untied) the LM head. */
static size_t gqa_params_closed_form(const al_config *c) {
    const size_t d = (size_t)c->hidden_size, f = (size_t)c->intermediate_size, V = (size_t)c->vocab_size;
    const size_t qd = (size_t)c->num_heads * c->head_dim, kvd = (size_t)c->num_kv_heads * c->head_dim;
    const size_t layer = 2 * d + d * qd + 2 * d * kvd + qd * d + 3 * d * f;
    return V * d + (size_t)c->num_layers * layer + d + (c->tie_word_embeddings ? 0 : V * d);
}

/* Saves a random model of config c into dir; 0 on success. */
static int save_model(const al_config *c, uint64_t seed, const char *dir) {
    al_model m;
    if (tu_make_model(&m, c, seed, TU_GAINS_ONE)) return -1;
    al_err err = {{0}};
    const int rc = al_model_save(&m, dir, NULL, &err);
    CHECK_MSG(rc == 0, "save %s: %s", dir, err.msg);
    al_model_free(&m);
    return rc;
}

/* The index of the largest of x[n] (the first on ties). */
static int argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++) best = x[i] > x[best] ? i : best;
    return best;
}

/* One design's checkpoint through the API: facts, logits, generation. */
static void check_design(const char *name, const al_config *c, size_t kv_bytes_want, size_t params_want,
                         const char *root) {
    char dir[512], errbuf[256];
    snprintf(dir, sizeof dir, "%s/%s", root, name);
    if (save_model(c, 11, dir)) return;
    al_handle *h = al_open(dir, errbuf, sizeof errbuf);
    CHECK_MSG(h != NULL, "%s: al_open: %s", name, errbuf);
    if (!h) return;
    CHECK(al_vocab_size(h) == 256);
    CHECK(al_max_context(h) == c->max_position);
    CHECK_MSG(al_kv_bytes_per_token(h) == kv_bytes_want, "%s: KV bytes per token %zu, closed form %zu", name,
              al_kv_bytes_per_token(h), kv_bytes_want);
    if (params_want)
        CHECK_MSG(al_param_count(h) == params_want, "%s: %zu parameters, closed form %zu", name, al_param_count(h),
                  params_want);

    /* al_logits: the model's forward, bit for bit */
    const int T = c->max_position;
    uint8_t bytes[256];
    int tok[256];
    al_rng r;
    al_rng_seed(&r, 5);
    for (int i = 0; i < T; i++) tok[i] = bytes[i] = (uint8_t)(al_rng_u64(&r) % 256);
    float *got = malloc(sizeof(float) * (size_t)T * 256);
    CHECK_MSG(al_logits(h, bytes, T, got, errbuf, sizeof errbuf) == 0, "%s: al_logits: %s", name, errbuf);
    al_model m;
    al_err err = {{0}};
    if (al_model_load(&m, dir, NULL, &err) == 0) {
        float *want = tu_logits(&m, tok, 1, T);
        CHECK_MSG(want && !memcmp(got, want, sizeof(float) * (size_t)T * 256), "%s: al_logits differ from the forward",
                  name);
        free(want);
        al_model_free(&m);
    } else CHECK_MSG(0, "%s: load: %s", name, err.msg);

    /* greedy generation (KV cache) = the argmax of a full recompute per step */
    enum { PROMPT = 5 };
    const int n = T - PROMPT;
    uint8_t out[256], seq[256];
    memcpy(seq, bytes, PROMPT);
    for (int i = 0; i < n; i++) {
        CHECK(al_logits(h, seq, PROMPT + i, got, errbuf, sizeof errbuf) == 0);
        seq[PROMPT + i] = (uint8_t)argmax(got + (size_t)(PROMPT + i - 1) * 256, 256);
    }
    CHECK_MSG(al_generate(h, bytes, PROMPT, n, 0.0f, 0, 1.0f, 1, out, errbuf, sizeof errbuf) == n, "%s: %s", name,
              errbuf);
    CHECK_MSG(!memcmp(out, seq + PROMPT, (size_t)n), "%s: greedy generation differs from the recomputed argmax", name);
    /* top-k 1 at any temperature is greedy; sampling repeats by seed */
    uint8_t again[256];
    CHECK(al_generate(h, bytes, PROMPT, n, 1.5f, 1, 1.0f, 9, again, errbuf, sizeof errbuf) == n);
    CHECK(!memcmp(out, again, (size_t)n));
    CHECK(al_generate(h, bytes, PROMPT, n, 1.0f, 20, 0.9f, 3, out, errbuf, sizeof errbuf) == n);
    CHECK(al_generate(h, bytes, PROMPT, n, 1.0f, 20, 0.9f, 3, again, errbuf, sizeof errbuf) == n);
    CHECK(!memcmp(out, again, (size_t)n));
    CHECK(al_generate(h, bytes, PROMPT, 0, 1.0f, 0, 1.0f, 3, out, errbuf, sizeof errbuf) == 0);

    /* refusals: -1 with one line in errbuf */
    errbuf[0] = 0;
    CHECK(al_logits(h, bytes, 0, got, errbuf, sizeof errbuf) == -1 && errbuf[0]);
    errbuf[0] = 0;
    CHECK(al_logits(h, bytes, T + 1, got, errbuf, sizeof errbuf) == -1 && errbuf[0]);
    errbuf[0] = 0;
    CHECK(al_generate(h, bytes, 0, 4, 0.0f, 0, 1.0f, 1, out, errbuf, sizeof errbuf) == -1 && strstr(errbuf, "empty"));
    errbuf[0] = 0;
    CHECK(al_generate(h, bytes, PROMPT, T, 0.0f, 0, 1.0f, 1, out, errbuf, sizeof errbuf) == -1 &&
          strstr(errbuf, "exceed"));
    CHECK(!strchr(errbuf, '\n'));
    CHECK(al_generate(h, bytes, PROMPT, -1, 0.0f, 0, 1.0f, 1, out, NULL, 0) == -1); /* no buffer: no message */
    free(got);
    al_close(h);
}

/* Directories that al_open refuses, and the buffer's handling. */
static void check_open_refusals(const char *root) {
    char errbuf[256], small[8], dir[512];
    snprintf(dir, sizeof dir, "%s/none", root);
    CHECK(al_open(dir, errbuf, sizeof errbuf) == NULL && errbuf[0] && !strchr(errbuf, '\n'));
    memset(small, 'x', sizeof small);
    CHECK(al_open(dir, small, sizeof small) == NULL && strlen(small) == sizeof small - 1); /* truncated, ended */
    CHECK(al_open(dir, NULL, 0) == NULL);
    al_close(NULL);

    al_config v;
    al_config_vision_default(&v);
    v.image_size = 8, v.patch_size = 2, v.num_channels = 1, v.num_labels = 5;
    v.hidden_size = 16, v.intermediate_size = 24, v.num_layers = 1, v.num_heads = 2, v.num_kv_heads = 2;
    v.head_dim = 8;
    al_config_vision_derive(&v, 1);
    snprintf(dir, sizeof dir, "%s/vit", root);
    if (save_model(&v, 3, dir)) return;
    errbuf[0] = 0;
    CHECK_MSG(al_open(dir, errbuf, sizeof errbuf) == NULL && strstr(errbuf, "vision"), "vision model: '%s'", errbuf);
}

/* A model whose vocabulary is not the 256 bytes (a tokenized run's): bytes
 * past it are refused by al_logits, and al_generate, whose samples are
 * bytes, refuses the model. */
static void check_other_vocab(const char *root) {
    char dir[512], errbuf[256];
    snprintf(dir, sizeof dir, "%s/v200", root);
    al_config c = tu_config(32, 64, 1, 2, 2, 16, 16);
    c.vocab_size = 200;
    c.tokenizer_vocab = 1; /* a tokenized run's vocabulary */
    if (save_model(&c, 4, dir)) return;
    al_handle *h = al_open(dir, errbuf, sizeof errbuf);
    CHECK_MSG(h != NULL, "vocab 200: al_open: %s", errbuf);
    if (!h) return;
    CHECK(al_vocab_size(h) == 200);
    const uint8_t ok[3] = {1, 199, 7}, bad[3] = {1, 250, 7};
    float logits[3 * 200];
    CHECK(al_logits(h, ok, 3, logits, errbuf, sizeof errbuf) == 0);
    errbuf[0] = 0;
    CHECK_MSG(al_logits(h, bad, 3, logits, errbuf, sizeof errbuf) == -1 && strstr(errbuf, "byte 250"), "'%s'", errbuf);
    uint8_t out[4];
    errbuf[0] = 0;
    CHECK_MSG(al_generate(h, ok, 3, 4, 0.0f, 0, 1.0f, 1, out, errbuf, sizeof errbuf) == -1 &&
                  strstr(errbuf, "200 tokens"),
              "'%s'", errbuf);
    al_close(h);
}

int main(void) {
    char root[] = "/tmp/al_test_api_XXXXXX";
    if (!mkdtemp(root)) return 1;
#ifdef NDEBUG
    /* this file is built with the library's flags: its asserts would be gone too */
    CHECK_MSG(0, "%s", "NDEBUG is defined: the build compiled assert() out (CMakeLists.txt keeps it on)");
#endif
    /* GQA: 2 layers x 2 KV heads x (k, v) x 12 floats x 4 bytes */
    al_config gqa = tu_config(48, 80, 2, 4, 2, 12, 32);
    check_design("gqa", &gqa, 2 * 2 * 2 * 12 * 4, gqa_params_closed_form(&gqa), root);
    al_config mha = tu_config(48, 80, 1, 4, 4, 12, 24);
    mha.tie_word_embeddings = 1;
    check_design("mha-tied", &mha, 1 * 2 * 4 * 12 * 4, gqa_params_closed_form(&mha), root);
    /* MLA: 2 layers x (d_c 20 + d_r 4) floats x 4 bytes */
    al_config mla = tu_mla_config(0, 0);
    check_design("mla", &mla, 2 * (20 + 4) * 4, 0, root);
    check_open_refusals(root);
    check_other_vocab(root);
    CHECK(tu_remove_dir(root) == 0);
    return TEST_EXIT();
}
