/*
 * encode.c: text -> ids, in Hugging Face tokenizers' order:
 *
 *   1. split the text on the added tokens matched in the raw text (leftmost,
 *      longest first; lstrip/rstrip take the whitespace beside a match along),
 *      each match becoming its id, never split further;
 *   2. normalize every other segment (NFC, Prepend, Replace, in order), and
 *      split it again on the added tokens matched in normalized text;
 *   3. pre-tokenize each remaining segment into pieces (Split by a compiled
 *      pattern with its behavior, ByteLevel, Metaspace, in order);
 *   4. run the BPE model on each piece (bpe.c);
 *   5. add the special tokens around the text (BOS, EOS) when asked.
 *
 * Pieces travel between the pre-tokenizer steps as string lists
 * (tok_strlist); a piece's flag says whether it starts the original text,
 * which Metaspace's prepend_scheme "first" needs.
 */
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"
#include "unicode.h"

/* ---- normalizers ---- */

/* s with every occurrence of a replaced by b (left to right, not
 * overlapping), appended as a new string of dst. */
static int replace_all(const char *s, size_t n, const char *a, size_t alen, const char *b, size_t blen,
                       tok_strlist *dst, int flag) {
    if (tok_sl_begin(dst, flag)) return -1;
    size_t i = 0, from = 0;
    while (alen && i + alen <= n) {
        if (s[i] == a[0] && !memcmp(s + i, a, alen)) {
            if (tok_sl_append(dst, s + from, i - from) || tok_sl_append(dst, b, blen)) return -1;
            i += alen;
            from = i;
        } else {
            i++;
        }
    }
    return tok_sl_append(dst, s + from, n - from);
}

int tok_normalize(const al_tokenizer *t, const char *s, size_t n, char **out, size_t *out_len) {
    char *cur = malloc(n + 1);
    if (!cur) return -1;
    memcpy(cur, s, n);
    cur[n] = 0;
    for (int k = 0; k < t->n_norms; k++) {
        const tok_norm *m = &t->norms[k];
        char *next = NULL;
        size_t next_len = 0;
        if (m->kind == NORM_NFC) {
            if (al_uc_nfc(cur, n, &next, &next_len)) {
                free(cur);
                return -1;
            }
        } else {
            tok_strlist l = {0};
            int rc;
            if (m->kind == NORM_PREPEND) /* Hugging Face prepends to non-empty text only */
                rc = tok_sl_begin(&l, 0) || (n && tok_sl_append(&l, m->a, m->alen)) || tok_sl_append(&l, cur, n);
            else
                rc = replace_all(cur, n, m->a, m->alen, m->b, m->blen, &l, 0);
            if (rc || tok_sl_append(&l, "", 0)) {
                tok_sl_free(&l);
                free(cur);
                return -1;
            }
            l.buf[l.len] = 0; /* tok_sl_append keeps one spare byte */
            next = l.buf;
            next_len = l.len;
            free(l.s);
        }
        free(cur);
        cur = next;
        n = next_len;
    }
    *out = cur;
    *out_len = n;
    return 0;
}

/* ---- pre-tokenizers ---- */

/* Decodes a well-formed UTF-8 piece into code points and the byte offset of
 * each (offs[n] = len). */
static int decode_cps(const char *s, size_t len, uint32_t **cps, size_t **offs, size_t *n) {
    *cps = malloc(sizeof **cps * (len + 1));
    *offs = malloc(sizeof **offs * (len + 1));
    if (!*cps || !*offs) return -1;
    size_t k = 0;
    for (size_t i = 0; i < len;) {
        int l = al_utf8_decode((const unsigned char *)s + i, len - i, &(*cps)[k]);
        if (!l) (*cps)[k] = 0xFFFD, l = 1;
        (*offs)[k++] = i;
        i += (size_t)l;
    }
    (*offs)[k] = len;
    *n = k;
    return 0;
}

/* One stretch of a piece: code points [a, b), whether it is a match of the
 * pattern (before a behavior is applied) or to be removed (after). */
typedef struct {
    size_t a, b;
    int flag;
} split_span;

typedef struct {
    split_span *v;
    size_t n, cap;
} span_list;

static int span_push(span_list *l, size_t a, size_t b, int flag) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        split_span *v = realloc(l->v, sizeof *v * cap);
        if (!v) return -1;
        l->v = v, l->cap = cap;
    }
    l->v[l->n++] = (split_span){a, b, flag};
    return 0;
}

/* The matches of re over cps[0..n) and the stretches between them, as
 * Hugging Face lists them: Oniguruma's find_iter (an empty match right where
 * the previous match ended is skipped, the search moving one character on),
 * a gap before each match that does not start where the last one ended, and
 * the tail. */
static int find_matches(const tok_regex *re, tok_regex_ws *ws, const uint32_t *cps, size_t n, span_list *out) {
    size_t last_end = 0, prev = 0, ms, me;
    int have_match = 0;
    while (last_end <= n && tok_regex_find(re, ws, cps, n, last_end, &ms, &me)) {
        if (ms == me && have_match && prev == me) {
            last_end++;
            continue;
        }
        if (prev != ms && span_push(out, prev, ms, 0)) return -1;
        if (span_push(out, ms, me, 1)) return -1;
        last_end = prev = me;
        have_match = 1;
    }
    return prev != n ? span_push(out, prev, n, 0) : 0;
}

/* Applies a Split behavior in place: flags become "remove" (Hugging Face's
 * NormalizedString::split): Isolated keeps everything, Removed drops the
 * matches, Contiguous joins neighbours that are both matches or both not,
 * MergedWithPrevious appends a match to the stretch before it,
 * MergedWithNext prepends it to the stretch after it. */
static void apply_behavior(tok_split_behavior b, span_list *l) {
    size_t w = 0;
    int prev_match = 0;
    switch (b) {
    case SPLIT_ISOLATED:
        for (size_t i = 0; i < l->n; i++) l->v[i].flag = 0;
        return;
    case SPLIT_REMOVED: return;
    case SPLIT_CONTIGUOUS:
    case SPLIT_MERGED_PREVIOUS:
        for (size_t i = 0; i < l->n; i++) {
            int m = l->v[i].flag;
            int join = b == SPLIT_CONTIGUOUS ? (m == prev_match && w > 0) : (m && !prev_match && w > 0);
            if (join) l->v[w - 1].b = l->v[i].b;
            else l->v[w++] = (split_span){l->v[i].a, l->v[i].b, 0};
            prev_match = m;
        }
        l->n = w;
        return;
    case SPLIT_MERGED_NEXT:
        /* from the end: a match joins the stretch after it unless that is a match too */
        w = l->n;
        for (size_t i = l->n; i-- > 0;) {
            int m = l->v[i].flag;
            if (m && !prev_match && w < l->n) l->v[w].a = l->v[i].a;
            else l->v[--w] = (split_span){l->v[i].a, l->v[i].b, 0};
            prev_match = m;
        }
        if (w) memmove(l->v, l->v + w, sizeof *l->v * (l->n - w)); /* an empty list may have no array */
        l->n -= w;
        return;
    }
}

/* Split: the pieces the pattern, the behavior and invert make of s[0..len),
 * appended to dst (empty pieces dropped, as Hugging Face drops them). */
static int pre_split(const tok_pre *p, tok_regex_ws *ws, const char *s, size_t len, int flag, tok_strlist *dst) {
    uint32_t *cps = NULL;
    size_t *offs = NULL, n = 0;
    span_list l = {0};
    int rc = decode_cps(s, len, &cps, &offs, &n);
    if (!rc && n) rc = find_matches(p->re, ws, cps, n, &l);
    for (size_t i = 0; !rc && p->invert && i < l.n; i++) l.v[i].flag = !l.v[i].flag;
    if (!rc) apply_behavior(p->behavior, &l);
    for (size_t i = 0; !rc && i < l.n; i++) {
        const split_span *x = &l.v[i];
        if (!x->flag && x->b > x->a)
            rc = tok_sl_add(dst, s + offs[x->a], offs[x->b] - offs[x->a], flag && x->a == 0);
    }
    free(l.v);
    free(cps);
    free(offs);
    return rc;
}

/* Each byte as the character GPT-2's byte map gives it, appended to the last
 * string of dst. */
static int append_bytelevel(tok_strlist *dst, const char *s, size_t len) {
    for (size_t i = 0; i < len; i++) {
        unsigned char u[4];
        int l = al_utf8_encode(tok_byte_to_cp((unsigned char)s[i]), u);
        if (tok_sl_append(dst, (const char *)u, (size_t)l)) return -1;
    }
    return 0;
}

/* ByteLevel: a space before a piece that has none (add_prefix_space), the
 * GPT-2 split (use_regex), then the byte map. */
static int pre_bytelevel(const tok_pre *p, tok_regex_ws *ws, const char *s, size_t len, int flag, tok_strlist *dst) {
    char *tmp = NULL;
    if (p->add_prefix_space && (len == 0 || s[0] != ' ')) {
        tmp = malloc(len + 1);
        if (!tmp) return -1;
        tmp[0] = ' ';
        memcpy(tmp + 1, s, len);
        s = tmp;
        len++;
    }
    tok_strlist parts = {0};
    int rc = p->use_regex ? pre_split(p, ws, s, len, flag, &parts) : tok_sl_add(&parts, s, len, flag);
    for (size_t i = 0; !rc && i < parts.n; i++)
        rc = tok_sl_begin(dst, parts.s[i].flag) || append_bytelevel(dst, parts.buf + parts.s[i].off, parts.s[i].len);
    tok_sl_free(&parts);
    free(tmp);
    return rc;
}

/* Metaspace: spaces become the replacement, which is prepended (always; or
 * "first": only to the piece that starts the text) unless the piece already
 * starts with it; with split, a new piece starts at every replacement. */
static int pre_metaspace(const tok_pre *p, const char *s, size_t len, int flag, tok_strlist *dst) {
    unsigned char rep[4];
    size_t rl = (size_t)al_utf8_encode(p->replacement, rep);
    tok_strlist l = {0};
    int rc = replace_all(s, len, " ", 1, (const char *)rep, rl, &l, flag);
    const char *r = l.buf ? l.buf : "";
    size_t n = l.len;
    int starts = n >= rl && !memcmp(r, rep, rl);
    int prepend = n > 0 && !starts && (p->prepend == PREPEND_ALWAYS || (p->prepend == PREPEND_FIRST && flag));
    tok_strlist full = {0};
    if (!rc)
        rc = tok_sl_begin(&full, flag) || (prepend && tok_sl_append(&full, (const char *)rep, rl)) ||
             tok_sl_append(&full, r, n);
    if (!rc && !p->split) {
        rc = tok_sl_add(dst, full.buf, full.len, flag);
    } else if (!rc) {
        /* MergedWithNext: every replacement starts a new piece */
        size_t from = 0;
        for (size_t i = 1; i < full.len && !rc; i++)
            if (full.len - i >= rl && !memcmp(full.buf + i, rep, rl)) {
                rc = tok_sl_add(dst, full.buf + from, i - from, flag && from == 0);
                from = i;
            }
        if (!rc && from < full.len) rc = tok_sl_add(dst, full.buf + from, full.len - from, flag && from == 0);
    }
    tok_sl_free(&l);
    tok_sl_free(&full);
    return rc ? -1 : 0;
}

/* Pre-tokenizes one segment and runs the model on every piece. A step with
 * a pattern gets one matching workspace for all its pieces. */
static int encode_segment(const al_tokenizer *t, const char *s, size_t len, int at_start, tok_ids *out) {
    tok_strlist cur = {0}, next = {0};
    int rc = tok_sl_add(&cur, s, len, at_start);
    for (int k = 0; k < t->n_pres && !rc; k++) {
        const tok_pre *p = &t->pres[k];
        size_t longest = 0; /* in bytes, at least the characters */
        for (size_t i = 0; i < cur.n; i++)
            if (cur.s[i].len > longest) longest = cur.s[i].len;
        tok_regex_ws *ws = p->re ? tok_regex_ws_new(p->re, longest + (p->add_prefix_space != 0)) : NULL;
        if (p->re && !ws) rc = -1;
        for (size_t i = 0; i < cur.n && !rc; i++) {
            const char *ps = cur.buf + cur.s[i].off;
            size_t pl = cur.s[i].len;
            int flag = cur.s[i].flag;
            if (p->kind == PRE_SPLIT) rc = pre_split(p, ws, ps, pl, flag, &next);
            else if (p->kind == PRE_BYTELEVEL) rc = pre_bytelevel(p, ws, ps, pl, flag, &next);
            else rc = pre_metaspace(p, ps, pl, flag, &next);
        }
        tok_regex_ws_free(ws);
        tok_sl_free(&cur);
        cur = next;
        memset(&next, 0, sizeof next);
    }
    for (size_t i = 0; i < cur.n && !rc; i++)
        if (cur.s[i].len) rc = tok_bpe_word(t, cur.buf + cur.s[i].off, cur.s[i].len, out);
    tok_sl_free(&cur);
    tok_sl_free(&next);
    return rc;
}

/* ---- added tokens ---- */

/* Longest added token of m matching at s[i..n), or NULL. */
static const tok_added *added_at(const tok_matcher *m, const char *s, size_t n, size_t i) {
    unsigned c = (unsigned char)s[i];
    for (int k = m->first[c]; k < m->first[c + 1]; k++) {
        const tok_added *a = &m->tokens[k];
        if (a->len <= n - i && !memcmp(s + i, a->text, a->len)) return a;
    }
    return NULL;
}

/* Length of the White_Space character ending at s[end] (0 if none). */
static size_t space_before(const char *s, size_t start, size_t end) {
    for (size_t l = 1; l <= 4 && l <= end - start; l++) {
        uint32_t cp;
        if (al_utf8_decode((const unsigned char *)s + end - l, l, &cp) == (int)l) return al_uc_is_space(cp) ? l : 0;
    }
    return 0;
}

/* What happens to the text between added tokens. */
typedef int (*gap_fn)(const al_tokenizer *t, const char *s, size_t len, int at_start, tok_ids *out);

/* Splits s[0..n) on the added tokens of m: matches become their ids, the
 * text around them goes to gap() (at_start: the gap starts s and s starts
 * the text). */
static int split_added(const al_tokenizer *t, const tok_matcher *m, const char *s, size_t n, int at_start,
                       gap_fn gap, tok_ids *out) {
    size_t from = 0, i = 0;
    while (m->n && i < n) {
        const tok_added *a = added_at(m, s, n, i);
        if (!a) {
            i++;
            continue;
        }
        size_t start = i, stop = i + a->len, l;
        if (a->lstrip)
            while (start > from && (l = space_before(s, from, start))) start -= l;
        if (a->rstrip)
            while (stop < n) {
                uint32_t cp;
                int k = al_utf8_decode((const unsigned char *)s + stop, n - stop, &cp);
                if (!k || !al_uc_is_space(cp)) break;
                stop += (size_t)k;
            }
        if (start > from && gap(t, s + from, start - from, at_start && from == 0, out)) return -1;
        if (tok_ids_push(out, a->id)) return -1;
        from = i = stop;
    }
    if (from < n) return gap(t, s + from, n - from, at_start && from == 0, out);
    return 0;
}

/* A segment of normalized text between added tokens: pre-tokenize and run
 * the model. */
static int gap_normalized(const al_tokenizer *t, const char *s, size_t len, int at_start, tok_ids *out) {
    return encode_segment(t, s, len, at_start, out);
}

/* A segment of raw text between added tokens: normalize, then look for the
 * added tokens that match normalized text. */
static int gap_raw(const al_tokenizer *t, const char *s, size_t len, int at_start, tok_ids *out) {
    char *norm;
    size_t nl;
    if (tok_normalize(t, s, len, &norm, &nl)) return -1;
    int rc = split_added(t, &t->norm_added, norm, nl, at_start, gap_normalized, out);
    free(norm);
    return rc;
}

int al_tok_encode(const al_tokenizer *t, const char *text, size_t len, int add_special, int **ids, int *n,
                  al_err *err) {
    *ids = NULL;
    *n = 0;
    if (len > (size_t)1 << 30) return al_errf(err, "text of %zu bytes is too long to tokenize (at most 1 GiB)", len);
    if (t->is_bytes) {
        *ids = malloc(sizeof **ids * (len ? len : 1));
        if (!*ids) return al_errf(err, "out of memory");
        for (size_t i = 0; i < len; i++) (*ids)[i] = (unsigned char)text[i];
        *n = (int)len;
        return 0;
    }
    size_t bad = al_utf8_check((const unsigned char *)text, len);
    if (bad < len) return al_errf(err, "the text is not valid UTF-8 (byte %zu: 0x%02X)", bad, (unsigned char)text[bad]);
    tok_ids out = {0};
    int rc = 0;
    for (int i = 0; add_special && i < t->n_prefix && !rc; i++) rc = tok_ids_push(&out, t->prefix[i]);
    if (!rc) rc = split_added(t, &t->raw_added, text, len, 1, gap_raw, &out);
    for (int i = 0; add_special && i < t->n_suffix && !rc; i++) rc = tok_ids_push(&out, t->suffix[i]);
    if (!rc && out.n > (size_t)1 << 30) rc = -1;
    if (rc) {
        free(out.v);
        return al_errf(err, "out of memory while tokenizing %zu bytes", len);
    }
    if (!out.v && !(out.v = malloc(sizeof(int)))) return al_errf(err, "out of memory");
    *ids = out.v;
    *n = (int)out.n;
    return 0;
}
