/*
 * config.h: the model configuration as plain data, below every design.
 *
 * al_config mirrors a Hugging Face config.json (Llama keys) plus attnlab's own
 * block {"attnlab": {...}}. It is only data: what a field is called in
 * config.json, on the command line and in JSON views, and when it applies,
 * is described by al_config_field rows: the shared fields in AL_CONFIG_FIELDS
 * below, each design's own fields in its file under src/attn/ (its ops
 * table). Reading, writing, comparing and deriving a config (src/model/
 * config.c) iterate over those rows and ask the designs; nothing here calls
 * up into them.
 *
 * Two tasks share it: the byte-level language model (task "lm") and the
 * vision transformer (task "vision", docs/vision.md), which adds the image
 * fields and always attends bidirectionally.
 */
#ifndef AL_CORE_CONFIG_H
#define AL_CORE_CONFIG_H

#include <stddef.h>

typedef enum { AL_SCORE_SOFTMAX, AL_SCORE_POLY, AL_SCORE_RELU, AL_SCORE_SIGMOID, AL_SCORE_COUNT } al_score_kind;
typedef enum { AL_TASK_LM, AL_TASK_VISION, AL_TASK_COUNT } al_task;
/* Where a config comes from: attnlab's own checkpoints (an "attnlab" block in
 * config.json), or a Hugging Face checkpoint of one of these families,
 * whose conventions and extra fields then apply (docs/hf-models.md). */
typedef enum {
    AL_HF_NONE,
    AL_HF_LLAMA,
    AL_HF_MISTRAL,
    AL_HF_QWEN2,
    AL_HF_DEEPSEEK_V2,
    AL_HF_QWEN3,
    AL_HF_GEMMA,
    AL_HF_COUNT
} al_hf_family;

/* The MLP's gate activation: SwiGLU's silu (Llama and attnlab's models) or
 * GeGLU's tanh-approximated GELU (Gemma's gelu_pytorch_tanh). */
typedef enum { AL_ACT_SILU, AL_ACT_GELU_TANH } al_mlp_act;

/* Frequency scaling of a Hugging Face config's "rope_scaling": none;
 * Llama 3's (type AL_ROPE_LLAMA3: factor, low_freq_factor, high_freq_factor,
 * original_max_position_embeddings); or DeepSeek-V2's YaRN (AL_ROPE_YARN:
 * factor, original_max_position_embeddings, beta_fast, beta_slow, mscale,
 * mscale_all_dim; nn/ops.c al_rope_inv_freq and al_rope_attention_factor). */
typedef enum { AL_ROPE_DEFAULT, AL_ROPE_LLAMA3, AL_ROPE_YARN } al_rope_type;
typedef struct al_rope_scaling {
    al_rope_type type;
    double factor, low_freq_factor, high_freq_factor;
    int original_max_position;
    double beta_fast, beta_slow, mscale, mscale_all_dim; /* yarn */
} al_rope_scaling;

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
    /* the KV design: an index of the registry in src/attn/ (AL_ATTN_MHA, ...
     * in attn.h); nothing outside src/attn/ needs to know which */
    int attention;
    al_score_kind score;
    /* MLA's own fields (DeepSeek-V2 names, src/attn/mla.c): latent rank d_c,
     * query latent rank (0: none), per-head key dims without / with RoPE,
     * value dim */
    int kv_lora_rank, q_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim;
    /* LRKV's own field (src/attn/lrkv.c): per-head low-rank residual rank r */
    int lrkv_rank;
    /* integer fields of designs added later: a new design names the slots it
     * uses in its own field rows (AL_CONFIG_FIELD(design_param[0], ...)), so
     * it needs no change here */
    int design_param[4];
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
    al_rope_scaling rope_scaling; /* "rope_scaling": none, llama3 or (DeepseekV2) yarn */
    /* what a Hugging Face family does differently, from the family table of
     * model/config.c (attnlab's own models: all 0) */
    int qk_norm;          /* Qwen3: q_norm / k_norm, RMSNorm of each head's q and k (head_dim gains) before RoPE */
    int norm_unit_offset; /* Gemma: every RMSNorm scales by (1 + w); the mapped gains hold 1 + w */
    int embed_scale;      /* Gemma: embeddings times sqrt(hidden_size) rounded to the embedding's dtype */
    al_mlp_act mlp_act;   /* the MLP's gate activation (Gemma: AL_ACT_GELU_TANH) */
    /* DeepseekV2 mixture of experts (n_routed_experts 0: every MLP dense).
     * Layer l is MoE when l >= first_k_dense_replace and l % moe_layer_freq
     * == 0 (al_config_layer_moe): a router picks num_experts_per_tok of the
     * routed experts (SwiGLU MLPs of width moe_intermediate_size) by softmax
     * score, greedily or within the topk_group best of n_group groups
     * (moe_group_limited); weights renormalised (norm_topk_prob) or scaled by
     * routed_scaling_factor; plus n_shared_experts always-on experts as one
     * MLP of width n_shared_experts x moe_intermediate_size. */
    int n_routed_experts, num_experts_per_tok, n_shared_experts, moe_intermediate_size;
    int first_k_dense_replace, moe_layer_freq;
    int moe_group_limited, n_group, topk_group, norm_topk_prob;
    double routed_scaling_factor;
    /* attnlab's own models whose token ids are a tokenizer.json's (a model
     * converted from a Hugging Face checkpoint, `attnlab convert`): any
     * vocab_size; 0 (every earlier config): bytes, vocab_size 256 */
    int tokenizer_vocab;
} al_config;

/* ---- field descriptors ----
 * One row per configurable field. `name` is its key in every JSON view of a
 * config (info, heads, the study report) and, with '_' written '-', its
 * command-line flag; `key` is its config.json key (Hugging Face's name where
 * HF has one), at the top level or in the "attnlab" block. */
typedef enum {
    AL_CF_INT,        /* int */
    AL_CF_FLOAT,      /* float */
    AL_CF_DOUBLE,     /* double */
    AL_CF_BOOL,       /* int, JSON true/false */
    AL_CF_DESIGN,     /* int attention: a design name of the registry */
    AL_CF_SCORE,      /* al_score_kind: softmax, poly, relu, sigmoid */
    AL_CF_TASK,       /* al_task: lm, vision */
    AL_CF_POLY_SCALE, /* double poly_scale + poly_scale_auto: a number or "auto" */
} al_cf_type;

/* When a field means something (and so is saved, shown and compared). */
typedef enum {
    AL_CF_ALWAYS,
    AL_CF_LM,        /* language models only */
    AL_CF_VISION,    /* vision transformers only */
    AL_CF_POLY,      /* score poly */
    AL_CF_SCORED,    /* any score but softmax (score_n) */
    AL_CF_HF_MOE,    /* Hugging Face families with mixture-of-experts keys (DeepseekV2) */
} al_cf_when;

/* Where config.json keeps it. */
typedef enum { AL_CF_TOP, AL_CF_BLOCK, AL_CF_UNSAVED } al_cf_where;

enum {
    AL_CF_FLAG = 1,         /* a command-line flag of `train` / `bench train` */
    AL_CF_NULL_IF_ZERO = 2, /* saved as null when 0 (HF's q_lora_rank) */
    AL_CF_MEASURED = 4,     /* set from the training data when a run starts, not planned (pixel statistics) */
};

typedef struct al_config_field {
    const char *name;  /* view key; flag with '-' for '_' */
    const char *key;   /* config.json key */
    al_cf_type type;
    al_cf_where where;
    al_cf_when when;
    int flags;         /* AL_CF_FLAG | AL_CF_NULL_IF_ZERO | ... */
    size_t offset;     /* offsetof(al_config, member) */
    const char *help;  /* flag help */
} al_config_field;

#define AL_CONFIG_FIELD(member, type, name, key, where, when, flags, help) \
    {name, key, type, where, when, flags, offsetof(al_config, member), help}

/* The fields every design shares, in config.json's order:
 * X(member, type, view name, json key, where, when, flags, help).
 * The design's own fields follow the shared ones (al_attn_ops.fields). */
/* clang-format off */
#define AL_CONFIG_FIELDS(X)                                                                                            \
    X(task, AL_CF_TASK, "task", "task", AL_CF_BLOCK, AL_CF_ALWAYS, 0, "lm or vision")                                  \
    X(attention, AL_CF_DESIGN, "attention", "attention", AL_CF_BLOCK, AL_CF_ALWAYS, AL_CF_FLAG,                        \
      "KV design (default: mha/gqa/mqa from --kv-heads)")                                                              \
    X(score, AL_CF_SCORE, "score", "score", AL_CF_BLOCK, AL_CF_ALWAYS, AL_CF_FLAG,                                     \
      "attention weights: softmax | poly | relu | sigmoid (default softmax)")                                          \
    X(image_size, AL_CF_INT, "image_size", "image_size", AL_CF_TOP, AL_CF_VISION, 0, "image side in pixels")           \
    X(patch_size, AL_CF_INT, "patch_size", "patch_size", AL_CF_TOP, AL_CF_VISION, 0, "patch side in pixels")           \
    X(num_channels, AL_CF_INT, "channels", "num_channels", AL_CF_TOP, AL_CF_VISION, 0, "image channels")               \
    X(num_labels, AL_CF_INT, "num_labels", "num_labels", AL_CF_TOP, AL_CF_VISION, 0, "classes")                        \
    X(image_mean, AL_CF_DOUBLE, "image_mean", "image_mean", AL_CF_TOP, AL_CF_VISION, AL_CF_MEASURED, "pixel mean (of x / 255)")     \
    X(image_std, AL_CF_DOUBLE, "image_std", "image_std", AL_CF_TOP, AL_CF_VISION, AL_CF_MEASURED, "pixel deviation")                \
    X(vocab_size, AL_CF_INT, "vocab", "vocab_size", AL_CF_TOP, AL_CF_LM, 0, "vocabulary size")                         \
    X(num_layers, AL_CF_INT, "layers", "num_hidden_layers", AL_CF_TOP, AL_CF_ALWAYS, AL_CF_FLAG,      \
      "transformer blocks")                                                                                            \
    X(hidden_size, AL_CF_INT, "hidden", "hidden_size", AL_CF_TOP, AL_CF_ALWAYS, AL_CF_FLAG,           \
      "hidden size d")                                                                                                 \
    X(num_heads, AL_CF_INT, "heads", "num_attention_heads", AL_CF_TOP, AL_CF_ALWAYS, AL_CF_FLAG,      \
      "query heads H")                                                                                                 \
    X(num_kv_heads, AL_CF_INT, "kv_heads", "num_key_value_heads", AL_CF_TOP, AL_CF_ALWAYS, AL_CF_FLAG,                 \
      "key/value heads G (default H)")                                                                                 \
    X(head_dim, AL_CF_INT, "head_dim", "head_dim", AL_CF_TOP, AL_CF_ALWAYS, AL_CF_FLAG,                                \
      "head dimension (default hidden / heads)")                                                                       \
    X(intermediate_size, AL_CF_INT, "ffn", "intermediate_size", AL_CF_TOP, AL_CF_ALWAYS, AL_CF_FLAG,  \
      "SwiGLU width (default 8/3 hidden, rounded up to 16)")                                                           \
    X(rms_norm_eps, AL_CF_FLOAT, "rms_norm_eps", "rms_norm_eps", AL_CF_TOP, AL_CF_ALWAYS, 0, "RMSNorm epsilon")        \
    X(rope_theta, AL_CF_DOUBLE, "rope_theta", "rope_theta", AL_CF_TOP, AL_CF_LM, AL_CF_FLAG, "RoPE base")              \
    X(max_position, AL_CF_INT, "context", "max_position_embeddings", AL_CF_TOP, AL_CF_LM, 0,                           \
      "longest sequence (the training context)")                                                                       \
    X(tie_word_embeddings, AL_CF_BOOL, "tied", "tie_word_embeddings", AL_CF_TOP, AL_CF_LM, AL_CF_FLAG,                 \
      "tie the LM head to the embedding")                                                                              \
    X(poly_power, AL_CF_INT, "poly_power", "poly_power", AL_CF_BLOCK, AL_CF_POLY, AL_CF_FLAG,                          \
      "poly: weights c s^p, integer p >= 1 (default 3)")                                                               \
    X(poly_scale, AL_CF_POLY_SCALE, "poly_scale", "poly_scale", AL_CF_BLOCK, AL_CF_POLY, AL_CF_FLAG,                   \
      "poly: c, a positive number or auto = 1/sqrt(N), N = context or patches (default auto)")                         \
    X(score_n, AL_CF_INT, "score_n", "score_n", AL_CF_BLOCK, AL_CF_SCORED, 0,                                          \
      "N of the score functions (the training context, or the patches)")                                               \
    X(n_routed_experts, AL_CF_INT, "experts", "n_routed_experts", AL_CF_TOP, AL_CF_HF_MOE, AL_CF_NULL_IF_ZERO,         \
      "routed experts per MoE layer (0: dense)")                                                                       \
    X(num_experts_per_tok, AL_CF_INT, "experts_per_token", "num_experts_per_tok", AL_CF_TOP, AL_CF_HF_MOE,             \
      AL_CF_NULL_IF_ZERO, "routed experts each token uses")                                                            \
    X(n_shared_experts, AL_CF_INT, "shared_experts", "n_shared_experts", AL_CF_TOP, AL_CF_HF_MOE, AL_CF_NULL_IF_ZERO,  \
      "always-on experts per MoE layer")                                                                               \
    X(moe_intermediate_size, AL_CF_INT, "expert_ffn", "moe_intermediate_size", AL_CF_TOP, AL_CF_HF_MOE, 0,            \
      "an expert's SwiGLU width")                                                                                      \
    X(first_k_dense_replace, AL_CF_INT, "first_dense_layers", "first_k_dense_replace", AL_CF_TOP, AL_CF_HF_MOE, 0,     \
      "layers before the first MoE layer")                                                                             \
    X(moe_layer_freq, AL_CF_INT, "moe_layer_freq", "moe_layer_freq", AL_CF_TOP, AL_CF_HF_MOE, 0,                      \
      "every this many layers is MoE")                                                                                 \
    X(n_group, AL_CF_INT, "expert_groups", "n_group", AL_CF_TOP, AL_CF_HF_MOE, AL_CF_NULL_IF_ZERO,                    \
      "expert groups (group_limited_greedy)")                                                                          \
    X(topk_group, AL_CF_INT, "expert_groups_per_token", "topk_group", AL_CF_TOP, AL_CF_HF_MOE, AL_CF_NULL_IF_ZERO,    \
      "groups a token's experts come from (group_limited_greedy)")                                                     \
    X(norm_topk_prob, AL_CF_BOOL, "norm_topk_prob", "norm_topk_prob", AL_CF_TOP, AL_CF_HF_MOE, 0,                     \
      "renormalise the chosen experts' weights")                                                                       \
    X(routed_scaling_factor, AL_CF_DOUBLE, "routed_scaling", "routed_scaling_factor", AL_CF_TOP, AL_CF_HF_MOE, 0,      \
      "factor of the routed experts' weights (without norm_topk_prob)")                                                \
    X(tokenizer_vocab, AL_CF_BOOL, "tokenizer_vocab", "tokenizer_vocab", AL_CF_BLOCK, AL_CF_LM, 0,                     \
      "token ids are those of the directory's tokenizer.json (any vocab_size), not bytes")
/* clang-format on */

const char *al_task_name(al_task t);
int al_task_from_name(const char *s, al_task *t);
const char *al_score_name(al_score_kind k);
int al_score_from_name(const char *s, al_score_kind *k);
/* The longest sequence a model may run: max_position, or a Mistral sliding
 * window shorter than it (see sliding_window). */
int al_config_max_context(const al_config *c);
/* Whether layer l's MLP is a mixture of experts (DeepseekV2's rule). */
int al_config_layer_moe(const al_config *c, int l);
/* The widest MLP of any layer (dense, shared experts, one expert): what the
 * activations of one MLP are sized for. */
int al_config_ffn_max(const al_config *c);
/* The largest image side a vision config may give (validation refuses more). */
#define AL_IMAGE_SIZE_MAX 4096
/* Patches per image ((image_size / patch_size)^2), 0 for the language model
 * and for sizes validation refuses (not positive, sides past AL_IMAGE_SIZE_MAX
 * patches): derived fields are set before a parsed config is validated. */
int al_config_num_patches(const al_config *c);
/* Whether field f applies to c (its `when`). */
int al_config_field_applies(const al_config_field *f, const al_config *c);
/* Pointers to field f's member in c. */
static inline void *al_config_field_ptr(const al_config_field *f, al_config *c) { return (char *)c + f->offset; }
static inline const void *al_config_field_cptr(const al_config_field *f, const al_config *c) {
    return (const char *)c + f->offset;
}

#endif
