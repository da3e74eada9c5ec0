/*
 * config.c: config.json parsing, validation and writing (cJSON), and the
 * field table that drives them, the flags, comparisons and JSON views.
 *
 * Reading is strict where a wrong value would silently mis-run a model
 * (non-integer sizes, unknown attention/score names, a kv-head count that does
 * not divide the heads) and lenient where HF leaves keys optional (defaults as
 * transformers' LlamaConfig). A vision transformer (task "vision") is saved
 * under the architecture name AttnlabViTForImageClassification with the image
 * keys of HF's ViTConfig (image_size, patch_size, num_channels) plus
 * num_labels and the pixel statistics (docs/vision.md).
 *
 * What a field is called and when it is written comes from the rows of
 * AL_CONFIG_FIELDS (core/config.h) and of each design's ops->fields; what is
 * left here by hand is the Hugging Face format itself: architectures and
 * families, their defaults and refusals (parse_hf), DeepseekV2's dense-MoE
 * keys.
 */
#include "config.h"

#include <cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../io/io.h"

#define VIT_ARCH "AttnlabViTForImageClassification"
#define LLAMA_ARCH "LlamaForCausalLM"
#define DEEPSEEK_ARCH "DeepseekV2ForCausalLM"

/* The Hugging Face families attnlab reads, by architecture and model_type,
 * and what each does differently from Llama (parse_hf copies it into the
 * config, where the model and the designs read it): whether its attention
 * is Llama's (MHA/GQA/MQA by head counts; else the design whose hf_arch is
 * the architecture), q/k/v biases (Qwen2), per-head q/k norms (Qwen3),
 * RMSNorm gains 1 + w and embeddings times sqrt(hidden) (Gemma), its MLP
 * activation, and tie_word_embeddings when config.json has none (the
 * config classes' defaults). */
static const struct {
    const char *arch, *model_type;
    int llama_attention, qkv_bias, qk_norm, norm_unit_offset, embed_scale, tied_default;
    al_mlp_act act;
} hf_names[AL_HF_COUNT] = {
    /* arch                   model_type     llama bias qknorm 1+w  scale tied act */
    {"AttnlabForCausalLM",    "attnlab",     0,    0,   0,     0,   0,    0,   AL_ACT_SILU},
    {LLAMA_ARCH,              "llama",       1,    0,   0,     0,   0,    0,   AL_ACT_SILU},
    {"MistralForCausalLM",    "mistral",     1,    0,   0,     0,   0,    0,   AL_ACT_SILU},
    {"Qwen2ForCausalLM",      "qwen2",       1,    1,   0,     0,   0,    0,   AL_ACT_SILU},
    {DEEPSEEK_ARCH,           "deepseek_v2", 0,    0,   0,     0,   0,    0,   AL_ACT_SILU},
    {"Qwen3ForCausalLM",      "qwen3",       1,    0,   1,     0,   0,    0,   AL_ACT_SILU},
    {"GemmaForCausalLM",      "gemma",       1,    0,   0,     1,   1,    1,   AL_ACT_GELU_TANH},
};

/* The architecture whose designs a family's configs are: Mistral's, Qwen's
 * and Gemma's attention is Llama's. */
static const char *family_design_arch(al_hf_family f) {
    return f != AL_HF_LLAMA && hf_names[f].llama_attention ? LLAMA_ARCH : hf_names[f].arch;
}

/* ---- the field table ---- */

#define AL_CONFIG_ROW_(member, type, name, key, where, when, flags, help) \
    AL_CONFIG_FIELD(member, type, name, key, where, when, flags, help),
static const al_config_field shared_fields[] = {AL_CONFIG_FIELDS(AL_CONFIG_ROW_)};
#undef AL_CONFIG_ROW_
enum { N_SHARED = (int)(sizeof shared_fields / sizeof shared_fields[0]) };

int al_config_field_count(void) {
    int n = N_SHARED;
    for (int k = 0; k < AL_ATTN_COUNT; k++) n += al_attn_design(k)->n_fields;
    return n;
}

const al_config_field *al_config_field_at(int i, int *design) {
    if (design) *design = -1;
    if (i < 0) return NULL;
    if (i < N_SHARED) return &shared_fields[i];
    i -= N_SHARED;
    for (int k = 0; k < AL_ATTN_COUNT; k++) {
        const al_attn_ops *d = al_attn_design(k);
        if (i < d->n_fields) {
            if (design) *design = k;
            return &d->fields[i];
        }
        i -= d->n_fields;
    }
    return NULL;
}

int al_config_field_find(const char *name) {
    const int n = al_config_field_count();
    for (int i = 0; i < n; i++) {
        const char *a = al_config_field_at(i, NULL)->name, *b = name;
        while (*a && (*a == *b || (*a == '_' && *b == '-'))) a++, b++;
        if (!*a && !*b) return i;
    }
    return -1;
}

int al_config_field_flag(const al_config_field *f, char *buf, size_t cap) {
    const int cut = al_strfmt(buf, cap, "%s", f->name);
    for (char *q = buf; *q; q++)
        if (*q == '_') *q = '-';
    return cut ? -1 : 0;
}

int al_config_field_used(int i, const al_config *c) {
    int design;
    const al_config_field *f = al_config_field_at(i, &design);
    return f && (design < 0 || design == c->attention) && al_config_field_applies(f, c);
}

/* The first index of design k's fields. */
static int design_first_field(int k) {
    int i = N_SHARED;
    for (int j = 0; j < k; j++) i += al_attn_design(j)->n_fields;
    return i;
}

/* Runs the design's derive with its slice of given[] (NULL: all given). */
static void design_derive(al_config *c, const unsigned char *given) {
    const al_attn_ops *d = al_attn_ops_for(c);
    unsigned char all[AL_ATTN_MAX_FIELDS];
    memset(all, 1, sizeof all);
    if (d && d->derive) d->derive(c, given ? given + design_first_field(c->attention) : all);
}

/* A field's value as a double (enums as their index), for comparisons and messages. */
static double field_num(const al_config_field *f, const al_config *c) {
    const void *p = al_config_field_cptr(f, c);
    switch (f->type) {
    case AL_CF_FLOAT: return *(const float *)p;
    case AL_CF_DOUBLE:
    case AL_CF_POLY_SCALE: return *(const double *)p;
    case AL_CF_SCORE: return (double)*(const al_score_kind *)p;
    case AL_CF_TASK: return (double)*(const al_task *)p;
    default: return *(const int *)p;
    }
}

/* Field f of c as a JSON value; `view`: poly_scale resolved. NULL when out of memory. */
static cJSON *field_json(const al_config_field *f, const al_config *c, int view) {
    switch (f->type) {
    case AL_CF_DESIGN: return cJSON_CreateString(al_attn_name(c->attention));
    case AL_CF_SCORE: return cJSON_CreateString(al_score_name(*(const al_score_kind *)al_config_field_cptr(f, c)));
    case AL_CF_TASK: return cJSON_CreateString(al_task_name(*(const al_task *)al_config_field_cptr(f, c)));
    case AL_CF_BOOL: return cJSON_CreateBool(*(const int *)al_config_field_cptr(f, c));
    case AL_CF_POLY_SCALE:
        if (view) return cJSON_CreateNumber(c->poly_scale_auto ? 1.0 / sqrt((double)c->score_n) : c->poly_scale);
        return c->poly_scale_auto ? cJSON_CreateString("auto") : cJSON_CreateNumber(c->poly_scale);
    case AL_CF_INT:
        if ((f->flags & AL_CF_NULL_IF_ZERO) && *(const int *)al_config_field_cptr(f, c) == 0 && !view)
            return cJSON_CreateNull();
        return cJSON_CreateNumber(field_num(f, c));
    default: return cJSON_CreateNumber(field_num(f, c));
    }
}

/* Reads field f from JSON value v into c. The enumerations name their
 * choices in the message. Returns 0 or -1. */
static int field_from_json(const al_config_field *f, const cJSON *v, al_config *c, al_err *err) {
    void *p = al_config_field_ptr(f, c);
    char names[128];
    switch (f->type) {
    case AL_CF_INT:
        if (cJSON_IsNull(v) && (f->flags & AL_CF_NULL_IF_ZERO)) return *(int *)p = 0, 0;
        if (!al_json_whole_in(v, -2147483647.0, 2147483647.0))
            return al_errf(err, "invalid config: %s must be an integer", f->key);
        *(int *)p = (int)v->valuedouble;
        return 0;
    case AL_CF_FLOAT:
    case AL_CF_DOUBLE:
        if (!cJSON_IsNumber(v)) return al_errf(err, "invalid config: %s must be a number", f->key);
        if (f->type == AL_CF_FLOAT) *(float *)p = (float)v->valuedouble;
        else *(double *)p = v->valuedouble;
        return 0;
    case AL_CF_BOOL: *(int *)p = cJSON_IsTrue(v); return 0;
    case AL_CF_POLY_SCALE:
        if (cJSON_IsNumber(v)) {
            c->poly_scale = v->valuedouble;
            c->poly_scale_auto = 0;
        } else if (!cJSON_IsNull(v) && !(cJSON_IsString(v) && strcmp(v->valuestring, "auto") == 0)) {
            return al_errf(err, "invalid config: poly_scale must be a positive number or \"auto\"");
        }
        return 0;
    case AL_CF_DESIGN:
        if (!cJSON_IsString(v) || al_attn_from_name(v->valuestring, &c->attention))
            return al_errf(err, "invalid config: unknown attention '%s' (expected %s)",
                           cJSON_IsString(v) ? v->valuestring : "?", al_attn_names(names, sizeof names));
        return 0;
    case AL_CF_SCORE:
        if (!cJSON_IsString(v) || al_score_from_name(v->valuestring, &c->score))
            return al_errf(err, "invalid config: unknown score '%s' (expected softmax, poly, relu or sigmoid)",
                           cJSON_IsString(v) ? v->valuestring : "?");
        return 0;
    case AL_CF_TASK:
        if (!cJSON_IsString(v) || al_task_from_name(v->valuestring, &c->task))
            return al_errf(err, "invalid config: unknown task '%s' (expected lm or vision)",
                           cJSON_IsString(v) ? v->valuestring : "?");
        return 0;
    }
    return al_errf(err, "invalid config: %s has an unknown type", f->key);
}

int al_config_view(const al_config *c, cJSON *obj) {
    const int n = al_config_field_count();
    for (int i = 0; i < n; i++) {
        if (!al_config_field_used(i, c)) continue;
        const al_config_field *f = al_config_field_at(i, NULL);
        cJSON *v = field_json(f, c, 1);
        if (!al_json_add(obj, f->name, v)) return -1;
    }
    return 0;
}

/* Relative equality of two settings that went through JSON. */
static int same_d(double a, double b) { return fabs(a - b) <= 1e-9 * fmax(1.0, fabs(b)); }

/* Whether field f holds the same value in a and b (numbers within 1e-9 relative). */
static int field_same(const al_config_field *f, const al_config *a, const al_config *b) {
    if (f->type == AL_CF_POLY_SCALE)
        return a->poly_scale_auto == b->poly_scale_auto && (a->poly_scale_auto || same_d(a->poly_scale, b->poly_scale));
    if (f->type == AL_CF_DOUBLE || f->type == AL_CF_FLOAT) return same_d(field_num(f, a), field_num(f, b));
    return field_num(f, a) == field_num(f, b);
}

/* Field f of c as config.json writes it, without quotes ("mha", "4", "auto"), into buf[cap]. */
static void field_text(const al_config_field *f, const al_config *c, char *buf, size_t cap) {
    cJSON *j = field_json(f, c, 0);
    char *printed = j && !cJSON_IsString(j) ? cJSON_PrintUnformatted(j) : NULL;
    al_strfmt(buf, cap, "%s", cJSON_IsString(j) ? j->valuestring : printed ? printed : "?");
    free(printed);
    cJSON_Delete(j);
}

int al_config_contradicts(const al_config *values, const unsigned char *given, const al_config *base, char *why,
                          size_t cap) {
    const int n = al_config_field_count();
    for (int i = 0; i < n; i++) {
        const al_config_field *f = al_config_field_at(i, NULL);
        char flag[64], mine[64], theirs[64];
        if (!given[i]) continue;
        al_config_field_flag(f, flag, sizeof flag);
        field_text(f, values, mine, sizeof mine);
        if (!al_config_field_used(i, base)) {
            al_strfmt(why, cap, "--%s %s does not apply to its model (attention %s, score %s)", flag, mine,
                      al_attn_name(base->attention), al_score_name(base->score));
            return 1;
        }
        if (field_same(f, values, base)) continue;
        field_text(f, base, theirs, sizeof theirs);
        al_strfmt(why, cap, "--%s %s, but its config has %s", flag, mine, theirs);
        return 1;
    }
    return 0;
}

int al_config_same(const al_config *a, const al_config *b, char *why, size_t cap) {
    const int n = al_config_field_count();
    /* the task, design and score first: they decide which other fields apply */
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < n; i++) {
            const al_config_field *f = al_config_field_at(i, NULL);
            const int decides = f->type == AL_CF_TASK || f->type == AL_CF_DESIGN || f->type == AL_CF_SCORE;
            if (decides != (pass == 0) || (f->flags & AL_CF_MEASURED) || !al_config_field_used(i, b)) continue;
            if (!field_same(f, a, b)) {
                if (f->type == AL_CF_POLY_SCALE) al_strfmt(why, cap, "its poly scale differs");
                else if (f->type == AL_CF_DESIGN)
                    al_strfmt(why, cap, "its attention differs (%s, planned %s)", al_attn_name(a->attention),
                              al_attn_name(b->attention));
                else al_strfmt(why, cap, "its %s differs (%g, planned %g)", f->name, field_num(f, a), field_num(f, b));
                return 0;
            }
        }
    return 1;
}

int al_config_resolve(al_config *c, const unsigned char *given, al_err *err) {
    const int hd = al_config_field_find("head_dim"), kv = al_config_field_find("kv_heads"),
              ffn = al_config_field_find("ffn"), design = al_config_field_find("attention");
    if (c->num_heads <= 0) return al_errf(err, "--heads must be positive, got %d", c->num_heads);
    if (c->hidden_size <= 0) return al_errf(err, "--hidden must be positive, got %d", c->hidden_size);
    if (!given[hd]) {
        if (c->hidden_size % c->num_heads)
            return al_errf(err, "hidden size %d is not divisible by %d heads and --head-dim is not given",
                           c->hidden_size, c->num_heads);
        c->head_dim = c->hidden_size / c->num_heads;
    }
    if (!given[kv]) c->num_kv_heads = c->num_heads;
    if (!given[ffn]) c->intermediate_size = ((c->hidden_size * 8 / 3) + 15) / 16 * 16;
    if (!given[design]) { /* the first design whose head counts say so (MHA, GQA, MQA) */
        c->attention = AL_ATTN_COUNT;
        for (int k = 0; k < AL_ATTN_COUNT && c->attention == AL_ATTN_COUNT; k++) {
            const al_attn_ops *d = al_attn_design(k);
            if (d->hf_matches && !strcmp(d->hf_arch, LLAMA_ARCH) && d->hf_matches(c)) c->attention = k;
        }
        if (c->attention == AL_ATTN_COUNT) c->attention = AL_ATTN_MHA;
    }
    const int n = al_config_field_count();
    for (int i = 0; i < n; i++) {
        int owner;
        const al_config_field *f = al_config_field_at(i, &owner);
        if (!given[i]) continue;
        char flag[64];
        al_config_field_flag(f, flag, sizeof flag);
        if (owner >= 0 && owner != c->attention)
            return al_errf(err, "--%s applies only to --attention %s", flag, al_attn_name(owner));
        if (f->when == AL_CF_POLY && c->score != AL_SCORE_POLY)
            return al_errf(err, "--%s applies only to --score poly", flag);
    }
    if (c->poly_power < 1) return al_errf(err, "--poly-power must be an integer >= 1, got %d", c->poly_power);
    design_derive(c, given);
    /* relu, sigmoid and poly auto keep the training length as N, also when evaluated at another */
    c->score_n = c->max_position;
    return al_config_validate(c, err);
}

const char *al_hf_family_name(al_hf_family f) { return (unsigned)f < AL_HF_COUNT ? hf_names[f].model_type : "?"; }






void al_config_default(al_config *c) {
    memset(c, 0, sizeof *c);
    c->vocab_size = 256;
    c->hidden_size = 256;
    c->intermediate_size = 0; /* 0: derived at validation time by callers */
    c->num_layers = 4;
    c->num_heads = 8;
    c->num_kv_heads = 8;
    c->head_dim = 32;
    c->max_position = 256;
    c->rms_norm_eps = 1e-5f;
    c->rope_theta = 10000.0;
    c->tie_word_embeddings = 0;
    c->attention = AL_ATTN_MHA;
    c->score = AL_SCORE_SOFTMAX;
    c->poly_power = 3;
    c->poly_scale = 1.0;
    c->poly_scale_auto = 1;
    c->score_n = c->max_position;
}


void al_config_vision_derive(al_config *c, int score_n_too) {
    if (c->task != AL_TASK_VISION) return;
    const int P = al_config_num_patches(c);
    c->max_position = 1 + P;
    c->bidirectional = 1;
    c->vocab_size = 0;
    c->tie_word_embeddings = 0;
    if (score_n_too) c->score_n = P > 0 ? P : 1;
}

void al_config_vision_fmnist(al_config *c, int patch) {
    c->task = AL_TASK_VISION;
    c->image_size = 28;
    c->patch_size = patch;
    c->num_channels = 1;
    c->num_labels = 10;
    c->image_mean = 0.0;
    c->image_std = 1.0;
    al_config_vision_derive(c, 1);
}

void al_config_vision_default(al_config *c) {
    al_config_default(c);
    al_config_vision_fmnist(c, 2);
}

/* The vision fields: divisible patches, a sane number of channels and
 * classes, finite pixel statistics, and the derived fields in agreement. */
static int validate_vision(const al_config *c, al_err *err) {
    if (c->image_size <= 0 || c->patch_size <= 0 || c->num_channels <= 0)
        return al_errf(err, "invalid config: image_size, patch_size and num_channels must be positive");
    if (c->image_size > AL_IMAGE_SIZE_MAX || c->num_channels > 64)
        return al_errf(err, "invalid config: images beyond %d pixels or 64 channels are not supported",
                       AL_IMAGE_SIZE_MAX);
    if (c->image_size % c->patch_size)
        return al_errf(err, "invalid config: patch_size %d does not divide image_size %d", c->patch_size, c->image_size);
    if (c->num_labels < 2 || c->num_labels > 65536)
        return al_errf(err, "invalid config: num_labels must be in 2..65536, got %d", c->num_labels);
    if (!isfinite(c->image_mean) || !(c->image_std > 0) || !isfinite(c->image_std))
        return al_errf(err, "invalid config: image_std must be positive and image_mean finite");
    if (!c->bidirectional) return al_errf(err, "invalid config: a vision transformer attends bidirectionally");
    if (c->max_position != 1 + al_config_num_patches(c))
        return al_errf(err, "invalid config: max_position %d is not 1 + %d patches", c->max_position,
                       al_config_num_patches(c));
    return 0;
}

int al_config_validate(const al_config *c, al_err *err) {
    const struct { const char *name; int v; } pos[] = {
        {"hidden_size", c->hidden_size},     {"intermediate_size", c->intermediate_size},
        {"num_hidden_layers", c->num_layers}, {"num_attention_heads", c->num_heads},
        {"num_key_value_heads", c->num_kv_heads}, {"max_position_embeddings", c->max_position},
    };
    for (size_t i = 0; i < sizeof pos / sizeof pos[0]; i++)
        if (pos[i].v <= 0) return al_errf(err, "invalid config: %s must be positive, got %d", pos[i].name, pos[i].v);
    if ((unsigned)c->task >= AL_TASK_COUNT) return al_errf(err, "invalid config: unknown task");
    if (c->task == AL_TASK_VISION) {
        if (validate_vision(c, err)) return -1;
    } else {
        if (c->hf == AL_HF_NONE && !c->tokenizer_vocab && c->vocab_size != 256)
            return al_errf(err, "invalid config: vocab_size must be 256 (bytes), got %d", c->vocab_size);
        if (c->vocab_size < 1 || c->vocab_size > (1 << 24))
            return al_errf(err, "invalid config: vocab_size must be in 1..%d, got %d", 1 << 24, c->vocab_size);
        if (c->bidirectional)
            return al_errf(err, "invalid config: a language model attends causally (bidirectional is for task vision)");
    }
    if ((unsigned)c->hf >= AL_HF_COUNT || (c->hf != AL_HF_NONE && c->task != AL_TASK_LM))
        return al_errf(err, "invalid config: Hugging Face families are language models");
    if (c->sliding_window < 0) return al_errf(err, "invalid config: sliding_window must be positive");
    const al_attn_ops *ops = al_attn_ops_for(c);
    if (!ops) return al_errf(err, "invalid config: unknown attention design %d", c->attention);
    if (c->qkv_bias && !ops->qkv_bias)
        return al_errf(err, "invalid config: q/k/v biases are not implemented for attention '%s'", ops->name);
    if (c->rope_scaling.type == AL_ROPE_LLAMA3) {
        const al_rope_scaling *r = &c->rope_scaling;
        if (!(r->factor >= 1.0) || !isfinite(r->factor))
            return al_errf(err, "invalid config: rope_scaling factor must be >= 1, got %g", r->factor);
        if (!(r->low_freq_factor > 0) || !(r->high_freq_factor > r->low_freq_factor) || !isfinite(r->high_freq_factor))
            return al_errf(err, "invalid config: rope_scaling needs 0 < low_freq_factor < high_freq_factor, got %g and %g",
                           r->low_freq_factor, r->high_freq_factor);
        if (r->original_max_position <= 0)
            return al_errf(err, "invalid config: rope_scaling original_max_position_embeddings must be positive");
    } else if (c->rope_scaling.type == AL_ROPE_YARN) {
        const al_rope_scaling *r = &c->rope_scaling;
        if (!(r->factor >= 1.0) || !isfinite(r->factor))
            return al_errf(err, "invalid config: rope_scaling factor must be >= 1, got %g", r->factor);
        if (r->original_max_position <= 0 || !(r->beta_fast > 0) || !(r->beta_slow > 0) || !isfinite(r->beta_fast) ||
            !isfinite(r->beta_slow) || !isfinite(r->mscale) || !isfinite(r->mscale_all_dim))
            return al_errf(err, "invalid config: yarn rope_scaling needs positive original_max_position_embeddings, "
                                "beta_fast and beta_slow and finite mscales");
    } else if (c->rope_scaling.type != AL_ROPE_DEFAULT) {
        return al_errf(err, "invalid config: unknown rope scaling");
    }
    if (!(c->rms_norm_eps > 0) || !isfinite(c->rms_norm_eps))
        return al_errf(err, "invalid config: rms_norm_eps must be positive");
    if (!(c->rope_theta > 1) || !isfinite(c->rope_theta))
        return al_errf(err, "invalid config: rope_theta must be > 1");
    /* guard against sizes whose products overflow the arenas' size_t math */
    if (c->hidden_size > 65536 || c->intermediate_size > 262144 || c->num_layers > 1024 || c->num_heads > 1024 ||
        c->head_dim > 4096 || c->max_position > (1 << 20))
        return al_errf(err, "invalid config: sizes are beyond what attnlab supports");
    if (ops->validate(c, err)) return -1;
    if ((unsigned)c->score >= AL_SCORE_COUNT) return al_errf(err, "invalid config: unknown score function");
    if (c->poly_power < 1) return al_errf(err, "invalid config: poly_power must be an integer >= 1, got %d", c->poly_power);
    if (!c->poly_scale_auto && !(c->poly_scale > 0 && isfinite(c->poly_scale)))
        return al_errf(err, "invalid config: poly_scale must be a positive number or \"auto\", got %g", c->poly_scale);
    if (c->score_n < 1) return al_errf(err, "invalid config: score_n must be positive, got %d", c->score_n);
    return 0;
}

/* Reads an integer-valued JSON number; returns 1 if present, 0 if absent, -1 if malformed. */
static int get_int(const cJSON *o, const char *key, int *out, al_err *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!al_json_whole_in(v, -2147483647.0, 2147483647.0))
        return al_errf(err, "invalid config: %s must be an integer", key);
    *out = (int)v->valuedouble;
    return 1;
}

static int get_num(const cJSON *o, const char *key, double *out, al_err *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsNumber(v)) return al_errf(err, "invalid config: %s must be a number", key);
    *out = v->valuedouble;
    return 1;
}

/* Reads the optional numbers keys[i] of rs into dst[i] (left as they are
 * when absent); 0, or -1 for a malformed one. */
static int get_nums(const cJSON *rs, const char *const *keys, double *const *dst, int n, al_err *err) {
    for (int i = 0; i < n; i++)
        if (get_num(rs, keys[i], dst[i], err) < 0) return al_err_prefix(err, "rope_scaling");
    return 0;
}

/* "rope_scaling": null, absent, {"rope_type" (or "type"): "default"},
 * Llama 3's {"rope_type": "llama3", "factor", "low_freq_factor",
 * "high_freq_factor", "original_max_position_embeddings"}, or (DeepseekV2)
 * YaRN's {"type": "yarn", "factor", and optionally
 * "original_max_position_embeddings" (4096), "beta_fast" (32), "beta_slow"
 * (1), "mscale" (1), "mscale_all_dim" (0)}: the defaults of
 * DeepseekV2YarnRotaryEmbedding. Any other type (linear, dynamic, longrope,
 * yarn for another family, ...) is refused by name. */
static int parse_rope_scaling(al_config *c, const cJSON *root, al_err *err) {
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(root, "rope_scaling");
    memset(&c->rope_scaling, 0, sizeof c->rope_scaling);
    if (!rs || cJSON_IsNull(rs)) return 0;
    if (!cJSON_IsObject(rs)) return al_errf(err, "invalid config: rope_scaling must be an object or null");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(rs, "rope_type");
    if (!t) t = cJSON_GetObjectItemCaseSensitive(rs, "type");
    if (!cJSON_IsString(t)) return al_errf(err, "invalid config: rope_scaling has no rope_type");
    if (strcmp(t->valuestring, "default") == 0) return 0;
    al_rope_scaling *r = &c->rope_scaling;
    const int yarn = strcmp(t->valuestring, "yarn") == 0 && c->hf == AL_HF_DEEPSEEK_V2;
    if (strcmp(t->valuestring, "llama3") != 0 && !yarn)
        return al_errf(err, "unsupported rope_scaling type '%.40s' for %s (attnlab implements llama3 scaling, and "
                            "yarn for DeepseekV2ForCausalLM)",
                       t->valuestring, hf_names[c->hf].arch);
    if (yarn) {
        *r = (al_rope_scaling){.type = AL_ROPE_YARN, .original_max_position = 4096, .beta_fast = 32, .beta_slow = 1,
                               .mscale = 1, .mscale_all_dim = 0};
        const char *const keys[] = {"beta_fast", "beta_slow", "mscale", "mscale_all_dim"};
        double *const dst[] = {&r->beta_fast, &r->beta_slow, &r->mscale, &r->mscale_all_dim};
        if (get_nums(rs, keys, dst, 4, err)) return -1;
    } else {
        r->type = AL_ROPE_LLAMA3;
    }
    const char *need[] = {"factor", "low_freq_factor", "high_freq_factor"};
    double *dst[] = {&r->factor, &r->low_freq_factor, &r->high_freq_factor};
    for (int i = 0; i < (yarn ? 1 : 3); i++) {
        int got = get_num(rs, need[i], dst[i], err);
        if (got < 0) return al_err_prefix(err, "rope_scaling");
        if (!got) return al_errf(err, "invalid config: %s rope_scaling needs %s", t->valuestring, need[i]);
    }
    int got = get_int(rs, "original_max_position_embeddings", &r->original_max_position, err);
    if (got < 0) return al_err_prefix(err, "rope_scaling");
    if (!got && !yarn) return al_errf(err, "invalid config: llama3 rope_scaling needs original_max_position_embeddings");
    return 0;
}

/* The MLP activation of hidden_act (and Gemma's hidden_activation): silu
 * for every family but Gemma, whose GemmaMLP runs gelu_pytorch_tanh for
 * "gelu" too (transformers' fallback since the first Gemma release). */
static int parse_act(al_config *c, const cJSON *root, al_err *err) {
    const char *arch = hf_names[c->hf].arch;
    const char *keys[] = {"hidden_act", "hidden_activation"};
    c->mlp_act = hf_names[c->hf].act;
    for (int i = 0; i < 2; i++) {
        const cJSON *act = cJSON_GetObjectItemCaseSensitive(root, keys[i]);
        if (!act || cJSON_IsNull(act)) continue;
        const char *v = cJSON_IsString(act) ? act->valuestring : "?";
        const int ok = c->mlp_act == AL_ACT_SILU ? !strcmp(v, "silu")
                                                 : !strcmp(v, "gelu_pytorch_tanh") || (i == 0 && !strcmp(v, "gelu"));
        if (!ok)
            return al_errf(err, "unsupported %s '%.40s' for %s (attnlab's MLP is %s)", keys[i], v, arch,
                           c->mlp_act == AL_ACT_SILU ? "SwiGLU with silu" : "GeGLU with gelu_pytorch_tanh");
    }
    return 0;
}

/* DeepseekV2's mixture-of-experts keys beyond the field rows: topk_method
 * ("greedy", or "group_limited_greedy" with n_group / topk_group) and
 * scoring_func ("softmax"), and the shapes the routing needs. */
static int parse_moe(al_config *c, const cJSON *root, al_err *err) {
    if (c->n_routed_experts <= 0) {
        c->n_routed_experts = 0;
        return 0;
    }
    if (c->moe_layer_freq < 1)
        return al_errf(err, "invalid config: moe_layer_freq must be positive, got %d", c->moe_layer_freq);
    int any = 0; /* experts that no layer uses (every layer before first_k_dense_replace): dense */
    for (int l = 0; l < c->num_layers; l++) any |= al_config_layer_moe(c, l);
    if (!any) return 0;
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "topk_method");
    const char *method = cJSON_IsString(m) ? m->valuestring : "greedy";
    if (m && !cJSON_IsNull(m) && !cJSON_IsString(m)) return al_errf(err, "invalid config: topk_method must be a string");
    c->moe_group_limited = !strcmp(method, "group_limited_greedy");
    if (!c->moe_group_limited && strcmp(method, "greedy"))
        return al_errf(err, "unsupported topk_method '%.40s' (attnlab routes greedy and group_limited_greedy)", method);
    const cJSON *sf = cJSON_GetObjectItemCaseSensitive(root, "scoring_func");
    if (sf && !cJSON_IsNull(sf) && !(cJSON_IsString(sf) && !strcmp(sf->valuestring, "softmax")))
        return al_errf(err, "unsupported scoring_func '%.40s' (attnlab's router scores with softmax)",
                       cJSON_IsString(sf) ? sf->valuestring : "?");
    const int E = c->n_routed_experts, k = c->num_experts_per_tok;
    if (k < 1 || k > E)
        return al_errf(err, "invalid config: mixture-of-experts layers need num_experts_per_tok in 1..n_routed_experts %d, "
                            "got %d",
                       E, k);
    if (c->moe_intermediate_size <= 0 || c->n_shared_experts < 0 || c->moe_layer_freq < 1 || c->first_k_dense_replace < 0)
        return al_errf(err, "invalid config: moe_intermediate_size and moe_layer_freq must be positive, "
                            "n_shared_experts and first_k_dense_replace non-negative");
    if (E > 4096 || (long)c->n_shared_experts * c->moe_intermediate_size > 262144 || c->moe_intermediate_size > 262144)
        return al_errf(err, "invalid config: mixture-of-experts sizes are beyond what attnlab supports");
    if (!isfinite(c->routed_scaling_factor)) return al_errf(err, "invalid config: routed_scaling_factor must be finite");
    if (c->moe_group_limited &&
        (c->n_group < 1 || E % c->n_group || c->topk_group < 1 || c->topk_group > c->n_group ||
         (long)c->topk_group * (E / c->n_group) < k))
        return al_errf(err, "invalid config: group_limited_greedy needs n_group dividing n_routed_experts (%d) and "
                            "1 <= topk_group <= n_group with at least num_experts_per_tok experts in topk_group groups "
                            "(n_group %d, topk_group %d)",
                       E, c->n_group, c->topk_group);
    return 0;
}

/* What only Hugging Face configs carry: the family's behaviours (table
 * hf_names), refusals by name of what attnlab does not implement, and the
 * fields it does (docs/hf-models.md). */
static int parse_hf(al_config *c, const cJSON *root, al_err *err) {
    const char *arch = hf_names[c->hf].arch;
    if (parse_act(c, root, err)) return -1;
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "mlp_bias")))
        return al_errf(err, "unsupported mlp_bias true (attnlab's MLP has no biases)");
    /* Qwen2's q/k/v biases are part of the architecture, not a config key */
    if (!hf_names[c->hf].qkv_bias && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "attention_bias")))
        return al_errf(err, "unsupported attention_bias true for %s (attnlab reads the q/k/v biases of Qwen2 only)", arch);
    c->qkv_bias = hf_names[c->hf].qkv_bias;
    c->qk_norm = hf_names[c->hf].qk_norm;
    c->norm_unit_offset = hf_names[c->hf].norm_unit_offset;
    c->embed_scale = hf_names[c->hf].embed_scale;
    if (parse_rope_scaling(c, root, err)) return -1;
    if ((c->hf == AL_HF_QWEN2 || c->hf == AL_HF_QWEN3) &&
        cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "use_sliding_window")))
        return al_errf(err, "unsupported use_sliding_window true for %s (attnlab has no sliding-window attention)", arch);
    if (c->hf == AL_HF_MISTRAL) {
        int sw = 0, got = get_int(root, "sliding_window", &sw, err);
        if (got < 0) return -1;
        if (got && sw <= 0) return al_errf(err, "invalid config: sliding_window must be positive or null, got %d", sw);
        /* a window as long as the positions cannot matter; a shorter one limits the contexts we run */
        c->sliding_window = got && sw < c->max_position ? sw : 0;
    }
    return c->hf == AL_HF_DEEPSEEK_V2 ? parse_moe(c, root, err) : 0;
}

/* Reads the fields of rows [from, to) that apply to c from root (top-level
 * keys) and block (the attnlab block, may be NULL); present[i] records which
 * keys were there. Returns 0 or -1. */
static int read_fields(al_config *c, int from, int to, const cJSON *root, const cJSON *block, unsigned char *present,
                       al_err *err) {
    for (int i = from; i < to; i++) {
        const al_config_field *f = al_config_field_at(i, NULL);
        if (f->where == AL_CF_UNSAVED || !al_config_field_used(i, c)) continue;
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(f->where == AL_CF_TOP ? root : block, f->key);
        if (!v || (cJSON_IsNull(v) && !(f->flags & AL_CF_NULL_IF_ZERO))) continue;
        if (field_from_json(f, v, c, err)) return -1;
        present[i] = 1;
    }
    return 0;
}

int al_config_parse(al_config *c, const char *text, char **extra_out, al_err *err) {
    if (extra_out) *extra_out = NULL;
    int oom;
    cJSON *root = al_json_parse(text, strlen(text), &oom);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return al_errf(err, oom ? "out of memory" : "invalid config: not a JSON object");
    }
    al_config_default(c);
    int rc = -1;
    unsigned char present[AL_CONFIG_MAX_FIELDS] = {0};
    const int i_task = al_config_field_find("task"),
              i_design = al_config_field_find("attention"), i_score = al_config_field_find("score");
    const cJSON *arch = cJSON_GetObjectItemCaseSensitive(root, "architectures");
    int is_vit = 0;
    al_hf_family family = AL_HF_LLAMA; /* no architectures: Llama's keys (or model_type's family) */
    if (arch) {
        const cJSON *a0 = cJSON_IsArray(arch) ? cJSON_GetArrayItem(arch, 0) : NULL;
        if (!cJSON_IsString(a0)) {
            al_errf(err, "invalid config: architectures must be a list of names");
            goto done;
        }
        is_vit = strcmp(a0->valuestring, VIT_ARCH) == 0;
        family = AL_HF_COUNT;
        for (int f = 0; f < AL_HF_COUNT; f++)
            if (strcmp(a0->valuestring, hf_names[f].arch) == 0) family = (al_hf_family)f;
        if (!is_vit && family == AL_HF_COUNT) {
            al_errf(err, "unsupported architecture '%.80s' (attnlab reads LlamaForCausalLM, MistralForCausalLM, "
                         "Qwen2ForCausalLM, Qwen3ForCausalLM, GemmaForCausalLM, DeepseekV2ForCausalLM, "
                         "AttnlabForCausalLM, " VIT_ARCH ")",
                    a0->valuestring);
            goto done;
        }
    } else {
        const cJSON *mt = cJSON_GetObjectItemCaseSensitive(root, "model_type");
        for (int f = 1; cJSON_IsString(mt) && f < AL_HF_COUNT; f++)
            if (strcmp(mt->valuestring, hf_names[f].model_type) == 0) family = (al_hf_family)f;
    }
    const cJSON *al = cJSON_GetObjectItemCaseSensitive(root, "attnlab");
    if (al && !cJSON_IsObject(al)) {
        al_errf(err, "invalid config: \"attnlab\" must be an object");
        goto done;
    }
    /* no "attnlab" block: a Hugging Face checkpoint of its family */
    if (!al && !is_vit && family != AL_HF_NONE) c->hf = family;
    if (al && family < AL_HF_COUNT && family != AL_HF_LLAMA && hf_names[family].llama_attention) {
        al_errf(err, "invalid config: an \"attnlab\" block goes with attnlab's own architectures, not %s",
                hf_names[family].arch);
        goto done;
    }
    if (al) {
        const cJSON *ver = cJSON_GetObjectItemCaseSensitive(al, "format_version");
        if (ver && (!cJSON_IsNumber(ver) || ver->valuedouble > AL_CONFIG_FORMAT_VERSION)) {
            al_errf(err, "invalid config: format_version %g is newer than this attnlab reads (%d)",
                    cJSON_IsNumber(ver) ? ver->valuedouble : -1.0, AL_CONFIG_FORMAT_VERSION);
            goto done;
        }
    }
    if (c->hf != AL_HF_NONE) { /* transformers' defaults for these families */
        c->rms_norm_eps = 1e-6f;
        c->tie_word_embeddings = hf_names[c->hf].tied_default;
        c->moe_layer_freq = 1;
        c->routed_scaling_factor = 1.0;
    }
    if (is_vit) al_config_vision_fmnist(c, 2); /* ViTConfig's keys, where absent */
    /* the shared fields: the enumerations first (they decide which others apply) */
    const al_task task_of_arch = c->task;
    if (read_fields(c, i_task, i_task + 1, root, al, present, err) ||
        read_fields(c, i_design, i_design + 1, root, al, present, err) ||
        read_fields(c, i_score, i_score + 1, root, al, present, err))
        goto done;
    if (present[i_task] && c->task != task_of_arch) {
        al_errf(err, "invalid config: task 'vision' goes with architecture " VIT_ARCH);
        goto done;
    }
    c->task = task_of_arch;
    if (read_fields(c, 0, N_SHARED, root, al, present, err)) goto done;
    const int have_hd = present[al_config_field_find("head_dim")], have_kv = present[al_config_field_find("kv_heads")];
    if (!present[al_config_field_find("heads")] || c->num_heads <= 0) {
        al_errf(err, "invalid config: num_attention_heads must be positive");
        goto done;
    }
    if (!have_kv) c->num_kv_heads = c->num_heads;
    /* the design: from the block, else the one of the architecture (by head counts for Llama's) */
    const char *design_arch = is_vit ? LLAMA_ARCH : family_design_arch(family);
    if (!present[i_design]) {
        c->attention = -1;
        for (int k = 0; k < AL_ATTN_COUNT && c->attention < 0; k++) {
            const al_attn_ops *d = al_attn_design(k);
            if (!strcmp(d->hf_arch, design_arch) && (!d->hf_matches || d->hf_matches(c))) c->attention = k;
        }
        if (c->attention < 0) {
            al_errf(err, "invalid config: %s needs \"attention\" in its attnlab block", design_arch);
            goto done;
        }
    }
    const al_attn_ops *design = al_attn_ops_for(c);
    if (!is_vit && strcmp(design->hf_arch, design_arch)) {
        /* name the design that is not Llama's: the block's, or the architecture's */
        const al_attn_ops *named = design;
        for (int k = 0; k < AL_ATTN_COUNT && !strcmp(named->hf_arch, LLAMA_ARCH); k++)
            if (!strcmp(al_attn_design(k)->hf_arch, design_arch)) named = al_attn_design(k);
        al_errf(err, "invalid config: attention '%s' goes with architecture %s", named->name, named->hf_arch);
        goto done;
    }
    const int first = design_first_field(c->attention);
    if (read_fields(c, first, first + design->n_fields, root, al, present, err)) goto done;
    /* what the design fixes (MLA: head_dim = dn + dr) unless the file says otherwise */
    const int head_dim = c->head_dim, kv_heads = c->num_kv_heads;
    if (!have_hd) c->head_dim = c->hidden_size % c->num_heads ? 0 : c->hidden_size / c->num_heads;
    design_derive(c, NULL);
    if (have_hd) c->head_dim = head_dim;
    if (have_kv) c->num_kv_heads = kv_heads;
    if (c->head_dim <= 0 && !have_hd) {
        al_errf(err, "invalid config: hidden_size %d is not divisible by num_attention_heads %d and head_dim is not given",
                c->hidden_size, c->num_heads);
        goto done;
    }
    /* absent score_n: the length the positions were set up for (the training context), for vision the patches */
    const int have_score_n = present[al_config_field_find("score_n")];
    if (!have_score_n) c->score_n = c->max_position;
    if (is_vit) al_config_vision_derive(c, !have_score_n);
    if (al && extra_out && !(*extra_out = al_json_print(al, 0, al_json_mark()))) {
        al_errf(err, "out of memory");
        goto done;
    }
    if (c->hf != AL_HF_NONE && parse_hf(c, root, err)) goto done;
    rc = al_config_validate(c, err);
done:
    if (rc && extra_out) {
        free(*extra_out);
        *extra_out = NULL;
    }
    cJSON_Delete(root);
    return rc;
}

const char *al_config_architecture(const al_config *c) {
    if (c->hf != AL_HF_NONE && (unsigned)c->hf < AL_HF_COUNT) return hf_names[c->hf].arch;
    const al_attn_ops *d = al_attn_ops_for(c);
    return c->task == AL_TASK_VISION ? VIT_ARCH : d ? d->hf_arch : "?";
}

int al_config_load(al_config *c, const char *path, char **extra_out, al_err *err) {
    char *text;
    size_t len;
    if (al_read_file(path, &text, &len, err)) return -1;
    int rc = al_config_parse(c, text, extra_out, err);
    free(text);
    if (rc) al_err_prefix(err, "%s", path);
    return rc;
}

int al_config_load_dir(al_config *c, const char *dir, char **extra_out, al_err *err) {
    char *path = al_sprintf("%s/config.json", dir);
    if (!path) return al_errf(err, "out of memory");
    int rc = al_config_load(c, path, extra_out, err);
    free(path);
    return rc;
}

/* Adds the fields of c that config.json keeps at `where` to obj. */
static int write_fields(const al_config *c, al_cf_where where, cJSON *obj) {
    const int n = al_config_field_count();
    for (int i = 0; i < n; i++) {
        const al_config_field *f = al_config_field_at(i, NULL);
        if (f->where != where || !al_config_field_used(i, c)) continue;
        /* DeepseekV2's config has no head_dim: it is qk_nope_head_dim + qk_rope_head_dim (one a file gave
         * otherwise is kept, so that the config loads back the same) */
        if (!strcmp(f->key, "head_dim") && !strcmp(al_config_architecture(c), DEEPSEEK_ARCH) &&
            c->head_dim == c->qk_nope_head_dim + c->qk_rope_head_dim)
            continue;
        cJSON *v = field_json(f, c, 0);
        if (!al_json_add(obj, f->key, v)) return -1;
    }
    return 0;
}

/* Removes every member `key` of obj: a file may repeat a key, and one copy
 * left behind would be read back instead of the value written after it. */
static void delete_key(cJSON *obj, const char *key) {
    while (cJSON_GetObjectItemCaseSensitive(obj, key)) cJSON_DeleteItemFromObjectCaseSensitive(obj, key);
}

int al_config_save(const al_config *c, const char *path, const char *extra_json, al_err *err) {
    const unsigned long mark = al_json_mark();
    cJSON *root = cJSON_CreateObject();
    cJSON *arch = cJSON_AddArrayToObject(root, "architectures");
    const char *arch_name = al_config_architecture(c);
    al_json_push(arch, cJSON_CreateString(arch_name));
    const al_attn_ops *d = al_attn_ops_for(c);
    cJSON_AddStringToObject(root, "model_type", c->task == AL_TASK_VISION ? "attnlab_vit" : d ? d->hf_model_type : "?");
    int bad = write_fields(c, AL_CF_TOP, root);
    if (!strcmp(arch_name, DEEPSEEK_ARCH)) {
        /* dense MLP in every layer, read the same by HF's native and remote DeepseekV2 code */
        cJSON_AddNullToObject(root, "n_routed_experts");
        cJSON_AddNullToObject(root, "n_shared_experts");
        cJSON_AddNumberToObject(root, "first_k_dense_replace", c->num_layers);
        cJSON_AddNumberToObject(root, "moe_layer_freq", 1);
        cJSON_AddNullToObject(root, "rope_scaling");
    }
    cJSON_AddStringToObject(root, "hidden_act", "silu");
    cJSON_AddBoolToObject(root, "attention_bias", 0);
    cJSON_AddBoolToObject(root, "mlp_bias", 0);
    cJSON_AddStringToObject(root, "torch_dtype", "float32");
    int oom = 0; /* an "attnlab" block that cannot be parsed for want of memory must not be dropped */
    cJSON *al = extra_json ? al_json_parse(extra_json, strlen(extra_json), &oom) : NULL;
    if (!al || !cJSON_IsObject(al)) {
        cJSON_Delete(al);
        al = oom ? NULL : cJSON_CreateObject();
    }
    /* the block's config keys are rewritten from c (any design's, in case c's design changed) */
    const int n = al_config_field_count();
    for (int i = 0; i < n; i++) {
        const al_config_field *f = al_config_field_at(i, NULL);
        if (f->where == AL_CF_BLOCK) delete_key(al, f->key);
    }
    delete_key(al, "format_version");
    cJSON_AddNumberToObject(al, "format_version", AL_CONFIG_FORMAT_VERSION);
    bad |= write_fields(c, AL_CF_BLOCK, al);
    al_json_add(root, "attnlab", al);
    char *text = bad || oom ? NULL : al_json_print(root, 1, mark);
    cJSON_Delete(root);
    if (!text) return al_errf(err, "%s: out of memory", path);
    size_t len = strlen(text);
    text[len] = '\n'; /* cJSON_Print leaves room: replace the NUL, write len+1 bytes */
    int rc = al_write_file_atomic(path, text, len + 1, err);
    free(text);
    return rc;
}
