/*
 * hf.c: Hugging Face checkpoints, memory-mapped (docs/hf-models.md).
 *
 * config.json (without an "attnlab" block) has been parsed into an
 * al_config of its family (config.c: Llama, Mistral, Qwen2, Qwen3, Gemma,
 * DeepseekV2 with its experts); the parameter table that al_model_build lays out from it
 * names every tensor the model needs under HF's names and shapes. This file
 * opens the directory's safetensors (one file, or shards through
 * model.safetensors.index.json: io/ckpt.c), checks every tensor against the
 * table, and points the model's views at the data:
 *
 *   - matrices (2-D) in F32, BF16 or F16 are used in place: the view points
 *     into the read-only mapping and the products of nn/wmat.c read the file
 *     dtype (a 7B BF16 model costs its 14 GB of file pages, shared with the
 *     page cache, not 28 GB of fp32 on the heap); a tensor whose bytes are
 *     not aligned to its element size (possible in the format, never written
 *     by transformers) is copied to an aligned heap buffer first;
 *   - 1-D tensors (norm gains, Qwen2's biases) are converted to fp32 copies
 *     in the small arena m->w, since the kernels read them as float; a
 *     Gemma checkpoint's RMSNorm gains w become 1 + w there (GemmaRMSNorm
 *     scales by 1 + w), so every norm kernel runs unchanged;
 *   - a tensor the table does not name is an error (the files and the config
 *     disagree), except lm_head.weight of a tied model and the RoPE buffers
 *     (*.rotary_emb.inv_freq) some conversions saved.
 *
 * Data: m->data[i] / m->dts[i] per parameter i; m->ckpt keeps the mapping
 * open until al_model_unmap. Byte counts (mapped_bytes, copied_bytes) are for
 * `attnlab info`.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../io/io.h"
#include "model.h"

/* Names the table does not hold but a checkpoint may carry harmlessly. */
static int ignorable(const al_model *m, const char *name) {
    if (m->cfg.tie_word_embeddings && strcmp(name, "lm_head.weight") == 0) return 1;
    const char *suffix = ".rotary_emb.inv_freq";
    size_t n = strlen(name), k = strlen(suffix);
    return n > k && strcmp(name + n - k, suffix) == 0;
}

/* Whether a tensor is an RMSNorm gain ("...norm.weight"). */
static int is_norm_gain(const char *name) {
    const char *suffix = "norm.weight";
    size_t n = strlen(name), k = strlen(suffix);
    return n >= k && strcmp(name + n - k, suffix) == 0;
}

/* Element i of a 1-D tensor's bytes (any float dtype) as fp32. */
static float elem_f32(const void *p, al_dtype dt, size_t i) {
    const char *b = (const char *)p + i * al_dtype_size(dt);
    uint16_t h;
    float f;
    double d;
    switch (dt) {
    case AL_DT_F16: memcpy(&h, b, 2); return al_f16_to_f32(h);
    case AL_DT_BF16: memcpy(&h, b, 2); return al_bf16_to_f32(h);
    case AL_DT_F64: memcpy(&d, b, 8); return (float)d;
    default: memcpy(&f, b, 4); return f;
    }
}

int al_model_map(al_model *m, const char *dir, const al_config *c, al_err *err) {
    if (al_model_build(m, c, 0, err)) return al_err_prefix(err, "%s/config.json", dir);
    m->mapped = 1;
    m->ckpt = calloc(1, sizeof *m->ckpt);
    m->data = calloc((size_t)m->n_params, sizeof *m->data);
    m->dts = calloc((size_t)m->n_params, sizeof *m->dts);
    void **own = calloc((size_t)m->n_params, sizeof *own); /* heap copies of misaligned matrices */
    size_t small = 0;
    for (int i = 0; i < m->n_params; i++) small += m->params[i].ndim == 1 ? m->params[i].numel : 0;
    m->w = al_alloc(sizeof(float) * (small ? small : 1));
    if (!m->ckpt || !m->data || !m->dts || !own || !m->w) {
        free(own);
        al_model_free(m);
        return al_errf(err, "out of memory");
    }
    if (al_ckpt_open(m->ckpt, dir, err)) {
        free(m->ckpt);
        m->ckpt = NULL;
        free(own);
        al_model_free(m);
        return -1;
    }
    const al_ckpt *ck = m->ckpt;
    int rc = 0;
    size_t woff = 0;
    char a[AL_ST_SHAPE_STR_LEN], b[AL_ST_SHAPE_STR_LEN];
    for (int i = 0; i < m->n_params && !rc; i++) {
        const al_param *p = &m->params[i];
        const al_ckpt_entry *e = al_ckpt_find(ck, p->name);
        if (!e) {
            rc = al_errf(err, "%s: missing tensor '%s'%s", dir, p->name,
                         ck->sharded ? " (not in model.safetensors.index.json)" : "");
            break;
        }
        const al_st_tensor *t = e->t;
        const char *file = al_ckpt_file_name(ck, e); /* errors name DIR/FILE */
        int same = t->ndim == p->ndim;
        for (int k = 0; same && k < p->ndim; k++) same = t->shape[k] == p->shape[k];
        if (!same) {
            rc = al_errf(err, "%s/%s: tensor '%s' has shape %s, expected %s from config.json", dir, file, p->name,
                         al_st_shape_str(a, sizeof a, t->ndim, t->shape), al_st_shape_str(b, sizeof b, p->ndim, p->shape));
            break;
        }
        const void *bytes = al_ckpt_data(ck, e);
        if (p->ndim == 1) { /* gains and biases: fp32 copies */
            if (t->dtype != AL_DT_F32 && t->dtype != AL_DT_F16 && t->dtype != AL_DT_BF16 && t->dtype != AL_DT_F64) {
                rc = al_errf(err, "%s/%s: tensor '%s' has dtype %s, expected a floating-point dtype", dir, file,
                             p->name, al_dtype_name(t->dtype));
                break;
            }
            float *dst = m->w + woff;
            /* Gemma's RMSNorm scales by (1 + w), added in fp32 as GemmaRMSNorm does */
            const float offset = m->cfg.norm_unit_offset && is_norm_gain(p->name) ? 1.0f : 0.0f;
            for (size_t k = 0; k < p->numel; k++) dst[k] = offset + elem_f32(bytes, t->dtype, k);
            woff += p->numel;
            m->data[i] = dst;
            m->dts[i] = AL_DT_F32;
            m->copied_bytes += p->numel * sizeof(float);
            continue;
        }
        if (t->dtype != AL_DT_F32 && t->dtype != AL_DT_F16 && t->dtype != AL_DT_BF16) {
            rc = al_errf(err, "%s/%s: tensor '%s' has dtype %s, expected F32, BF16 or F16", dir, file, p->name,
                         al_dtype_name(t->dtype));
            break;
        }
        m->dts[i] = t->dtype;
        if ((uintptr_t)bytes % al_dtype_size(t->dtype) == 0) {
            m->data[i] = bytes;
            m->mapped_bytes += t->nbytes;
        } else { /* misaligned in the file: an aligned copy, same dtype */
            if (!(own[i] = al_alloc(t->nbytes ? t->nbytes : 1))) {
                rc = al_errf(err, "out of memory for tensor '%s'", p->name);
                break;
            }
            memcpy(own[i], bytes, t->nbytes);
            m->data[i] = own[i];
            m->copied_bytes += t->nbytes;
        }
    }
    for (int k = 0; k < ck->n_entries && !rc; k++) {
        const char *name = ck->entries[k].name;
        int known = ignorable(m, name);
        for (int i = 0; i < m->n_params && !known; i++) known = strcmp(name, m->params[i].name) == 0;
        if (!known)
            rc = al_errf(err, "%s/%s: unexpected tensor '%s' (not part of this config)", dir,
                         al_ckpt_file_name(ck, &ck->entries[k]), name);
    }
    /* the copies of misaligned tensors live as long as the model (freed by al_model_unmap) */
    if (!rc) {
        size_t n_own = 0;
        for (int i = 0; i < m->n_params; i++) n_own += own[i] != NULL;
        if (n_own == 0) {
            free(own);
            own = NULL;
        }
    }
    m->owned = own;
    if (rc) {
        al_model_free(m);
        return -1;
    }
    if (al_model_set_views(m, m->data, m->dts, err)) {
        al_model_free(m);
        return -1;
    }
    return 0;
}

void al_model_unmap(al_model *m) {
    if (!m->mapped) return;
    if (m->owned)
        for (int i = 0; i < m->n_params; i++) al_free(m->owned[i]);
    free(m->owned);
    if (m->ckpt) al_ckpt_close(m->ckpt);
    free(m->ckpt);
    free(m->data);
    free(m->dts);
    m->owned = NULL;
    m->ckpt = NULL;
    m->data = NULL;
    m->dts = NULL;
    m->mapped = 0;
}

size_t al_model_weight_bytes(const al_model *m) {
    size_t n = 0;
    for (int i = 0; i < m->n_params; i++) {
        const al_param *p = &m->params[i];
        n += p->numel * al_dtype_size(m->dts ? m->dts[i] : AL_DT_F32);
    }
    return n;
}
