/*
 * config.h (model): reading, writing, comparing, showing and deriving a
 * model configuration. The struct and its field rows are plain data in
 * core/config.h; this layer sits above src/attn/ and asks each design (its
 * ops table) for its own fields and rules, so no arrow runs back up.
 *
 * One table drives every format: AL_CONFIG_FIELDS (shared fields) followed
 * by each design's fields. Indexes 0..al_config_field_count()-1 below run
 * over the shared fields, then every design's in registry order; `given`
 * arrays (which fields a user set) use the same indexes.
 */
#ifndef AL_CONFIG_H
#define AL_CONFIG_H

#include "../attn/attn.h"
#include "../core/config.h"
#include "../core/core.h"

struct cJSON;

/* config.json's "attnlab" block carries this; configs without it are
 * version 1 (every earlier attnlab), read the same way. */
enum { AL_CONFIG_FORMAT_VERSION = 2 };
enum { AL_CONFIG_MAX_FIELDS = 96 };

/* "llama", "mistral", "qwen2", "deepseek_v2" (HF model_type), "attnlab". */
const char *al_hf_family_name(al_hf_family f);

/* Fills defaults for a small byte-level Llama. */
void al_config_default(al_config *c);
/* Fills defaults for a small Fashion-MNIST ViT (28 x 28 x 1, 2 x 2 patches,
 * 10 classes), with the fields al_config_vision_derive sets. */
void al_config_vision_default(al_config *c);
/* Makes c a vision config of Fashion-MNIST's shape: 28 x 28 x 1 images in
 * patch x patch patches, 10 classes, pixel statistics 0 / 1 (a run sets them
 * from its training images), then al_config_vision_derive(c, 1). */
void al_config_vision_fmnist(al_config *c, int patch);
/* Vision: sets what follows from the image fields: max_position = 1 +
 * patches, bidirectional = 1, vocab_size = 0 and (when `score_n_too`) the
 * score functions' N = patches. No-op for the language model. */
void al_config_vision_derive(al_config *c, int score_n_too);
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
/* The same for DIR/config.json (a path of any length). */
int al_config_load_dir(al_config *c, const char *dir, char **extra_out, al_err *err);
int al_config_save(const al_config *c, const char *path, const char *extra_json, al_err *err);
/* Parses config.json text (used by load; exposed for tests). */
int al_config_parse(al_config *c, const char *json_text, char **extra_out, al_err *err);

/* ---- the field table ---- */
int al_config_field_count(void);
/* Field i; *design (may be NULL) gets the index of the design that owns it,
 * -1 for a shared field. */
const al_config_field *al_config_field_at(int i, int *design);
/* The index of the field whose view name is `name` (flags: '-' for '_'), -1 if none. */
int al_config_field_find(const char *name);
/* Field f's command-line flag ("kv-lora-rank": its name with '-' for '_')
 * into buf[cap]; returns 0, or -1 when it does not fit (buf then holds a cut). */
int al_config_field_flag(const al_config_field *f, char *buf, size_t cap);
/* Whether field i means something for c: its `when`, and for a design's
 * field, that c is of that design. */
int al_config_field_used(int i, const al_config *c);

/* Completes a config a user specified field by field (flags, a preset, a
 * study plan): given[i] says which fields were set. Derives the rest:
 * kv_heads = heads, head_dim = hidden / heads, the SwiGLU width ~ 8/3 hidden,
 * the design from the head counts, the design's own defaults (its derive),
 * score_n = max_position; refuses a design's or a score's field given for
 * another ("--kv-lora-rank applies only to --attention mla"), then
 * validates. */
int al_config_resolve(al_config *c, const unsigned char *given, al_err *err);

/* 1 if a and b are the same model in every field that applies (fields a run
 * measures from its data, such as the pixel statistics, excepted); else 0
 * with the first difference in why ("its layers differs (2, planned 4)"). */
int al_config_same(const al_config *a, const al_config *b, char *why, size_t cap);
/* 1 if a field given[i] holds another value in `values` than in `base`, or
 * does not apply to base (another design's or score's field), with the first
 * such in why ("--heads 8, but its config has 4"); else 0. For flags given
 * beside a model that already exists (train --init-from). */
int al_config_contradicts(const al_config *values, const unsigned char *given, const al_config *base, char *why,
                          size_t cap);

/* Adds the config's fields (those that apply) to a JSON object under their
 * view names: the one JSON view of a config that info, heads and the study
 * report share. poly_scale is shown resolved (1/sqrt(N) for "auto"). */
int al_config_view(const al_config *c, struct cJSON *obj);

#endif
