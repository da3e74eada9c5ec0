/*
 * attnlab.h: the public API of libattnlab.
 *
 * A small embeddable surface over a trained checkpoint directory
 * (config.json + model.safetensors, Hugging Face conventions): open it, score
 * bytes, generate with the design's KV cache, read its sizes. Hugging Face
 * checkpoints (docs/hf-models.md) open memory-mapped. Errors are
 * returned as -1 / NULL with a one-line message in the caller's buffer.
 * The CLI (`attnlab`) is built on the internal headers under src/.
 */
#ifndef ATTNLAB_H
#define ATTNLAB_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define AL_VERSION "0.1.0"

typedef struct al_handle al_handle;

/* Opens a model directory. NULL on failure (message in errbuf). */
al_handle *al_open(const char *model_dir, char *errbuf, size_t errlen);
void al_close(al_handle *h);

/* Model facts. */
int al_vocab_size(const al_handle *h);
int al_max_context(const al_handle *h);
size_t al_param_count(const al_handle *h);
/* KV-cache bytes per token across all layers (float32 values). */
size_t al_kv_bytes_per_token(const al_handle *h);

/* logits[n, vocab] of bytes[0, n) in one causal window (n <= max context). */
int al_logits(al_handle *h, const uint8_t *bytes, int n, float *logits, char *errbuf, size_t errlen);

/* Appends up to n sampled bytes after `prompt` into out[0, n) using the KV
 * cache; returns the number written or -1. temperature 0 is greedy. Byte
 * vocabularies only (attnlab's models): a Hugging Face checkpoint opens and
 * scores bytes as token ids, but its samples are not bytes (-1). */
int al_generate(al_handle *h, const uint8_t *prompt, int prompt_len, int n, float temperature, int top_k,
                float top_p, uint64_t seed, uint8_t *out, char *errbuf, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
