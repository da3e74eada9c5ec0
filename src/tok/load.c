/*
 * load.c: reading a Hugging Face tokenizer.json (and tokenizer_config.json)
 * into an al_tokenizer (tok_internal.h), and the byte tokenizer.
 *
 * Loading validates everything it will later rely on, so encode and decode
 * never meet a bad id: the model must be BPE with an object vocabulary of
 * non-negative integer ids, merges must name vocabulary tokens whose
 * concatenation is a token too, added tokens need an id and non-empty
 * content. Every normalizer, pre-tokenizer, post-processor and decoder node is
 * either understood or refused by name (docs/tokenizers.md lists them), and
 * Split patterns are compiled here (regex.c), once. Each error is one line
 * that starts with the file's path.
 *
 * Strings (tokens, pieces, added-token texts) are copied into an arena of
 * large blocks owned by the tokenizer, so freeing is a walk over the blocks.
 */
#include <cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/io.h"
#include "tok_internal.h"
#include "unicode.h"


/* ---- the arena ---- */

struct tok_block {
    struct tok_block *next;
    size_t used, cap;
    char data[];
};

const char *tok_intern(al_tokenizer *t, const char *s, size_t n) {
    struct tok_block *b = t->blocks;
    if (!b || b->cap - b->used < n + 1) {
        size_t cap = n + 1 > (1u << 20) ? n + 1 : (1u << 20);
        b = malloc(sizeof *b + cap);
        if (!b) return NULL;
        b->next = t->blocks;
        b->used = 0;
        b->cap = cap;
        t->blocks = b;
    }
    char *p = b->data + b->used;
    memcpy(p, s, n);
    p[n] = 0;
    b->used += n + 1;
    return p;
}

/* ---- the byte tokenizer ---- */

/* Its tables are constant, so the one shared instance needs no set-up and
 * no lock: piece i is the byte i. */
#define AL_B4(i) (i), (i) + 1, (i) + 2, (i) + 3
#define AL_B16(i) AL_B4(i), AL_B4((i) + 4), AL_B4((i) + 8), AL_B4((i) + 12)
#define AL_B64(i) AL_B16(i), AL_B16((i) + 16), AL_B16((i) + 32), AL_B16((i) + 48)
static const unsigned char byte_values[256] = {AL_B64(0), AL_B64(64), AL_B64(128), AL_B64(192)};
#define AL_P4(i) (const char *)&byte_values[i], (const char *)&byte_values[(i) + 1], \
                 (const char *)&byte_values[(i) + 2], (const char *)&byte_values[(i) + 3]
#define AL_P16(i) AL_P4(i), AL_P4((i) + 4), AL_P4((i) + 8), AL_P4((i) + 12)
#define AL_P64(i) AL_P16(i), AL_P16((i) + 16), AL_P16((i) + 32), AL_P16((i) + 48)
static const char *byte_pieces[256] = {AL_P64(0), AL_P64(64), AL_P64(128), AL_P64(192)};
#define AL_ONE4 1, 1, 1, 1
#define AL_ONE16 AL_ONE4, AL_ONE4, AL_ONE4, AL_ONE4
#define AL_ONE64 AL_ONE16, AL_ONE16, AL_ONE16, AL_ONE16
static uint32_t byte_lens[256] = {AL_ONE64, AL_ONE64, AL_ONE64, AL_ONE64};
static al_tokenizer byte_tok = {.is_bytes = 1, .kind = TOK_KIND_BYTES, .vocab_size = 256, .unk_id = -1,
                                .bos = -1, .eos = -1, .piece = byte_pieces, .piece_len = byte_lens};

al_tokenizer *al_tok_bytes(void) { return &byte_tok; }

void al_tok_free(al_tokenizer *t) {
    if (!t || t == &byte_tok) return;
    free(t->tok_str);
    free(t->tok_len);
    free(t->piece);
    free(t->piece_len);
    free(t->flags);
    tok_strmap_free(&t->vocab);
    tok_pairmap_free(&t->merges);
    free(t->norms);
    for (int i = 0; i < t->n_pres; i++) tok_regex_free(t->pres[i].re);
    free(t->pres);
    free(t->decs);
    free(t->raw_added.tokens);
    free(t->norm_added.tokens);
    free(t->prefix);
    free(t->suffix);
    for (struct tok_block *b = t->blocks, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    free(t);
}

/* ---- JSON helpers ---- */

/* The loader's state: the tokenizer being built and where errors come from. */
typedef struct loader {
    al_tokenizer *t;
    const char *path;
    al_err *err;
    tok_raw_span raw_vocab, raw_merges; /* set: model.vocab / merges are read from the text (rawjson.c) */
    int fallback;                       /* the raw readers met a form they leave to cJSON: load again without */
    long max_id, rank;                  /* while reading the vocabulary / the merges */
    char *buf;                          /* the merge being checked, a ‖ b */
    size_t cap;
} loader;

/* "PATH: message" into err; returns -1. */
static int fail(loader *ld, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(loader *ld, const char *fmt, ...) {
    char msg[AL_ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    al_vstrfmt(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return al_errf(ld->err, "%s: %s", ld->path, msg);
}

/* A JSON value's text cut to fit an error line. */
static void shown(const char *s, char *buf, size_t cap) {
    size_t n = strlen(s);
    if (n < cap) {
        memcpy(buf, s, n + 1);
        return;
    }
    size_t k = cap - 4;
    while (k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80) k--; /* do not cut a character */
    memcpy(buf, s, k);
    memcpy(buf + k, "...", 4);
}

static const cJSON *field(const cJSON *o, const char *name) { return cJSON_GetObjectItemCaseSensitive(o, name); }
static int is_null(const cJSON *v) { return !v || cJSON_IsNull(v); }

/* A boolean field: *out = its value, or dflt when absent or null. */
static int get_bool(loader *ld, const cJSON *o, const char *what, const char *name, int dflt, int *out) {
    const cJSON *v = field(o, name);
    if (is_null(v)) {
        *out = dflt;
        return 0;
    }
    if (!cJSON_IsBool(v)) return fail(ld, "%s.%s must be true or false", what, name);
    *out = cJSON_IsTrue(v);
    return 0;
}

/* A non-negative integer (JSON number without a fraction) below limit. */
static int get_index(const cJSON *v, long limit, long *out) {
    if (!cJSON_IsNumber(v)) return -1;
    double d = v->valuedouble;
    if (!(d >= 0) || d != floor(d) || d >= (double)limit) return -1;
    *out = (long)d;
    return 0;
}

/* A string field (required unless optional; absent/null gives NULL). */
static int get_string(loader *ld, const cJSON *o, const char *what, const char *name, int optional,
                      const char **out) {
    const cJSON *v = field(o, name);
    *out = NULL;
    if (is_null(v)) return optional ? 0 : fail(ld, "%s has no \"%s\"", what, name);
    if (!cJSON_IsString(v)) return fail(ld, "%s.%s must be a string", what, name);
    *out = v->valuestring;
    return 0;
}

/* A one-character string field (the Metaspace replacement, Strip content). */
static int get_char(loader *ld, const cJSON *o, const char *what, const char *name, uint32_t *out) {
    const char *s;
    if (get_string(ld, o, what, name, 0, &s)) return -1;
    size_t n = strlen(s);
    int l = al_utf8_decode((const unsigned char *)s, n, out);
    if (!l || (size_t)l != n) return fail(ld, "%s.%s must be one character, got '%s'", what, name, s);
    return 0;
}

/* A {"String": s} pattern (Replace normalizers and decoders); a Regex one is
 * refused, since only literal replacements are implemented. */
static int get_literal_pattern(loader *ld, const cJSON *o, const char *what, const char **out) {
    const cJSON *p = field(o, "pattern");
    if (!cJSON_IsObject(p)) return fail(ld, "%s has no \"pattern\" object", what);
    const cJSON *s = field(p, "String"), *r = field(p, "Regex");
    if (cJSON_IsString(r)) {
        char buf[96];
        shown(r->valuestring, buf, sizeof buf);
        return fail(ld, "%s with a Regex pattern '%s' is not supported (only String patterns)", what, buf);
    }
    if (!cJSON_IsString(s)) return fail(ld, "%s.pattern must be {\"String\": ...}", what);
    if (!s->valuestring[0]) return fail(ld, "%s.pattern is an empty string", what);
    *out = s->valuestring;
    return 0;
}

/* A node's "type", or NULL with an error. */
static const char *node_type(loader *ld, const cJSON *node, const char *what) {
    if (!cJSON_IsObject(node)) {
        fail(ld, "%s must be an object or null", what);
        return NULL;
    }
    const cJSON *ty = field(node, "type");
    if (!cJSON_IsString(ty)) {
        fail(ld, "%s has no \"type\" string", what);
        return NULL;
    }
    return ty->valuestring;
}

/* Appends one element to a step array (norms, pres, decs). */
static int grow(loader *ld, void **arr, int *n, size_t size) {
    void *p = realloc(*arr, size * (size_t)(*n + 1));
    if (!p) return fail(ld, "out of memory");
    *arr = p;
    memset((char *)p + size * (size_t)*n, 0, size);
    (*n)++;
    return 0;
}

/* ---- the pipeline ---- */

static int load_normalizer(loader *ld, const cJSON *node, int depth) {
    al_tokenizer *t = ld->t;
    if (is_null(node)) return 0;
    const char *type = node_type(ld, node, "normalizer");
    if (!type) return -1;
    if (!strcmp(type, "Sequence")) {
        const cJSON *list = field(node, "normalizers"), *x;
        if (!cJSON_IsArray(list)) return fail(ld, "normalizer Sequence has no \"normalizers\" array");
        if (depth > 8) return fail(ld, "normalizer Sequences nested too deep");
        cJSON_ArrayForEach(x, list) if (load_normalizer(ld, x, depth + 1)) return -1;
        return 0;
    }
    tok_norm n = {0};
    if (!strcmp(type, "NFC")) {
        n.kind = NORM_NFC;
    } else if (!strcmp(type, "Prepend")) {
        n.kind = NORM_PREPEND;
        if (get_string(ld, node, "normalizer Prepend", "prepend", 0, &n.a)) return -1;
    } else if (!strcmp(type, "Replace")) {
        n.kind = NORM_REPLACE;
        if (get_literal_pattern(ld, node, "normalizer Replace", &n.a) ||
            get_string(ld, node, "normalizer Replace", "content", 0, &n.b))
            return -1;
    } else {
        return fail(ld, "unsupported normalizer '%s' (attnlab supports NFC, Prepend, Replace and Sequence)", type);
    }
    /* interned: the strings point into the JSON, freed after loading */
    if ((n.a && !(n.a = tok_intern(t, n.a, strlen(n.a)))) || (n.b && !(n.b = tok_intern(t, n.b, strlen(n.b)))))
        return fail(ld, "out of memory");
    n.alen = n.a ? strlen(n.a) : 0;
    n.blen = n.b ? strlen(n.b) : 0;
    if (grow(ld, (void **)&t->norms, &t->n_norms, sizeof n)) return -1;
    t->norms[t->n_norms - 1] = n;
    return 0;
}

/* The prepend_scheme of a Metaspace node (or the older add_prefix_space). */
static int get_prepend(loader *ld, const cJSON *node, const char *what, tok_prepend *out) {
    const cJSON *ps = field(node, "prepend_scheme");
    if (cJSON_IsString(ps)) {
        if (!strcmp(ps->valuestring, "always")) *out = PREPEND_ALWAYS;
        else if (!strcmp(ps->valuestring, "first")) *out = PREPEND_FIRST;
        else if (!strcmp(ps->valuestring, "never")) *out = PREPEND_NEVER;
        else return fail(ld, "%s.prepend_scheme '%s' is not always, first or never", what, ps->valuestring);
        return 0;
    }
    if (!is_null(ps)) return fail(ld, "%s.prepend_scheme must be a string", what);
    int add = 0;
    if (get_bool(ld, node, what, "add_prefix_space", 1, &add)) return -1;
    *out = add ? PREPEND_ALWAYS : PREPEND_NEVER;
    return 0;
}

/* Compiles a Split pattern ({"Regex": r} or {"String": s}) into p->re. */
static int compile_split_pattern(loader *ld, const cJSON *node, tok_pre *p) {
    const cJSON *pat = field(node, "pattern");
    const cJSON *re = cJSON_IsObject(pat) ? field(pat, "Regex") : NULL;
    const cJSON *str = cJSON_IsObject(pat) ? field(pat, "String") : NULL;
    const cJSON *v = cJSON_IsString(re) ? re : str;
    if (!cJSON_IsString(v)) return fail(ld, "pre_tokenizer Split.pattern must be {\"Regex\": ...} or {\"String\": ...}");
    char why[200], buf[120];
    p->re = tok_regex_compile(v->valuestring, strlen(v->valuestring), v == str, why, sizeof why);
    if (p->re) return 0;
    shown(v->valuestring, buf, sizeof buf);
    return fail(ld, "unsupported pre_tokenizer Split %s '%s': %s", v == str ? "string" : "regex", buf, why);
}

/* A Split behavior name (TOK_SPLIT_BEHAVIORS). */
static int split_behavior(loader *ld, const char *name, tok_split_behavior *out) {
    static const struct {
        const char *name;
        tok_split_behavior b;
    } names[] = {
#define TOK_SPLIT_ROW(e, n) {n, SPLIT_##e},
        TOK_SPLIT_BEHAVIORS(TOK_SPLIT_ROW)
#undef TOK_SPLIT_ROW
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(name, names[i].name)) {
            *out = names[i].b;
            return 0;
        }
    return fail(ld, "unsupported pre_tokenizer Split behavior '%s' (Removed, Isolated, MergedWithPrevious, "
                "MergedWithNext or Contiguous)", name);
}

static int load_pre_tokenizer(loader *ld, const cJSON *node, int depth) {
    al_tokenizer *t = ld->t;
    if (is_null(node)) return 0;
    const char *type = node_type(ld, node, "pre_tokenizer");
    if (!type) return -1;
    if (!strcmp(type, "Sequence")) {
        const cJSON *list = field(node, "pretokenizers"), *x;
        if (!cJSON_IsArray(list)) return fail(ld, "pre_tokenizer Sequence has no \"pretokenizers\" array");
        if (depth > 8) return fail(ld, "pre_tokenizer Sequences nested too deep");
        cJSON_ArrayForEach(x, list) if (load_pre_tokenizer(ld, x, depth + 1)) return -1;
        return 0;
    }
    tok_pre p = {0};
    if (!strcmp(type, "Split")) {
        p.kind = PRE_SPLIT;
        const char *behavior;
        p.behavior = SPLIT_ISOLATED;
        if (get_string(ld, node, "pre_tokenizer Split", "behavior", 1, &behavior) ||
            (behavior && split_behavior(ld, behavior, &p.behavior)) ||
            get_bool(ld, node, "pre_tokenizer Split", "invert", 0, &p.invert) || compile_split_pattern(ld, node, &p))
            return -1;
    } else if (!strcmp(type, "ByteLevel")) {
        p.kind = PRE_BYTELEVEL;
        p.behavior = SPLIT_ISOLATED;
        if (get_bool(ld, node, "pre_tokenizer ByteLevel", "add_prefix_space", 1, &p.add_prefix_space) ||
            get_bool(ld, node, "pre_tokenizer ByteLevel", "use_regex", 1, &p.use_regex))
            return -1;
        char why[200];
        if (p.use_regex && !(p.re = tok_regex_compile(tok_gpt2_regex, strlen(tok_gpt2_regex), 0, why, sizeof why)))
            return fail(ld, "pre_tokenizer ByteLevel: %s", why);
    } else if (!strcmp(type, "Metaspace")) {
        p.kind = PRE_METASPACE;
        if (get_char(ld, node, "pre_tokenizer Metaspace", "replacement", &p.replacement) ||
            get_prepend(ld, node, "pre_tokenizer Metaspace", &p.prepend) ||
            get_bool(ld, node, "pre_tokenizer Metaspace", "split", 1, &p.split))
            return -1;
    } else {
        return fail(ld, "unsupported pre_tokenizer '%s' (attnlab supports Split, ByteLevel, Metaspace and Sequence)",
                    type);
    }
    if (grow(ld, (void **)&t->pres, &t->n_pres, sizeof p)) {
        tok_regex_free(p.re);
        return -1;
    }
    t->pres[t->n_pres - 1] = p;
    return 0;
}

static int load_decoder(loader *ld, const cJSON *node, int depth) {
    al_tokenizer *t = ld->t;
    if (is_null(node)) return 0;
    const char *type = node_type(ld, node, "decoder");
    if (!type) return -1;
    t->has_decoder = 1;
    if (!strcmp(type, "Sequence")) {
        const cJSON *list = field(node, "decoders"), *x;
        if (!cJSON_IsArray(list)) return fail(ld, "decoder Sequence has no \"decoders\" array");
        if (depth > 8) return fail(ld, "decoder Sequences nested too deep");
        cJSON_ArrayForEach(x, list) if (load_decoder(ld, x, depth + 1)) return -1;
        return 0;
    }
    tok_dec d = {0};
    if (!strcmp(type, "ByteLevel")) {
        d.kind = DEC_BYTELEVEL;
    } else if (!strcmp(type, "ByteFallback")) {
        d.kind = DEC_BYTEFALLBACK;
    } else if (!strcmp(type, "Fuse")) {
        d.kind = DEC_FUSE;
    } else if (!strcmp(type, "Replace")) {
        d.kind = DEC_REPLACE;
        if (get_literal_pattern(ld, node, "decoder Replace", &d.a) ||
            get_string(ld, node, "decoder Replace", "content", 0, &d.b))
            return -1;
        d.a = tok_intern(t, d.a, strlen(d.a));
        d.b = tok_intern(t, d.b, strlen(d.b));
        if (!d.a || !d.b) return fail(ld, "out of memory");
        d.alen = strlen(d.a);
        d.blen = strlen(d.b);
    } else if (!strcmp(type, "Strip")) {
        d.kind = DEC_STRIP;
        long start = 0, stop = 0;
        const cJSON *a = field(node, "start"), *b = field(node, "stop");
        if (get_char(ld, node, "decoder Strip", "content", &d.ch)) return -1;
        if ((!is_null(a) && get_index(a, 1 << 20, &start)) || (!is_null(b) && get_index(b, 1 << 20, &stop)))
            return fail(ld, "decoder Strip.start and .stop must be non-negative integers");
        d.start = (int)start;
        d.stop = (int)stop;
    } else if (!strcmp(type, "Metaspace")) {
        d.kind = DEC_METASPACE;
        if (get_char(ld, node, "decoder Metaspace", "replacement", &d.ch) ||
            get_prepend(ld, node, "decoder Metaspace", &d.prepend))
            return -1;
    } else {
        return fail(ld, "unsupported decoder '%s' (attnlab supports ByteLevel, Replace, ByteFallback, Fuse, Strip, "
                    "Metaspace and Sequence)", type);
    }
    if (grow(ld, (void **)&t->decs, &t->n_decs, sizeof d)) return -1;
    t->decs[t->n_decs - 1] = d;
    return 0;
}

/* The id of a token text: an added token's, else the vocabulary's; -1. */
static int token_id(const al_tokenizer *t, const char *s) {
    size_t n = strlen(s);
    for (int id = 0; id < t->vocab_size; id++) /* added tokens are few; scan their flags */
        if ((t->flags[id] & TOK_ADDED) && t->tok_len[id] == n && !memcmp(t->tok_str[id], s, n)) return id;
    return tok_strmap_get(&t->vocab, s, n);
}

/* Appends an id to a prefix or suffix list. */
static int push_id(loader *ld, int **arr, int *n, int id) {
    int *p = realloc(*arr, sizeof *p * (size_t)(*n + 1));
    if (!p) return fail(ld, "out of memory");
    p[(*n)++] = id;
    *arr = p;
    return 0;
}

/* TemplateProcessing: the special tokens its "single" template puts before
 * and after the text ($A). */
static int load_template(loader *ld, const cJSON *node) {
    al_tokenizer *t = ld->t;
    const cJSON *single = field(node, "single"), *specials = field(node, "special_tokens"), *item;
    if (!cJSON_IsArray(single)) return fail(ld, "post_processor TemplateProcessing has no \"single\" array");
    int seen_a = 0;
    cJSON_ArrayForEach(item, single) {
        const cJSON *sp = field(item, "SpecialToken"), *seq = field(item, "Sequence");
        if (cJSON_IsObject(seq)) {
            const char *id;
            if (get_string(ld, seq, "post_processor template Sequence", "id", 0, &id)) return -1;
            if (strcmp(id, "A")) return fail(ld, "post_processor template: the single template names sequence '%s'", id);
            if (seen_a) return fail(ld, "post_processor template: $A appears twice in the single template");
            seen_a = 1;
            continue;
        }
        if (!cJSON_IsObject(sp)) return fail(ld, "post_processor template items must be SpecialToken or Sequence");
        const char *name;
        if (get_string(ld, sp, "post_processor template SpecialToken", "id", 0, &name)) return -1;
        const cJSON *entry = cJSON_IsObject(specials) ? field(specials, name) : NULL;
        const cJSON *ids = cJSON_IsObject(entry) ? field(entry, "ids") : NULL, *x;
        if (!cJSON_IsArray(ids))
            return fail(ld, "post_processor template: special token '%s' is not in special_tokens", name);
        cJSON_ArrayForEach(x, ids) {
            long id;
            if (get_index(x, t->vocab_size, &id))
                return fail(ld, "post_processor template: special token '%s' has an id outside the vocabulary", name);
            if (!t->tok_str[id]) /* a gap in the ids: encoding would emit a token that has no text */
                return fail(ld, "post_processor template: special token '%s' has id %ld, which no token has", name, id);
            if (seen_a ? push_id(ld, &t->suffix, &t->n_suffix, (int)id) : push_id(ld, &t->prefix, &t->n_prefix, (int)id))
                return -1;
        }
    }
    if (!seen_a) return fail(ld, "post_processor template: the single template has no $A");
    return 0;
}

static int load_post_processor(loader *ld, const cJSON *node, int depth) {
    if (is_null(node)) return 0;
    const char *type = node_type(ld, node, "post_processor");
    if (!type) return -1;
    if (!strcmp(type, "Sequence")) {
        const cJSON *list = field(node, "processors"), *x;
        if (!cJSON_IsArray(list)) return fail(ld, "post_processor Sequence has no \"processors\" array");
        if (depth > 8) return fail(ld, "post_processor Sequences nested too deep");
        cJSON_ArrayForEach(x, list) if (load_post_processor(ld, x, depth + 1)) return -1;
        return 0;
    }
    if (!strcmp(type, "ByteLevel")) return 0; /* only trims offsets, which attnlab does not report */
    if (!strcmp(type, "TemplateProcessing")) return load_template(ld, node);
    return fail(ld, "unsupported post_processor '%s' (attnlab supports TemplateProcessing, ByteLevel and Sequence)",
                type);
}

/* ---- the model ---- */

/* One merge (rank ld->rank): an "a b" string when b is NULL, else the pair;
 * both must be tokens and so must their concatenation. */
static int merge_entry(void *ctx, const char *a, size_t alen, const char *b, size_t blen) {
    loader *ld = ctx;
    al_tokenizer *t = ld->t;
    long rank = ld->rank;
    char sa[80], sb[80];
    if (!b) {
        const char *sp = memchr(a, ' ', alen);
        if (!sp || memchr(sp + 1, ' ', alen - (size_t)(sp + 1 - a)) || sp == a || sp + 1 == a + alen)
            return fail(ld, "model.merges[%ld] '%s' is not two tokens separated by one space", rank, a);
        b = sp + 1, blen = alen - (size_t)(sp + 1 - a), alen = (size_t)(sp - a);
    }
    int ia = tok_strmap_get(&t->vocab, a, alen), ib = tok_strmap_get(&t->vocab, b, blen);
    if (ia < 0 || ib < 0) {
        char tmp[160];
        snprintf(tmp, sizeof tmp, "%.*s", (int)(ia < 0 ? alen : blen), ia < 0 ? a : b);
        shown(tmp, sa, sizeof sa);
        return fail(ld, "model.merges[%ld] names '%s', which is not in the vocabulary", rank, sa);
    }
    if (alen + blen + 1 > ld->cap) {
        size_t cap = 2 * (alen + blen + 1);
        char *nb = realloc(ld->buf, cap);
        if (!nb) return fail(ld, "out of memory");
        ld->buf = nb, ld->cap = cap;
    }
    memcpy(ld->buf, a, alen);
    memcpy(ld->buf + alen, b, blen);
    int merged = tok_strmap_get(&t->vocab, ld->buf, alen + blen);
    if (merged < 0) {
        ld->buf[alen + blen] = 0;
        shown(ld->buf, sb, sizeof sb);
        return fail(ld, "model.merges[%ld] makes '%s', which is not in the vocabulary", rank, sb);
    }
    if (tok_pairmap_put(&t->merges, ia, ib, (int)rank, merged)) return fail(ld, "out of memory");
    ld->rank++;
    return 0;
}

/* The merges: from the raw text when the loader found them there, else from
 * the cJSON array ("a b" strings or ["a", "b"] pairs). */
static int load_merges(loader *ld, const cJSON *merges) {
    al_tokenizer *t = ld->t;
    size_t expected = ld->raw_merges.p ? tok_raw_count(ld->raw_merges) : (size_t)cJSON_GetArraySize(merges);
    if (tok_pairmap_init(&t->merges, expected)) return fail(ld, "out of memory");
    ld->rank = 0;
    if (ld->raw_merges.p) {
        int rc = tok_raw_merges(ld->raw_merges, merge_entry, ld);
        if (rc == TOK_RAW_FALLBACK) ld->fallback = 1;
        return rc == TOK_RAW_NOMEM ? fail(ld, "out of memory") : rc ? -1 : 0;
    }
    const cJSON *m;
    cJSON_ArrayForEach(m, merges) {
        const cJSON *x = cJSON_GetArrayItem(m, 0), *y = cJSON_GetArrayItem(m, 1);
        int rc;
        if (cJSON_IsString(m)) rc = merge_entry(ld, m->valuestring, strlen(m->valuestring), NULL, 0);
        else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 && cJSON_IsString(x) && cJSON_IsString(y))
            rc = merge_entry(ld, x->valuestring, strlen(x->valuestring), y->valuestring, strlen(y->valuestring));
        else rc = fail(ld, "model.merges[%ld] must be \"a b\" or [\"a\", \"b\"]", ld->rank);
        if (rc) return -1;
    }
    return 0;
}

/* One added token's fields. */
typedef struct {
    int id, special, lstrip, rstrip, normalized;
    const char *content;
} added_spec;

static int load_added(loader *ld, const cJSON *list, added_spec **out, int *n_out, long *max_id) {
    *out = NULL;
    *n_out = 0;
    if (is_null(list)) return 0;
    if (!cJSON_IsArray(list)) return fail(ld, "added_tokens must be an array");
    int n = cJSON_GetArraySize(list), i = 0;
    added_spec *a = calloc((size_t)(n ? n : 1), sizeof *a);
    if (!a) return fail(ld, "out of memory");
    const cJSON *x;
    cJSON_ArrayForEach(x, list) {
        char what[48];
        snprintf(what, sizeof what, "added_tokens[%d]", i);
        long id;
        int single_word = 0;
        if (!cJSON_IsObject(x)) {
            free(a);
            return fail(ld, "%s must be an object", what);
        }
        if (get_index(field(x, "id"), TOK_MAX_VOCAB, &id)) {
            free(a);
            return fail(ld, "%s.id must be an integer in 0..%d", what, TOK_MAX_VOCAB - 1);
        }
        a[i].id = (int)id;
        if (get_string(ld, x, what, "content", 0, &a[i].content) || get_bool(ld, x, what, "special", 0, &a[i].special) ||
            get_bool(ld, x, what, "lstrip", 0, &a[i].lstrip) || get_bool(ld, x, what, "rstrip", 0, &a[i].rstrip) ||
            get_bool(ld, x, what, "single_word", 0, &single_word)) {
            free(a);
            return -1;
        }
        if (get_bool(ld, x, what, "normalized", !a[i].special, &a[i].normalized)) {
            free(a);
            return -1;
        }
        if (!a[i].content[0]) {
            free(a);
            return fail(ld, "%s has empty content", what);
        }
        if (single_word) {
            char buf[80];
            shown(a[i].content, buf, sizeof buf);
            free(a);
            return fail(ld, "added token '%s' has single_word true, which attnlab does not support", buf);
        }
        if (id > *max_id) *max_id = id;
        i++;
    }
    *out = a;
    *n_out = i;
    return 0;
}

/* Sorts a matcher's tokens by first byte, longest first, and indexes them. */
static int cmp_added(const void *x, const void *y) {
    const tok_added *a = x, *b = y;
    unsigned ca = (unsigned char)a->text[0], cb = (unsigned char)b->text[0];
    if (ca != cb) return ca < cb ? -1 : 1;
    if (a->len != b->len) return a->len > b->len ? -1 : 1;
    return a->id - b->id;
}

static void index_matcher(tok_matcher *m) {
    qsort(m->tokens, (size_t)m->n, sizeof *m->tokens, cmp_added);
    int k = 0;
    for (int c = 0; c <= 256; c++) {
        while (k < m->n && (unsigned char)m->tokens[k].text[0] < c) k++;
        m->first[c] = k;
    }
}

/* The two added-token matchers: raw text (normalized false) and normalized
 * text (normalized true; the content itself normalized, as Hugging Face
 * builds its normalized trie). */
static int build_matchers(loader *ld, const added_spec *a, int n) {
    al_tokenizer *t = ld->t;
    t->raw_added.tokens = calloc((size_t)(n ? n : 1), sizeof(tok_added));
    t->norm_added.tokens = calloc((size_t)(n ? n : 1), sizeof(tok_added));
    if (!t->raw_added.tokens || !t->norm_added.tokens) return fail(ld, "out of memory");
    for (int i = 0; i < n; i++) {
        tok_matcher *m = a[i].normalized ? &t->norm_added : &t->raw_added;
        tok_added *x = &m->tokens[m->n];
        size_t len = strlen(a[i].content);
        const char *text = tok_intern(t, a[i].content, len);
        if (!text) return fail(ld, "out of memory");
        if (a[i].normalized && t->n_norms) {
            char *nt;
            size_t nl;
            if (tok_normalize(t, text, len, &nt, &nl)) return fail(ld, "out of memory");
            text = nl ? tok_intern(t, nt, nl) : NULL;
            len = nl;
            free(nt);
            if (nl && !text) return fail(ld, "out of memory");
            if (!text) continue; /* normalizes to nothing: can never match */
        }
        x->text = text;
        x->len = len;
        x->id = a[i].id;
        x->lstrip = a[i].lstrip;
        x->rstrip = a[i].rstrip;
        m->n++;
    }
    index_matcher(&t->raw_added);
    index_matcher(&t->norm_added);
    return 0;
}

/* One vocabulary entry token -> id. */
static int vocab_entry(void *ctx, const char *token, size_t len, long id) {
    loader *ld = ctx;
    if (len == 0) return fail(ld, "model.vocab has an empty token");
    const char *key = tok_intern(ld->t, token, len);
    if (!key || tok_strmap_put(&ld->t->vocab, key, len, (int)id)) return fail(ld, "out of memory");
    if (id > ld->max_id) ld->max_id = id;
    return 0;
}

static int load_model(loader *ld, const cJSON *root, const added_spec *added, int n_added, long max_added) {
    al_tokenizer *t = ld->t;
    const cJSON *model = field(root, "model");
    if (!cJSON_IsObject(model)) return fail(ld, "no \"model\" object");
    const cJSON *type = field(model, "type");
    if (!is_null(type) && !cJSON_IsString(type)) return fail(ld, "model.type must be a string");
    if (cJSON_IsString(type) && strcmp(type->valuestring, "BPE"))
        return fail(ld, "unsupported model type '%s' (attnlab reads BPE tokenizers)", type->valuestring);
    const cJSON *vocab = field(model, "vocab"), *merges = field(model, "merges");
    if (!cJSON_IsObject(vocab)) return fail(ld, "model.vocab must be an object of token -> id");
    if (!is_null(merges) && !cJSON_IsArray(merges)) return fail(ld, "model.merges must be an array");
    const cJSON *dropout = field(model, "dropout");
    if (!is_null(dropout) && (!cJSON_IsNumber(dropout) || dropout->valuedouble != 0))
        return fail(ld, "model.dropout must be null or 0 (BPE dropout is for training)");
    const char *prefix, *suffix, *unk;
    if (get_string(ld, model, "model", "continuing_subword_prefix", 1, &prefix) ||
        get_string(ld, model, "model", "end_of_word_suffix", 1, &suffix) ||
        get_string(ld, model, "model", "unk_token", 1, &unk) ||
        get_bool(ld, model, "model", "fuse_unk", 0, &t->fuse_unk) ||
        get_bool(ld, model, "model", "byte_fallback", 0, &t->byte_fallback) ||
        get_bool(ld, model, "model", "ignore_merges", 0, &t->ignore_merges))
        return -1;
    if ((prefix && prefix[0]) || (suffix && suffix[0]))
        return fail(ld, "unsupported BPE model with continuing_subword_prefix or end_of_word_suffix");

    /* vocabulary: from the raw text when the loader found it there */
    size_t expected = ld->raw_vocab.p ? tok_raw_count(ld->raw_vocab) : (size_t)cJSON_GetArraySize(vocab);
    if (tok_strmap_init(&t->vocab, expected)) return fail(ld, "out of memory");
    ld->max_id = max_added;
    if (ld->raw_vocab.p) {
        int rc = tok_raw_vocab(ld->raw_vocab, vocab_entry, ld);
        if (rc == TOK_RAW_FALLBACK) ld->fallback = 1;
        if (rc) return rc == TOK_RAW_NOMEM ? fail(ld, "out of memory") : -1;
    }
    const cJSON *v;
    cJSON_ArrayForEach(v, vocab) {
        long id;
        char buf[80];
        if (get_index(v, TOK_MAX_VOCAB, &id)) {
            shown(v->string, buf, sizeof buf);
            return fail(ld, "model.vocab['%s'] must be an integer id in 0..%d", buf, TOK_MAX_VOCAB - 1);
        }
        if (vocab_entry(ld, v->string, strlen(v->string), id)) return -1;
    }
    long max_id = ld->max_id;
    if (max_id < 0) return fail(ld, "the vocabulary is empty");
    t->vocab_size = (int)max_id + 1;
    size_t V = (size_t)t->vocab_size;
    t->tok_str = calloc(V, sizeof *t->tok_str);
    t->tok_len = calloc(V, sizeof *t->tok_len);
    t->piece = calloc(V, sizeof *t->piece);
    t->piece_len = calloc(V, sizeof *t->piece_len);
    t->flags = calloc(V, 1);
    if (!t->tok_str || !t->tok_len || !t->piece || !t->piece_len || !t->flags) return fail(ld, "out of memory");
    for (size_t i = 0; i < t->vocab.cap; i++) {
        const struct tok_strmap_slot *s = &t->vocab.slots[i];
        if (!s->key) continue;
        t->tok_str[s->val] = s->key;
        t->tok_len[s->val] = s->len;
    }
    for (int i = 0; i < n_added; i++) {
        size_t len = strlen(added[i].content);
        const char *s = tok_intern(t, added[i].content, len);
        if (!s) return fail(ld, "out of memory");
        t->tok_str[added[i].id] = s;
        t->tok_len[added[i].id] = (uint32_t)len;
        t->flags[added[i].id] = TOK_ADDED | (added[i].special ? TOK_SPECIAL : 0);
    }
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        t->byte_id[b] = tok_strmap_get(&t->vocab, name, 6);
    }
    t->unk_id = -1;
    if (unk) {
        t->unk_id = token_id(t, unk);
        if (t->unk_id < 0) {
            char buf[80];
            shown(unk, buf, sizeof buf);
            return fail(ld, "model.unk_token '%s' is not in the vocabulary", buf);
        }
    }
    return merges ? load_merges(ld, merges) : (tok_pairmap_init(&t->merges, 0) ? fail(ld, "out of memory") : 0);
}

/* Every id's piece: the decoder run on the token alone (tok_decode_ids'
 * piece mode), interned. */
static int build_pieces(loader *ld) {
    al_tokenizer *t = ld->t;
    for (int id = 0; id < t->vocab_size; id++) {
        if (!t->tok_str[id]) continue;
        char *s;
        size_t n;
        if (tok_decode_ids(t, &id, 1, 0, 1, 0, &s, &n)) return fail(ld, "out of memory");
        t->piece[id] = tok_intern(t, s, n);
        t->piece_len[id] = (uint32_t)n;
        free(s);
        if (!t->piece[id]) return fail(ld, "out of memory");
    }
    return 0;
}

/* bos_token / eos_token of tokenizer_config.json: a string, {"content": s}
 * or null. *id = -1 when absent; a token the vocabulary lacks is an error. */
static int config_token(loader *ld, const cJSON *cfg, const char *name, int *id, int *present) {
    const cJSON *v = field(cfg, name);
    *present = 0;
    if (is_null(v)) return 0;
    const cJSON *content = cJSON_IsObject(v) ? field(v, "content") : v;
    if (!cJSON_IsString(content)) return fail(ld, "%s must be a string, {\"content\": ...} or null", name);
    *present = 1;
    *id = token_id(ld->t, content->valuestring);
    if (*id < 0) {
        char buf[80];
        shown(content->valuestring, buf, sizeof buf);
        return fail(ld, "%s '%s' is not in the tokenizer's vocabulary", name, buf);
    }
    return 0;
}

/* tokenizer_config.json: BOS/EOS and whether they are added. */
static int load_config(loader *ld, const char *path) {
    al_tokenizer *t = ld->t;
    char *text;
    size_t len;
    const char *tok_path = ld->path;
    if (al_read_file(path, &text, &len, ld->err)) return -1;
    ld->path = path;
    int oom;
    cJSON *cfg = al_json_parse(text, len, &oom);
    free(text);
    int rc = 0, has_bos = 0, has_eos = 0, add_bos = 0, add_eos = 0, bos = -1, eos = -1;
    if (!cJSON_IsObject(cfg)) {
        rc = fail(ld, oom ? "out of memory" : "not a JSON object");
        goto done;
    }
    if (config_token(ld, cfg, "bos_token", &bos, &has_bos) || config_token(ld, cfg, "eos_token", &eos, &has_eos)) {
        rc = -1;
        goto done;
    }
    if (has_bos) t->bos = bos;
    if (has_eos) t->eos = eos;
    if (field(cfg, "add_bos_token")) {
        if ((rc = get_bool(ld, cfg, "tokenizer_config", "add_bos_token", 0, &add_bos))) goto done;
        t->n_prefix = 0;
        if (add_bos && t->bos < 0) {
            rc = fail(ld, "add_bos_token is true but there is no bos_token");
            goto done;
        }
        if (add_bos && (rc = push_id(ld, &t->prefix, &t->n_prefix, t->bos))) goto done;
    }
    if (field(cfg, "add_eos_token")) {
        if ((rc = get_bool(ld, cfg, "tokenizer_config", "add_eos_token", 0, &add_eos))) goto done;
        t->n_suffix = 0;
        if (add_eos && t->eos < 0) {
            rc = fail(ld, "add_eos_token is true but there is no eos_token");
            goto done;
        }
        if (add_eos && (rc = push_id(ld, &t->suffix, &t->n_suffix, t->eos))) goto done;
    }
done:
    cJSON_Delete(cfg);
    ld->path = tok_path;
    return rc;
}

/* text[0..len) with the values of model.vocab and model.merges (spans v and
 * m) replaced by {} and [], for cJSON; NULL when out of memory. */
static char *without_model_tables(const char *text, size_t len, tok_raw_span v, tok_raw_span m, size_t *out_len) {
    tok_raw_span first = v.p < m.p ? v : m, second = v.p < m.p ? m : v;
    const char *r1 = v.p < m.p ? "{}" : "[]", *r2 = v.p < m.p ? "[]" : "{}";
    size_t n = len - (size_t)(first.end - first.p) - (size_t)(second.end - second.p) + 4, w = 0;
    char *out = malloc(n + 1);
    if (!out) return NULL;
#define AL_PUT(src, k) (memcpy(out + w, (src), (k)), w += (k))
    AL_PUT(text, (size_t)(first.p - text));
    AL_PUT(r1, 2);
    AL_PUT(first.end, (size_t)(second.p - first.end));
    AL_PUT(r2, 2);
    AL_PUT(second.end, (size_t)(text + len - second.end));
#undef AL_PUT
    out[w] = 0;
    *out_len = w;
    return out;
}

/* A tokenizer from tokenizer.json's text. raw: read model.vocab and
 * model.merges from the text directly (rawjson.c) and the rest through
 * cJSON; *fallback is set (and NULL returned) when that cannot be done, for a
 * load without it, which reads everything through cJSON. */
static al_tokenizer *load_text(const char *text, size_t len, const char *json_path, const char *config_path, int raw,
                               int *fallback, al_err *err) {
    al_tokenizer *t = calloc(1, sizeof *t);
    loader ld = {t, json_path, err};
    added_spec *added = NULL;
    int n_added = 0, rc = -1;
    cJSON *root = NULL;
    char *reduced = NULL;
    size_t reduced_len = 0;
    int oom = 0;
    if (!t) {
        al_errf(err, "out of memory");
        goto done;
    }
    t->bos = t->eos = t->unk_id = -1;
    if (raw && !tok_raw_model_spans(text, len, &ld.raw_vocab, &ld.raw_merges)) {
        if (!(reduced = without_model_tables(text, len, ld.raw_vocab, ld.raw_merges, &reduced_len))) {
            al_errf(err, "out of memory");
            goto done;
        }
        root = al_json_parse(reduced, reduced_len, &oom);
        if (oom) {
            fail(&ld, "out of memory");
            goto done;
        }
        if (!root) { /* let the full parse say where the error is */
            *fallback = 1;
            goto done;
        }
    } else {
        if (raw) { /* not shaped as expected: the full parse decides */
            *fallback = 1;
            goto done;
        }
        root = al_json_parse(text, len, &oom);
    }
    if (oom) {
        fail(&ld, "out of memory");
        goto done;
    }
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        long off = at && at >= text && at <= text + len ? (long)(at - text) : -1;
        fail(&ld, "not valid JSON (error near byte %ld)", off);
        goto done;
    }
    if (!cJSON_IsObject(root)) {
        fail(&ld, "not a JSON object");
        goto done;
    }
    long max_added = -1;
    if (load_added(&ld, field(root, "added_tokens"), &added, &n_added, &max_added) ||
        load_model(&ld, root, added, n_added, max_added) || load_normalizer(&ld, field(root, "normalizer"), 0) ||
        load_pre_tokenizer(&ld, field(root, "pre_tokenizer"), 0) || load_decoder(&ld, field(root, "decoder"), 0) ||
        load_post_processor(&ld, field(root, "post_processor"), 0) || build_matchers(&ld, added, n_added) ||
        build_pieces(&ld))
        goto done;
    /* BOS/EOS without a tokenizer_config.json: the template's tokens */
    if (t->n_prefix) t->bos = t->prefix[0];
    if (t->n_suffix) t->eos = t->suffix[t->n_suffix - 1];
    if (config_path && load_config(&ld, config_path)) goto done;
    t->kind = TOK_KIND_BPE;
    for (int i = 0; i < t->n_pres; i++)
        if (t->pres[i].kind == PRE_BYTELEVEL) t->kind = TOK_KIND_BYTELEVEL;
    for (int i = 0; i < t->n_decs; i++)
        if (t->decs[i].kind == DEC_BYTELEVEL) t->kind = TOK_KIND_BYTELEVEL;
    if (t->kind == TOK_KIND_BPE) {
        for (int i = 0; i < t->n_norms; i++)
            if (t->norms[i].kind == NORM_PREPEND) t->kind = TOK_KIND_SENTENCEPIECE;
        for (int i = 0; i < t->n_pres; i++)
            if (t->pres[i].kind == PRE_METASPACE) t->kind = TOK_KIND_SENTENCEPIECE;
        if (t->byte_fallback) t->kind = TOK_KIND_SENTENCEPIECE;
    }
    rc = 0;
done:
    if (ld.fallback) *fallback = 1;
    cJSON_Delete(root);
    free(reduced);
    free(ld.buf);
    free(added);
    if (rc) {
        al_tok_free(t);
        return NULL;
    }
    return t;
}

al_tokenizer *al_tok_load_json(const char *json_path, const char *config_path, al_err *err) {
    char *text;
    size_t len;
    if (al_read_file(json_path, &text, &len, err)) return NULL;
    int fallback = 0;
    al_tokenizer *t = load_text(text, len, json_path, config_path, 1, &fallback, err);
    if (!t && fallback) t = load_text(text, len, json_path, config_path, 0, &fallback, err);
    free(text);
    return t;
}

al_tokenizer *al_tok_open_dir(const char *model_dir, al_err *err) {
    struct stat st;
    if (stat(model_dir, &st)) {
        al_errf(err, "%s: %s", model_dir, strerror(errno));
        return NULL;
    }
    if (!S_ISDIR(st.st_mode)) {
        al_errf(err, "%s: not a directory", model_dir);
        return NULL;
    }
    char *tj = al_sprintf("%s/tokenizer.json", model_dir), *tc = al_sprintf("%s/tokenizer_config.json", model_dir);
    al_tokenizer *t = NULL;
    if (!tj || !tc) al_errf(err, "out of memory");
    else if (stat(tj, &st) == 0) t = al_tok_load_json(tj, stat(tc, &st) == 0 ? tc : NULL, err);
    else if (errno != ENOENT) al_errf(err, "%s: %s", tj, strerror(errno));
    else t = al_tok_bytes();
    free(tj);
    free(tc);
    return t;
}

/* ---- facts ---- */

int al_tok_vocab_size(const al_tokenizer *t) { return t->vocab_size; }
int al_tok_bos(const al_tokenizer *t) { return t->bos; }
int al_tok_eos(const al_tokenizer *t) { return t->eos; }
int al_tok_adds_bos(const al_tokenizer *t) { return t->n_prefix > 0; }
int al_tok_is_bytes(const al_tokenizer *t) { return t->is_bytes; }

const char *al_tok_kind(const al_tokenizer *t) {
    switch (t->kind) {
    case TOK_KIND_BYTES: return "bytes";
    case TOK_KIND_BYTELEVEL: return "byte-level BPE";
    case TOK_KIND_SENTENCEPIECE: return "SentencePiece BPE";
    default: return "BPE";
    }
}

int al_tok_is_special(const al_tokenizer *t, int id) {
    if (id < 0 || id >= t->vocab_size || t->is_bytes) return 0;
    return (t->flags[id] & TOK_SPECIAL) || id == t->bos || id == t->eos;
}
