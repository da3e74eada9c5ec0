/*
 * config.h: the model configuration: one struct that mirrors a Hugging Face
 * config.json (Llama keys) plus attnlab's own block {"attnlab": {...}}.
 * Two tasks share it: the byte-level language model (task "lm") and the
 * vision transformer (task "vision", docs/vision.md), which adds the image
 * fields and always attends bidirectionally.
 *
 * The struct is the single source of truth for shapes; al_config_validate
 * refuses impossible ones with a one-line reason before anything allocates.
 */
#ifndef AL_CONFIG_H
#define AL_CONFIG_H

#include "../core/core.h"
#include "../nn/nn.h"

typedef enum { AL_ATTN_MHA, AL_ATTN_GQA, AL_ATTN_MQA, AL_ATTN_MLA, AL_ATTN_LRKV, AL_ATTN_COUNT } al_attn_kind;
typedef enum { AL_SCORE_SOFTMAX, AL_SCORE_POLY, AL_SCORE_RELU, AL_SCORE_SIGMOID, AL_SCORE_COUNT } al_score_kind;
typedef enum { AL_TASK_LM, AL_TASK_VISION, AL_TASK_COUNT } al_task;
/* Where a config comes from: attnlab's own checkpoints (an "attnlab" block in
 * config.json), or a Hugging Face checkpoint of one of these families,
 * whose conventions and extra fields then apply (docs/hf-models.md). */
typedef enum { AL_HF_NONE, AL_HF_LLAMA, AL_HF_MISTRAL, AL_HF_QWEN2, AL_HF_DEEPSEEK_V2, AL_HF_COUNT } al_hf_family;

typedef struct al_config {
    int vocab_size;          /* 256: bytes */
    int hidden_size;         /* d */
    int intermediate_size;   /* SwiGLU width f */
    int num_layers;          /* L */
    int num_heads;           /* H */
    int num_kv_heads;        /* G (MHA: H, MQA: 1) */
    int head_dim;            /* d_h */
    int max_position;        /* longest sequence RoPE tables and caches cover */
    float rms_norm_eps;
    double rope_theta;
    int tie_word_embeddings;
    al_attn_kind attention;
    al_score_kind score;
    /* MLA (DeepSeek-V2 names): latent rank d_c, query latent rank (0: none),
     * per-head key dims without / with RoPE, value dim */
    int kv_lora_rank, q_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim;
    /* LRKV: per-head low-rank residual rank r (0 = MQA) */
    int lrkv_rank;
    /* score function parameters (attention.md 2): poly weight c s^p with
     * p = poly_power and c = poly_scale, or 1/sqrt(score_n) when
     * poly_scale_auto; relu and sigmoid divide by / shift by log of score_n.
     * score_n is fixed when training (the context) and saved, so evaluating
     * at another length reproduces the trained function. */
    int poly_power;      /* >= 1, default 3 */
    double poly_scale;   /* > 0, used unless poly_scale_auto */
    int poly_scale_auto; /* default 1 */
    int score_n;         /* N >= 1; default: max_position (the training context),
                            for vision the number of patches */
    /* task and attention mask. bidirectional reaches the score kernels
     * through al_attn_set_score: 0 causal (lm), 1 no mask (vision). */
    al_task task;
    int bidirectional;
    /* vision (task AL_TASK_VISION): square images of num_channels x
     * image_size^2 pixels cut into patch_size^2 patches; num_labels classes;
     * pixels enter as (x / 255 - image_mean) / image_std. For vision the
     * sequence is the CLS token plus the patches: max_position = 1 +
     * patches, derived (al_config_vision_derive), and vocab_size is 0. */
    int image_size, patch_size, num_channels, num_labels;
    double image_mean, image_std;
    /* Hugging Face checkpoints (hf != AL_HF_NONE): loaded memory-mapped in
     * their file dtype, for inference only; vocab_size is then any size. */
    al_hf_family hf;
    int qkv_bias;                 /* Qwen2: q_proj, k_proj, v_proj have biases */
    int sliding_window;           /* Mistral's sliding_window when it is shorter than
                                     max_position_embeddings (0: none): longer
                                     contexts are refused, shorter ones cannot see it */
    al_rope_scaling rope_scaling; /* "rope_scaling": none or llama3 */
} al_config;

const char *al_attn_name(al_attn_kind k);
const char *al_task_name(al_task t);
int al_task_from_name(const char *s, al_task *t);
const char *al_score_name(al_score_kind k);
/* "llama", "mistral", "qwen2", "deepseek_v2" (HF model_type), "attnlab". */
const char *al_hf_family_name(al_hf_family f);
/* The longest sequence a model may run: max_position, or a Mistral sliding
 * window shorter than it (see sliding_window). */
int al_config_max_context(const al_config *c);
int al_attn_from_name(const char *s, al_attn_kind *k);
int al_score_from_name(const char *s, al_score_kind *k);

/* Fills defaults for a small byte-level Llama. */
void al_config_default(al_config *c);
/* Fills defaults for a small Fashion-MNIST ViT (28 x 28 x 1, 2 x 2 patches,
 * 10 classes), with the fields al_config_vision_derive sets. */
void al_config_vision_default(al_config *c);
/* Vision: sets what follows from the image fields: max_position = 1 +
 * patches, bidirectional = 1, vocab_size = 0 and (when `score_n_too`) the
 * score functions' N = patches. No-op for the language model. */
void al_config_vision_derive(al_config *c, int score_n_too);
/* Patches per image ((image_size / patch_size)^2), 0 for the language model. */
int al_config_num_patches(const al_config *c);
/* Refuses impossible shapes: one line naming the problem. Checks what every
 * design shares, then the design's own rules (its ops->validate). */
int al_config_validate(const al_config *c, al_err *err);

/* The HF "architectures" name a config is saved under (HF checkpoints: the
 * one they were read from). */
const char *al_config_architecture(const al_config *c);

/* config.json <-> struct. `extra` (may be NULL) is a JSON object text merged
 * into the "attnlab" block on save (training settings); on load the block's
 * text is returned in *extra_out if non-NULL (malloc'd, may be NULL). */
int al_config_load(al_config *c, const char *path, char **extra_out, al_err *err);
int al_config_save(const al_config *c, const char *path, const char *extra_json, al_err *err);
/* Parses config.json text (used by load; exposed for tests). */
int al_config_parse(al_config *c, const char *json_text, char **extra_out, al_err *err);

#endif
