/*
 * config.c (core): the names of the config's enumerations and the few
 * questions about a config that need no design (see config.h).
 */
#include "config.h"

#include <string.h>

static const char *const score_names[AL_SCORE_COUNT] = {"softmax", "poly", "relu", "sigmoid"};
static const char *const task_names[AL_TASK_COUNT] = {"lm", "vision"};

const char *al_score_name(al_score_kind k) { return (unsigned)k < AL_SCORE_COUNT ? score_names[k] : "?"; }
const char *al_task_name(al_task t) { return (unsigned)t < AL_TASK_COUNT ? task_names[t] : "?"; }

int al_task_from_name(const char *s, al_task *t) {
    for (int i = 0; i < AL_TASK_COUNT; i++)
        if (s && strcmp(s, task_names[i]) == 0) return *t = (al_task)i, 0;
    return -1;
}

int al_score_from_name(const char *s, al_score_kind *k) {
    for (int i = 0; i < AL_SCORE_COUNT; i++)
        if (s && strcmp(s, score_names[i]) == 0) return *k = (al_score_kind)i, 0;
    return -1;
}

int al_config_max_context(const al_config *c) {
    return c->sliding_window > 0 && c->sliding_window < c->max_position ? c->sliding_window : c->max_position;
}

int al_config_layer_moe(const al_config *c, int l) {
    return c->n_routed_experts > 0 && l >= c->first_k_dense_replace && c->moe_layer_freq > 0 &&
           l % c->moe_layer_freq == 0;
}

int al_config_ffn_max(const al_config *c) {
    int f = c->intermediate_size;
    if (c->n_routed_experts > 0) {
        const int shared = c->n_shared_experts * c->moe_intermediate_size;
        if (shared > f) f = shared;
        if (c->moe_intermediate_size > f) f = c->moe_intermediate_size;
    }
    return f;
}

int al_config_num_patches(const al_config *c) {
    if (c->task != AL_TASK_VISION || c->patch_size <= 0 || c->image_size <= 0) return 0;
    const int g = c->image_size / c->patch_size;
    return g > AL_IMAGE_SIZE_MAX ? 0 : g * g; /* runs before validation: no int overflow on any size */
}

int al_config_field_applies(const al_config_field *f, const al_config *c) {
    switch (f->when) {
    case AL_CF_ALWAYS: return 1;
    case AL_CF_LM: return c->task == AL_TASK_LM;
    case AL_CF_VISION: return c->task == AL_TASK_VISION;
    case AL_CF_POLY: return c->score == AL_SCORE_POLY;
    case AL_CF_SCORED: return c->score != AL_SCORE_SOFTMAX;
    case AL_CF_HF_MOE: return c->hf == AL_HF_DEEPSEEK_V2;
    }
    return 0;
}
