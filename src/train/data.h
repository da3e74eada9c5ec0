/*
 * data.h: corpora. A byte corpus (al_corpus) is the whole file in memory,
 * split deterministically: the first (1 - val_fraction) of the bytes train,
 * the rest validate. The default corpus is the King James Bible printed by
 * Debian's `bible` program (package bible-kjv), cached to a file on first use.
 *
 * What a language model trains on is the corpus as token ids (al_token_data):
 * for a byte model (no tokenizer.json) the ids are the bytes, split as the
 * byte corpus; with a tokenizer.json the whole text is encoded once (with the
 * BOS/EOS the tokenizer adds, so the ids are those `attnlab tokenize --file`
 * prints) and the first (1 - val_fraction) of the ids train, the rest
 * validate. That encoding is cached in one file beside the run
 * (AL_TOKEN_CACHE: a header with the key, a 64-bit hash of the tokenizer
 * files and the text, then the ids as int32), reused while the key matches
 * and the ids check, written again otherwise.
 */
#ifndef AL_DATA_H
#define AL_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "../core/core.h"
#include "../tok/tokenizer.h"

typedef struct al_corpus {
    uint8_t *bytes;
    size_t n;        /* total bytes */
    size_t n_train;  /* [0, n_train) trains, [n_train, n) validates */
    char *path;      /* the file it came from (malloc'd) */
} al_corpus;

/* path NULL or "" = the default corpus. Refuses empty or too-short files
 * (each split needs at least min_split + 1 bytes). */
int al_corpus_load(al_corpus *c, const char *path, double val_fraction, int min_split, al_err *err);
void al_corpus_free(al_corpus *c);
/* Path of the cached default corpus (malloc'd; NULL on failure, err says
 * why), creating it (atomically) if needed. */
char *al_default_corpus_path(al_err *err);

/* Draws B random windows of T+1 token ids from [lo, hi): inputs[B*T], targets[B*T]. */
void al_sample_batch(const int *ids, size_t lo, size_t hi, int B, int T, al_rng *rng, int *inputs, int *targets);

/* ---- the corpus as token ids ---- */

#define AL_TOKEN_CACHE "data_tokens.bin" /* the cache's file name in its directory */

/* Where a token corpus came from (al_token_data.source). */
typedef enum { AL_TOKENS_BYTES, AL_TOKENS_ENCODED, AL_TOKENS_CACHED } al_token_source;

typedef struct al_token_data {
    int *ids;
    size_t n;            /* ids */
    size_t n_train;      /* [0, n_train) trains, [n_train, n) validates */
    size_t text_bytes;   /* bytes of the text */
    al_tokenizer *tok;   /* the text's tokenizer (al_tok_bytes() for a byte model) */
    uint64_t key;        /* hash of the tokenizer files and the text (0: bytes) */
    al_token_source source;
    char *path;          /* the text file (malloc'd) */
} al_token_data;

/* The corpus text_path (NULL or "": the default corpus) as ids of the
 * tokenizer in tok_dir (al_tok_open_dir: none there = bytes). With a
 * tokenizer.json the encoding is read from cache_dir/AL_TOKEN_CACHE when
 * its key matches, else encoded, and then written there when write_cache
 * (cache_dir NULL: no cache). Refused in one line: a tokenizer with more ids
 * than the model's vocab, an id >= vocab, a split shorter than min_split + 1
 * ids, text a tokenizer.json cannot encode. */
int al_token_data_load(al_token_data *d, const char *text_path, const char *tok_dir, const char *cache_dir,
                       int write_cache, double val_fraction, int min_split, int vocab, al_err *err);
void al_token_data_free(al_token_data *d);
/* Copies from_dir's tokenizer files (tokenizer.json, tokenizer_config.json)
 * into to_dir, atomically, and removes those to_dir has that from_dir lacks:
 * a run started from another run's weights takes its tokenizer. */
int al_tokenizer_copy(const char *from_dir, const char *to_dir, al_err *err);
/* The bytes of text that the predictions of ids[1..count] of an encoding by
 * t cover (the first id is never predicted; al_tok_text_bytes): count itself
 * for the byte tokenizer. What bits per byte divide by. */
int al_predicted_bytes(const al_tokenizer *t, const int *ids, size_t count, size_t *bytes, al_err *err);

#endif
