/*
 * generate.h: autoregressive sampling with the design's KV cache: the prompt
 * is fed token by token (filling the cache), then each sampled token is fed
 * back. on_token (may be NULL) sees every generated token as it is made.
 * al_generate_tokens takes and returns token ids (any vocabulary, e.g. a
 * Hugging Face checkpoint's); al_generate_bytes is the byte-level form for
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
} al_gen_stats;

int al_generate_tokens(const al_model *m, const int *prompt, int prompt_len, int n, const al_sampler *s, uint64_t seed,
                       int *out, void (*on_token)(int token, void *ctx), void *ctx, al_gen_stats *stats, al_err *err);
int al_generate_bytes(const al_model *m, const uint8_t *prompt, int prompt_len, int n, const al_sampler *s,
                      uint64_t seed, uint8_t *out, void (*on_token)(int byte, void *ctx), void *ctx,
                      al_gen_stats *stats, al_err *err);

#endif
