/*
 * presets.c: the named configurations (documented in docs/presets.md).
 */
#include "presets.h"

#include <stdio.h>
#include <string.h>

#define TINY {.num_layers = 2, .hidden_size = 64, .num_heads = 4, .num_kv_heads = 4, .head_dim = 16}
#define SMALL {.num_layers = 4, .hidden_size = 256, .num_heads = 8, .num_kv_heads = 8, .head_dim = 32}
#define GPT2 {.num_layers = 12, .hidden_size = 768, .num_heads = 12, .num_kv_heads = 12, .head_dim = 64}

/* The study: five designs of the same depth, width and head count (4 layers,
 * hidden 256, 8 heads of 32), KV caches as the LRKV paper's smallest
 * setting, the SwiGLU width adjusted so every model has the same parameter
 * count within 1 % (docs/presets.md has the arithmetic). */
#define STUDY .num_layers = 4, .hidden_size = 256, .num_heads = 8, .head_dim = 32
#define STUDY_TRAIN                                                                                                    \
    {.context = 256, .batch = 8, .steps = 1500, .lr = 2e-3, .warmup = 100, .eval_every = 250, .save_every = 500,       \
     .eval_tokens = 65536}

static const al_preset presets[] = {
    {"tiny", "2 layers, hidden 64, 4 heads, context 64: seconds; for tests and smoke runs", NULL, TINY,
     {.context = 64, .batch = 8, .steps = 200, .lr = 3e-3, .warmup = 20, .eval_every = 50, .save_every = 100,
      .eval_tokens = 8192}},
    {"small", "4 layers, hidden 256, 8 heads, context 256 (~3.2M params): the demo model", NULL, SMALL,
     {.context = 256, .batch = 8, .steps = 1500, .lr = 2e-3, .warmup = 100, .eval_every = 250, .save_every = 500,
      .eval_tokens = 65536}},
    {"bench", "4 layers, hidden 256, 8 heads, B=8 x T=256: the training benchmark of issue 2", NULL, SMALL,
     {.context = 256, .batch = 8}},
    {"gpt2", "12 layers, hidden 768, 12 heads, B=4 x T=256: GPT-2-small-sized (benchmarks)", NULL, GPT2,
     {.context = 256, .batch = 4}},
    {"mha", "study: MHA, 8 KV heads (cache 100 %)", "mha", {STUDY, .num_kv_heads = 8, .intermediate_size = 688},
     STUDY_TRAIN},
    {"gqa", "study: GQA, 4 KV heads (cache 50 %)", "gqa", {STUDY, .num_kv_heads = 4, .intermediate_size = 768},
     STUDY_TRAIN},
    {"mqa", "study: MQA, 1 KV head (cache 12.5 %)", "mqa", {STUDY, .num_kv_heads = 1, .intermediate_size = 832},
     STUDY_TRAIN},
    {"mla", "study: MLA, d_c 48 + d_r 16 (cache 12.5 %)", "mla",
     {STUDY, .kv_lora_rank = 48, .qk_rope_head_dim = 16, .qk_nope_head_dim = 32, .v_head_dim = 32,
      .intermediate_size = 768},
     STUDY_TRAIN},
    {"lrkv", "study: LRKV, r 14 (cache 56.25 %)", "lrkv", {STUDY, .lrkv_rank = 14, .intermediate_size = 752},
     STUDY_TRAIN},
};
enum { N_PRESETS = (int)(sizeof presets / sizeof presets[0]) };

const al_preset *al_preset_find(const char *name) {
    for (int i = 0; name && i < N_PRESETS; i++)
        if (!strcmp(presets[i].name, name)) return &presets[i];
    return NULL;
}

const char *al_preset_names(char *buf, size_t cap) {
    size_t at = 0;
    buf[0] = 0;
    for (int i = 0; i < N_PRESETS && at < cap; i++) {
        if (al_strfmt(buf + at, cap - at, "%s%s", i ? ", " : "", presets[i].name)) break; /* cut: ends in "..." */
        at += strlen(buf + at);
    }
    return buf;
}

void al_preset_apply(const al_preset *p, al_config *c, unsigned char *given) {
    static const al_config zero;
    const int n = al_config_field_count(), design = al_config_field_find("attention");
    for (int i = 0; i < n; i++) {
        const al_config_field *f = al_config_field_at(i, NULL);
        if (given[i] || i == design) continue;
        size_t size = f->type == AL_CF_DOUBLE || f->type == AL_CF_POLY_SCALE ? sizeof(double)
                      : f->type == AL_CF_FLOAT                               ? sizeof(float)
                                                                             : sizeof(int);
        if (!memcmp(al_config_field_cptr(f, &p->model), al_config_field_cptr(f, &zero), size)) continue;
        memcpy(al_config_field_ptr(f, c), al_config_field_cptr(f, &p->model), size);
        given[i] = 1;
    }
    if (p->attention && !given[design] && !al_attn_from_name(p->attention, &c->attention)) given[design] = 1;
}
