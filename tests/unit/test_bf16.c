/*
 * test_bf16.c: BF16 weights for attnlab's own models (al_model_weights_bf16):
 *   - for every design (MHA, GQA, MQA, MLA with and without query
 *     compression, LRKV with r > 0 and r = 0; tied and untied heads) a model
 *     converted to BF16 gives the logits of the same model whose fp32
 *     matrices were rounded to BF16 values, forward and decode (the same
 *     math; only the order of the sums differs), and decode agrees with its
 *     own forward;
 *   - the conversion: one buffer at the arena's offsets (LRKV's and MHA's
 *     adjacent tensors stay adjacent), round to nearest even, NaN kept, the
 *     1-D tensors fp32 views into the arena, a second call a no-op;
 *   - weight bytes: the matrices count half;
 *   - inference only: gradients and saving refused (one line), inference
 *     activations; vision models and models with gradients refused.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/io.h"
#include "model/model.h"
#include "test.h"
#include "testutil.h"

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Rounds m's 2-D tensors to BF16 values in place (what the conversion keeps). */
static void round_matrices(al_model *m) {
    for (int i = 0; i < m->n_params; i++) {
        const al_param *p = &m->params[i];
        if (p->ndim != 2) continue;
        float *w = m->w + p->offset;
        for (size_t j = 0; j < p->numel; j++) w[j] = al_bf16_to_f32(al_f32_to_bf16(w[j]));
    }
}

/* The conversion itself: dtypes, where the views point, the values, bytes. */
static void check_layout(const char *tag, const al_model *ref, const al_model *b) {
    size_t vec = 0, mat = 0;
    int bad_view = 0, bad_value = 0;
    for (int i = 0; i < b->n_params; i++) {
        const al_param *p = &b->params[i];
        if (p->ndim == 1) {
            vec += p->numel;
            bad_view += b->dts[i] != AL_DT_F32;
            continue;
        }
        mat += p->numel;
        bad_view += b->dts[i] != AL_DT_BF16;
        /* the arena still holds the unrounded fp32 values; w16 their RNE BF16 at the same offsets */
        for (size_t j = 0; j < p->numel; j++)
            bad_value += b->w16[p->offset + j] != al_f32_to_bf16(b->w[p->offset + j]) ||
                         al_bf16_to_f32(b->w16[p->offset + j]) != ref->w[p->offset + j];
    }
    CHECK_MSG(bad_view == 0 && bad_value == 0, "%s: %d tensors of the wrong dtype, %d values off", tag, bad_view,
              bad_value);
    /* the views: matrices in w16 at twice their arena byte offset, 1-D tensors in the fp32 arena */
    const int l = b->cfg.num_layers - 1;
    const al_layer_ptrs *L = &b->layers[l];
    const size_t gate_off = (size_t)(ref->layers[l].gate - ref->w);
    CHECK_MSG((const void *)b->embed == (const void *)b->w16 && b->embed_dt == AL_DT_BF16 &&
                  b->head_dt == AL_DT_BF16 && L->gate_dt == AL_DT_BF16 && L->down_dt == AL_DT_BF16 &&
                  (const char *)L->gate == (const char *)b->w16 + 2 * gate_off && L->ln1 >= b->w &&
                  L->ln1 < b->w + b->n_floats && b->final_norm >= b->w && b->final_norm < b->w + b->n_floats,
              "%s: views", tag);
    /* layer 0's first two attention tensors (params 2 and 3, after the embedding and input_layernorm)
     * stay adjacent in BF16, as the fused q/k/v and LRKV input products need */
    const al_attn_layer *A = &b->layers[0].attn;
    if (b->cfg.attention != AL_ATTN_MLA)
        CHECK_MSG(A->wdt[0] == AL_DT_BF16 && (const char *)A->w[1] == (const char *)A->w[0] + 2 * b->params[2].numel,
                  "%s: q_proj and the next tensor are not adjacent in BF16", tag);
    /* bytes: the matrices count 2 per element, the 1-D tensors 4 */
    CHECK_MSG(al_model_weight_bytes(ref) == 4 * (vec + mat) && al_model_weight_bytes(b) == 4 * vec + 2 * mat,
              "%s: weight bytes %zu (fp32 %zu), want %zu", tag, al_model_weight_bytes(b), al_model_weight_bytes(ref),
              4 * vec + 2 * mat);
}

/* Model c with random weights: a copy rounded to BF16 values (fp32) against
 * the same weights converted with al_model_weights_bf16. */
static void check_design(const char *tag, al_config c, uint64_t seed) {
    al_model ref, b;
    al_err err = {{0}};
    if (tu_make_model(&ref, &c, seed, TU_GAINS_ONE) || tu_make_model(&b, &c, seed, TU_GAINS_ONE)) {
        CHECK_MSG(0, "%s: model refused", tag);
        return;
    }
    round_matrices(&ref);
    CHECK_MSG(al_model_weights_bf16(&b, &err) == 0 && b.w16, "%s: %s", tag, err.msg);
    uint16_t *w16 = b.w16;
    CHECK(al_model_weights_bf16(&b, &err) == 0 && b.w16 == w16); /* a second call: nothing to do */
    check_layout(tag, &ref, &b);

    const int B = 2, T = 13, V = c.vocab_size;
    int tok[2 * 13];
    al_rng r;
    al_rng_seed(&r, seed + 1);
    tu_random_tokens(tok, B * T, &r);
    float *lr = tu_logits(&ref, tok, B, T), *lb = tu_logits(&b, tok, B, T);
    double fwd = lr && lb ? test_rel_err(lb, lr, (size_t)B * T * V) : 1.0;
    CHECK_MSG(fwd <= 1e-5, "%s: BF16 forward vs rounded fp32: %.3g", tag, fwd);
    /* decode: both models step by step, against each other and the rounded forward */
    al_decoder dr, db;
    float *gr = malloc(sizeof(float) * V), *gb = malloc(sizeof(float) * V);
    double dec = 0, vs_fwd = 0;
    CHECK(al_decoder_create(&dr, &ref, T, &err) == 0 && al_decoder_create(&db, &b, T, &err) == 0);
    for (int t = 0; t < T; t++) {
        CHECK(al_decoder_step(&dr, tok[t], gr, &err) == 0 && al_decoder_step(&db, tok[t], gb, &err) == 0);
        double e = test_rel_err(gb, gr, (size_t)V);
        dec = e > dec ? e : dec;
        e = lr ? test_rel_err(gb, lr + (size_t)t * V, (size_t)V) : 1.0;
        vs_fwd = e > vs_fwd ? e : vs_fwd;
    }
    al_decoder_free(&dr);
    al_decoder_free(&db);
    CHECK_MSG(dec <= 1e-5, "%s: BF16 decode vs rounded fp32 decode: %.3g", tag, dec);
    CHECK_MSG(vs_fwd <= 1e-5, "%s: BF16 decode vs rounded fp32 forward: %.3g", tag, vs_fwd);
    printf("%-16s BF16 vs rounded fp32: forward %.2e, decode %.2e (vs forward %.2e)\n", tag, fwd, dec, vs_fwd);

    /* inference only */
    CHECK_MSG(al_model_alloc_grads(&b, &err) == -1 && strstr(err.msg, "training needs fp32 weights") &&
                  !strchr(err.msg, '\n') && b.g == NULL,
              "%s: gradients: %s", tag, err.msg);
    CHECK(al_model_save(&b, "/nonexistent-bf16", NULL, &err) == -1 && strstr(err.msg, "not saved"));
    al_acts a;
    CHECK(al_acts_create(&a, &b, 1, 4, &err) == 0 && a.infer && !a.dlogits);
    al_acts_free(&a);
    free(gr);
    free(gb);
    free(lr);
    free(lb);
    al_model_free(&ref);
    al_model_free(&b);
}

static al_config lrkv(int r, int tied) {
    al_config c = tu_config(32, 80, 2, 4, 4, 8, 32);
    c.attention = AL_ATTN_LRKV;
    c.lrkv_rank = r;
    c.tie_word_embeddings = tied;
    return c;
}

/* Round to nearest even and NaN on chosen values; refusals. */
static void check_rounding_and_refusals(void) {
    al_config c = tu_config(32, 48, 1, 4, 2, 8, 16);
    al_model m;
    al_err err = {{0}};
    if (tu_make_model(&m, &c, 3, TU_GAINS_ONE)) {
        CHECK(0);
        return;
    }
    float *e = m.w + m.params[0].offset; /* the embedding */
    e[0] = from_bits(0x3F808000u);       /* a tie: to even, down */
    e[1] = from_bits(0x3F818000u);       /* a tie: to even, up */
    e[2] = from_bits(0x3F808001u);       /* above the tie */
    e[3] = NAN;
    e[4] = -from_bits(0x7F7FFFFFu);      /* the largest float: rounds to -inf */
    CHECK(al_model_weights_bf16(&m, &err) == 0);
    const uint16_t *h = m.w16 + m.params[0].offset;
    CHECK(h[0] == 0x3F80 && h[1] == 0x3F82 && h[2] == 0x3F81);
    CHECK((h[3] & 0x7F80) == 0x7F80 && (h[3] & 0x7F) != 0); /* NaN stays NaN */
    CHECK(h[4] == 0xFF80);
    /* init and load must not touch a converted model's weights silently: init is a no-op */
    const uint16_t keep = m.w16[m.params[2].offset];
    al_model_init_weights(&m, 99);
    CHECK(m.w16[m.params[2].offset] == keep);
    al_model_free(&m);

    /* a model with gradients (training) is refused */
    CHECK(tu_make_model(&m, &c, 3, TU_GAINS_ONE) == 0);
    CHECK(al_model_alloc_grads(&m, &err) == 0);
    CHECK(al_model_weights_bf16(&m, &err) == -1 && strstr(err.msg, "gradients") && m.w16 == NULL);
    al_model_free(&m);

    /* a vision model is refused */
    al_config v;
    al_config_vision_default(&v);
    v.intermediate_size = 2 * v.hidden_size;
    CHECK_MSG(al_model_create(&m, &v, &err) == 0, "%s", err.msg);
    CHECK(al_model_weights_bf16(&m, &err) == -1 && strstr(err.msg, "language models") && m.w16 == NULL);
    al_model_free(&m);
}

int main(void) {
    check_rounding_and_refusals();
    check_design("mha", tu_config(32, 48, 2, 4, 4, 8, 32), 11);
    check_design("gqa", tu_config(32, 48, 2, 4, 2, 8, 32), 12);
    al_config mqa_tied = tu_config(32, 48, 2, 4, 1, 8, 32);
    mqa_tied.tie_word_embeddings = 1;
    check_design("mqa tied", mqa_tied, 13);
    check_design("mla", tu_mla_config(0, 0), 14);
    check_design("mla q-lora tied", tu_mla_config(16, 1), 15);
    check_design("lrkv r=4", lrkv(4, 0), 16);
    check_design("lrkv r=0 tied", lrkv(0, 1), 17);
    return TEST_EXIT();
}
