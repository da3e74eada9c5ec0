/*
 * rawjson.c: reading the two large values of a tokenizer.json,
 * model.vocab (token -> id) and model.merges, straight from the file's text,
 * without building a JSON tree for them: Gemma-3's file holds 262k tokens and
 * 515k merges, and cJSON's node per value (allocated, then freed) costs more
 * than everything else loading does.
 *
 * Data structure: none of its own; a tok_raw_span is a [p, end) range of the
 * text holding one JSON value. The scanner skips values (strings with their
 * escapes, nested objects and arrays) to find the spans; the readers walk a
 * span and hand each entry, its strings unescaped, to a callback. They accept
 * only the plain forms real files use (string keys, integer ids, merges as
 * "a b" strings or ["a", "b"] pairs); for anything else they answer
 * TOK_RAW_FALLBACK and load.c reads the file through cJSON instead, which
 * gives the usual errors.
 */
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"
#include "unicode.h"

static const char *skip_ws(const char *p, const char *e) {
    while (p < e && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    return p;
}

/* Past the string starting at p (a '"'), or NULL: the next quote not
 * escaped by an odd run of backslashes. */
static const char *skip_string(const char *p, const char *e) {
    for (const char *q = p + 1; q < e && (q = memchr(q, '"', (size_t)(e - q))); q++) {
        const char *b = q;
        while (b > p + 1 && b[-1] == '\\') b--;
        if ((q - b) % 2 == 0) return q + 1;
    }
    return NULL;
}

/* Past the value at p (after white space), or NULL if it is not a value. */
static const char *skip_value(const char *p, const char *e, int depth) {
    p = skip_ws(p, e);
    if (p >= e || depth > 64) return NULL;
    if (*p == '"') return skip_string(p, e);
    if (*p == '{' || *p == '[') {
        char close = *p == '{' ? '}' : ']';
        p = skip_ws(p + 1, e);
        if (p < e && *p == close) return p + 1;
        for (;;) {
            if (close == '}') {
                if (p >= e || *p != '"' || !(p = skip_string(p, e))) return NULL;
                p = skip_ws(p, e);
                if (p >= e || *p != ':') return NULL;
                p++;
            }
            if (!(p = skip_value(p, e, depth + 1))) return NULL;
            p = skip_ws(p, e);
            if (p >= e) return NULL;
            if (*p == close) return p + 1;
            if (*p != ',') return NULL;
            p = skip_ws(p + 1, e);
        }
    }
    const char *s = p;
    while (p < e && *p != ',' && *p != '}' && *p != ']' && *p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') p++;
    return p > s ? p : NULL;
}

/* Whether the string at p (a '"') is exactly the key k (no escapes). */
static int key_is(const char *p, const char *e, const char *k) {
    size_t n = strlen(k);
    return (size_t)(e - p) > n + 1 && !memcmp(p + 1, k, n) && p[n + 1] == '"';
}

/* Calls visit(key, value span) for the members of the object at p; returns
 * past the object, or NULL. */
typedef void (*member_fn)(const char *key, const char *v, const char *v_end, void *ctx);
static const char *members(const char *p, const char *e, member_fn visit, void *ctx) {
    p = skip_ws(p, e);
    if (p >= e || *p != '{') return NULL;
    p = skip_ws(p + 1, e);
    if (p < e && *p == '}') return p + 1;
    for (;;) {
        const char *key = p;
        if (p >= e || *p != '"' || !(p = skip_string(p, e))) return NULL;
        p = skip_ws(p, e);
        if (p >= e || *p != ':') return NULL;
        const char *v = skip_ws(p + 1, e), *v_end = skip_value(v, e, 1);
        if (!v_end) return NULL;
        visit(key, v, v_end, ctx);
        p = skip_ws(v_end, e);
        if (p >= e) return NULL;
        if (*p == '}') return p + 1;
        if (*p != ',') return NULL;
        p = skip_ws(p + 1, e);
    }
}

typedef struct {
    const char *e;
    tok_raw_span model, vocab, merges;
} finder;

static void model_member(const char *key, const char *v, const char *v_end, void *ctx) {
    finder *f = ctx;
    /* the first of duplicate keys, as cJSON's look-up finds it */
    if (key_is(key, f->e, "vocab") && !f->vocab.p) f->vocab = (tok_raw_span){v, v_end};
    if (key_is(key, f->e, "merges") && !f->merges.p) f->merges = (tok_raw_span){v, v_end};
}

static void root_member(const char *key, const char *v, const char *v_end, void *ctx) {
    finder *f = ctx;
    if (key_is(key, f->e, "model") && !f->model.p) f->model = (tok_raw_span){v, v_end};
}

int tok_raw_model_spans(const char *text, size_t len, tok_raw_span *vocab, tok_raw_span *merges) {
    finder f = {.e = text + len};
    if (!members(text, text + len, root_member, &f) || !f.model.p) return -1;
    if (!members(f.model.p, f.model.end, model_member, &f) || !f.vocab.p || !f.merges.p) return -1;
    *vocab = f.vocab;
    *merges = f.merges;
    return 0;
}

/* ---- readers ---- */

size_t tok_raw_count(tok_raw_span span) {
    size_t quotes = 0;
    for (const char *p = span.p; (p = memchr(p, '"', (size_t)(span.end - p))); p++) quotes++;
    const char *first = skip_ws(span.p, span.end);
    first = first < span.end ? skip_ws(first + 1, span.end) : first;
    int pairs = first < span.end && *first == '[';
    return quotes / (pairs ? 4 : 2);
}

/* A growable buffer for unescaped strings. */
typedef struct {
    char *v;
    size_t n, cap;
} strbuf;

static int sb_put(strbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1) cap *= 2;
        char *v = realloc(b->v, cap);
        if (!v) return -1;
        b->v = v, b->cap = cap;
    }
    memcpy(b->v + b->n, s, n);
    b->n += n;
    b->v[b->n] = 0;
    return 0;
}

static int hex4(const char *p, const char *e, uint32_t *out) {
    if (e - p < 4) return -1;
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        int d = c >= '0' && c <= '9' ? c - '0' : (c | 0x20) >= 'a' && (c | 0x20) <= 'f' ? (c | 0x20) - 'a' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + (uint32_t)d;
    }
    *out = v;
    return 0;
}

/* Unescapes the string at *pp (a '"') into b (from empty) and moves *pp past
 * it: 0, TOK_RAW_FALLBACK for what cJSON should judge (control characters,
 * bad escapes or surrogates, an escaped NUL, which cJSON's C strings would
 * cut at), TOK_RAW_NOMEM. */
static int read_string(const char **pp, const char *e, strbuf *b) {
    const char *p = *pp;
    b->n = 0;
    if (p >= e || *p != '"') return TOK_RAW_FALLBACK;
    p++;
    for (;;) {
        const char *s = p;
        while (p < e && *p != '"' && *p != '\\' && (unsigned char)*p >= 0x20) p++;
        if (p > s && sb_put(b, s, (size_t)(p - s))) return TOK_RAW_NOMEM;
        if (p >= e || (unsigned char)*p < 0x20) return TOK_RAW_FALLBACK;
        if (*p == '"') break;
        if (++p >= e) return TOK_RAW_FALLBACK;
        char c = *p++, one = 0;
        switch (c) {
        case '"': one = '"'; break;
        case '\\': one = '\\'; break;
        case '/': one = '/'; break;
        case 'b': one = '\b'; break;
        case 'f': one = '\f'; break;
        case 'n': one = '\n'; break;
        case 'r': one = '\r'; break;
        case 't': one = '\t'; break;
        case 'u': {
            uint32_t cp, lo;
            if (hex4(p, e, &cp)) return TOK_RAW_FALLBACK;
            p += 4;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                if (e - p < 6 || p[0] != '\\' || p[1] != 'u' || hex4(p + 2, e, &lo) || lo < 0xDC00 || lo > 0xDFFF)
                    return TOK_RAW_FALLBACK;
                p += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if ((cp >= 0xDC00 && cp <= 0xDFFF) || cp == 0) {
                return TOK_RAW_FALLBACK;
            }
            unsigned char u[4];
            if (sb_put(b, (const char *)u, (size_t)al_utf8_encode(cp, u))) return TOK_RAW_NOMEM;
            continue;
        }
        default: return TOK_RAW_FALLBACK;
        }
        if (sb_put(b, &one, 1)) return TOK_RAW_NOMEM;
    }
    *pp = p + 1;
    return 0;
}

/* Skips white space, the character c and the white space after it: 0, or
 * TOK_RAW_FALLBACK if c is not there. */
static int expect(const char **pp, const char *e, char c) {
    const char *p = skip_ws(*pp, e);
    if (p >= e || *p != c) return TOK_RAW_FALLBACK;
    *pp = skip_ws(p + 1, e);
    return 0;
}

/* After an entry: ',' (1, more follow) or the closing character (0); else
 * TOK_RAW_FALLBACK. */
static int next_entry(const char **pp, const char *e, char close) {
    const char *p = skip_ws(*pp, e);
    if (p < e && *p == ',') {
        *pp = skip_ws(p + 1, e);
        return 1;
    }
    if (p < e && *p == close) {
        *pp = p + 1;
        return 0;
    }
    return TOK_RAW_FALLBACK;
}

int tok_raw_vocab(tok_raw_span span, tok_raw_vocab_fn fn, void *ctx) {
    const char *p = skip_ws(span.p, span.end), *e = span.end;
    strbuf key = {0};
    int rc = 0;
    if (p >= e || *p != '{') return TOK_RAW_FALLBACK;
    p = skip_ws(p + 1, e);
    if (p < e && *p == '}') return 0;
    for (;;) {
        if ((rc = read_string(&p, e, &key)) || (rc = expect(&p, e, ':'))) break;
        long id = 0;
        const char *d = p;
        while (p < e && *p >= '0' && *p <= '9' && id < TOK_MAX_VOCAB) id = id * 10 + (*p++ - '0');
        if (p == d || id >= TOK_MAX_VOCAB || (p < e && (*p == '.' || *p == 'e' || *p == 'E')) ||
            (*d == '0' && p - d > 1)) {
            rc = TOK_RAW_FALLBACK; /* fractions, exponents, signs, huge ids: cJSON decides */
            break;
        }
        if ((rc = fn(ctx, key.v ? key.v : "", key.n, id))) break;
        int more = next_entry(&p, e, '}');
        if (more != 1) {
            rc = more;
            break;
        }
    }
    free(key.v);
    return rc;
}

int tok_raw_merges(tok_raw_span span, tok_raw_merge_fn fn, void *ctx) {
    const char *p = skip_ws(span.p, span.end), *e = span.end;
    strbuf a = {0}, b = {0};
    int rc = 0;
    if (p >= e || *p != '[') return TOK_RAW_FALLBACK;
    p = skip_ws(p + 1, e);
    if (p < e && *p == ']') return 0;
    for (;;) {
        if (p >= e) {
            rc = TOK_RAW_FALLBACK;
            break;
        }
        if (*p == '"') {
            if ((rc = read_string(&p, e, &a)) || (rc = fn(ctx, a.v ? a.v : "", a.n, NULL, 0))) break;
        } else if (*p == '[') {
            p = skip_ws(p + 1, e);
            if ((rc = read_string(&p, e, &a)) || (rc = expect(&p, e, ',')) || (rc = read_string(&p, e, &b)) ||
                (rc = expect(&p, e, ']')) || (rc = fn(ctx, a.v ? a.v : "", a.n, b.v ? b.v : "", b.n)))
                break;
        } else {
            rc = TOK_RAW_FALLBACK;
            break;
        }
        int more = next_entry(&p, e, ']');
        if (more != 1) {
            rc = more;
            break;
        }
    }
    free(a.v);
    free(b.v);
    return rc;
}
