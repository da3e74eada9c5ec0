/*
 * tok_internal.h: the inside of an al_tokenizer, shared by the files of
 * src/tok (load.c reads tokenizer.json into it, encode.c / decode.c run it,
 * regex.c the Split patterns' regex engine, pretok.c GPT-2's byte map and
 * pattern, bpe.c the hash tables and the merge loop).
 *
 * Data structure: a tokenizer.json becomes
 *   - the id table: for each id its token string as tokenizer.json spells it
 *     (byte-level alphabet, "▁", "<0xNN>"), its raw piece bytes (what the id
 *     stands for in text) and flags (added, special); every string lives in
 *     one arena owned by the tokenizer;
 *   - the model: a string -> id hash map of the BPE vocabulary and a
 *     (left id, right id) -> (rank, merged id) hash map of the merges, plus
 *     the unknown-token and byte-fallback settings;
 *   - the pipeline, flattened: a list of normalizer steps, a list of
 *     pre-tokenizer steps and a list of decoder steps (Sequence nodes are
 *     expanded at load time);
 *   - the added tokens in two matchers (raw text and normalized text), each
 *     indexed by first byte with the longest candidates first;
 *   - the special tokens added around a text (prefix, suffix) and BOS/EOS.
 * The byte tokenizer is the same struct with is_bytes set and nothing else.
 */
#ifndef AL_TOK_INTERNAL_H
#define AL_TOK_INTERNAL_H

#include <stdint.h>

#include "regex.h"
#include "tokenizer.h"

/* ---- hash maps (bpe.c) ---- */

/* string -> id; keys point into memory the owner keeps alive */
typedef struct tok_strmap {
    struct tok_strmap_slot {
        const char *key;
        uint32_t len;
        int32_t val;
    } *slots;
    size_t cap, n; /* cap: a power of two */
} tok_strmap;

int tok_strmap_init(tok_strmap *m, size_t expected);
void tok_strmap_free(tok_strmap *m);
/* Inserts or overwrites; -1 when out of memory. */
int tok_strmap_put(tok_strmap *m, const char *key, size_t len, int val);
/* The value, or -1. */
int tok_strmap_get(const tok_strmap *m, const char *key, size_t len);

/* (a, b) -> (rank, merged id) */
typedef struct tok_pairmap {
    struct tok_pair_slot {
        uint64_t key; /* a << 32 | b, plus one so that 0 means empty */
        int32_t rank, merged;
    } *slots;
    size_t cap, n;
} tok_pairmap;

int tok_pairmap_init(tok_pairmap *m, size_t expected);
void tok_pairmap_free(tok_pairmap *m);
/* Inserts or overwrites (a pair listed twice keeps its last rank, as
 * Hugging Face's merge map does); -1 when out of memory. */
int tok_pairmap_put(tok_pairmap *m, int a, int b, int rank, int merged);
/* 1 and (rank, merged) if the pair merges, else 0. */
int tok_pairmap_get(const tok_pairmap *m, int a, int b, int *rank, int *merged);

/* ---- the pipeline ---- */

typedef enum { NORM_NFC, NORM_PREPEND, NORM_REPLACE } tok_norm_kind;
typedef struct tok_norm {
    tok_norm_kind kind;
    const char *a, *b; /* PREPEND: a; REPLACE: a -> b */
    size_t alen, blen;
} tok_norm;

/* What Split does with the matches (Hugging Face's SplitDelimiterBehavior):
 * X(enum suffix, tokenizer.json name). */
#define TOK_SPLIT_BEHAVIORS(X) \
    X(REMOVED, "Removed") X(ISOLATED, "Isolated") X(MERGED_PREVIOUS, "MergedWithPrevious") \
    X(MERGED_NEXT, "MergedWithNext") X(CONTIGUOUS, "Contiguous")
typedef enum {
#define TOK_SPLIT_ENUM(e, name) SPLIT_##e,
    TOK_SPLIT_BEHAVIORS(TOK_SPLIT_ENUM)
#undef TOK_SPLIT_ENUM
} tok_split_behavior;

typedef enum { PRE_SPLIT, PRE_BYTELEVEL, PRE_METASPACE } tok_pre_kind;
typedef enum { PREPEND_ALWAYS, PREPEND_FIRST, PREPEND_NEVER } tok_prepend;
typedef struct tok_pre {
    tok_pre_kind kind;
    tok_regex *re;            /* SPLIT: its pattern (a String compiled as a literal); BYTELEVEL with
                                 use_regex: GPT-2's; owned */
    tok_split_behavior behavior; /* SPLIT (BYTELEVEL: ISOLATED) */
    int invert;               /* SPLIT */
    int use_regex;            /* BYTELEVEL */
    int add_prefix_space;     /* BYTELEVEL */
    uint32_t replacement;     /* METASPACE */
    tok_prepend prepend;      /* METASPACE */
    int split;                /* METASPACE */
} tok_pre;

typedef enum { DEC_BYTELEVEL, DEC_REPLACE, DEC_BYTEFALLBACK, DEC_FUSE, DEC_STRIP, DEC_METASPACE } tok_dec_kind;
typedef struct tok_dec {
    tok_dec_kind kind;
    const char *a, *b;        /* REPLACE: a -> b */
    size_t alen, blen;
    uint32_t ch;              /* STRIP: the character; METASPACE: the replacement */
    int start, stop;          /* STRIP */
    tok_prepend prepend;      /* METASPACE */
} tok_dec;

/* One added token as a matcher sees it. */
typedef struct tok_added {
    const char *text;         /* content, or its normalized form in the normalized matcher */
    size_t len;
    int id, lstrip, rstrip;
} tok_added;

typedef struct tok_matcher {
    tok_added *tokens;        /* sorted by first byte, then longest first */
    int n;
    int first[257];           /* tokens with first byte c: [first[c], first[c + 1]) */
} tok_matcher;

enum { TOK_ADDED = 1, TOK_SPECIAL = 2 };
enum { TOK_KIND_BYTES, TOK_KIND_BYTELEVEL, TOK_KIND_SENTENCEPIECE, TOK_KIND_BPE };

struct al_tokenizer {
    int is_bytes, kind;
    int vocab_size;
    const char **tok_str;     /* [vocab_size]: the token as tokenizer.json spells it; NULL: no such id */
    uint32_t *tok_len;
    const char **piece;       /* [vocab_size]: raw bytes it stands for */
    uint32_t *piece_len;
    unsigned char *flags;     /* [vocab_size]: TOK_ADDED, TOK_SPECIAL */

    tok_strmap vocab;         /* the BPE model's vocabulary */
    tok_pairmap merges;
    int unk_id;               /* -1: none (unknown characters are dropped, as Hugging Face does) */
    int fuse_unk, byte_fallback, ignore_merges;
    int byte_id[256];         /* "<0xNN>" ids, -1 where missing */

    tok_norm *norms;
    int n_norms;
    tok_pre *pres;
    int n_pres;
    tok_dec *decs;
    int n_decs, has_decoder;

    tok_matcher raw_added, norm_added;

    int *prefix, *suffix;     /* special ids added around a text */
    int n_prefix, n_suffix;
    int bos, eos;

    struct tok_block *blocks; /* the arena holding every string above (load.c) */
};

/* ---- loading (load.c) ---- */

/* A copy of s[0..n) (NUL-terminated) in t's arena; NULL when out of memory. */
const char *tok_intern(al_tokenizer *t, const char *s, size_t n);

/* ---- model.vocab and model.merges read from the raw text (rawjson.c) ---- */

typedef struct {
    const char *p, *end;
} tok_raw_span;

/* The readers' answers besides 0 and a callback's -1: a form they leave to
 * cJSON, out of memory. Ids are below TOK_MAX_VOCAB (16.7M: far beyond any
 * real vocabulary, small enough to allocate). */
enum { TOK_RAW_FALLBACK = 1, TOK_RAW_NOMEM = 2, TOK_MAX_VOCAB = 1 << 24 };
/* The spans of the values of model.vocab and model.merges in text[0..len)
 * (first occurrences): 0, or -1 when the text is not an object holding them. */
int tok_raw_model_spans(const char *text, size_t len, tok_raw_span *vocab, tok_raw_span *merges);
/* About how many entries the vocabulary / merges span holds (from its
 * quotes), to size the hash tables. */
size_t tok_raw_count(tok_raw_span span);
/* Each token -> id entry (id: 0..TOK_MAX_VOCAB - 1), in file order. */
typedef int (*tok_raw_vocab_fn)(void *ctx, const char *token, size_t len, long id);
/* Each merge: an "a b" string as (s, n, NULL, 0), a pair as (a, alen, b, blen). */
typedef int (*tok_raw_merge_fn)(void *ctx, const char *a, size_t alen, const char *b, size_t blen);
/* 0, TOK_RAW_FALLBACK, TOK_RAW_NOMEM, or the -1 of a callback (which
 * reported its error). */
int tok_raw_vocab(tok_raw_span span, tok_raw_vocab_fn fn, void *ctx);
int tok_raw_merges(tok_raw_span span, tok_raw_merge_fn fn, void *ctx);

/* ---- encoding and decoding (encode.c, decode.c) ---- */

/* Runs the normalizer steps over s[0..n): a malloc'd, NUL-terminated string. */
int tok_normalize(const al_tokenizer *t, const char *s, size_t n, char **out, size_t *out_len);

/* The decoder over ids[0..n). piece_mode: decode each token on its own, as
 * not the first of a text, without Strip (the raw pieces). lossy: malformed
 * UTF-8 becomes U+FFFD as Hugging Face decodes; else bytes stay as they are.
 * Ids must be valid. Returns 0 or -1 (out of memory). */
int tok_decode_ids(const al_tokenizer *t, const int *ids, int n, int skip_special, int piece_mode, int lossy,
                   char **out, size_t *out_len);

/* ---- pre-tokenizer data (pretok.c) ---- */

/* GPT-2's pre-tokenizer regex, which ByteLevel with use_regex splits by. */
extern const char tok_gpt2_regex[];
/* GPT-2's bytes_to_unicode: byte -> code point, and back (-1: not a byte's) */
uint32_t tok_byte_to_cp(unsigned char b);
int tok_cp_to_byte(uint32_t cp);

/* ---- BPE (bpe.c) ---- */

/* Growable int array. */
typedef struct tok_ids {
    int *v;
    size_t n, cap;
} tok_ids;
int tok_ids_push(tok_ids *a, int id);

/* A list of byte strings in one buffer (pre-tokenized pieces, decoder
 * tokens): string i is buf[s[i].off .. + s[i].len), with a flag (the piece
 * starts the text, for Metaspace's "first"). Take pointers into buf only once
 * the list is complete: appending may move it. */
typedef struct tok_span {
    size_t off, len;
    int flag;
} tok_span;
typedef struct tok_strlist {
    char *buf;
    size_t len, cap;
    tok_span *s;
    size_t n, cap_s;
} tok_strlist;
/* Starts a new, empty string; -1 when out of memory. */
int tok_sl_begin(tok_strlist *l, int flag);
/* Appends bytes to the last string; -1 when out of memory. */
int tok_sl_append(tok_strlist *l, const char *s, size_t n);
/* tok_sl_begin + tok_sl_append. */
int tok_sl_add(tok_strlist *l, const char *s, size_t n, int flag);
void tok_sl_free(tok_strlist *l);

/* Appends the ids of one pre-tokenized word s[0..len) (UTF-8). -1 only when
 * out of memory. */
int tok_bpe_word(const al_tokenizer *t, const char *s, size_t len, tok_ids *out);

#endif
