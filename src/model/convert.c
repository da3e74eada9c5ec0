/*
 * convert.c (model): converting a trained MHA/GQA model into another KV
 * design (convert.h, docs/convert.md). Steps: widen the source to an fp32
 * arena model; run it over the calibration windows and keep every layer's
 * attention input x_l (after input_layernorm) and its second moment; let the
 * target design fit its attention weights per layer (al_attn_ops.convert);
 * copy every other tensor by name; measure map errors (from the design),
 * output errors (both attention layers run on x_l) and held-out losses.
 */
#include <cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../attn/convert.h"
#include "../io/io.h"
#include "../train/train.h"
#include "config.h"
#include "convert.h"

/* The source forms a conversion understands: an MHA or GQA language model
 * computed as Llama computes it. */
static int check_source(const al_config *c, al_err *err) {
    if (c->task != AL_TASK_LM) return al_errf(err, "the source is a vision model (conversion is for language models)");
    if (c->attention != AL_ATTN_MHA && c->attention != AL_ATTN_GQA)
        return al_errf(err, "the source's attention is %s; conversion starts from mha or gqa",
                       al_attn_name(c->attention));
    if (c->hf != AL_HF_NONE && c->hf != AL_HF_LLAMA && c->hf != AL_HF_MISTRAL)
        return al_errf(err, "the source is a %s checkpoint; conversion takes Llama-family ones (llama, mistral)",
                       al_hf_family_name(c->hf));
    if (c->qkv_bias || c->qk_norm || c->norm_unit_offset || c->embed_scale || c->mlp_act != AL_ACT_SILU ||
        c->n_routed_experts)
        return al_errf(err, "the source has q/k/v biases, q/k norms, experts or another MLP (not Llama's form)");
    if (c->sliding_window) return al_errf(err, "the source has a sliding window, which attnlab's models do not");
    if (c->rope_scaling.type != AL_ROPE_DEFAULT)
        return al_errf(err, "the source has rope_scaling, which attnlab's own configs do not carry");
    return 0;
}

int al_convert_target(const al_config *src, int to, int kv_heads, const al_config *flags, const unsigned char *given,
                      al_config *dst, al_err *err) {
    if (check_source(src, err)) return -1;
    const al_attn_ops *d = al_attn_design(to);
    if (!d || !d->convert || !d->convert_shape)
        return al_errf(err, "%s cannot be a conversion's target (gqa, mqa, mla or lrkv)", d ? d->name : "?");
    if (kv_heads && to != AL_ATTN_GQA && to != AL_ATTN_MQA)
        return al_errf(err, "--kv-heads applies only to --to gqa");
    *dst = *src;
    dst->attention = to;
    dst->num_kv_heads = kv_heads;
    dst->tokenizer_vocab = src->tokenizer_vocab || src->hf != AL_HF_NONE || src->vocab_size != 256;
    dst->hf = AL_HF_NONE;
    for (int i = 0; i < d->n_fields; i++)
        if (given[i]) {
            const al_config_field *f = &d->fields[i];
            memcpy((char *)dst + f->offset, (const char *)flags + f->offset,
                   f->type == AL_CF_DOUBLE ? sizeof(double) : sizeof(int));
        }
    if (d->convert_shape(NULL, src, dst, given, err)) return -1;
    if (dst->attention == src->attention && dst->num_kv_heads == src->num_kv_heads)
        return al_errf(err, "the target equals the source (%s with %d KV heads)", d->name, src->num_kv_heads);
    return al_config_validate(dst, err);
}

/* tensor i of m as fp32 into out (numel values), whatever m holds it in */
static void read_f32(const al_model *m, int i, float *out) {
    const size_t n = m->params[i].numel;
    if (!m->data) {
        memcpy(out, m->w + m->params[i].offset, sizeof(float) * n);
        return;
    }
    const void *p = m->data[i];
    switch (m->dts[i]) {
    case AL_DT_BF16:
        for (size_t k = 0; k < n; k++) out[k] = al_bf16_to_f32(((const uint16_t *)p)[k]);
        break;
    case AL_DT_F16:
        for (size_t k = 0; k < n; k++) out[k] = al_f16_to_f32(((const uint16_t *)p)[k]);
        break;
    default: memcpy(out, p, sizeof(float) * n);
    }
}

/* An fp32 arena copy of src (which may be mapped or BF16), as an attnlab config. */
static int widen(const al_model *src, al_model *w, al_err *err) {
    al_config c = src->cfg;
    c.tokenizer_vocab = c.tokenizer_vocab || c.hf != AL_HF_NONE || c.vocab_size != 256;
    c.hf = AL_HF_NONE;
    if (al_model_create(w, &c, err)) return -1;
    if (w->n_params != src->n_params) {
        al_model_free(w);
        return al_errf(err, "internal: the widened model has %d tensors, the source %d", w->n_params, src->n_params);
    }
    for (int i = 0; i < w->n_params; i++) read_f32(src, i, w->w + w->params[i].offset);
    return 0;
}

/* the parameter of m named `name` with numel values (-1: none) */
static int find_param(const al_model *m, const char *name, size_t numel) {
    for (int i = 0; i < m->n_params; i++)
        if (!strcmp(m->params[i].name, name) && m->params[i].numel == numel) return i;
    return -1;
}

/* Every layer's attention input over the calibration windows: X[l] [n, d]
 * (n = windows x T), and cov[l] = X^T X / n [d, d]. */
static int capture(const al_model *w, const int *ids, size_t n_win, int T, int B, float **X, double **cov, al_err *err) {
    const al_config *c = &w->cfg;
    const int d = c->hidden_size, L = c->num_layers;
    const size_t n = n_win * T, N = (size_t)B * T;
    al_acts a;
    int *in = malloc(sizeof(int) * N);
    float *tmp = malloc(sizeof(float) * d * d);
    if (!in || !tmp) {
        free(in);
        free(tmp);
        return al_errf(err, "out of memory");
    }
    if (al_acts_create(&a, w, B, T, err)) {
        free(in);
        free(tmp);
        return -1;
    }
    int rc = 0;
    for (int l = 0; l < L && !rc; l++)
        if (!(X[l] = malloc(sizeof(float) * n * d)) || !(cov[l] = malloc(sizeof(double) * d * d)))
            rc = al_errf(err, "out of memory for the calibration activations (%zu tokens x %d layers)", n, L);
    for (size_t k0 = 0; k0 < n_win && !rc; k0 += B) {
        al_eval_windows(ids, n_win * T, k0 * T, B, T, in, NULL);
        al_model_forward(w, &a, in, NULL);
        const size_t rows = (k0 + B <= n_win ? (size_t)B : n_win - k0) * T;
        for (int l = 0; l < L; l++)
            memcpy(X[l] + k0 * T * d, a.xn1 + (size_t)l * N * d, sizeof(float) * rows * d);
    }
    for (int l = 0; l < L && !rc; l++) {
        al_sgemm(1, 0, d, d, (int)n, 1.0f / (float)n, X[l], d, X[l], d, 0.0f, tmp, d);
        /* symmetrised: sgemm's X^T X is not exactly symmetric, and an asymmetric cov lets M cov M^T leak
         * outside M's column space (an MLA latent of M's full rank then missed exactness by ~1e-4:
         * tests/ref/test_convert_ref.py) */
        for (int i = 0; i < d; i++)
            for (int j = 0; j < d; j++)
                cov[l][(size_t)i * d + j] = 0.5 * ((double)tmp[(size_t)i * d + j] + tmp[(size_t)j * d + i]);
    }
    al_acts_free(&a);
    free(in);
    free(tmp);
    return rc;
}

/* ||y_t - y_s|| / ||y_s|| of layer l's attention (source w, target t) on x[n, d], B windows of T at a time */
static int output_error(const al_model *w, const al_model *t, int l, const float *x, size_t n_win, int T, int B,
                        double *out, al_err *err) {
    const int d = w->cfg.hidden_size;
    const size_t N = (size_t)B * T;
    const size_t ss = w->attn->saved_floats(&w->cfg, B, T), sc = w->attn->scratch_floats(&w->cfg, B, T);
    const size_t ts = t->attn->saved_floats(&t->cfg, B, T), tc = t->attn->scratch_floats(&t->cfg, B, T);
    float *buf = malloc(sizeof(float) * ((ss > ts ? ss : ts) + (sc > tc ? sc : tc) + 3 * N * d));
    if (!buf) return al_errf(err, "out of memory");
    float *ys = buf, *yt = ys + N * d, *xb = yt + N * d, *saved = xb + N * d;
    float *scratch = saved + (ss > ts ? ss : ts);
    double num = 0, den = 0;
    for (size_t k0 = 0; k0 < n_win; k0 += B) {
        const size_t wins = k0 + B <= n_win ? (size_t)B : n_win - k0;
        memset(xb, 0, sizeof(float) * N * d);
        memcpy(xb, x + k0 * T * d, sizeof(float) * wins * T * d);
        w->attn->forward(&w->layers[l].attn, al_wref_f32(xb), ys, saved, scratch, B, T);
        t->attn->forward(&t->layers[l].attn, al_wref_f32(xb), yt, saved, scratch, B, T);
        for (size_t i = 0; i < wins * T * d; i++) {
            const double e = (double)yt[i] - ys[i];
            num += e * e;
            den += (double)ys[i] * ys[i];
        }
    }
    free(buf);
    *out = den > 0 ? sqrt(num / den) : sqrt(num);
    return 0;
}

/* mean held-out loss of m over ids, windows of T, B per pass */
static int heldout_loss(const al_model *m, const int *ids, size_t n, int T, int B, double *loss, size_t *count,
                        al_err *err) {
    al_acts a;
    if (al_acts_create_infer(&a, m, B, T, NULL, 0, err)) return -1;
    int rc = al_eval_ids(m, &a, ids, n, 0, loss, count, err);
    al_acts_free(&a);
    return rc;
}

void al_convert_report_free(al_convert_report *r) {
    free(r->k_err);
    free(r->v_err);
    free(r->out_err);
    memset(r, 0, sizeof *r);
}

int al_model_convert(const al_model *src, const al_config *target, const unsigned char *given,
                     const al_convert_opts *o, al_model *dst, al_convert_report *rep, al_err *err) {
    const al_config *sc = &src->cfg;
    const int L = sc->num_layers, H = sc->num_heads, T = o->context, B = o->batch > 0 ? o->batch : 1;
    const al_attn_ops *design = al_attn_ops_for(target);
    memset(rep, 0, sizeof *rep);
    memset(dst, 0, sizeof *dst);
    if (check_source(sc, err)) return -1;
    if (!design || !design->convert) return al_errf(err, "the target design cannot be converted to");
    if (T < 1 || T > sc->max_position) return al_errf(err, "context %d outside 1..%d", T, sc->max_position);
    const size_t n_win = o->n_calib > 0 ? (o->n_calib - 1) / (size_t)T : 0;
    if (n_win < 1)
        return al_errf(err, "the calibration text has %zu tokens; it needs at least one window of %d + 1", o->n_calib, T);
    if (o->n_heldout < 2) return al_errf(err, "the held-out text has %zu tokens (needs at least 2)", o->n_heldout);
    al_model w;
    if (widen(src, &w, err)) return -1;
    float **X = calloc((size_t)L, sizeof *X);
    double **cov = calloc((size_t)L, sizeof *cov);
    al_attn_source *layers = calloc((size_t)L, sizeof *layers);
    rep->k_err = calloc((size_t)L * H, sizeof(double));
    rep->v_err = calloc((size_t)L * H, sizeof(double));
    rep->out_err = calloc((size_t)L, sizeof(double));
    int rc = -1, made = 0;
    if (!X || !cov || !layers || !rep->k_err || !rep->v_err || !rep->out_err) {
        al_errf(err, "out of memory");
        goto done;
    }
    if (capture(&w, o->calib, n_win, T, B, X, cov, err)) goto done;
    for (int l = 0; l < L; l++) {
        const al_attn_layer *A = &w.layers[l].attn;
        layers[l] = (al_attn_source){&w.cfg, A->w[0], A->w[1], A->w[2], A->w[3], X[l], n_win * T, cov[l]};
    }
    al_config tc = *target;
    if (design->convert_shape(layers, sc, &tc, given, err) || al_model_create(dst, &tc, err)) goto done;
    made = 1;
    al_model_init_weights(dst, 1);
    for (int i = 0; i < dst->n_params; i++) { /* everything outside attention, by name */
        const int j = find_param(&w, dst->params[i].name, dst->params[i].numel);
        if (j >= 0 && !strstr(dst->params[i].name, ".self_attn."))
            memcpy(dst->w + dst->params[i].offset, w.w + w.params[j].offset, sizeof(float) * dst->params[i].numel);
    }
    for (int l = 0; l < L; l++)
        if (design->convert(&layers[l], &dst->layers[l].attn, rep->k_err + (size_t)l * H, rep->v_err + (size_t)l * H,
                            err) ||
            output_error(&w, dst, l, X[l], n_win, T, B, &rep->out_err[l], err)) {
            al_err_prefix(err, "layer %d", l);
            goto done;
        }
    size_t count;
    if (heldout_loss(&w, o->heldout, o->n_heldout, T, B, &rep->loss_source, &count, err) ||
        heldout_loss(dst, o->heldout, o->n_heldout, T, B, &rep->loss_converted, &rep->heldout_tokens, err))
        goto done;
    rep->layers = L;
    rep->heads = H;
    rep->calib_tokens = n_win * T;
    rep->kv_source = w.attn->cache_values_per_token(&w.cfg);
    rep->kv_target = dst->attn->cache_values_per_token(&dst->cfg);
    rep->kv_percent_of_mha = 100.0 * (double)rep->kv_target / (2.0 * H * sc->head_dim);
    rc = 0;
done:
    for (int l = 0; X && l < L; l++) free(X[l]);
    for (int l = 0; cov && l < L; l++) free(cov[l]);
    free(X);
    free(cov);
    free(layers);
    al_model_free(&w);
    if (rc) {
        if (made) al_model_free(dst);
        al_convert_report_free(rep);
    }
    return rc;
}

/* a JSON array of n doubles */
static cJSON *numbers(const double *v, int n) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < n; i++) al_json_push(a, cJSON_CreateNumber(v[i]));
    return a;
}

char *al_convert_report_json(const al_convert_report *r, const al_config *src, const al_config *dst) {
    const unsigned long mark = al_json_mark();
    cJSON *root = cJSON_CreateObject(), *cfg = cJSON_CreateObject(), *layers = cJSON_CreateArray();
    if (!root || !cfg || !layers) {
        cJSON_Delete(root);
        cJSON_Delete(cfg);
        cJSON_Delete(layers);
        return NULL;
    }
    cJSON_AddStringToObject(root, "source_attention", al_attn_name(src->attention));
    cJSON_AddStringToObject(root, "target_attention", al_attn_name(dst->attention));
    al_config_view(dst, cfg);
    al_json_add(root, "config", cfg);
    cJSON_AddNumberToObject(root, "calibration_tokens", (double)r->calib_tokens);
    cJSON_AddNumberToObject(root, "heldout_tokens", (double)r->heldout_tokens);
    cJSON_AddNumberToObject(root, "heldout_loss_source", r->loss_source);
    cJSON_AddNumberToObject(root, "heldout_loss_converted", r->loss_converted);
    cJSON_AddNumberToObject(root, "kv_values_per_token_source", (double)r->kv_source);
    cJSON_AddNumberToObject(root, "kv_values_per_token_target", (double)r->kv_target);
    cJSON_AddNumberToObject(root, "kv_percent_of_mha", r->kv_percent_of_mha);
    for (int l = 0; l < r->layers; l++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "layer", l);
        cJSON_AddNumberToObject(o, "output_error", r->out_err[l]);
        al_json_add(o, "key_error", numbers(r->k_err + (size_t)l * r->heads, r->heads));
        al_json_add(o, "value_error", numbers(r->v_err + (size_t)l * r->heads, r->heads));
        al_json_push(layers, o);
    }
    al_json_add(root, "layers", layers);
    char *s = al_json_print(root, 1, mark);
    cJSON_Delete(root);
    return s;
}
