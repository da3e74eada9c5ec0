/*
 * generate.h: autoregressive sampling with the design's KV cache: the prompt
 * fills the cache in one batched forward (al_decoder_prefill; token by token
 * if that forward's activations do not fit), then each sampled token is fed
 * back. on_token (may be NULL) sees every generated token as it is made.
 * al_generate_ids takes and returns token ids (any vocabulary: a tokenizer's,
 * a Hugging Face checkpoint's); al_generate_bytes is the byte-level form for
 * attnlab's own models (vocabulary = the 256 bytes).
 */
#ifndef AL_GENERATE_H
#define AL_GENERATE_H

#include "../model/model.h"
#include "sample.h"

typedef struct al_gen_stats {
    int prompt_tokens, generated;
    double prefill_s, decode_s;
    size_t cache_bytes;
    double kv_held_bytes; /* what the cache held at the end (evicted or quantised: less than cache_bytes) */
} al_gen_stats;

/* Feeds prompt[0..prompt_len) and samples up to n ids into out (may be
 * NULL), calling on_token for each (may be NULL). Sampling stop_id (>= 0;
 * -1: never) ends generation after it is reported (it counts as generated).
 * kv_dt: the KV cache's values, AL_DT_F32 or AL_DT_BF16 (al_decoder).
 * Returns the number generated or -1. */
int al_generate_ids(const al_model *m, const int *prompt, int prompt_len, int n, const al_sampler *s, uint64_t seed,
                    int stop_id, al_dtype kv_dt, int *out, void (*on_token)(int id, void *ctx), void *ctx, al_gen_stats *stats,
                    al_err *err);

/* The same through a compressed cache (kv: quantised and/or evicting,
 * al_decoder_create_opts; NULL: uncompressed). The prompt is prefilled;
 * SnapKV's prompt 0 means the whole prompt. */
int al_generate_ids_kv(const al_model *m, const int *prompt, int prompt_len, int n, const al_sampler *s, uint64_t seed,
                       int stop_id, al_dtype kv_dt, const al_kv_opts *kv, int *out, void (*on_token)(int id, void *ctx),
                       void *ctx, al_gen_stats *stats, al_err *err);

/* The same with bytes as ids (and no stop token): samples exactly what
 * al_generate_ids does with the prompt's bytes as ids. */
int al_generate_bytes(const al_model *m, const uint8_t *prompt, int prompt_len, int n, const al_sampler *s,
                      uint64_t seed, uint8_t *out, void (*on_token)(int byte, void *ctx), void *ctx,
                      al_gen_stats *stats, al_err *err);

#endif
