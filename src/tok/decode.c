/*
 * decode.c: ids -> text through the tokenizer.json decoder, the raw pieces
 * of single ids, printable labels and the byte count of a text for bits per
 * byte.
 *
 * The decoder works as Hugging Face's does: the ids become their token
 * strings (special ones dropped when asked), each decoder step maps that list
 * of strings to a new list (tok_strlist), and the last list is concatenated;
 * with no decoder the tokens are joined by spaces. Steps: ByteLevel (GPT-2's
 * character -> byte map; a token with a character outside the map stays as
 * it is; all tokens fuse into one), Replace (literal), ByteFallback ("<0xNN>"
 * runs become their bytes), Fuse, Strip (per token), Metaspace (replacement
 * -> space, dropped in the first token unless prepend_scheme is never).
 * Decoded bytes that are not UTF-8 become U+FFFD as Hugging Face decodes
 * (ByteLevel: per maximal ill-formed subsequence, ByteFallback: per byte of a
 * bad run), except in the raw mode used for pieces and byte counts.
 */
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"
#include "unicode.h"

static const char REPLACEMENT_CHAR[] = "\xEF\xBF\xBD"; /* U+FFFD */

/* Appends s[0..n) to the last string of dst with every maximal ill-formed
 * subsequence replaced by U+FFFD (the Unicode recommendation that Rust's
 * from_utf8_lossy and Python's errors="replace" follow). */
static int append_lossy(tok_strlist *dst, const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, from = 0;
    while (i < n) {
        uint32_t cp;
        int l = u[i] < 0x80 ? 1 : al_utf8_decode(u + i, n - i, &cp);
        if (l) {
            i += (size_t)l;
            continue;
        }
        /* how many bytes form the longest valid-looking prefix */
        unsigned c = u[i];
        size_t want = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 1;
        size_t k = 1;
        if (want > 1 && i + 1 < n) {
            unsigned lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80, hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
            if (u[i + 1] >= lo && u[i + 1] <= hi) {
                k = 2;
                while (k < want && i + k < n && (u[i + k] & 0xC0) == 0x80) k++;
            }
        }
        if (tok_sl_append(dst, s + from, i - from) || tok_sl_append(dst, REPLACEMENT_CHAR, 3)) return -1;
        i += k;
        from = i;
    }
    return tok_sl_append(dst, s + from, n - from);
}

/* The byte of a "<0xNN>" token, or -1. */
static int fallback_byte(const char *s, size_t n) {
    if (n != 6 || memcmp(s, "<0x", 3) || s[5] != '>') return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* One decoder step over src into dst. */
static int decode_step(const tok_dec *d, const tok_strlist *src, tok_strlist *dst, int piece_mode, int lossy) {
    unsigned char ch[4];
    size_t chl = (d->kind == DEC_STRIP || d->kind == DEC_METASPACE) ? (size_t)al_utf8_encode(d->ch, ch) : 0;
    switch (d->kind) {
    case DEC_BYTELEVEL: {
        tok_strlist raw = {0};
        int rc = tok_sl_begin(&raw, 0) || tok_sl_append(&raw, "", 0);
        for (size_t i = 0; i < src->n && !rc; i++) {
            const unsigned char *s = (const unsigned char *)src->buf + src->s[i].off;
            size_t n = src->s[i].len, k = 0, start = raw.len;
            int all = 1;
            while (k < n && all) {
                uint32_t cp;
                int l = al_utf8_decode(s + k, n - k, &cp), b = l ? tok_cp_to_byte(cp) : -1;
                if (b < 0) {
                    all = 0;
                    break;
                }
                char c = (char)b;
                rc = tok_sl_append(&raw, &c, 1);
                k += (size_t)l;
            }
            if (!all && !rc) { /* a character outside the map: the token's own bytes */
                raw.len = start;
                raw.s[0].len = start;
                rc = tok_sl_append(&raw, (const char *)s, n);
            }
        }
        if (!rc) rc = tok_sl_begin(dst, 0) || (lossy ? append_lossy(dst, raw.buf, raw.len) : tok_sl_append(dst, raw.buf, raw.len));
        tok_sl_free(&raw);
        return rc;
    }
    case DEC_BYTEFALLBACK: {
        size_t i = 0;
        while (i < src->n) {
            const char *s = src->buf + src->s[i].off;
            if (fallback_byte(s, src->s[i].len) < 0) {
                if (tok_sl_add(dst, s, src->s[i].len, 0)) return -1;
                i++;
                continue;
            }
            size_t j = i;
            if (tok_sl_begin(dst, 0)) return -1;
            size_t start = dst->len;
            for (; j < src->n && fallback_byte(src->buf + src->s[j].off, src->s[j].len) >= 0; j++) {
                char c = (char)fallback_byte(src->buf + src->s[j].off, src->s[j].len);
                if (tok_sl_append(dst, &c, 1)) return -1;
            }
            if (lossy && al_utf8_check((const unsigned char *)dst->buf + start, dst->len - start) < dst->len - start) {
                dst->len = start; /* a bad run: one U+FFFD per byte, as Hugging Face does */
                dst->s[dst->n - 1].len = 0;
                for (size_t k = i; k < j; k++)
                    if (tok_sl_append(dst, REPLACEMENT_CHAR, 3)) return -1;
            }
            i = j;
        }
        return 0;
    }
    case DEC_FUSE:
        if (tok_sl_begin(dst, 0)) return -1;
        for (size_t i = 0; i < src->n; i++)
            if (tok_sl_append(dst, src->buf + src->s[i].off, src->s[i].len)) return -1;
        return 0;
    case DEC_REPLACE:
        for (size_t i = 0; i < src->n; i++) {
            const char *s = src->buf + src->s[i].off;
            size_t n = src->s[i].len, from = 0, k = 0;
            if (tok_sl_begin(dst, 0)) return -1;
            while (k + d->alen <= n) {
                if (!memcmp(s + k, d->a, d->alen)) {
                    if (tok_sl_append(dst, s + from, k - from) || tok_sl_append(dst, d->b, d->blen)) return -1;
                    k += d->alen;
                    from = k;
                } else {
                    k++;
                }
            }
            if (tok_sl_append(dst, s + from, n - from)) return -1;
        }
        return 0;
    case DEC_STRIP:
        for (size_t i = 0; i < src->n; i++) {
            const char *s = src->buf + src->s[i].off;
            size_t a = 0, b = src->s[i].len;
            for (int k = 0; !piece_mode && k < d->start && b - a >= chl && !memcmp(s + a, ch, chl); k++) a += chl;
            for (int k = 0; !piece_mode && k < d->stop && b - a >= chl && !memcmp(s + b - chl, ch, chl); k++) b -= chl;
            if (tok_sl_add(dst, s + a, b - a, 0)) return -1;
        }
        return 0;
    case DEC_METASPACE:
        for (size_t i = 0; i < src->n; i++) {
            const char *s = src->buf + src->s[i].off;
            size_t n = src->s[i].len, from = 0, k = 0;
            int drop = i == 0 && !piece_mode && d->prepend != PREPEND_NEVER;
            if (tok_sl_begin(dst, 0)) return -1;
            while (k + chl <= n) {
                if (!memcmp(s + k, ch, chl)) {
                    if (tok_sl_append(dst, s + from, k - from) || (!drop && tok_sl_append(dst, " ", 1))) return -1;
                    k += chl;
                    from = k;
                } else {
                    k++;
                }
            }
            if (tok_sl_append(dst, s + from, n - from)) return -1;
        }
        return 0;
    }
    return 0;
}

int tok_decode_ids(const al_tokenizer *t, const int *ids, int n, int skip_special, int piece_mode, int lossy,
                   char **out, size_t *out_len) {
    tok_strlist cur = {0}, next = {0};
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        if (skip_special && al_tok_is_special(t, ids[i])) continue;
        rc = tok_sl_add(&cur, t->tok_str[ids[i]], t->tok_len[ids[i]], 0);
    }
    for (int k = 0; k < t->n_decs && !rc; k++) {
        rc = decode_step(&t->decs[k], &cur, &next, piece_mode, lossy);
        tok_sl_free(&cur);
        cur = next;
        memset(&next, 0, sizeof next);
    }
    /* concatenate (joined by spaces when there is no decoder) */
    tok_strlist joined = {0};
    if (!rc) rc = tok_sl_begin(&joined, 0) || tok_sl_append(&joined, "", 0);
    for (size_t i = 0; i < cur.n && !rc; i++) {
        if (i && !t->has_decoder) rc = tok_sl_append(&joined, " ", 1);
        if (!rc) rc = tok_sl_append(&joined, cur.buf + cur.s[i].off, cur.s[i].len);
    }
    tok_sl_free(&cur);
    tok_sl_free(&next);
    if (rc) {
        tok_sl_free(&joined);
        return -1;
    }
    joined.buf[joined.len] = 0;
    *out = joined.buf;
    *out_len = joined.len;
    free(joined.s);
    return 0;
}

/* -1 with a message unless every id names a token. */
static int check_ids(const al_tokenizer *t, const int *ids, int n, al_err *err) {
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->vocab_size)
            return al_errf(err, "token id %d is outside the vocabulary (0..%d)", ids[i], t->vocab_size - 1);
        if (!t->is_bytes && !t->tok_str[ids[i]]) return al_errf(err, "token id %d has no token in this vocabulary", ids[i]);
    }
    return 0;
}

int al_tok_decode(const al_tokenizer *t, const int *ids, int n, int skip_special, char **text, size_t *len,
                  al_err *err) {
    *text = NULL;
    *len = 0;
    if (n < 0) return al_errf(err, "negative token count");
    if (check_ids(t, ids, n, err)) return -1;
    if (t->is_bytes) {
        char *s = malloc((size_t)n + 1);
        if (!s) return al_errf(err, "out of memory");
        for (int i = 0; i < n; i++) s[i] = (char)ids[i];
        s[n] = 0;
        *text = s;
        *len = (size_t)n;
        return 0;
    }
    if (tok_decode_ids(t, ids, n, skip_special, 0, 1, text, len)) return al_errf(err, "out of memory");
    return 0;
}

int al_tok_text_bytes(const al_tokenizer *t, const int *ids, int n, size_t *bytes, al_err *err) {
    if (n < 0) return al_errf(err, "negative token count");
    if (check_ids(t, ids, n, err)) return -1;
    if (t->is_bytes) {
        *bytes = (size_t)n;
        return 0;
    }
    char *s;
    if (tok_decode_ids(t, ids, n, 1, 0, 0, &s, bytes)) return al_errf(err, "out of memory");
    free(s);
    return 0;
}

int al_tok_piece(const al_tokenizer *t, int id, const char **bytes, size_t *len) {
    if (id < 0 || id >= t->vocab_size || !t->piece[id]) return -1;
    *bytes = t->piece[id];
    *len = t->piece_len[id];
    return 0;
}

int al_tok_piece_label(const al_tokenizer *t, int id, char *buf, size_t cap) {
    const char *p;
    size_t n, w = 0;
    if (cap == 0) return -1;
    if (al_tok_piece(t, id, &p, &n)) {
        snprintf(buf, cap, "?");
        return -1;
    }
    for (size_t i = 0; i < n;) {
        const unsigned char *u = (const unsigned char *)p + i;
        char tmp[16];
        size_t tl;
        uint32_t cp = 0;
        int l = al_utf8_decode(u, n - i, &cp);
        if (l && cp == '\n') memcpy(tmp, "\\n", tl = 2);
        else if (l && cp == '\t') memcpy(tmp, "\\t", tl = 2);
        else if (l && cp == '\r') memcpy(tmp, "\\r", tl = 2);
        else if (l && cp == '\\') memcpy(tmp, "\\\\", tl = 2);
        else if (!l || cp < 0x20 || cp == 0x7F) { /* malformed byte or C0 control */
            tl = (size_t)snprintf(tmp, sizeof tmp, "\\x%02X", u[0]);
            l = 1;
        } else if (cp >= 0x80 && cp < 0xA0) { /* C1 control: both bytes */
            tl = (size_t)snprintf(tmp, sizeof tmp, "\\x%02X\\x%02X", u[0], u[1]);
        } else {
            memcpy(tmp, u, (size_t)l);
            tl = (size_t)l;
        }
        if (w + tl >= cap) break;
        memcpy(buf + w, tmp, tl);
        w += tl;
        i += (size_t)l;
    }
    buf[w] = 0;
    return (int)w;
}
