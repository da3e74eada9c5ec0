/*
 * config.c: config.json parsing, validation and writing (cJSON).
 *
 * Reading is strict where a wrong value would silently mis-run a model
 * (non-integer sizes, unknown attention/score names, a kv-head count that does
 * not divide the heads) and lenient where HF leaves keys optional (defaults as
 * transformers' LlamaConfig). A vision transformer (task "vision") is saved
 * under the architecture name AttnlabViTForImageClassification with the image
 * keys of HF's ViTConfig (image_size, patch_size, num_channels) plus
 * num_labels and the pixel statistics (docs/vision.md).
 */
#include "config.h"

#include <cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../attn/attn.h"
#include "../io/io.h"

static const char *attn_names[AL_ATTN_COUNT] = {"mha", "gqa", "mqa", "mla", "lrkv"};
static const char *score_names[AL_SCORE_COUNT] = {"softmax", "poly", "relu", "sigmoid"};
static const char *task_names[AL_TASK_COUNT] = {"lm", "vision"};
#define VIT_ARCH "AttnlabViTForImageClassification"

/* The Hugging Face families attnlab reads, by architecture and model_type. */
static const struct {
    const char *arch, *model_type;
} hf_names[AL_HF_COUNT] = {
    {"AttnlabForCausalLM", "attnlab"},     {"LlamaForCausalLM", "llama"},         {"MistralForCausalLM", "mistral"},
    {"Qwen2ForCausalLM", "qwen2"},         {"DeepseekV2ForCausalLM", "deepseek_v2"},
};

const char *al_hf_family_name(al_hf_family f) { return (unsigned)f < AL_HF_COUNT ? hf_names[f].model_type : "?"; }

int al_config_max_context(const al_config *c) {
    return c->sliding_window > 0 && c->sliding_window < c->max_position ? c->sliding_window : c->max_position;
}

const char *al_attn_name(al_attn_kind k) { return (unsigned)k < AL_ATTN_COUNT ? attn_names[k] : "?"; }
const char *al_score_name(al_score_kind k) { return (unsigned)k < AL_SCORE_COUNT ? score_names[k] : "?"; }
const char *al_task_name(al_task t) { return (unsigned)t < AL_TASK_COUNT ? task_names[t] : "?"; }

int al_task_from_name(const char *s, al_task *t) {
    for (int i = 0; i < AL_TASK_COUNT; i++)
        if (s && strcmp(s, task_names[i]) == 0) return *t = (al_task)i, 0;
    return -1;
}

int al_attn_from_name(const char *s, al_attn_kind *k) {
    for (int i = 0; i < AL_ATTN_COUNT; i++)
        if (s && strcmp(s, attn_names[i]) == 0) return *k = (al_attn_kind)i, 0;
    return -1;
}

int al_score_from_name(const char *s, al_score_kind *k) {
    for (int i = 0; i < AL_SCORE_COUNT; i++)
        if (s && strcmp(s, score_names[i]) == 0) return *k = (al_score_kind)i, 0;
    return -1;
}

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

int al_config_num_patches(const al_config *c) {
    if (c->task != AL_TASK_VISION || c->patch_size <= 0) return 0;
    const int g = c->image_size / c->patch_size;
    return g * g;
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

void al_config_vision_default(al_config *c) {
    al_config_default(c);
    c->task = AL_TASK_VISION;
    c->image_size = 28;
    c->patch_size = 2;
    c->num_channels = 1;
    c->num_labels = 10;
    c->image_mean = 0.0;
    c->image_std = 1.0;
    al_config_vision_derive(c, 1);
}

/* The vision fields: divisible patches, a sane number of channels and
 * classes, finite pixel statistics, and the derived fields in agreement. */
static int validate_vision(const al_config *c, al_err *err) {
    if (c->image_size <= 0 || c->patch_size <= 0 || c->num_channels <= 0)
        return al_errf(err, "invalid config: image_size, patch_size and num_channels must be positive");
    if (c->image_size > 4096 || c->num_channels > 64)
        return al_errf(err, "invalid config: images beyond 4096 pixels or 64 channels are not supported");
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
        if (c->hf == AL_HF_NONE && c->vocab_size != 256)
            return al_errf(err, "invalid config: vocab_size must be 256 (bytes), got %d", c->vocab_size);
        if (c->vocab_size < 1 || c->vocab_size > (1 << 24))
            return al_errf(err, "invalid config: vocab_size must be in 1..%d, got %d", 1 << 24, c->vocab_size);
        if (c->bidirectional)
            return al_errf(err, "invalid config: a language model attends causally (bidirectional is for task vision)");
    }
    if ((unsigned)c->hf >= AL_HF_COUNT || (c->hf != AL_HF_NONE && c->task != AL_TASK_LM))
        return al_errf(err, "invalid config: Hugging Face families are language models");
    if (c->sliding_window < 0) return al_errf(err, "invalid config: sliding_window must be positive");
    if (c->qkv_bias && c->attention != AL_ATTN_MHA && c->attention != AL_ATTN_GQA && c->attention != AL_ATTN_MQA)
        return al_errf(err, "invalid config: q/k/v biases need attention mha, gqa or mqa");
    if (c->rope_scaling.type == AL_ROPE_LLAMA3) {
        const al_rope_scaling *r = &c->rope_scaling;
        if (!(r->factor >= 1.0) || !isfinite(r->factor))
            return al_errf(err, "invalid config: rope_scaling factor must be >= 1, got %g", r->factor);
        if (!(r->low_freq_factor > 0) || !(r->high_freq_factor > r->low_freq_factor) || !isfinite(r->high_freq_factor))
            return al_errf(err, "invalid config: rope_scaling needs 0 < low_freq_factor < high_freq_factor, got %g and %g",
                           r->low_freq_factor, r->high_freq_factor);
        if (r->original_max_position <= 0)
            return al_errf(err, "invalid config: rope_scaling original_max_position_embeddings must be positive");
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
    const al_attn_ops *ops = al_attn_ops_for(c);
    if (!ops) return al_errf(err, "invalid config: attention '%s' is not available in this build", al_attn_name(c->attention));
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
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || fabs(v->valuedouble) > 2147483647.0)
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

/* "rope_scaling": null, absent, {"rope_type" (or "type"): "default"}, or
 * Llama 3's {"rope_type": "llama3", "factor", "low_freq_factor",
 * "high_freq_factor", "original_max_position_embeddings"}; any other type
 * (linear, dynamic, yarn, longrope, ...) is refused by name. */
static int parse_rope_scaling(al_config *c, const cJSON *root, al_err *err) {
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(root, "rope_scaling");
    memset(&c->rope_scaling, 0, sizeof c->rope_scaling);
    if (!rs || cJSON_IsNull(rs)) return 0;
    if (!cJSON_IsObject(rs)) return al_errf(err, "invalid config: rope_scaling must be an object or null");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(rs, "rope_type");
    if (!t) t = cJSON_GetObjectItemCaseSensitive(rs, "type");
    if (!cJSON_IsString(t)) return al_errf(err, "invalid config: rope_scaling has no rope_type");
    if (strcmp(t->valuestring, "default") == 0) return 0;
    if (strcmp(t->valuestring, "llama3") != 0)
        return al_errf(err, "unsupported rope_scaling type '%.40s' (attnlab implements llama3 scaling only)",
                       t->valuestring);
    al_rope_scaling *r = &c->rope_scaling;
    r->type = AL_ROPE_LLAMA3;
    const char *need[] = {"factor", "low_freq_factor", "high_freq_factor"};
    double *dst[] = {&r->factor, &r->low_freq_factor, &r->high_freq_factor};
    for (int i = 0; i < 3; i++) {
        int got = get_num(rs, need[i], dst[i], err);
        if (got < 0) return al_err_prefix(err, "rope_scaling");
        if (!got) return al_errf(err, "invalid config: llama3 rope_scaling needs %s", need[i]);
    }
    int got = get_int(rs, "original_max_position_embeddings", &r->original_max_position, err);
    if (got < 0) return al_err_prefix(err, "rope_scaling");
    if (!got) return al_errf(err, "invalid config: llama3 rope_scaling needs original_max_position_embeddings");
    return 0;
}

/* What only Hugging Face configs carry: refusals by name of what attnlab
 * does not implement, and the fields it does (docs/hf-models.md). */
static int parse_hf(al_config *c, const cJSON *root, al_err *err) {
    const char *arch = hf_names[c->hf].arch;
    const cJSON *act = cJSON_GetObjectItemCaseSensitive(root, "hidden_act");
    if (act && !cJSON_IsNull(act) && (!cJSON_IsString(act) || strcmp(act->valuestring, "silu") != 0))
        return al_errf(err, "unsupported hidden_act '%.40s' (attnlab's MLP is SwiGLU with silu)",
                       cJSON_IsString(act) ? act->valuestring : "?");
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "mlp_bias")))
        return al_errf(err, "unsupported mlp_bias true (attnlab's MLP has no biases)");
    /* Qwen2's q/k/v biases are part of the architecture, not a config key */
    if (c->hf != AL_HF_QWEN2 && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "attention_bias")))
        return al_errf(err, "unsupported attention_bias true for %s (attnlab reads the q/k/v biases of Qwen2 only)", arch);
    c->qkv_bias = c->hf == AL_HF_QWEN2;
    if (parse_rope_scaling(c, root, err)) return -1;
    if (c->hf == AL_HF_QWEN2 && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "use_sliding_window")))
        return al_errf(err, "unsupported use_sliding_window true for %s (attnlab has no sliding-window attention)", arch);
    if (c->hf == AL_HF_MISTRAL) {
        int sw = 0, got = get_int(root, "sliding_window", &sw, err);
        if (got < 0) return -1;
        if (got && sw <= 0) return al_errf(err, "invalid config: sliding_window must be positive or null, got %d", sw);
        /* a window as long as the positions cannot matter; a shorter one limits the contexts we run */
        c->sliding_window = got && sw < c->max_position ? sw : 0;
    }
    if (c->hf == AL_HF_DEEPSEEK_V2) {
        /* HF DeepseekV2 layer l is MoE when n_routed_experts is set, l >=
         * first_k_dense_replace and l % moe_layer_freq == 0 */
        int experts = 0, first_dense = 0, freq = 1;
        if (get_int(root, "n_routed_experts", &experts, err) < 0 ||
            get_int(root, "first_k_dense_replace", &first_dense, err) < 0 ||
            get_int(root, "moe_layer_freq", &freq, err) < 0)
            return -1;
        if (freq < 1) return al_errf(err, "invalid config: moe_layer_freq must be positive, got %d", freq);
        for (int l = first_dense > 0 ? first_dense : 0; experts > 0 && l < c->num_layers; l++)
            if (l % freq == 0)
                return al_errf(err,
                               "unsupported mixture-of-experts layers (n_routed_experts %d from layer %d, "
                               "first_k_dense_replace %d): attnlab runs DeepseekV2 with dense MLPs only",
                               experts, l, first_dense);
    }
    return 0;
}

int al_config_parse(al_config *c, const char *text, char **extra_out, al_err *err) {
    if (extra_out) *extra_out = NULL;
    cJSON *root = cJSON_Parse(text);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return al_errf(err, "invalid config: not a JSON object");
    }
    al_config_default(c);
    int rc = -1, have_heads = 0, have_hd = 0, have_kv = 0, tmp;
    double num = 0;
    const cJSON *arch = cJSON_GetObjectItemCaseSensitive(root, "architectures");
    int is_mla = 0, is_attnlab = 0, is_vit = 0, have_score_n = 0;
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
                         "Qwen2ForCausalLM, DeepseekV2ForCausalLM (dense), AttnlabForCausalLM, " VIT_ARCH ")",
                    a0->valuestring);
            goto done;
        }
    } else {
        const cJSON *mt = cJSON_GetObjectItemCaseSensitive(root, "model_type");
        for (int f = 1; cJSON_IsString(mt) && f < AL_HF_COUNT; f++)
            if (strcmp(mt->valuestring, hf_names[f].model_type) == 0) family = (al_hf_family)f;
    }
    is_attnlab = family == AL_HF_NONE;
    is_mla = family == AL_HF_DEEPSEEK_V2;
    const cJSON *al = cJSON_GetObjectItemCaseSensitive(root, "attnlab");
    /* no "attnlab" block: a Hugging Face checkpoint of its family */
    if (!al && !is_vit && !is_attnlab) c->hf = family;
    if (al && (family == AL_HF_MISTRAL || family == AL_HF_QWEN2)) {
        al_errf(err, "invalid config: an \"attnlab\" block goes with attnlab's own architectures, not %s",
                hf_names[family].arch);
        goto done;
    }
    if (c->hf != AL_HF_NONE) c->rms_norm_eps = 1e-6f; /* transformers' default for these families */
    /* MLA's shape keys: with DeepseekV2's architecture, or a ViT whose block says mla */
    const cJSON *al_attn = cJSON_IsObject(al) ? cJSON_GetObjectItemCaseSensitive(al, "attention") : NULL;
    const int mla_keys = is_mla || (is_vit && cJSON_IsString(al_attn) && strcmp(al_attn->valuestring, "mla") == 0);
    if (is_vit) {
        c->task = AL_TASK_VISION;
        c->image_size = 28;
        c->patch_size = 2;
        c->num_channels = 1;
        c->num_labels = 10;
        c->image_std = 1.0;
        if (get_int(root, "image_size", &c->image_size, err) < 0 || get_int(root, "patch_size", &c->patch_size, err) < 0 ||
            get_int(root, "num_channels", &c->num_channels, err) < 0 ||
            get_int(root, "num_labels", &c->num_labels, err) < 0 ||
            get_num(root, "image_mean", &c->image_mean, err) < 0 || get_num(root, "image_std", &c->image_std, err) < 0)
            goto done;
    }
    if (!is_vit && get_int(root, "vocab_size", &c->vocab_size, err) < 0) goto done;
    if (get_int(root, "hidden_size", &c->hidden_size, err) < 0) goto done;
    if (get_int(root, "intermediate_size", &c->intermediate_size, err) < 0) goto done;
    if (get_int(root, "num_hidden_layers", &c->num_layers, err) < 0) goto done;
    if ((have_heads = get_int(root, "num_attention_heads", &c->num_heads, err)) < 0) goto done;
    if ((have_kv = get_int(root, "num_key_value_heads", &tmp, err)) < 0) goto done;
    if ((have_hd = get_int(root, "head_dim", &c->head_dim, err)) < 0) goto done;
    if (!is_vit && get_int(root, "max_position_embeddings", &c->max_position, err) < 0) goto done;
    if ((tmp = get_num(root, "rms_norm_eps", &num, err)) < 0) goto done;
    if (tmp) c->rms_norm_eps = (float)num;
    if ((tmp = get_num(root, "rope_theta", &num, err)) < 0) goto done;
    if (tmp) c->rope_theta = num;
    const cJSON *tie = cJSON_GetObjectItemCaseSensitive(root, "tie_word_embeddings");
    c->tie_word_embeddings = !is_vit && cJSON_IsTrue(tie);
    if (!have_heads || c->num_heads <= 0) {
        al_errf(err, "invalid config: num_attention_heads must be positive");
        goto done;
    }
    if (have_kv) {
        cJSON *kv = cJSON_GetObjectItemCaseSensitive(root, "num_key_value_heads");
        c->num_kv_heads = (int)kv->valuedouble;
    } else {
        c->num_kv_heads = c->num_heads;
    }
    if (mla_keys) {
        if (get_int(root, "kv_lora_rank", &c->kv_lora_rank, err) < 0 ||
            get_int(root, "q_lora_rank", &c->q_lora_rank, err) < 0 ||
            get_int(root, "qk_nope_head_dim", &c->qk_nope_head_dim, err) < 0 ||
            get_int(root, "qk_rope_head_dim", &c->qk_rope_head_dim, err) < 0 ||
            get_int(root, "v_head_dim", &c->v_head_dim, err) < 0)
            goto done;
        if (!have_hd) c->head_dim = c->qk_nope_head_dim + c->qk_rope_head_dim;
    } else if (!have_hd) {
        if (c->hidden_size <= 0 || c->hidden_size % c->num_heads) {
            al_errf(err, "invalid config: hidden_size %d is not divisible by num_attention_heads %d and head_dim is not given",
                    c->hidden_size, c->num_heads);
            goto done;
        }
        c->head_dim = c->hidden_size / c->num_heads;
    }
    /* absent score_n: the length the positions were set up for, i.e. the training context */
    c->score_n = c->max_position;
    /* attention kind: from our block, else from the architecture and head counts */
    c->attention = is_mla ? AL_ATTN_MLA : c->num_kv_heads == c->num_heads ? AL_ATTN_MHA : c->num_kv_heads == 1 ? AL_ATTN_MQA : AL_ATTN_GQA;
    if (al) {
        if (!cJSON_IsObject(al)) {
            al_errf(err, "invalid config: \"attnlab\" must be an object");
            goto done;
        }
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(al, "attention");
        if (a && (!cJSON_IsString(a) || al_attn_from_name(a->valuestring, &c->attention))) {
            al_errf(err, "invalid config: unknown attention '%s' (expected mha, gqa, mqa, mla or lrkv)",
                    cJSON_IsString(a) ? a->valuestring : "?");
            goto done;
        }
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(al, "score");
        if (s && (!cJSON_IsString(s) || al_score_from_name(s->valuestring, &c->score))) {
            al_errf(err, "invalid config: unknown score '%s' (expected softmax, poly, relu or sigmoid)",
                    cJSON_IsString(s) ? s->valuestring : "?");
            goto done;
        }
        if (get_int(al, "lrkv_rank", &c->lrkv_rank, err) < 0) goto done;
        if (get_int(al, "poly_power", &c->poly_power, err) < 0) goto done;
        const cJSON *ps = cJSON_GetObjectItemCaseSensitive(al, "poly_scale");
        if (cJSON_IsNumber(ps)) {
            c->poly_scale = ps->valuedouble;
            c->poly_scale_auto = 0;
        } else if (ps && !cJSON_IsNull(ps) && !(cJSON_IsString(ps) && strcmp(ps->valuestring, "auto") == 0)) {
            al_errf(err, "invalid config: poly_scale must be a positive number or \"auto\"");
            goto done;
        }
        if ((have_score_n = get_int(al, "score_n", &c->score_n, err)) < 0) goto done;
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(al, "task");
        al_task task = AL_TASK_LM;
        if (t && (!cJSON_IsString(t) || al_task_from_name(t->valuestring, &task))) {
            al_errf(err, "invalid config: unknown task '%s' (expected lm or vision)", cJSON_IsString(t) ? t->valuestring : "?");
            goto done;
        }
        if (t && (task == AL_TASK_VISION) != is_vit) {
            al_errf(err, "invalid config: task 'vision' goes with architecture " VIT_ARCH);
            goto done;
        }
        if (extra_out) *extra_out = cJSON_PrintUnformatted(al);
    }
    if (is_vit) {
        /* any design and score function; the architecture name says nothing about them */
        al_config_vision_derive(c, !have_score_n);
    } else if ((is_mla && c->attention != AL_ATTN_MLA) || (c->attention == AL_ATTN_MLA && !is_mla)) {
        al_errf(err, "invalid config: attention 'mla' goes with architecture DeepseekV2ForCausalLM");
        goto done;
    }
    if (!is_vit && (c->attention == AL_ATTN_LRKV) != is_attnlab) {
        al_errf(err, "invalid config: attention 'lrkv' goes with architecture AttnlabForCausalLM");
        goto done;
    }
    if (c->hf != AL_HF_NONE && parse_hf(c, root, err)) goto done;
    rc = al_config_validate(c, err);
done:
    cJSON_Delete(root);
    return rc;
}

const char *al_config_architecture(const al_config *c) {
    if (c->hf != AL_HF_NONE && (unsigned)c->hf < AL_HF_COUNT) return hf_names[c->hf].arch;
    return c->task == AL_TASK_VISION      ? VIT_ARCH
           : c->attention == AL_ATTN_MLA    ? "DeepseekV2ForCausalLM"
           : c->attention == AL_ATTN_LRKV ? "AttnlabForCausalLM"
                                          : "LlamaForCausalLM";
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

int al_config_save(const al_config *c, const char *path, const char *extra_json, al_err *err) {
    cJSON *root = cJSON_CreateObject();
    cJSON *arch = cJSON_AddArrayToObject(root, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString(al_config_architecture(c)));
    const int vit = c->task == AL_TASK_VISION;
    cJSON_AddStringToObject(root, "model_type", vit                            ? "attnlab_vit"
                                                : c->attention == AL_ATTN_MLA  ? "deepseek_v2"
                                                : c->attention == AL_ATTN_LRKV ? "attnlab"
                                                                               : "llama");
    if (vit) {
        cJSON_AddNumberToObject(root, "image_size", c->image_size);
        cJSON_AddNumberToObject(root, "patch_size", c->patch_size);
        cJSON_AddNumberToObject(root, "num_channels", c->num_channels);
        cJSON_AddNumberToObject(root, "num_labels", c->num_labels);
        cJSON_AddNumberToObject(root, "image_mean", c->image_mean);
        cJSON_AddNumberToObject(root, "image_std", c->image_std);
    } else {
        cJSON_AddNumberToObject(root, "vocab_size", c->vocab_size);
    }
    cJSON_AddNumberToObject(root, "hidden_size", c->hidden_size);
    cJSON_AddNumberToObject(root, "intermediate_size", c->intermediate_size);
    cJSON_AddNumberToObject(root, "num_hidden_layers", c->num_layers);
    cJSON_AddNumberToObject(root, "num_attention_heads", c->num_heads);
    cJSON_AddNumberToObject(root, "num_key_value_heads", c->num_kv_heads);
    if (c->attention == AL_ATTN_MLA) {
        cJSON_AddNumberToObject(root, "kv_lora_rank", c->kv_lora_rank);
        if (c->q_lora_rank > 0) cJSON_AddNumberToObject(root, "q_lora_rank", c->q_lora_rank);
        else cJSON_AddNullToObject(root, "q_lora_rank");
        cJSON_AddNumberToObject(root, "qk_nope_head_dim", c->qk_nope_head_dim);
        cJSON_AddNumberToObject(root, "qk_rope_head_dim", c->qk_rope_head_dim);
        cJSON_AddNumberToObject(root, "v_head_dim", c->v_head_dim);
        /* dense MLP in every layer, read the same by HF's native and remote DeepseekV2 code */
        if (!vit) {
            cJSON_AddNullToObject(root, "n_routed_experts");
            cJSON_AddNullToObject(root, "n_shared_experts");
            cJSON_AddNumberToObject(root, "first_k_dense_replace", c->num_layers);
            cJSON_AddNumberToObject(root, "moe_layer_freq", 1);
            cJSON_AddNullToObject(root, "rope_scaling");
        }
    } else {
        cJSON_AddNumberToObject(root, "head_dim", c->head_dim);
    }
    cJSON_AddStringToObject(root, "hidden_act", "silu");
    cJSON_AddNumberToObject(root, "rms_norm_eps", c->rms_norm_eps);
    if (!vit) { /* a ViT has no RoPE, and its sequence length follows from the patches */
        cJSON_AddNumberToObject(root, "rope_theta", c->rope_theta);
        cJSON_AddNumberToObject(root, "max_position_embeddings", c->max_position);
        cJSON_AddBoolToObject(root, "tie_word_embeddings", c->tie_word_embeddings);
    }
    cJSON_AddBoolToObject(root, "attention_bias", 0);
    cJSON_AddBoolToObject(root, "mlp_bias", 0);
    cJSON_AddStringToObject(root, "torch_dtype", "float32");
    cJSON *al = extra_json ? cJSON_Parse(extra_json) : NULL;
    if (!al || !cJSON_IsObject(al)) {
        cJSON_Delete(al);
        al = cJSON_CreateObject();
    }
    cJSON_DeleteItemFromObjectCaseSensitive(al, "attention");
    cJSON_DeleteItemFromObjectCaseSensitive(al, "score");
    cJSON_DeleteItemFromObjectCaseSensitive(al, "lrkv_rank");
    cJSON_DeleteItemFromObjectCaseSensitive(al, "poly_power");
    cJSON_DeleteItemFromObjectCaseSensitive(al, "poly_scale");
    cJSON_DeleteItemFromObjectCaseSensitive(al, "score_n");
    cJSON_DeleteItemFromObjectCaseSensitive(al, "task");
    if (vit) cJSON_AddStringToObject(al, "task", al_task_name(c->task));
    cJSON_AddStringToObject(al, "attention", al_attn_name(c->attention));
    cJSON_AddStringToObject(al, "score", al_score_name(c->score));
    /* softmax has no parameters; the others carry what reproduces them at any length */
    if (c->score == AL_SCORE_POLY) {
        cJSON_AddNumberToObject(al, "poly_power", c->poly_power);
        if (c->poly_scale_auto) cJSON_AddStringToObject(al, "poly_scale", "auto");
        else cJSON_AddNumberToObject(al, "poly_scale", c->poly_scale);
    }
    if (c->score != AL_SCORE_SOFTMAX) cJSON_AddNumberToObject(al, "score_n", c->score_n);
    if (c->attention == AL_ATTN_LRKV) cJSON_AddNumberToObject(al, "lrkv_rank", c->lrkv_rank);
    cJSON_AddItemToObject(root, "attnlab", al);
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text) return al_errf(err, "%s: out of memory", path);
    size_t n = strlen(text);
    text[n] = '\n'; /* cJSON_Print leaves room: replace the NUL, write n+1 bytes */
    int rc = al_write_file_atomic(path, text, n + 1, err);
    free(text);
    return rc;
}
