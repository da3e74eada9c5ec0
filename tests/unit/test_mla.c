/*
 * test_mla.c: the MLA design (DeepSeek-V2 latent attention). What the
 * PyTorch reference (tests/ref/test_mla_grads.py) does not cover:
 *  - absorbed decoding token by token == the materialised full forward, with
 *    and without query compression, with qk_nope_head_dim = 0, over several
 *    decode key chunks, and for every score function;
 *  - the decoder's cache holds exactly layers x tokens x (dc + dr) floats;
 *  - parameter names and shapes are HF DeepseekV2's;
 *  - impossible configs are refused with a one-line reason;
 *  - a checkpoint round trip keeps DeepseekV2ForCausalLM and the MLA fields;
 *  - a training step gives the same bits at 1 and 2 threads.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/blas.h"
#include "io/io.h"
#include "model/model.h"
#include "test.h"

enum { DC = 12, DR = 6, DV = 10 };

static al_config mla_config(int dq, int dn, int T, int tied) {
    al_config c;
    al_config_default(&c);
    c.hidden_size = 48;
    c.intermediate_size = 80;
    c.num_layers = 2;
    c.num_heads = 4;
    c.num_kv_heads = 4;
    c.attention = AL_ATTN_MLA;
    c.kv_lora_rank = DC;
    c.q_lora_rank = dq;
    c.qk_nope_head_dim = dn;
    c.qk_rope_head_dim = DR; /* dr/2 = 3 frequencies: odd on purpose */
    c.v_head_dim = DV;
    c.head_dim = dn + DR;
    c.max_position = T;
    c.tie_word_embeddings = tied;
    return c;
}

/* Random weights (std 0.15), norm gains around 1, so that every path matters. */
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

/* T > 64 crosses the score kernels' query blocks, T > 256 decode's key chunks. */
static void check_decode(int dq, int dn, int tied, int T, al_score_kind score) {
    al_config c = mla_config(dq, dn, T, tied);
    c.score = score;
    al_model m;
    if (make_model(&m, &c, (uint64_t)(dq * 7 + dn * 3 + tied))) {
        CHECK(0);
        return;
    }
    al_err err;
    al_acts a;
    int *tok = malloc(sizeof(int) * T);
    al_rng r;
    al_rng_seed(&r, 3);
    for (int i = 0; i < T; i++) tok[i] = (int)(al_rng_u64(&r) % 256);
    CHECK(al_acts_create(&a, &m, 1, T, &err) == 0);
    al_model_forward(&m, &a, tok, NULL);
    al_decoder dec;
    CHECK(al_decoder_create(&dec, &m, T, &err) == 0);
    /* the latent and the rope key per token per layer, nothing more */
    CHECK(dec.values_per_token == DC + DR);
    CHECK_MSG(dec.cache_bytes == (size_t)c.num_layers * T * (DC + DR) * sizeof(float), "cache_bytes %zu",
              dec.cache_bytes);
    float logits[256];
    double worst = 0;
    for (int t = 0; t < T; t++) {
        CHECK(al_decoder_step(&dec, tok[t], logits, &err) == 0);
        double e = test_rel_err(logits, a.logits + (size_t)t * 256, 256);
        worst = e > worst ? e : worst;
    }
    CHECK_MSG(worst < 1e-4, "dq=%d dn=%d tied=%d T=%d score=%s: decode vs forward rel err %g", dq, dn, tied, T,
              al_score_name(score), worst);
    CHECK(al_decoder_step(&dec, 1, logits, &err) == -1 && strstr(err.msg, "full"));
    free(tok);
    al_decoder_free(&dec);
    al_acts_free(&a);
    al_model_free(&m);
}

static const al_param *find_param(const al_model *m, const char *name) {
    for (int i = 0; i < m->n_params; i++)
        if (strcmp(m->params[i].name, name) == 0) return &m->params[i];
    return NULL;
}

static void expect_param(const al_model *m, const char *name, int64_t rows, int64_t cols, int decay) {
    const al_param *p = find_param(m, name);
    CHECK_MSG(p && p->shape[0] == rows && (cols == 0 ? p->ndim == 1 : p->ndim == 2 && p->shape[1] == cols) &&
                  p->decay == decay,
              "%s: want [%lld, %lld]", name, (long long)rows, (long long)cols);
}

static void check_params(void) {
    const int H = 4, dn = 8, d = 48;
    for (int dq = 0; dq <= 16; dq += 16) {
        al_config c = mla_config(dq, dn, 16, 0);
        al_model m;
        al_err err;
        CHECK(al_model_create(&m, &c, &err) == 0);
        const char *pre = "model.layers.1.self_attn.";
        char name[128];
#define P(n, r, cl, dec)                            \
    snprintf(name, sizeof name, "%s%s", pre, n);     \
    expect_param(&m, name, r, cl, dec);
        if (dq) {
            P("q_a_proj.weight", dq, d, 1);
            P("q_a_layernorm.weight", dq, 0, 0);
            P("q_b_proj.weight", H * (dn + DR), dq, 1);
            snprintf(name, sizeof name, "%sq_proj.weight", pre);
            CHECK(find_param(&m, name) == NULL);
        } else {
            P("q_proj.weight", H * (dn + DR), d, 1);
        }
        P("kv_a_proj_with_mqa.weight", DC + DR, d, 1);
        P("kv_a_layernorm.weight", DC, 0, 0);
        P("kv_b_proj.weight", H * (dn + DV), DC, 1);
        P("o_proj.weight", d, H * DV, 1);
#undef P
        /* gains start at one, matrices at std 0.02 (o_proj scaled down with depth) */
        al_model_init_weights(&m, 1);
        snprintf(name, sizeof name, "%skv_a_layernorm.weight", pre);
        const al_param *g = find_param(&m, name);
        CHECK(g && m.w[g->offset] == 1.0f && m.w[g->offset + DC - 1] == 1.0f);
        snprintf(name, sizeof name, "%so_proj.weight", pre);
        const al_param *o = find_param(&m, name);
        CHECK(o && fabsf(o->std - 0.02f / 2.0f) < 1e-7f);
        al_model_free(&m);
    }
}

static void expect_invalid(al_config c, const char *want) {
    al_err err = {{0}};
    int rc = al_config_validate(&c, &err);
    CHECK_MSG(rc == -1 && strcmp(err.msg, want) == 0, "got '%s', want '%s'", rc ? err.msg : "(accepted)", want);
}

static void check_validation(void) {
    al_config ok = mla_config(0, 8, 16, 0), c;
    al_err err;
    CHECK(al_config_validate(&ok, &err) == 0);
    c = ok, c.qk_nope_head_dim = 0; /* allowed: keys are the rope key alone */
    CHECK(al_config_validate(&c, &err) == 0);
    c = ok, c.kv_lora_rank = 0;
    expect_invalid(c, "invalid config: kv_lora_rank must be positive, got 0");
    c = ok, c.qk_rope_head_dim = 5;
    expect_invalid(c, "invalid config: qk_rope_head_dim must be even for RoPE, got 5");
    c = ok, c.qk_rope_head_dim = 0;
    expect_invalid(c, "invalid config: qk_rope_head_dim must be positive, got 0");
    c = ok, c.qk_nope_head_dim = -2;
    expect_invalid(c, "invalid config: qk_nope_head_dim must be non-negative, got -2");
    c = ok, c.v_head_dim = 0;
    expect_invalid(c, "invalid config: v_head_dim must be positive, got 0");
    c = ok, c.q_lora_rank = -1;
    expect_invalid(c, "invalid config: q_lora_rank must be non-negative (0: no query compression), got -1");
    c = ok, c.num_kv_heads = 2;
    expect_invalid(c, "invalid config: attention 'mla' needs num_key_value_heads == num_attention_heads (4), got 2");
    c = ok, c.kv_lora_rank = 1 << 20;
    expect_invalid(c, "invalid config: MLA sizes are beyond what attnlab supports");
    /* the same rules through config.json */
    const char *json =
        "{\"architectures\":[\"DeepseekV2ForCausalLM\"],\"hidden_size\":32,\"intermediate_size\":64,"
        "\"num_hidden_layers\":1,\"num_attention_heads\":4,\"num_key_value_heads\":4,\"kv_lora_rank\":8,"
        "\"q_lora_rank\":null,\"qk_nope_head_dim\":8,\"qk_rope_head_dim\":7,\"v_head_dim\":8,\"vocab_size\":256}";
    al_config p;
    err.msg[0] = 0;
    CHECK(al_config_parse(&p, json, NULL, &err) == -1);
    CHECK_MSG(strcmp(err.msg, "invalid config: qk_rope_head_dim must be even for RoPE, got 7") == 0, "%s", err.msg);
}

static void check_roundtrip(void) {
    char dir[] = "/tmp/al_test_mla_XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(0);
        return;
    }
    for (int dq = 0; dq <= 20; dq += 20) {
        al_config c = mla_config(dq, 8, 32, dq == 0);
        al_model a, b;
        al_err err;
        if (make_model(&a, &c, 9)) {
            CHECK(0);
            continue;
        }
        CHECK_MSG(al_model_save(&a, dir, NULL, &err) == 0, "%s", err.msg);
        CHECK_MSG(al_model_load(&b, dir, NULL, &err) == 0, "%s", err.msg);
        const al_config *l = &b.cfg;
        CHECK(l->attention == AL_ATTN_MLA && l->kv_lora_rank == DC && l->q_lora_rank == dq &&
              l->qk_nope_head_dim == 8 && l->qk_rope_head_dim == DR && l->v_head_dim == DV &&
              l->num_kv_heads == 4 && l->tie_word_embeddings == (dq == 0));
        CHECK(b.n_floats == a.n_floats && memcmp(a.w, b.w, a.n_floats * sizeof(float)) == 0);
        char path[256], *text = NULL;
        size_t len;
        snprintf(path, sizeof path, "%s/config.json", dir);
        CHECK(al_read_file(path, &text, &len, &err) == 0);
        CHECK(text && strstr(text, "\"DeepseekV2ForCausalLM\"") && strstr(text, "\"deepseek_v2\""));
        CHECK(text && strstr(text, dq ? "\"q_lora_rank\":\t20" : "\"q_lora_rank\":\tnull"));
        free(text);
        al_model_free(&a);
        al_model_free(&b);
    }
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

/* Forward + backward at 1 and at 2 threads: bit-identical loss and grads. */
static void check_threads(void) {
    al_config c = mla_config(16, 8, 70, 0);
    al_model m;
    al_acts a;
    al_err err;
    if (make_model(&m, &c, 21) || al_model_alloc_grads(&m, &err) || al_acts_create(&a, &m, 3, 70, &err)) {
        CHECK(0);
        return;
    }
    int in[210], tg[210];
    for (int i = 0; i < 210; i++) in[i] = (i * 37) % 256, tg[i] = (i * 91 + 5) % 256;
    float *g1 = malloc(m.n_floats * sizeof(float));
    double loss[2];
    for (int k = 0; k < 2; k++) {
        al_set_threads(k + 1);
        al_model_zero_grads(&m);
        loss[k] = al_model_forward(&m, &a, in, tg);
        al_model_backward(&m, &a);
        if (k == 0) memcpy(g1, m.g, m.n_floats * sizeof(float));
    }
    CHECK(loss[0] == loss[1] && memcmp(g1, m.g, m.n_floats * sizeof(float)) == 0);
    double gn = 0;
    for (size_t i = 0; i < m.n_floats; i++) gn += (double)m.g[i] * m.g[i];
    CHECK(gn > 0 && isfinite(gn));
    free(g1);
    al_acts_free(&a);
    al_model_free(&m);
}

int main(int argc, char **argv) {
    (void)argc;
    al_blas_fix_kernels(argv); /* test the kernels users get */
    check_decode(0, 8, 0, 75, AL_SCORE_SOFTMAX);
    check_decode(16, 8, 1, 75, AL_SCORE_SOFTMAX);
    check_decode(16, 0, 0, 75, AL_SCORE_SOFTMAX);
    check_decode(0, 8, 0, 600, AL_SCORE_SOFTMAX);
    for (int s = AL_SCORE_POLY; s < AL_SCORE_COUNT; s++) check_decode(16, 8, 0, 300, (al_score_kind)s);
    check_params();
    check_validation();
    check_roundtrip();
    check_threads();
    return TEST_EXIT();
}
