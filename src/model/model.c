/*
 * model.c: parameter table and arenas, initialisation, checkpoints, the
 * training forward/backward over a batch for both tasks, and single-token
 * decoding (LM).
 * Data flow of an LM step: embedding -> blocks -> RMSNorm -> LM head ->
 * cross-entropy; of a ViT step: patches -> linear + bias, CLS, + positions ->
 * blocks -> RMSNorm of the CLS row -> classifier -> cross-entropy. The blocks,
 * L x [RMSNorm -> attention design -> residual -> RMSNorm -> SwiGLU ->
 * residual], are one pair of functions (blocks_fwd / blocks_bwd) that both
 * run; backward is the same in reverse.
 */
#include "model.h"

#include <assert.h>
#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../io/io.h"

/* ---- parameter table ---- */

static int add_param(al_model *m, int cap, const char *name, int ndim, int64_t r, int64_t c, al_init_kind init,
                     float std, int decay) {
    assert(m->n_params < cap); /* the table's capacity is computed from the same config */
    if (m->n_params >= cap) return -1;
    al_param *p = &m->params[m->n_params++];
    snprintf(p->name, sizeof p->name, "%s", name);
    p->ndim = ndim;
    p->shape[0] = r;
    p->shape[1] = ndim > 1 ? c : 1;
    p->numel = (size_t)r * (size_t)p->shape[1];
    p->offset = m->n_floats;
    p->init = init;
    p->std = std;
    p->decay = decay;
    /* no padding: tensors a design lists together stay adjacent, so e.g. q, k
     * and v projections form one matrix for a single GEMM */
    m->n_floats += p->numel;
    return 0;
}

/* The gated MLP of layer l at model.layers.l.mlp.<sub>: gate_proj, up_proj
 * [f, d], down_proj [d, f] (sub "" for a dense layer, "experts.e." or
 * "shared_experts." in a MoE layer). */
static void add_mlp_params(al_model *m, int cap, int l, const char *sub, int64_t f, float std_out) {
    const int64_t d = m->cfg.hidden_size;
    const char *mats[] = {"gate_proj", "up_proj", "down_proj"};
    char name[sizeof m->params[0].name];
    for (int k = 0; k < 3; k++) {
        al_strfmt(name, sizeof name, "model.layers.%d.mlp.%s%s.weight", l, sub, mats[k]);
        add_param(m, cap, name, 2, k < 2 ? f : d, k < 2 ? d : f, AL_INIT_NORMAL, k < 2 ? 0.02f : std_out, 1);
    }
}

/* Points the top-level views (when `top`) and the per-layer pointers of
 * `layers` at each tensor's data, walking the parameter table in the order
 * al_model_create laid it out: base + offset (the weights or the gradients,
 * all fp32) when data is NULL, else data[i] in dtype dts[i] (a mapped
 * checkpoint, hf.c). */
static void set_views(al_model *m, float *base, const void *const *data, const al_dtype *dts, al_layer_ptrs *layers,
                      int top) {
    const al_config *c = &m->cfg;
    const int vit = c->task == AL_TASK_VISION;
    float *embed = NULL, *head = NULL, *pw = NULL, *pb = NULL, *cls = NULL, *pos = NULL, *cw = NULL, *cb = NULL;
    al_dtype embed_dt = AL_DT_F32, head_dt = AL_DT_F32;
    int i = 0;
#define AL_PTR(k) (data ? (float *)(uintptr_t)data[k] : base + m->params[k].offset)
#define AL_DT(k) (dts ? dts[k] : AL_DT_F32)
    if (vit) {
        pw = AL_PTR(i), i++;
        pb = AL_PTR(i), i++;
        cls = AL_PTR(i), i++;
        pos = AL_PTR(i), i++;
    } else {
        embed = AL_PTR(i), embed_dt = AL_DT(i), i++;
    }
    for (int l = 0; l < c->num_layers; l++) {
        al_layer_ptrs *L = &layers[l];
        al_param_spec specs[AL_ATTN_MAX_PARAMS];
        int na = m->attn->params(c, specs);
        L->ln1 = AL_PTR(i), i++;
        memset(&L->attn, 0, sizeof L->attn);
        L->attn.cfg = &m->cfg;
        L->attn.rope = &m->rope;
        L->attn.rope_aux = m->rope_aux.cos ? &m->rope_aux : NULL;
        for (int a = 0; a < na; a++) L->attn.w[a] = AL_PTR(i), L->attn.wdt[a] = AL_DT(i), i++;
        L->ln2 = AL_PTR(i), i++;
        L->ffn = c->intermediate_size;
        L->router = (al_wref){NULL, AL_DT_F32};
        L->experts = NULL;
        if (al_config_layer_moe(c, l)) { /* router, routed experts, shared experts (mlp_params' order) */
            const int E = c->n_routed_experts;
            L->router = (al_wref){AL_PTR(i), AL_DT(i)}, i++;
            L->experts = m->experts + (size_t)l * 3 * E;
            for (int e = 0; e < 3 * E; e++, i++)
                if (top) L->experts[e] = (al_wref){AL_PTR(i), AL_DT(i)};
            L->ffn = c->n_shared_experts * c->moe_intermediate_size;
            L->gate = L->up = L->down = NULL;
            if (L->ffn == 0) continue;
        }
        L->gate = AL_PTR(i), L->gate_dt = AL_DT(i), i++;
        L->up = AL_PTR(i), L->up_dt = AL_DT(i), i++;
        L->down = AL_PTR(i), L->down_dt = AL_DT(i), i++;
    }
    float *final_norm = AL_PTR(i);
    i++;
    if (vit) {
        cw = AL_PTR(i), i++;
        cb = AL_PTR(i), i++;
    } else if (c->tie_word_embeddings) {
        head = embed, head_dt = embed_dt;
    } else {
        head = AL_PTR(i), head_dt = AL_DT(i), i++;
    }
#undef AL_PTR
#undef AL_DT
    if (!top) return;
    m->embed = embed;
    m->final_norm = final_norm;
    m->lm_head = head;
    m->embed_dt = embed_dt;
    m->head_dt = head_dt;
    m->patch_w = pw;
    m->patch_b = pb;
    m->cls = cls;
    m->pos = pos;
    m->cls_w = cw;
    m->cls_b = cb;
}

/* Asks the design whether every layer's layout suits its kernels
 * (ops->validate_layer), for inference or, when `training`, with gradients. */
static int check_layers(const al_model *m, int training, al_err *err) {
    for (int l = 0; m->attn->validate_layer && l < m->cfg.num_layers; l++)
        if (m->attn->validate_layer(&m->layers[l].attn, training, err)) return al_err_prefix(err, "layer %d", l);
    return 0;
}

int al_model_set_views(al_model *m, const void *const *data, const al_dtype *dts, al_err *err) {
    set_views(m, m->w, data, dts, m->layers, 1);
    return check_layers(m, 0, err);
}

int al_model_weights_bf16(al_model *m, al_err *err) {
    if (m->w16) return 0;
    if (m->mapped)
        return al_errf(err, "BF16 weights are made from attnlab's fp32 models; this Hugging Face checkpoint is "
                            "memory-mapped in its file dtype");
    if (m->cfg.task != AL_TASK_LM) return al_errf(err, "BF16 weights are for language models (not a vision model)");
    if (m->g) return al_errf(err, "BF16 weights are for inference: this model has gradients for training");
    const void **data = malloc(sizeof *data * (size_t)m->n_params);
    al_dtype *dts = malloc(sizeof *dts * (size_t)m->n_params);
    uint16_t *w16 = al_alloc(sizeof(uint16_t) * (m->n_floats ? m->n_floats : 1));
    if (!data || !dts || !w16) {
        free(data), free(dts), al_free(w16);
        return al_errf(err, "out of memory for %zu BF16 weights", m->n_floats);
    }
    /* the same offsets as the arena: the 1-D tensors' slots stay unused */
    for (int i = 0; i < m->n_params; i++) {
        const al_param *p = &m->params[i];
        const float *src = m->w + p->offset;
        if (p->ndim == 2) {
            uint16_t *dst = w16 + p->offset;
#pragma omp parallel for schedule(static) if (p->numel > 65536)
            for (size_t j = 0; j < p->numel; j++) dst[j] = al_f32_to_bf16(src[j]);
        }
        data[i] = p->ndim == 2 ? (const void *)(w16 + p->offset) : (const void *)src;
        dts[i] = p->ndim == 2 ? AL_DT_BF16 : AL_DT_F32;
    }
    m->w16 = w16;
    m->dts = dts;
    int rc = al_model_set_views(m, data, dts, err);
    free(data);
    return rc;
}

/* RoPE tables of angle 0 (cos 1, sin 0): the ViT's positions are learned
 * embeddings, and an identity rotation lets every design run unchanged. */
static void rope_identity(al_rope_table *t) {
    if (!t->cos) return;
    for (size_t i = 0; i < (size_t)t->max_pos * t->half; i++) {
        t->cos[i] = 1.0f;
        t->sin[i] = 0.0f;
    }
}

int al_model_create(al_model *m, const al_config *cfg, al_err *err) { return al_model_build(m, cfg, 1, err); }

int al_model_build(al_model *m, const al_config *cfg, int arena, al_err *err) {
    memset(m, 0, sizeof *m);
    if (al_config_validate(cfg, err)) return -1;
    m->cfg = *cfg;
    m->attn = al_attn_ops_for(cfg);
    if (!m->attn) return al_errf(err, "invalid config: no implementation for attention '%s'", al_attn_name(cfg->attention));
    if (m->attn->validate(cfg, err)) return -1;
    const al_config *c = &m->cfg;
    const int64_t d = c->hidden_size, f = c->intermediate_size, V = c->vocab_size;
    al_param_spec specs[AL_ATTN_MAX_PARAMS];
    int na = m->attn->params(c, specs);
    const int vit = c->task == AL_TASK_VISION;
    /* input side (<= 4) + final norm + output side (<= 2); per layer 2 norms, the
     * design's, 3 MLP matrices and for MoE a router and 3 per expert */
    const int E = c->n_routed_experts;
    int cap = 8 + c->num_layers * (5 + na + (E > 0 ? 1 + 3 * E : 0));
    m->params = calloc((size_t)cap, sizeof *m->params);
    m->layers = calloc((size_t)c->num_layers, sizeof *m->layers);
    m->glayers = calloc((size_t)c->num_layers, sizeof *m->glayers);
    if (E > 0) m->experts = calloc((size_t)c->num_layers * 3 * E, sizeof *m->experts);
    if (!m->params || !m->layers || !m->glayers || (E > 0 && !m->experts)) {
        al_model_free(m);
        return al_errf(err, "out of memory");
    }
    float std_out = 0.02f / sqrtf(2.0f * (float)c->num_layers);
    /* al_param.name[96] holds every name: num_layers <= 1024 (validated
     * above) and a design's tensor name is under 64 bytes, so the longest,
     * "model.layers.1023.self_attn.<63>", is 91 bytes */
    char name[sizeof m->params[0].name];
    if (vit) {
        /* ViT input side: patch embedding (a Conv2d of stride p, as a matrix), CLS token, positions */
        const int64_t pp = (int64_t)c->num_channels * c->patch_size * c->patch_size;
        add_param(m, cap, "vit.patch_embed.weight", 2, d, pp, AL_INIT_NORMAL, 0.02f, 1);
        add_param(m, cap, "vit.patch_embed.bias", 1, d, 1, AL_INIT_ZEROS, 0, 0);
        add_param(m, cap, "vit.cls_token", 1, d, 1, AL_INIT_NORMAL, 0.02f, 0);
        add_param(m, cap, "vit.pos_embed", 2, c->max_position, d, AL_INIT_NORMAL, 0.02f, 0);
    } else {
        add_param(m, cap, "model.embed_tokens.weight", 2, V, d, AL_INIT_NORMAL, 0.02f, 1);
    }
    for (int l = 0; l < c->num_layers; l++) {
        al_strfmt(name, sizeof name, "model.layers.%d.input_layernorm.weight", l);
        add_param(m, cap, name, 1, d, 1, AL_INIT_ONES, 0, 0);
        for (int a = 0; a < na; a++) {
            al_strfmt(name, sizeof name, "model.layers.%d.self_attn.%s", l, specs[a].name);
            add_param(m, cap, name, specs[a].ndim, specs[a].shape[0], specs[a].shape[1], specs[a].init, specs[a].std,
                      specs[a].decay);
            m->params[m->n_params - 1].grad_written = specs[a].grad_written;
        }
        al_strfmt(name, sizeof name, "model.layers.%d.post_attention_layernorm.weight", l);
        add_param(m, cap, name, 1, d, 1, AL_INIT_ONES, 0, 0);
        if (!al_config_layer_moe(c, l)) {
            add_mlp_params(m, cap, l, "", f, std_out);
            /* blocks_bwd writes the dense MLP's three gradients whole (not
             * MoE experts': one no token chose gets no product) */
            for (int k = 1; k <= 3; k++) m->params[m->n_params - k].grad_written = 1;
            continue;
        }
        /* DeepseekV2MoE: router, routed experts, shared experts */
        al_strfmt(name, sizeof name, "model.layers.%d.mlp.gate.weight", l);
        add_param(m, cap, name, 2, E, d, AL_INIT_NORMAL, 0.02f, 1);
        for (int e = 0; e < E; e++) {
            char sub[32];
            al_strfmt(sub, sizeof sub, "experts.%d.", e);
            add_mlp_params(m, cap, l, sub, c->moe_intermediate_size, std_out);
        }
        if (c->n_shared_experts > 0)
            add_mlp_params(m, cap, l, "shared_experts.", (int64_t)c->n_shared_experts * c->moe_intermediate_size, std_out);
    }
    add_param(m, cap, "model.norm.weight", 1, d, 1, AL_INIT_ONES, 0, 0);
    if (vit) {
        add_param(m, cap, "classifier.weight", 2, c->num_labels, d, AL_INIT_NORMAL, 0.02f, 1);
        add_param(m, cap, "classifier.bias", 1, c->num_labels, 1, AL_INIT_ZEROS, 0, 0);
    } else if (!c->tie_word_embeddings) {
        add_param(m, cap, "lm_head.weight", 2, V, d, AL_INIT_NORMAL, 0.02f, 1);
    }
    int rope_dims[2];
    m->attn->rope_dims(c, rope_dims);
    if (arena) m->w = al_alloc(sizeof(float) * m->n_floats);
    if ((arena && !m->w) ||
        al_rope_table_init_scaled(&m->rope, c->max_position, rope_dims[0], c->rope_theta, &c->rope_scaling) ||
        (rope_dims[1] > 0 &&
         al_rope_table_init_scaled(&m->rope_aux, c->max_position, rope_dims[1], c->rope_theta, &c->rope_scaling))) {
        al_model_free(m);
        return al_errf(err, "out of memory for %zu parameters", m->n_floats);
    }
    if (vit) {
        rope_identity(&m->rope);
        rope_identity(&m->rope_aux);
    }
    if (m->w) set_views(m, m->w, NULL, NULL, m->layers, 1);
    if (m->w && check_layers(m, 0, err)) {
        al_model_free(m);
        return -1;
    }
    return 0;
}

void al_model_free(al_model *m) {
    if (!m) return;
    al_model_unmap(m);
    free(m->dts); /* a BF16 model's (the mapping's are freed and NULL by now) */
    al_free(m->w16);
    al_free(m->w);
    al_free(m->g);
    free(m->params);
    free(m->layers);
    free(m->glayers);
    free(m->experts);
    al_rope_table_free(&m->rope);
    al_rope_table_free(&m->rope_aux);
    memset(m, 0, sizeof *m);
}

void al_model_init_weights(al_model *m, uint64_t seed) {
    if (m->mapped || m->w16) return; /* read-only weights; BF16 copies made already */
    al_rng rng;
    al_rng_seed(&rng, seed);
    for (int i = 0; i < m->n_params; i++) {
        al_param *p = &m->params[i];
        float *w = m->w + p->offset;
        for (size_t j = 0; j < p->numel; j++)
            w[j] = p->init == AL_INIT_ONES ? 1.0f : p->init == AL_INIT_ZEROS ? 0.0f : p->std * al_rng_normal(&rng);
    }
}

int al_model_alloc_grads(al_model *m, al_err *err) {
    if (m->g) return 0;
    /* a Hugging Face checkpoint is mapped in its file dtype and its extras
     * (biases, head_dim, rope scaling) have no backward here: inference only */
    if (m->mapped || m->cfg.hf != AL_HF_NONE)
        return al_errf(err, "training needs fp32 weights: this is a Hugging Face checkpoint (%s), memory-mapped in its "
                            "file dtype for inference only",
                       al_config_architecture(&m->cfg));
    if (m->w16)
        return al_errf(err, "training needs fp32 weights: this model holds BF16 weights for inference only "
                            "(al_model_weights_bf16)");
    m->g = al_alloc(sizeof(float) * m->n_floats);
    if (!m->g) return al_errf(err, "out of memory for gradients");
    set_views(m, m->g, NULL, NULL, m->glayers, 0);
    for (int l = 0; l < m->cfg.num_layers; l++)
        for (int a = 0; a < AL_ATTN_MAX_PARAMS; a++) m->layers[l].attn.g[a] = m->glayers[l].attn.w[a];
    return check_layers(m, 1, err);
}

/* g[0, n) = 0 on all threads, in blocks of 4 MB: one thread's memset
 * reaches about half the store bandwidth of two (gpt2's 340 MB of
 * gradients: 34 ms against 18 ms on 2 threads). */
static void zero_floats(float *g, size_t n) {
    enum { BLOCK = 1 << 20 }; /* floats */
    const long blocks = (long)((n + BLOCK - 1) / BLOCK);
#pragma omp parallel for schedule(static) if (blocks > 1)
    for (long b = 0; b < blocks; b++) {
        const size_t first = (size_t)b * BLOCK, len = n - first < BLOCK ? n - first : BLOCK;
        memset(g + first, 0, sizeof(float) * len);
    }
}

/* Zeroes every gradient before a backward adds into them, except those of
 * the parameters marked grad_written (the dense MLP matrices and the
 * attention matrices its design's backward writes in one product: all of a
 * gpt2 layer's weights), which the next backward writes (dW = dY^T X, not
 * +=) instead: zeroing gpt2's 340 MB of gradients took 3.7 % of its bf16
 * step on AMX (perf), and the products' adding to zeros read them back.
 * Runs of neighbouring tensors to zero are zeroed as one. */
void al_model_zero_grads(al_model *m) {
    if (!m->g) return;
    size_t from = 0; /* start of the run to zero */
    for (int i = 0; i < m->n_params; i++) {
        const al_param *p = &m->params[i];
        if (!p->grad_written) continue;
        zero_floats(m->g + from, p->offset - from);
        from = p->offset + p->numel;
    }
    zero_floats(m->g + from, m->n_floats - from);
    m->grads_unset = 1;
}

size_t al_model_matmul_params(const al_model *m) {
    size_t n = 0;
    for (int i = 0; i < m->n_params; i++)
        if (m->params[i].ndim == 2 && strcmp(m->params[i].name, "model.embed_tokens.weight") != 0 &&
            strcmp(m->params[i].name, "vit.pos_embed") != 0)
            n += m->params[i].numel;
    if (m->cfg.tie_word_embeddings) n += (size_t)m->cfg.vocab_size * m->cfg.hidden_size; /* the head's product */
    return n;
}

/* Forward FLOPs per token: 2 per matmul weight, plus causal attention:
 * q.k (key width dk) and p.v (value width dv) over on average T/2 keys,
 * 2 x (dk + dv) x H x T/2, with the design's head widths (MLA's keys are
 * qk_nope + qk_rope wide). */
double al_model_fwd_flops_per_token(const al_model *m, int T) {
    const al_config *c = &m->cfg;
    int dk, dv;
    al_attn_head_widths(c, &dk, &dv);
    /* a token runs num_experts_per_tok of each MoE layer's routed experts, not all of them */
    double idle = 0;
    for (int l = 0; l < c->num_layers; l++)
        if (al_config_layer_moe(c, l))
            idle += 3.0 * c->moe_intermediate_size * c->hidden_size * (c->n_routed_experts - c->num_experts_per_tok);
    return 2.0 * ((double)al_model_matmul_params(m) - idle) + (double)c->num_layers * c->num_heads * (dk + dv) * T;
}

double al_model_train_flops_per_token(const al_model *m, int T) { return 3.0 * al_model_fwd_flops_per_token(m, T); }

double al_vit_fwd_flops_per_image(const al_model *m) {
    const al_config *c = &m->cfg;
    const double T = c->max_position, P = T - 1;
    double block = 0, patch = 0, head = 0;
    for (int i = 0; i < m->n_params; i++) {
        const al_param *p = &m->params[i];
        if (p->ndim != 2) continue;
        if (!strncmp(p->name, "model.layers.", 13)) block += (double)p->numel;
        else if (!strcmp(p->name, "vit.patch_embed.weight")) patch += (double)p->numel;
        else if (!strcmp(p->name, "classifier.weight")) head += (double)p->numel;
    }
    int dk, dv;
    al_attn_head_widths(c, &dk, &dv);
    /* every query against all T keys: q.k and p.v, 2 x (dk + dv) per pair and head */
    const double attn = (double)c->num_layers * c->num_heads * 2.0 * (dk + dv) * T * T;
    return 2.0 * (block * T + patch * P + head) + attn;
}

/* ---- checkpoints ---- */

int al_model_save(const al_model *m, const char *dir, const char *extra_json, al_err *err) {
    if (m->mapped) return al_errf(err, "%s: a memory-mapped Hugging Face checkpoint is not saved by attnlab", dir);
    if (m->w16) return al_errf(err, "%s: a model with BF16 weights for inference is not saved by attnlab", dir);
    if (mkdir(dir, 0777) && errno != EEXIST) return al_errf(err, "%s: cannot create directory: %s", dir, strerror(errno));
    al_st_out_tensor *t = calloc((size_t)m->n_params, sizeof *t);
    char *weights = al_sprintf("%s/model.safetensors", dir), *config = al_sprintf("%s/config.json", dir);
    int rc = t && weights && config ? 0 : al_errf(err, "out of memory");
    for (int i = 0; i < m->n_params && !rc; i++) {
        t[i].name = m->params[i].name;
        t[i].data = m->w + m->params[i].offset;
        t[i].ndim = m->params[i].ndim;
        t[i].shape[0] = m->params[i].shape[0];
        t[i].shape[1] = m->params[i].shape[1];
    }
    const char *meta[] = {"format", "pt"};
    if (!rc) rc = al_st_write_f32(weights, t, m->n_params, meta, 1, err);
    if (!rc) rc = al_config_save(&m->cfg, config, extra_json, err);
    free(t);
    free(weights);
    free(config);
    return rc;
}

int al_model_load_weights(al_model *m, const char *path, al_err *err) {
    al_st_file f;
    if (al_st_open(&f, path, err)) return -1;
    int rc = 0;
    for (int i = 0; i < m->n_params && !rc; i++) {
        const al_param *p = &m->params[i];
        rc = al_st_read_f32(&f, p->name, m->w + p->offset, p->ndim, p->shape, err);
    }
    /* a tensor we do not know means the file and config disagree: refuse */
    for (int t = 0; t < f.n_tensors && !rc; t++) {
        const char *name = f.tensors[t].name;
        int known = m->cfg.tie_word_embeddings && strcmp(name, "lm_head.weight") == 0;
        for (int i = 0; i < m->n_params && !known; i++) known = strcmp(name, m->params[i].name) == 0;
        if (!known) rc = al_errf(err, "unexpected tensor '%s' (not part of this config)", name);
    }
    al_st_close(&f);
    if (rc) al_err_prefix(err, "%s", path);
    return rc;
}

int al_model_load(al_model *m, const char *dir, char **extra_out, al_err *err) {
    return al_model_open(m, dir, 0, extra_out, err);
}

int al_model_open(al_model *m, const char *dir, int min_positions, char **extra_out, al_err *err) {
    al_config c;
    char *weights = NULL;
    memset(m, 0, sizeof *m);
    if (extra_out) *extra_out = NULL;
    if (al_config_load_dir(&c, dir, extra_out, err)) return -1;
    if (c.max_position < min_positions) c.max_position = min_positions; /* longer RoPE tables; same weights */
    if (c.hf != AL_HF_NONE) {
        if (al_model_map(m, dir, &c, err)) goto fail;
        return 0;
    }
    if (al_model_create(m, &c, err)) {
        al_err_prefix(err, "%s/config.json", dir);
        goto fail;
    }
    if (!(weights = al_sprintf("%s/model.safetensors", dir))) {
        al_errf(err, "out of memory");
        goto fail;
    }
    if (al_model_load_weights(m, weights, err)) goto fail;
    free(weights);
    return 0;
fail:
    free(weights);
    al_model_free(m);
    if (extra_out) {
        free(*extra_out);
        *extra_out = NULL;
    }
    return -1;
}

/* ---- the MLP: dense, or a mixture of experts ---- */

/* x[n] *= s */
static void scale_vec(float *x, float s, size_t n) {
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++) x[i] *= s;
}

/* Gemma's embedding normalizer: sqrt(hidden_size) as a number of the
 * embedding's dtype (transformers builds it as a tensor of the model's
 * dtype: 45.25 for hidden 2048 in BF16). */
static float embed_multiplier(const al_model *m) {
    const float s = (float)sqrt((double)m->cfg.hidden_size);
    if (m->embed_dt == AL_DT_BF16) return al_bf16_to_f32(al_f32_to_bf16(s));
    if (m->embed_dt == AL_DT_F16) return al_f16_to_f32(al_f32_to_f16(s));
    return s;
}

/* One gated MLP of width f over x[N, d] -> y[N, d] (written):
 * y = W_down (act(W_gate x) * W_up x), with gate/up/h [N, f] buffers (kept:
 * training's backward reads them). Decode (N = 1) takes the matrix-vector
 * products (F32: cblas_sgemv, the calls decode always made), else al_matmul
 * (F32: the sgemm of al_linear_fwd). acts_bf16 (al_acts.acts_bf16; fp32
 * weights): x holds BF16 values and h is stored as BF16, both read as they
 * are by the products. */
static void glu_mlp(const al_config *c, al_wref wg, al_wref wu, al_wref wd, int f, const float *x, float *y, int N,
                    float *gate, float *up, float *h, int decode, int acts_bf16) {
    const int d = c->hidden_size;
    if (acts_bf16 && !decode) {
        const al_wref xb = {x, AL_DT_BF16}, hb = {h, AL_DT_BF16};
        al_matmul_x(gate, f, xb, d, wg, N, d, f, 0);
        al_matmul_x(up, f, xb, d, wu, N, d, f, 0);
        al_glu_fwd_bf16(c->mlp_act, (uint16_t *)h, gate, up, (size_t)N * f);
        al_matmul_x(y, d, hb, f, wd, N, f, d, 0);
        return;
    }
    if (decode) {
        al_matvec(gate, x, wg, f, d, 0);
        al_matvec(up, x, wu, f, d, 0);
        al_glu_fwd(c->mlp_act, h, gate, up, (size_t)f);
        al_matvec(y, h, wd, d, f, 0);
        return;
    }
    al_matmul(gate, f, x, d, wg, N, d, f, 0);
    al_matmul(up, f, x, d, wu, N, d, f, 0);
    al_glu_fwd(c->mlp_act, h, gate, up, (size_t)N * f);
    al_matmul(y, d, h, f, wd, N, f, d, 0);
}

/* A layer's dense MLP (or a MoE layer's shared experts) over x[N, d] -> y. */
static void mlp_fwd(const al_config *c, const al_layer_ptrs *L, const float *x, float *y, int N, float *gate,
                    float *up, float *h, int decode, int acts_bf16) {
    glu_mlp(c, (al_wref){L->gate, L->gate_dt}, (al_wref){L->up, L->up_dt}, (al_wref){L->down, L->down_dt}, L->ffn, x,
            y, N, gate, up, h, decode, acts_bf16);
}

/* ---- mixture of experts (DeepseekV2MoE) ----
 * Workspace of one MoE layer over N tokens: router scores [N, E], the k
 * chosen experts' weights [N, k] and indexes idx [N, k], a list of rows
 * [N], the rows routed to one expert gathered xg [N, d] and its outputs
 * yg [N, d]; gate/up/h [N, f_max] are the MLP buffers of the activations. */
typedef struct moe_work {
    float *scores, *wt, *xg, *yg, *gate, *up, *h;
    int *idx, *rows;
} moe_work;

static size_t moe_work_floats(const al_config *c, size_t N) {
    if (c->n_routed_experts <= 0) return 0;
    return N * ((size_t)c->n_routed_experts + (size_t)c->num_experts_per_tok + 2 * (size_t)c->hidden_size);
}

static size_t moe_work_ints(const al_config *c, size_t N) {
    return c->n_routed_experts > 0 ? N * ((size_t)c->num_experts_per_tok + 1) : 0;
}

/* The workspace carved from floats[moe_work_floats] and ints[moe_work_ints]. */
static moe_work moe_work_at(const al_config *c, float *floats, int *ints, int N, float *gate, float *up, float *h) {
    const size_t E = c->n_routed_experts, k = c->num_experts_per_tok, d = c->hidden_size;
    moe_work w = {floats, floats + N * E, floats + N * (E + k), floats + N * (E + k + d), gate, up, h, ints,
                  ints + N * k};
    return w;
}

/* The k largest of s[0..n) (ties: the lower index) into idx[0..k), in
 * descending order of score. */
static void top_k(const float *s, int n, int k, int *idx) {
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < n; e++) {
            int taken = 0;
            for (int i = 0; i < j && !taken; i++) taken = idx[i] == e;
            if (!taken && (best < 0 || s[e] > s[best])) best = e;
        }
        idx[j] = best;
    }
}

/* MoEGate of one token: scores = softmax(W_router x) in fp32 (in place in
 * s[E]); top-k greedily, or (group_limited_greedy) among the experts of the
 * topk_group groups with the largest best score (the others' scores 0);
 * weights renormalised to sum 1 (norm_topk_prob with k > 1, + 1e-20 as
 * transformers) or multiplied by routed_scaling_factor. */
static void route_token(const al_config *c, float *s, int *idx, float *wt) {
    const int E = c->n_routed_experts, k = c->num_experts_per_tok;
    float mx = s[0];
    for (int e = 1; e < E; e++) mx = s[e] > mx ? s[e] : mx;
    double sum = 0;
    for (int e = 0; e < E; e++) sum += (double)(s[e] = expf(s[e] - mx));
    for (int e = 0; e < E; e++) s[e] = (float)(s[e] / sum);
    if (c->moe_group_limited) {
        const int G = c->n_group, per = E / G;
        float gs[4096];
        int gi[4096];
        for (int g = 0; g < G; g++) {
            gs[g] = s[g * per];
            for (int e = 1; e < per; e++) gs[g] = s[g * per + e] > gs[g] ? s[g * per + e] : gs[g];
        }
        top_k(gs, G, c->topk_group, gi);
        for (int g = 0; g < G; g++) {
            int keep = 0;
            for (int i = 0; i < c->topk_group; i++) keep |= gi[i] == g;
            if (!keep)
                for (int e = 0; e < per; e++) s[g * per + e] = 0.0f;
        }
    }
    top_k(s, E, k, idx);
    double tot = 0;
    for (int j = 0; j < k; j++) tot += (double)(wt[j] = s[idx[j]]);
    for (int j = 0; j < k; j++)
        wt[j] = k > 1 && c->norm_topk_prob ? (float)(wt[j] / (tot + 1e-20)) : (float)(wt[j] * c->routed_scaling_factor);
}

/* A MoE layer over x[N, d] -> y[N, d] (written): the shared experts, then
 * for each routed expert in index order the rows routed to it, gathered,
 * through its MLP, added to their rows with their weights (a fixed order:
 * the same sums for any thread count). Experts no token chose are not
 * touched, so their mapped pages are never read. Decode (N = 1) takes the
 * matrix-vector products. */
static void moe_fwd(const al_config *c, const al_layer_ptrs *L, const float *x, float *y, int N, const moe_work *w,
                    int decode) {
    const int E = c->n_routed_experts, k = c->num_experts_per_tok, d = c->hidden_size, fe = c->moe_intermediate_size;
    if (L->ffn > 0) mlp_fwd(c, L, x, y, N, w->gate, w->up, w->h, decode, 0);
    else memset(y, 0, sizeof(float) * (size_t)N * d);
    if (decode) al_matvec(w->scores, x, L->router, E, d, 0);
    else al_matmul(w->scores, E, x, d, L->router, N, d, E, 0);
#pragma omp parallel for schedule(static) if (N > 16)
    for (int n = 0; n < N; n++) route_token(c, w->scores + (size_t)n * E, w->idx + (size_t)n * k, w->wt + (size_t)n * k);
    for (int e = 0; e < E; e++) {
        int ne = 0;
        for (int n = 0; n < N; n++)
            for (int j = 0; j < k; j++)
                if (w->idx[(size_t)n * k + j] == e) w->rows[ne++] = n * k + j; /* token n, slot j */
        if (ne == 0) continue;
        for (int r = 0; r < ne; r++) memcpy(w->xg + (size_t)r * d, x + (size_t)(w->rows[r] / k) * d, sizeof(float) * d);
        const al_wref *m3 = L->experts + 3 * (size_t)e;
        glu_mlp(c, m3[0], m3[1], m3[2], fe, w->xg, w->yg, ne, w->gate, w->up, w->h, decode, 0);
        for (int r = 0; r < ne; r++) {
            float *yr = y + (size_t)(w->rows[r] / k) * d;
            const float *g = w->yg + (size_t)r * d, wt = w->wt[w->rows[r]];
            for (int i = 0; i < d; i++) yr[i] += wt * g[i];
        }
    }
}

/* ---- activations ---- */

/* A context T the model can run: within its positions and, for a Mistral
 * sliding window, within the window (where the window cannot matter). */
static int check_context(const al_config *c, int T, al_err *err) {
    if (T > c->max_position) return al_errf(err, "context %d exceeds max_position_embeddings %d", T, c->max_position);
    if (T > al_config_max_context(c))
        return al_errf(err, "context %d exceeds the sliding_window %d, which attnlab does not implement (contexts up to "
                            "the window are exact)",
                       T, c->sliding_window);
    return 0;
}

/* The activation arena for B x T tokens. Training (infer 0): every layer's
 * buffers, kept for backward, plus the backward buffers. Inference (infer
 * 1): one layer's buffers reused by every layer (the residual stream ping-
 * pongs between two slots), no backward buffers, and attention blocks kept
 * only for the n_keep layers in keep[] (attention maps) plus one shared slot. */
static int acts_create(al_acts *a, const al_model *m, int B, int T, int infer, const int *keep, int n_keep,
                       int logits, al_err *err) {
    memset(a, 0, sizeof *a);
    const al_config *c = &m->cfg;
    const int vit = c->task == AL_TASK_VISION;
    if (B <= 0 || T <= 0) return al_errf(err, "empty batch (%d x %d tokens)", B, T);
    if (check_context(c, T, err)) return -1;
    if (infer && vit) return al_errf(err, "inference activations are for language models");
    if (vit && T != c->max_position)
        return al_errf(err, "a vision batch is 1 + %d patches per image, not %d tokens", c->max_position - 1, T);
    const size_t N = (size_t)B * T, d = c->hidden_size, f = al_config_ffn_max(c), V = c->vocab_size, L = c->num_layers;
    const size_t n_moe = moe_work_floats(c, N), n_moe_idx = moe_work_ints(c, N);
    /* LM: logits per token over the bytes; ViT: per image over the classes */
    const size_t n_logits = !logits ? 0 : vit ? (size_t)B * c->num_labels : N * V;
    const size_t pp = vit ? (size_t)c->num_channels * c->patch_size * c->patch_size : 0;
    const size_t n_patch = vit ? (size_t)B * (T - 1) * pp : 0, n_cls = vit ? (size_t)B * d : 0;
    a->B = B;
    a->T = T;
    a->infer = infer;
    a->attn_saved_per_layer = (m->attn->saved_floats(c, B, T) + 15) & ~(size_t)15;
    /* training: L slots of per-layer buffers and L + 1 of the residual stream; inference: 1 and 2 */
    const size_t Ls = infer ? 1 : L, Xs = infer ? 2 : L + 1, bwd = !infer, S = infer ? 1 + (size_t)n_keep : L;
    if (infer) {
        a->saved_slot = malloc(sizeof(int) * L);
        if (!a->saved_slot) return al_errf(err, "out of memory");
        for (size_t l = 0; l < L; l++) a->saved_slot[l] = -1; /* the shared slot S - 1 */
        for (int k = 0; k < n_keep; k++) {
            if (keep[k] < 0 || keep[k] >= (int)L) {
                al_acts_free(a);
                return al_errf(err, "layer %d out of range (the model has layers 0..%d)", keep[k], (int)L - 1);
            }
            a->saved_slot[keep[k]] = k;
        }
    }
    size_t sizes[] = {
        Xs * N * d,                         /* x_in */
        Ls * N * d, Ls * N, S * a->attn_saved_per_layer, Ls * N * d, Ls * N * d, Ls * N, /* xn1 rstd1 saved x_mid xn2 rstd2 */
        Ls * N * f, Ls * N * f, Ls * N * f, /* gate up hmid */
        N * d, N, n_logits, bwd * n_logits, /* xnf rstdf logits dlogits */
        bwd * N * d, N * d, bwd * N * f, bwd * N * f, bwd * N * f, m->attn->scratch_floats(c, B, T), /* dres dtmp dh dg du scratch */
        n_patch, n_cls, n_cls,              /* ViT: patches cls_x cls_dx */
        n_moe,                              /* MoE routing */
    };
    float **ptrs[] = {&a->x_in, &a->xn1, &a->rstd1, &a->attn_saved, &a->x_mid, &a->xn2, &a->rstd2, &a->gate, &a->up,
                      &a->hmid, &a->xnf, &a->rstdf, &a->logits, &a->dlogits, &a->dres, &a->dtmp, &a->dh, &a->dg,
                      &a->du, &a->attn_scratch, &a->patches, &a->cls_x, &a->cls_dx, &a->moe};
    enum { NBUF = sizeof ptrs / sizeof ptrs[0] };
    size_t total = 0;
    for (int i = 0; i < NBUF; i++) total += (sizes[i] + 15) & ~(size_t)15;
    a->arena = al_alloc(sizeof(float) * total);
    a->tokens = malloc(sizeof(int) * N);
    a->targets = malloc(sizeof(int) * N);
    a->moe_idx = n_moe_idx ? malloc(sizeof(int) * n_moe_idx) : NULL;
    if (!a->arena || !a->tokens || !a->targets || (n_moe_idx && !a->moe_idx)) {
        al_acts_free(a);
        return al_errf(err, "out of memory for activations (%zu MB)", total * 4 >> 20);
    }
    a->n_keep = n_keep;
    for (int k = 0; infer && !logits && k < n_keep; k++)
        if (keep[k] >= a->maps_layers) a->maps_layers = keep[k] + 1;
    if (infer) /* the shared slot: after the kept ones */
        for (size_t l = 0; l < L; l++)
            if (a->saved_slot[l] < 0) a->saved_slot[l] = n_keep;
    a->n_floats = total;
    float *p = a->arena;
    for (int i = 0; i < NBUF; i++) {
        *ptrs[i] = sizes[i] ? p : NULL;
        p += (sizes[i] + 15) & ~(size_t)15;
    }
    /* the score kernels' workspace (this thread's arena) for B x T, planned
     * now: a kernel call that could not grow it later would take the slower
     * path, whose sums differ in the last bits (a resumed run would no
     * longer repeat an uninterrupted one) */
    const al_attn_ops *ops = al_attn_design(m->cfg.attention);
    if (ops && ops->score_shape) {
        const al_attn_shape s = ops->score_shape(&m->cfg, B, T);
        if (al_attn_reserve(&s, err)) {
            al_acts_free(a);
            return -1;
        }
    }
    return 0;
}


int al_acts_create(al_acts *a, const al_model *m, int B, int T, al_err *err) {
    if (m->mapped || m->w16) return al_acts_create_infer(a, m, B, T, NULL, 0, err);
    return acts_create(a, m, B, T, 0, NULL, 0, 1, err);
}

int al_acts_create_infer(al_acts *a, const al_model *m, int B, int T, const int *keep, int n_keep, al_err *err) {
    return acts_create(a, m, B, T, 1, keep, n_keep, 1, err);
}

int al_acts_create_maps(al_acts *a, const al_model *m, int T, const int *keep, int n_keep, al_err *err) {
    return acts_create(a, m, 1, T, 1, keep, n_keep, 0, err);
}

int al_vit_acts_create(al_acts *a, const al_model *m, int B, al_err *err) {
    if (m->cfg.task != AL_TASK_VISION) {
        memset(a, 0, sizeof *a);
        return al_errf(err, "not a vision model");
    }
    return al_acts_create(a, m, B, m->cfg.max_position, err);
}

void al_acts_free(al_acts *a) {
    free(a->saved_slot);
    free(a->moe_idx);
    al_free(a->arena);
    free(a->tokens);
    free(a->targets);
    memset(a, 0, sizeof *a);
}

/* x[N, d] = rows tokens[n] of a 16-bit embedding E[V, d], widened (rows of
 * negative tokens are zero, as al_embed_fwd's). */
static void embed_rows(float *x, al_wref E, const int *tokens, int N, int d) {
#pragma omp parallel for schedule(static) if ((long)N * d > 65536)
    for (int n = 0; n < N; n++) {
        if (tokens[n] < 0) memset(x + (size_t)n * d, 0, sizeof(float) * (size_t)d);
        else al_wread(x + (size_t)n * d, E, (size_t)tokens[n] * d, (size_t)d);
    }
}

/* out[n] = a[n] + b[n] */
static void add_vec(float *out, const float *x, const float *y, size_t n) {
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++) out[i] = x[i] + y[i];
}

/* Slots of the per-layer activation buffers: layer l's own in training,
 * one shared slot (the residual stream: two, alternating) for inference. */
static inline size_t lslot(const al_acts *a, int l) { return a->infer ? 0 : (size_t)l; }
static inline size_t xslot(const al_acts *a, int l) { return a->infer ? (size_t)(l & 1) : (size_t)l; }
static inline float *saved_of(const al_acts *a, int l) {
    return a->attn_saved + (a->saved_slot ? (size_t)a->saved_slot[l] : (size_t)l) * a->attn_saved_per_layer;
}

const float *al_acts_saved(const al_acts *a, int layer) {
    if (a->infer && a->saved_slot[layer] == a->n_keep) return NULL; /* the shared slot: overwritten */
    return saved_of(a, layer);
}

/* Layer l's part of a decoder's cache. */
static al_kv decoder_layer(const al_decoder *dec, int l) {
    if (dec->kvq) return (al_kv){dec->kvq[l].res, dec->cache_dt, &dec->kvq[l], dec->kve ? &dec->kve[l] : NULL};
    const size_t layer0 = (size_t)l * dec->capacity * dec->values_per_token;
    return (al_kv){(char *)dec->cache + layer0 * al_dtype_size(dec->cache_dt), dec->cache_dt, NULL,
                   dec->kve ? &dec->kve[l] : NULL};
}

/* After a prefill's forward of layer l (its saved block still in place):
 * the attention mass of the prompt's keys in the layer's eviction state,
 * column sums of each head's weights (al_kve_colsum; SnapKV: the
 * observation window's rows only), into dec->fill_buf's q | k | work. */
static void prefill_mass(const al_model *m, const al_acts *a, int l, al_decoder *dec) {
    al_kve *e = &dec->kve[l];
    if (e->o.method != AL_KVE_H2O && e->o.method != AL_KVE_SNAPKV) return;
    const al_attn_layer *L = &m->layers[l].attn;
    const int T = a->T, d = m->attn->head_qk(L, saved_of(a, l), 1, T, 0, 0, NULL, NULL);
    const int r0 = e->o.method == AL_KVE_SNAPKV ? e->o.prompt - al_kve_snap_window(e->o.prompt) : 0;
    float *q = dec->fill_buf, *k = q + (size_t)T * d, *work = k + (size_t)T * d;
    al_attn_shape s = {1, T, 1, 1, d, d, d, d, d, d, 1.0f / sqrtf((float)d)};
    al_attn_set_score(&s, &m->cfg);
    for (int h = 0; h < m->cfg.num_heads; h++) {
        m->attn->head_qk(L, saved_of(a, l), 1, T, 0, h, q, k);
        al_kve_colsum(&s, q, k, d, T, r0, e->mass, work); /* slot = position after a prefill */
    }
}

/* The transformer blocks, shared by both tasks: a->x_in[0] [B*T, d] (filled
 * by the caller's embedding) -> a->x_in[L] [B*T, d] (slot xslot(L)), saving
 * what blocks_bwd needs. The mask (causal or not) comes from the config
 * through the design's score shape. The MLP's matrices go through al_matmul:
 * the sgemm of al_linear_fwd for fp32, the BF16/F16 paths of wmat.c for a
 * mapped checkpoint. */
static int acts_f32_forced; /* test hook: al_model_test_acts_f32 */

void al_model_test_acts_f32(int on) { acts_f32_forced = on != 0; }

/* y, rstd = RMSNorm(x) with gain w, or with s given RMSNorm(s = x + b) (the
 * residual add before it); y as the forward stores it: BF16 values where
 * a->acts_bf16. */
static void norm_into(const al_acts *a, float *s, float *y, float *rstd, const float *x, const float *b, const float *w,
                      int N, int d, float eps) {
    if (!s) {
        if (a->acts_bf16) al_rmsnorm_fwd_bf16((uint16_t *)y, rstd, x, w, N, d, eps);
        else al_rmsnorm_fwd(y, rstd, x, w, N, d, eps);
    } else if (a->acts_bf16) al_add_rmsnorm_fwd_bf16(s, (uint16_t *)y, rstd, x, b, w, N, d, eps);
    else al_add_rmsnorm_fwd(s, y, rstd, x, b, w, N, d, eps);
}

static void blocks_fwd(const al_model *m, al_acts *a) {
    const al_config *c = &m->cfg;
    const int B = a->B, T = a->T, N = B * T, d = c->hidden_size, f = al_config_ffn_max(c);
    const size_t Nd = (size_t)N * d, Nf = (size_t)N * f;
    a->acts_bf16 = !a->infer && m->g && al_precision_now() == AL_PREC_BF16 && !acts_f32_forced; /* al_acts.acts_bf16 */
    const al_dtype act_dt = a->acts_bf16 ? AL_DT_BF16 : AL_DT_F32; /* of xn1 (and the MLP's, glu_mlp) */
    if (c->num_layers > 0) /* the first block's norm; each later one is done with the residual add before it */
        norm_into(a, NULL, a->xn1, a->rstd1, a->x_in + xslot(a, 0) * Nd, NULL, m->layers[0].ln1, N, d, c->rms_norm_eps);
    for (int l = 0; l < c->num_layers; l++) {
        const al_layer_ptrs *L = &m->layers[l];
        const size_t ls = lslot(a, l);
        float *x = a->x_in + xslot(a, l) * Nd, *x_out = a->x_in + xslot(a, l + 1) * Nd;
        float *xn1 = a->xn1 + ls * Nd, *x_mid = a->x_mid + ls * Nd, *xn2 = a->xn2 + ls * Nd;
        float *gate = a->gate + ls * Nf, *up = a->up + ls * Nf, *hmid = a->hmid + ls * Nf;
        m->attn->forward(&L->attn, (al_wref){xn1, act_dt}, a->dtmp, saved_of(a, l), a->attn_scratch, B, T);
        if (a->fill) m->attn->cache_fill(&L->attn, saved_of(a, l), T, decoder_layer(a->fill, l));
        if (a->fill && a->fill->kve) prefill_mass(m, a, l, a->fill);
        if (l + 1 == a->maps_layers) return; /* attention maps: no later layer is wanted */
        norm_into(a, x_mid, xn2, a->rstd2 + ls * N, x, a->dtmp, L->ln2, N, d, c->rms_norm_eps);
        if (L->router.p) { /* (never with acts_bf16: a MoE model has no gradients) */
            moe_work w = moe_work_at(c, a->moe, a->moe_idx, N, gate, up, hmid);
            moe_fwd(c, L, xn2, a->dtmp, N, &w, 0);
        } else {
            mlp_fwd(c, L, xn2, a->dtmp, N, gate, up, hmid, 0, a->acts_bf16);
        }
        if (l + 1 < c->num_layers) { /* the next block's input and its first norm */
            const size_t ln = lslot(a, l + 1);
            norm_into(a, x_out, a->xn1 + ln * Nd, a->rstd1 + ln * N, x_mid, a->dtmp, m->layers[l + 1].ln1, N, d,
                      c->rms_norm_eps);
        } else {
            add_vec(x_out, x_mid, a->dtmp, Nd);
        }
    }
}

/* Tells the model's grads_final hook (model.h) that the gradients from g_from
 * to the end of the arena are final: the all-reduce of an MPI step may start
 * on them while the backward goes on. */
static void grads_final(al_model *m, const float *g_from) {
    if (m->grads_final) m->grads_final(m->grads_final_ctx, (size_t)(g_from - m->g));
}

/* Backward through the blocks: a->dres [B*T, d] holds dL/d(x_in[L]) on entry
 * and dL/d(x_in[0]) on return; every block weight's gradient accumulates
 * into m->g. */
static void blocks_bwd(al_model *m, al_acts *a) {
    const al_config *c = &m->cfg;
    const int B = a->B, T = a->T, N = B * T, d = c->hidden_size, f = c->intermediate_size;
    const size_t Nd = (size_t)N * d, Nf = (size_t)N * f;
    for (int l = c->num_layers - 1; l >= 0; l--) {
        const al_layer_ptrs *L = &m->layers[l], *G = &m->glayers[l];
        const float *x = a->x_in + l * Nd, *xn1 = a->xn1 + l * Nd, *x_mid = a->x_mid + l * Nd, *xn2 = a->xn2 + l * Nd;
        const float *gate = a->gate + l * Nf, *up = a->up + l * Nf, *hmid = a->hmid + l * Nf;
        /* MLP branch: dres is dL/d(layer output) = dL/d(x_mid) through the
         * residual; the matrices' gradients written after al_model_zero_grads */
        const int add_w = !m->grads_unset;
        const al_dtype act_dt = a->acts_bf16 ? AL_DT_BF16 : AL_DT_F32; /* of xn1, xn2, hmid, dg, du (al_acts) */
        al_linear_bwd_ref(a->dh, 0, G->down, add_w, al_wref_f32(a->dres), (al_wref){hmid, act_dt}, L->down, N, f, d);
        if (a->acts_bf16) al_swiglu_bwd_bf16((uint16_t *)a->dg, (uint16_t *)a->du, a->dh, gate, up, Nf);
        else al_swiglu_bwd(a->dg, a->du, a->dh, gate, up, Nf);
        const al_wref x2 = {xn2, act_dt};
        al_linear_bwd_ref(a->dtmp, 0, G->gate, add_w, (al_wref){a->dg, act_dt}, x2, L->gate, N, d, f);
        al_linear_bwd_ref(a->dtmp, 1, G->up, add_w, (al_wref){a->du, act_dt}, x2, L->up, N, d, f);
        al_rmsnorm_bwd(a->dres, G->ln2, a->dtmp, x_mid, L->ln2, a->rstd2 + (size_t)l * N, N, d);
        /* attention branch */
        memset(a->dtmp, 0, sizeof(float) * Nd);
        m->layers[l].attn.grads_unset = m->grads_unset;
        m->attn->backward(&L->attn, (al_wref){xn1, act_dt}, a->dres, a->dtmp,
                          a->attn_saved + l * a->attn_saved_per_layer, a->attn_scratch, B, T);
        al_rmsnorm_bwd(a->dres, G->ln1, a->dtmp, x, L->ln1, a->rstd1 + (size_t)l * N, N, d);
        grads_final(m, G->ln1); /* the layer's first tensor: layers l.. are done */
    }
    m->grads_unset = 0;
}

double al_model_forward(const al_model *m, al_acts *a, const int *tokens, const int *targets) {
    const al_config *c = &m->cfg;
    const int B = a->B, T = a->T, N = B * T, d = c->hidden_size, V = c->vocab_size;
    const size_t Nd = (size_t)N * d;
    if (!m->embed) return NAN; /* a vision model has no token embedding: al_vit_forward */
    memcpy(a->tokens, tokens, sizeof(int) * N);
    if (m->embed_dt == AL_DT_F32) al_embed_fwd(a->x_in, m->embed, tokens, N, d);
    else embed_rows(a->x_in, (al_wref){m->embed, m->embed_dt}, tokens, N, d);
    if (c->embed_scale) scale_vec(a->x_in, embed_multiplier(m), Nd);
    blocks_fwd(m, a);
    if (!a->logits) return 0.0; /* attention-map activations: the blocks are all that is wanted */
    al_rmsnorm_fwd(a->xnf, a->rstdf, a->x_in + xslot(a, c->num_layers) * Nd, m->final_norm, N, d, c->rms_norm_eps);
    al_matmul(a->logits, V, a->xnf, d, (al_wref){m->lm_head, m->head_dt}, N, d, V, 0);
    if (!targets) return 0.0;
    if (a->infer) { /* no dlogits buffer: the loss alone, from the logits */
        int count = 0;
        for (int i = 0; i < N; i++) {
            a->targets[i] = targets[i];
            count += targets[i] >= 0;
        }
        return count ? al_xent_fwd_bwd(NULL, a->logits, targets, N, V, 0.0f) / count : 0.0;
    }
    int count = 0;
    for (int i = 0; i < N; i++) {
        a->targets[i] = targets[i];
        count += targets[i] >= 0;
    }
    if (count == 0) return 0.0;
    double sum = al_xent_fwd_bwd(a->dlogits, a->logits, targets, N, V, 1.0f / (float)count);
    return sum / count;
}

void al_model_backward(al_model *m, al_acts *a) {
    const al_config *c = &m->cfg;
    const int B = a->B, T = a->T, N = B * T, d = c->hidden_size, V = c->vocab_size;
    const size_t Nd = (size_t)N * d;
    if (!m->embed || !m->g || a->infer) return; /* no gradients: an inference model or batch */
    float *g_head = m->cfg.tie_word_embeddings ? m->g + m->params[0].offset : m->g + m->params[m->n_params - 1].offset;
    float *g_norm = m->g + (m->final_norm - m->w);
    al_linear_bwd_into(a->dtmp, 0, g_head, 1, a->dlogits, a->xnf, m->lm_head, N, d, V);
    memset(a->dres, 0, sizeof(float) * Nd);
    al_rmsnorm_bwd(a->dres, g_norm, a->dtmp, a->x_in + (size_t)c->num_layers * Nd, m->final_norm, a->rstdf, N, d);
    grads_final(m, g_norm); /* final norm and an untied head (a tied one is the embedding, done last) */
    blocks_bwd(m, a);
    al_embed_bwd(m->g + m->params[0].offset, a->dres, a->tokens, N, d);
}

/* ---- vision transformer ---- */

void al_vit_patchify(float *patches, const float *images, int B, int C, int S, int p) {
    const int g = S / p, P = g * g, pp = C * p * p;
#pragma omp parallel for schedule(static) if ((long)B * S * S * C > 65536)
    for (long r = 0; r < (long)B * P; r++) {
        const int b = (int)(r / P), gy = (int)(r % P) / g, gx = (int)(r % P) % g;
        float *out = patches + (size_t)r * pp;
        for (int ch = 0; ch < C; ch++)
            for (int i = 0; i < p; i++) {
                const float *src = images + (((size_t)b * C + ch) * S + (size_t)gy * p + i) * S + (size_t)gx * p;
                memcpy(out + ((size_t)ch * p + i) * p, src, sizeof(float) * p);
            }
    }
}

double al_vit_forward(const al_model *m, al_acts *a, const float *images, const int *labels) {
    const al_config *c = &m->cfg;
    const int B = a->B, T = a->T, P = T - 1, d = c->hidden_size, K = c->num_labels;
    const int pp = c->num_channels * c->patch_size * c->patch_size;
    const size_t Nd = (size_t)B * T * d;
    al_vit_patchify(a->patches, images, B, c->num_channels, c->image_size, c->patch_size);
    al_linear_fwd(a->dtmp, a->patches, m->patch_w, B * P, pp, d, 0); /* dtmp[B*P, d] = patches W^T */
    /* x0 row b*T + t: t = 0 the CLS token, t > 0 patch t-1's embedding + bias; plus position t */
#pragma omp parallel for schedule(static) if (Nd > 65536)
    for (long r = 0; r < (long)B * T; r++) {
        const int b = (int)(r / T), t = (int)(r % T);
        float *x = a->x_in + (size_t)r * d;
        const float *pos = m->pos + (size_t)t * d;
        if (t == 0) {
            for (int j = 0; j < d; j++) x[j] = m->cls[j] + pos[j];
        } else {
            const float *e = a->dtmp + ((size_t)b * P + t - 1) * d;
            for (int j = 0; j < d; j++) x[j] = e[j] + m->patch_b[j] + pos[j];
        }
    }
    blocks_fwd(m, a);
    /* only the CLS rows feed the classifier: gather them, normalise, classify */
    const float *xl = a->x_in + (size_t)c->num_layers * Nd;
    for (int b = 0; b < B; b++) memcpy(a->cls_x + (size_t)b * d, xl + (size_t)b * T * d, sizeof(float) * d);
    al_rmsnorm_fwd(a->xnf, a->rstdf, a->cls_x, m->final_norm, B, d, c->rms_norm_eps);
    al_linear_fwd(a->logits, a->xnf, m->cls_w, B, d, K, 0); /* logits[B, K] = xnf W^T + b */
    for (int b = 0; b < B; b++)
        for (int k = 0; k < K; k++) a->logits[(size_t)b * K + k] += m->cls_b[k];
    if (!labels) return 0.0;
    int count = 0;
    for (int b = 0; b < B; b++) {
        a->targets[b] = labels[b];
        count += labels[b] >= 0;
    }
    if (count == 0) return 0.0;
    double sum = al_xent_fwd_bwd(a->dlogits, a->logits, a->targets, B, K, 1.0f / (float)count);
    return sum / count;
}

void al_vit_backward(al_model *m, al_acts *a) {
    const al_config *c = &m->cfg;
    const int B = a->B, T = a->T, P = T - 1, d = c->hidden_size, K = c->num_labels;
    const int pp = c->num_channels * c->patch_size * c->patch_size;
    const size_t Nd = (size_t)B * T * d;
    float *g_pw = m->g + (m->patch_w - m->w), *g_pb = m->g + (m->patch_b - m->w), *g_cls = m->g + (m->cls - m->w);
    float *g_pos = m->g + (m->pos - m->w), *g_norm = m->g + (m->final_norm - m->w);
    float *g_cw = m->g + (m->cls_w - m->w), *g_cb = m->g + (m->cls_b - m->w);
    /* classifier: bias gradient summed over images in order */
    for (int b = 0; b < B; b++)
        for (int k = 0; k < K; k++) g_cb[k] += a->dlogits[(size_t)b * K + k];
    al_linear_bwd_into(a->dtmp, 0, g_cw, 1, a->dlogits, a->xnf, m->cls_w, B, d, K);
    memset(a->cls_dx, 0, sizeof(float) * (size_t)B * d);
    al_rmsnorm_bwd(a->cls_dx, g_norm, a->dtmp, a->cls_x, m->final_norm, a->rstdf, B, d);
    grads_final(m, g_norm); /* final norm and classifier */
    /* only the CLS rows of the last stream receive a gradient */
    memset(a->dres, 0, sizeof(float) * Nd);
    for (int b = 0; b < B; b++) memcpy(a->dres + (size_t)b * T * d, a->cls_dx + (size_t)b * d, sizeof(float) * d);
    blocks_bwd(m, a);
    /* patch embedding: dW[d, pp] += dE^T patches with dE[B*P, d] the patch rows of dres */
#pragma omp parallel for schedule(static) if (Nd > 65536)
    for (long r = 0; r < (long)B * P; r++) {
        const int b = (int)(r / P), i = (int)(r % P);
        memcpy(a->dtmp + (size_t)r * d, a->dres + ((size_t)b * T + 1 + i) * d, sizeof(float) * d);
    }
    al_linear_bwd_into(NULL, 1, g_pw, 1, a->dtmp, a->patches, m->patch_w, B * P, pp, d);
    /* positions: per position the sum over images (rows, in image order, so
     * the same for any thread count) into dtmp[T, d]; the CLS token's is
     * position 0's, the patch bias's the sum of positions 1..P */
    float *spos = a->dtmp;
#pragma omp parallel for schedule(static) if (Nd > 65536)
    for (int t = 0; t < T; t++) {
        float *acc = spos + (size_t)t * d;
        memcpy(acc, a->dres + (size_t)t * d, sizeof(float) * d);
        for (int b = 1; b < B; b++) {
            const float *row = a->dres + ((size_t)b * T + t) * d;
            for (int j = 0; j < d; j++) acc[j] += row[j];
        }
    }
    for (int t = 0; t < T; t++) {
        const float *acc = spos + (size_t)t * d;
        float *gp = g_pos + (size_t)t * d, *gx = t == 0 ? g_cls : g_pb;
        for (int j = 0; j < d; j++) {
            gp[j] += acc[j];
            gx[j] += acc[j];
        }
    }
}

/* ---- decoding ---- */

int al_decoder_create(al_decoder *dec, const al_model *m, int capacity, al_err *err) {
    return al_decoder_create_kv(dec, m, capacity, AL_DT_F32, err);
}

int al_decoder_create_kv(al_decoder *dec, const al_model *m, int capacity, al_dtype cache_dt, al_err *err) {
    memset(dec, 0, sizeof *dec);
    if (cache_dt != AL_DT_F32 && cache_dt != AL_DT_BF16)
        return al_errf(err, "KV cache dtype %s: only F32 and BF16 are supported", al_dtype_name(cache_dt));
    const al_config *c = &m->cfg;
    if (capacity <= 0 || capacity > c->max_position)
        return al_errf(err, "context %d outside 1..max_position_embeddings (%d)", capacity, c->max_position);
    if (check_context(c, capacity, err)) return -1;
    if (c->task != AL_TASK_LM) return al_errf(err, "a vision model classifies images; it does not decode tokens");
    dec->m = m;
    dec->capacity = capacity;
    dec->values_per_token = m->attn->cache_values_per_token(c);
    size_t n = (size_t)c->num_layers * capacity * dec->values_per_token;
    dec->cache_dt = cache_dt;
    dec->cache_bytes = n * al_dtype_size(cache_dt);
    dec->cache = al_alloc(dec->cache_bytes);
    dec->scratch = al_alloc(sizeof(float) * (4 * (size_t)c->hidden_size + 3 * (size_t)al_config_ffn_max(c) +
                                             m->attn->scratch_floats(c, 1, 1) + moe_work_floats(c, 1)));
    const size_t n_idx = moe_work_ints(c, 1);
    dec->moe_idx = n_idx ? malloc(sizeof(int) * n_idx) : NULL;
    if (!dec->cache || !dec->scratch || (n_idx && !dec->moe_idx)) {
        al_decoder_free(dec);
        return al_errf(err, "out of memory for a %d-token KV cache", capacity);
    }
    return 0;
}

int al_decoder_create_q(al_decoder *dec, const al_model *m, int capacity, al_dtype cache_dt, const al_kvq_opts *q,
                        al_err *err) {
    if (!q || q->kind == AL_KVQ_NONE) return al_decoder_create_kv(dec, m, capacity, cache_dt, err);
    const al_config *c = &m->cfg;
    al_kv_seg segs[AL_KV_MAX_SEGS];
    if (!m->attn->cache_segments)
        return al_errf(err, "%s attention has no quantised KV cache", m->attn->name);
    const int nseg = m->attn->cache_segments(c, q->latent, segs);
    if (al_kvq_check(q, segs, nseg, err)) return -1;
    if (capacity <= 0 || capacity > c->max_position)
        return al_errf(err, "context %d outside 1..max_position_embeddings (%d)", capacity, c->max_position);
    if (check_context(c, capacity, err)) return -1;
    /* the plain decoder for its scratch and checks, with a one-token cache
     * that the quantised layers then replace */
    if (al_decoder_create_kv(dec, m, 1, cache_dt, err)) return -1;
    al_free(dec->cache);
    dec->cache = NULL;
    dec->cache_bytes = 0;
    dec->capacity = capacity;
    dec->kvq = calloc((size_t)c->num_layers, sizeof(al_kvq));
    if (!dec->kvq) {
        al_decoder_free(dec);
        return al_errf(err, "out of memory for a %d-token KV cache", capacity);
    }
    for (int l = 0; l < c->num_layers; l++) {
        if (al_kvq_create(&dec->kvq[l], q, segs, nseg, dec->values_per_token, capacity, cache_dt, err)) {
            al_decoder_free(dec);
            return -1;
        }
        dec->cache_bytes += dec->kvq[l].bytes;
    }
    return 0;
}

int al_decoder_create_opts(al_decoder *dec, const al_model *m, int capacity, al_dtype cache_dt, const al_kv_opts *o,
                           al_err *err) {
    if (!o || o->e.method == AL_KVE_NONE) return al_decoder_create_q(dec, m, capacity, cache_dt, o ? &o->q : NULL, err);
    if (al_kve_check(&o->e, capacity, err)) return -1;
    if (al_decoder_create_q(dec, m, capacity, cache_dt, &o->q, err)) return -1;
    const int L = m->cfg.num_layers;
    if (!(dec->kve = calloc((size_t)L, sizeof(al_kve)))) {
        al_decoder_free(dec);
        return al_errf(err, "out of memory");
    }
    for (int l = 0; l < L; l++)
        if (al_kve_create(&dec->kve[l], &o->e, l, L, capacity, dec->values_per_token, err) ||
            (dec->kvq && al_kve_attach_quantised(&dec->kve[l], &dec->kvq[l], err))) {
            al_decoder_free(dec);
            return -1;
        }
    return 0;
}

void al_decoder_reset(al_decoder *dec) {
    al_decoder_seek(dec, 0);
    if (dec->shadow) al_decoder_seek(dec->shadow, 0);
}

/* A full F32 cache whose layers report each step's attention mass per
 * position (an al_kve with method none and step_mass): the shadow of an
 * evicting decoder, for the recall of attention mass. */
static int create_shadow(al_decoder *sh, const al_model *m, int capacity, al_err *err) {
    if (al_decoder_create(sh, m, capacity, err)) return -1;
    const int L = m->cfg.num_layers;
    const al_kve_opts none = {AL_KVE_NONE, 1.0, 0, 0, 0};
    if (!(sh->kve = calloc((size_t)L, sizeof(al_kve)))) {
        al_decoder_free(sh);
        return al_errf(err, "out of memory");
    }
    for (int l = 0; l < L; l++) {
        if (al_kve_create(&sh->kve[l], &none, l, L, capacity, sh->values_per_token, err)) {
            al_decoder_free(sh);
            return -1;
        }
        sh->kve[l].step_mass = 1;
    }
    return 0;
}

void al_decoder_layer_recall(const al_decoder *dec, double *out) {
    for (int l = 0; l < dec->m->cfg.num_layers; l++)
        out[l] = dec->layer_recall && dec->err_steps ? dec->layer_recall[l] / (double)dec->err_steps : 1.0;
}

/* The share of the full cache's mass of this step (the shadow's layer l,
 * slot = position) on the positions e attended to: those it holds now and
 * those this step evicted. */
static double step_recall(const al_kve *e, const al_kve *full) {
    double kept = 0, all = 0;
    for (int j = 0; j < full->n; j++) all += full->mass[j];
    for (int i = 0; i < e->n; i++) kept += full->mass[e->pos[i]];
    for (int i = 0; i < e->n_gone; i++) kept += full->mass[e->gone[i]];
    return all > 0 ? kept / all : 1.0;
}

int al_decoder_track_error(al_decoder *dec, al_err *err) {
    dec->shadow = calloc(1, sizeof *dec->shadow);
    dec->layer_err = calloc((size_t)dec->m->cfg.num_layers, sizeof(double));
    if (!dec->shadow || !dec->layer_err) {
        free(dec->shadow), free(dec->layer_err);
        dec->shadow = NULL, dec->layer_err = NULL;
        return al_errf(err, "out of memory");
    }
    /* an evicting decoder's shadow: a full cache that reports each step's mass per position, for recall */
    static const al_kv_opts full = {{0}, {AL_KVE_NONE, 1.0, 0, 0, 0}};
    const al_kv_opts *so = dec->kve ? &full : NULL;
    if (dec->kve && !(dec->layer_recall = calloc((size_t)dec->m->cfg.num_layers, sizeof(double)))) {
        free(dec->shadow), free(dec->layer_err);
        dec->shadow = NULL, dec->layer_err = NULL;
        return al_errf(err, "out of memory");
    }
    if (so ? create_shadow(dec->shadow, dec->m, dec->capacity, err) : al_decoder_create(dec->shadow, dec->m, dec->capacity, err)) {
        free(dec->shadow), free(dec->layer_err), free(dec->layer_recall);
        dec->shadow = NULL, dec->layer_err = NULL, dec->layer_recall = NULL;
        return -1;
    }
    al_decoder_seek(dec->shadow, dec->pos);
    return 0;
}

void al_decoder_layer_errors(const al_decoder *dec, double *out) {
    for (int l = 0; l < dec->m->cfg.num_layers; l++)
        out[l] = dec->layer_err && dec->err_steps ? dec->layer_err[l] / (double)dec->err_steps : 0.0;
}

void al_decoder_seek(al_decoder *dec, int pos) {
    dec->pos = pos;
    for (int l = 0; dec->kve && l < dec->m->cfg.num_layers; l++) {
        if (pos) al_kve_seek(&dec->kve[l], pos);
        else al_kve_reset(&dec->kve[l]);
    }
    if (dec->kve && dec->kvq) { /* the quantised split of the positions held */
        for (int l = 0; l < dec->m->cfg.num_layers; l++) al_kvq_seek(&dec->kvq[l], dec->kve[l].n);
        return;
    }
    for (int l = 0; dec->kvq && l < dec->m->cfg.num_layers; l++) al_kvq_seek(&dec->kvq[l], pos);
}

double al_decoder_kv_bytes_per_token(const al_decoder *dec) {
    const int L = dec->m->cfg.num_layers;
    if (!dec->kvq) return (double)dec->values_per_token * al_dtype_size(dec->cache_dt) * L;
    double b = 0;
    for (int l = 0; l < L; l++) b += al_kvq_bytes_per_token(&dec->kvq[l]);
    return b;
}

double al_decoder_kv_held_bytes(const al_decoder *dec) {
    if (dec->kve && dec->kvq) { /* the positions each layer holds, quantised or in the residual */
        double b = 0;
        for (int l = 0; l < dec->m->cfg.num_layers; l++) b += al_kvq_held_bytes(&dec->kvq[l], dec->kve[l].n);
        return b;
    }
    if (dec->kve) { /* the positions each layer holds */
        double b = 0;
        for (int l = 0; l < dec->m->cfg.num_layers; l++) b += (double)dec->kve[l].n;
        return b * (double)dec->values_per_token * al_dtype_size(dec->cache_dt);
    }
    if (!dec->kvq) return al_decoder_kv_bytes_per_token(dec) * dec->pos;
    double b = 0;
    for (int l = 0; l < dec->m->cfg.num_layers; l++) b += al_kvq_held_bytes(&dec->kvq[l], dec->pos);
    return b;
}

void al_decoder_fill_random(al_decoder *dec, uint64_t seed) {
    if (dec->kvq) {
        for (int l = 0; l < dec->m->cfg.num_layers; l++) al_kvq_fill_random(&dec->kvq[l], seed + (uint64_t)l);
        return;
    }
    al_rng rng;
    al_rng_seed(&rng, seed);
    const size_t n = dec->cache_bytes / al_dtype_size(dec->cache_dt);
    const al_kv kv = {dec->cache, dec->cache_dt};
    float buf[256];
    for (size_t i = 0; i < n; i += 256) {
        const size_t k = n - i < 256 ? n - i : 256;
        for (size_t j = 0; j < k; j++) buf[j] = 0.5f * al_rng_normal(&rng);
        al_kv_store(kv, i, buf, k);
    }
}

void al_decoder_free(al_decoder *dec) {
    if (dec->shadow) al_decoder_free(dec->shadow);
    free(dec->shadow);
    free(dec->layer_err);
    free(dec->layer_recall);
    for (int l = 0; dec->kve && l < dec->m->cfg.num_layers; l++) al_kve_free(&dec->kve[l]);
    free(dec->kve);
    free(dec->fill_buf);
    for (int l = 0; dec->kvq && l < dec->m->cfg.num_layers; l++) al_kvq_free(&dec->kvq[l]);
    free(dec->kvq);
    al_free(dec->cache);
    al_free(dec->scratch);
    free(dec->moe_idx);
    memset(dec, 0, sizeof *dec);
}

int al_decoder_prefill(al_decoder *dec, const int *tokens, int n, float *logits, al_err *err) {
    const al_model *m = dec->m;
    const al_config *c = &m->cfg;
    const int d = c->hidden_size;
    if (dec->pos != 0) return al_errf(err, "prefill needs an empty KV cache (it holds %d tokens)", dec->pos);
    if (n <= 0 || n > dec->capacity)
        return al_errf(err, "prefill of %d tokens: the KV cache holds 1..%d", n, dec->capacity);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= c->vocab_size) return al_errf(err, "token %d outside the vocabulary", tokens[i]);
    al_acts a;
    if (al_acts_create_maps(&a, m, n, NULL, 0, err)) return -1;
    if (dec->kve) { /* SnapKV: the prefill is the prompt unless --kv-prompt says longer; q | k | row for the mass */
        for (int l = 0; l < c->num_layers; l++)
            if (dec->kve[l].o.method == AL_KVE_SNAPKV && dec->kve[l].o.prompt < n) dec->kve[l].o.prompt = n;
        const size_t dqk = (size_t)m->attn->head_qk(&m->layers[0].attn, saved_of(&a, 0), 1, n, 0, 0, NULL, NULL);
        free(dec->fill_buf);
        if (!(dec->fill_buf = malloc(sizeof(float) * (2 * (size_t)n * dqk + al_kve_colsum_work(n))))) {
            al_acts_free(&a);
            return al_errf(err, "out of memory for a %d-token prefill's attention mass", n);
        }
    }
    a.fill = dec;
    al_model_forward(m, &a, tokens, NULL); /* stops after the blocks: these activations have no logits */
    for (int l = 0; dec->kve && l < c->num_layers; l++) { /* the policies act on the whole prompt */
        al_kv kv = decoder_layer(dec, l);
        al_kve_evict(&dec->kve[l], &kv);
    }
    float *xn = dec->scratch + d, rstd;
    const float *last = a.x_in + xslot(&a, c->num_layers) * (size_t)n * d + (size_t)(n - 1) * d;
    al_rmsnorm_fwd(xn, &rstd, last, m->final_norm, 1, d, c->rms_norm_eps);
    al_matvec(logits, xn, (al_wref){m->lm_head, m->head_dt}, c->vocab_size, d, 0);
    al_acts_free(&a);
    dec->pos = n;
    return 0;
}

int al_decoder_step(al_decoder *dec, int token, float *logits, al_err *err) {
    const al_model *m = dec->m;
    const al_config *c = &m->cfg;
    const int d = c->hidden_size, f = al_config_ffn_max(c), pos = dec->pos;
    if (pos >= dec->capacity) return al_errf(err, "KV cache full (%d tokens)", dec->capacity);
    if (token < 0 || token >= c->vocab_size) return al_errf(err, "token %d outside the vocabulary", token);
    float *x = dec->scratch, *xn = x + d, *y = xn + d, *gate = y + d, *up = gate + f, *h = up + f;
    float *attn_scratch = h + f + d, *moe = attn_scratch + m->attn->scratch_floats(c, 1, 1);
    float rstd;
    if (m->embed_dt == AL_DT_F32) memcpy(x, m->embed + (size_t)token * d, sizeof(float) * d);
    else al_wread(x, (al_wref){m->embed, m->embed_dt}, (size_t)token * d, (size_t)d);
    if (c->embed_scale) scale_vec(x, embed_multiplier(m), (size_t)d);
    for (int l = 0; l < c->num_layers; l++) {
        const al_layer_ptrs *L = &m->layers[l];
        al_rmsnorm_fwd(xn, &rstd, x, L->ln1, 1, d, c->rms_norm_eps);
        m->attn->decode(&L->attn, xn, y, decoder_layer(dec, l), pos, attn_scratch);
        if (dec->shadow) { /* the same input against the full cache: y_full in the shadow's scratch */
            float *yf = dec->shadow->scratch;
            m->attn->decode(&L->attn, xn, yf, decoder_layer(dec->shadow, l), pos, attn_scratch);
            double dd = 0, nn = 0;
            for (int i = 0; i < d; i++) dd += ((double)y[i] - yf[i]) * ((double)y[i] - yf[i]), nn += (double)yf[i] * yf[i];
            dec->layer_err[l] += nn > 0 ? sqrt(dd / nn) : 0.0;
            if (dec->layer_recall) dec->layer_recall[l] += step_recall(&dec->kve[l], &dec->shadow->kve[l]);
        }
        for (int i = 0; i < d; i++) x[i] += y[i];
        al_rmsnorm_fwd(xn, &rstd, x, L->ln2, 1, d, c->rms_norm_eps);
        /* F32: the cblas_sgemv calls; BF16/F16: wmat.c's direct kernel */
        if (L->router.p) {
            moe_work w = moe_work_at(c, moe, dec->moe_idx, 1, gate, up, h);
            moe_fwd(c, L, xn, y, 1, &w, 1);
        } else {
            mlp_fwd(c, L, xn, y, 1, gate, up, h, 1, 0);
        }
        for (int i = 0; i < d; i++) x[i] += y[i];
    }
    al_rmsnorm_fwd(xn, &rstd, x, m->final_norm, 1, d, c->rms_norm_eps);
    al_matvec(logits, xn, (al_wref){m->lm_head, m->head_dt}, c->vocab_size, d, 0);
    dec->pos++;
    if (dec->shadow) dec->shadow->pos = dec->pos, dec->err_steps++;
    return 0;
}
