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
#include "testutil.h"

enum { DC = 12, DR = 6, DV = 10 };

static al_config mla_config(int dq, int dn, int T, int tied) {
    al_config c = tu_config(48, 80, 2, 4, 4, dn + DR, T);
    c.attention = AL_ATTN_MLA;
    c.kv_lora_rank = DC;
    c.q_lora_rank = dq;
    c.qk_nope_head_dim = dn;
    c.qk_rope_head_dim = DR; /* dr/2 = 3 frequencies: odd on purpose */
    c.v_head_dim = DV;
    c.tie_word_embeddings = tied;
    return c;
}

/* T > 64 crosses the score kernels' query blocks, T > 256 decode's key chunks. */
static void check_decode(int dq, int dn, int tied, int T, al_score_kind score) {
    al_config c = mla_config(dq, dn, T, tied);
    c.score = score;
    tu_decode d;
    if (tu_decode_random_model(&c, (uint64_t)(dq * 7 + dn * 3 + tied), TU_GAINS_ONE, 3, T, &d)) return;
    /* the latent and the rope key per token per layer, nothing more */
    CHECK(d.values_per_token == DC + DR);
    CHECK_MSG(d.cache_bytes == (size_t)c.num_layers * T * (DC + DR) * sizeof(float), "cache_bytes %zu",
              d.cache_bytes);
    CHECK_MSG(d.worst < 1e-4, "dq=%d dn=%d tied=%d T=%d score=%s: decode vs forward rel err %g", dq, dn, tied, T,
              al_score_name(score), d.worst);
    CHECK(d.refuses_full);
}

static void expect_param(const al_model *m, const char *name, int64_t rows, int64_t cols, int decay) {
    const al_param *p = tu_find_param(m, name);
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
            CHECK(tu_find_param(&m, name) == NULL);
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
        const al_param *g = tu_find_param(&m, name);
        CHECK(g && m.w[g->offset] == 1.0f && m.w[g->offset + DC - 1] == 1.0f);
        snprintf(name, sizeof name, "%so_proj.weight", pre);
        const al_param *o = tu_find_param(&m, name);
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
        if (tu_make_model(&a, &c, 9, TU_GAINS_ONE)) {
            CHECK(0);
            continue;
        }
        if (tu_save_load(&a, &b, dir, NULL, NULL)) {
            al_model_free(&a);
            continue;
        }
        const al_config *l = &b.cfg;
        CHECK(l->attention == AL_ATTN_MLA && l->kv_lora_rank == DC && l->q_lora_rank == dq &&
              l->qk_nope_head_dim == 8 && l->qk_rope_head_dim == DR && l->v_head_dim == DV &&
              l->num_kv_heads == 4 && l->tie_word_embeddings == (dq == 0));
        char *text = tu_read_config(dir);
        CHECK(text && strstr(text, "\"DeepseekV2ForCausalLM\"") && strstr(text, "\"deepseek_v2\""));
        CHECK(text && strstr(text, dq ? "\"q_lora_rank\":\t20" : "\"q_lora_rank\":\tnull"));
        free(text);
        al_model_free(&a);
        al_model_free(&b);
    }
    CHECK(tu_remove_dir(dir) == 0);
}

/* Forward + backward at 1 and at 2 threads: bit-identical loss and grads. */
static void check_threads(void) {
    al_config c = mla_config(16, 8, 70, 0);
    al_model m;
    al_acts a;
    al_err err;
    if (tu_make_model(&m, &c, 21, TU_GAINS_ONE) || al_model_alloc_grads(&m, &err) ||
        al_acts_create(&a, &m, 3, 70, &err)) {
        CHECK(0);
        return;
    }
    int in[210], tg[210];
    for (int i = 0; i < 210; i++) in[i] = (i * 37) % 256, tg[i] = (i * 91 + 5) % 256;
    CHECK(tu_same_bits_1_2_threads(&m, &a, in, tg));
    double gn = 0;
    for (size_t i = 0; i < m.n_floats; i++) gn += (double)m.g[i] * m.g[i];
    CHECK(gn > 0 && isfinite(gn));
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
