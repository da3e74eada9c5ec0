/*
 * tokenizer.h: text <-> token ids for attnlab's models: the byte tokenizer of
 * attnlab's own models (id = byte, vocabulary 256) and the Hugging Face
 * tokenizer.json of byte-level BPE (GPT-2, Llama-3, Qwen2) and
 * SentencePiece-style BPE with byte fallback (Llama-2, Mistral) checkpoints.
 * docs/tokenizers.md says what is supported and what is refused.
 *
 * An al_tokenizer is immutable once loaded (every function below takes it
 * const), so one may be shared by threads. Errors follow core.h: 0/-1 (or
 * NULL) with one line in err.
 */
#ifndef AL_TOK_TOKENIZER_H
#define AL_TOK_TOKENIZER_H

#include <stddef.h>

#include "../core/core.h"

typedef struct al_tokenizer al_tokenizer;

/* The tokenizer of a model directory: tokenizer.json (+ tokenizer_config.json
 * for BOS/EOS/add_bos when present); a directory without tokenizer.json gets
 * the byte tokenizer (id = byte, vocab 256) that attnlab's own models use.
 * A directory that does not exist is an error. */
al_tokenizer *al_tok_open_dir(const char *model_dir, al_err *err);
/* A tokenizer.json, and optionally the tokenizer_config.json beside it. */
al_tokenizer *al_tok_load_json(const char *tokenizer_json_path, const char *tokenizer_config_path_or_NULL,
                               al_err *err);
/* The byte tokenizer (a shared static instance; al_tok_free ignores it). */
al_tokenizer *al_tok_bytes(void);
void al_tok_free(al_tokenizer *t);

int al_tok_vocab_size(const al_tokenizer *t); /* largest id + 1 */
int al_tok_bos(const al_tokenizer *t);        /* -1 if none */
int al_tok_eos(const al_tokenizer *t);        /* -1 if none */
/* 1 if encoding with add_special prepends BOS: tokenizer_config.json's
 * add_bos_token, or else a special token before $A in the TemplateProcessing
 * post-processor. */
int al_tok_adds_bos(const al_tokenizer *t);
int al_tok_is_bytes(const al_tokenizer *t);
/* "bytes", "byte-level BPE" or "SentencePiece BPE" (for messages). */
const char *al_tok_kind(const al_tokenizer *t);

/* text[0..len) -> ids (allocates *ids, caller frees with free()). add_special:
 * add the special tokens the tokenizer adds around a text (BOS, and EOS where
 * tokenizer_config.json's add_eos_token or the template says so). Text for a
 * tokenizer.json must be well-formed UTF-8 (an error names the first bad
 * byte); the byte tokenizer takes any bytes. */
int al_tok_encode(const al_tokenizer *t, const char *text, size_t len, int add_special, int **ids, int *n,
                  al_err *err);
/* ids -> UTF-8 text (allocated, NUL-terminated), through the tokenizer.json
 * decoder; skip_special drops special tokens (added tokens marked special,
 * BOS and EOS). Ids outside the vocabulary are an error. The byte tokenizer
 * returns the bytes as they are. */
int al_tok_decode(const al_tokenizer *t, const int *ids, int n, int skip_special, char **text, size_t *len,
                  al_err *err);
/* The raw bytes token id stands for (after byte-level / metaspace / <0xNN>
 * mapping; an added token's content), for labels and streaming output. The
 * bytes belong to t; they need not be UTF-8 on their own (a byte-level token
 * may hold part of a character). 0, or -1 for an id outside the vocabulary. */
int al_tok_piece(const al_tokenizer *t, int id, const char **bytes, size_t *len);
/* 1 if id is a special token (what decode's skip_special drops). */
int al_tok_is_special(const al_tokenizer *t, int id);
/* The token's piece as printable text for labels: well-formed UTF-8 is kept,
 * "\n", "\t", "\r" and other control or malformed bytes are escaped ("\xNN"),
 * and a backslash is doubled. Writes at most cap - 1 bytes and a NUL (cut at a
 * character boundary); returns the length, or -1 for an id outside the
 * vocabulary (buf then holds "?"). */
int al_tok_piece_label(const al_tokenizer *t, int id, char *buf, size_t cap);
/* The number of bytes of the original text that ids[0..n) of an encoding
 * stand for, for bits per byte: the length of their decoding with special
 * tokens skipped and malformed UTF-8 kept as it is (so the space a
 * SentencePiece normalizer put before the text is not counted, and a byte
 * token counts 1). The byte tokenizer gives n. */
int al_tok_text_bytes(const al_tokenizer *t, const int *ids, int n, size_t *bytes, al_err *err);

#endif
