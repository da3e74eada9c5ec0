/*
 * unicode.c: UTF-8, general-category lookups and NFC over the generated
 * tables (unicode.h). Categories and properties are two table reads (the
 * two-stage property byte), with ASCII answered directly since it is most of
 * most text; case-fold orbits, combining classes and the NFC tables are
 * bisected.
 *
 * NFC follows UAX #15: full canonical decomposition (recursive, Hangul
 * algorithmic), canonical ordering of each run of non-starters by combining
 * class (stable), then canonical composition, where a character combines with
 * the last starter unless a character between them has class 0 or a class
 * not below its own.
 */
#include "unicode.h"

#include <stdlib.h>
#include <string.h>

int al_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp) {
    if (n == 0) return 0;
    unsigned c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    int len;
    uint32_t v, min;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2, v = c & 0x1F, min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3, v = c & 0x0F, min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4, v = c & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    if (n < (size_t)len) return 0;
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *cp = v;
    return len;
}

int al_utf8_encode(uint32_t cp, unsigned char *out) {
    if (cp < 0x80) {
        out[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (unsigned char)(0xC0 | (cp >> 6));
        out[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (unsigned char)(0xE0 | (cp >> 12));
        out[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (unsigned char)(0xF0 | (cp >> 18));
    out[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

size_t al_utf8_check(const unsigned char *s, size_t n) {
    size_t i = 0;
    uint32_t cp;
    while (i < n) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        int l = al_utf8_decode(s + i, n - i, &cp);
        if (!l) return i;
        i += (size_t)l;
    }
    return n;
}

int al_uc_is_letter(uint32_t cp) {
    if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
    return (AL_UC_L_MASK >> al_uc_gc(cp)) & 1;
}

int al_uc_is_number(uint32_t cp) {
    if (cp < 0x80) return cp >= '0' && cp <= '9';
    return (AL_UC_N_MASK >> al_uc_gc(cp)) & 1;
}

int al_uc_is_space(uint32_t cp) {
    if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
    return (al_uc_props(cp) & AL_UC_WHITE_SPACE) != 0;
}

uint32_t al_uc_fold_next(uint32_t cp) {
    int lo = 0, hi = al_uc_fold_orbit_n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < al_uc_fold_orbit[mid][0]) hi = mid - 1;
        else if (cp > al_uc_fold_orbit[mid][0]) lo = mid + 1;
        else return al_uc_fold_orbit[mid][1];
    }
    return cp;
}

int al_uc_ccc_of(uint32_t cp) {
    if (cp < 0x300) return 0;
    int lo = 0, hi = al_uc_ccc_n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < al_uc_ccc[mid].first) hi = mid - 1;
        else if (cp > al_uc_ccc[mid].last) lo = mid + 1;
        else return al_uc_ccc[mid].ccc;
    }
    return 0;
}

/* ---- NFC ---- */

enum { SBASE = 0xAC00, LBASE = 0x1100, VBASE = 0x1161, TBASE = 0x11A7, LCOUNT = 19, VCOUNT = 21, TCOUNT = 28,
       NCOUNT = VCOUNT * TCOUNT, SCOUNT = LCOUNT * NCOUNT };

/* The canonical decomposition entry of cp, or NULL. */
static const al_uc_decomp *find_decomp(uint32_t cp) {
    int lo = 0, hi = al_uc_decomps_n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < al_uc_decomps[mid].cp) hi = mid - 1;
        else if (cp > al_uc_decomps[mid].cp) lo = mid + 1;
        else return &al_uc_decomps[mid];
    }
    return NULL;
}

/* The primary composite of a b, or 0. */
static uint32_t compose_pair(uint32_t a, uint32_t b) {
    if (a >= LBASE && a < LBASE + LCOUNT && b >= VBASE && b < VBASE + VCOUNT)
        return SBASE + ((a - LBASE) * VCOUNT + (b - VBASE)) * TCOUNT;
    if (a >= SBASE && a < SBASE + SCOUNT && (a - SBASE) % TCOUNT == 0 && b > TBASE && b < TBASE + TCOUNT)
        return a + (b - TBASE);
    int lo = 0, hi = al_uc_composes_n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        const al_uc_compose *c = &al_uc_composes[mid];
        if (a < c->a || (a == c->a && b < c->b)) hi = mid - 1;
        else if (a > c->a || b > c->b) lo = mid + 1;
        else return c->cp;
    }
    return 0;
}

/* A growable code point buffer. */
typedef struct {
    uint32_t *v;
    size_t n, cap;
} cpbuf;

static int cp_push(cpbuf *b, uint32_t cp) {
    if (b->n == b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 64;
        uint32_t *v = realloc(b->v, cap * sizeof *v);
        if (!v) return -1;
        b->v = v, b->cap = cap;
    }
    b->v[b->n++] = cp;
    return 0;
}

/* Appends the full canonical decomposition of cp (decompositions nest at
 * most a few levels deep, so recursion is bounded). */
static int decompose(cpbuf *b, uint32_t cp) {
    if (cp >= SBASE && cp < SBASE + SCOUNT) {
        uint32_t s = cp - SBASE, t = s % TCOUNT;
        if (cp_push(b, LBASE + s / NCOUNT) || cp_push(b, VBASE + (s % NCOUNT) / TCOUNT)) return -1;
        return t ? cp_push(b, TBASE + t) : 0;
    }
    const al_uc_decomp *d = cp < 0xC0 ? NULL : find_decomp(cp);
    if (!d) return cp_push(b, cp);
    if (decompose(b, d->a)) return -1;
    return d->b ? decompose(b, d->b) : 0;
}

int al_uc_nfc(const char *s, size_t n, char **out, size_t *out_len) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n && u[i] < 0x80) i++;
    if (i == n) { /* ASCII is NFC */
        *out = malloc(n + 1);
        if (!*out) return -1;
        memcpy(*out, s, n);
        (*out)[n] = 0;
        *out_len = n;
        return 0;
    }
    cpbuf b = {0};
    int rc = 0;
    for (i = 0; i < n && !rc;) {
        uint32_t cp;
        int l = al_utf8_decode(u + i, n - i, &cp);
        if (!l) cp = 0xFFFD, l = 1; /* callers pass well-formed text; never loop forever */
        rc = decompose(&b, cp);
        i += (size_t)l;
    }
    /* canonical ordering: insertion sort of each non-starter run, stable */
    for (size_t k = 1; k < b.n && !rc; k++) {
        int c = al_uc_ccc_of(b.v[k]);
        if (!c) continue;
        size_t j = k;
        uint32_t x = b.v[k];
        while (j > 0) {
            int p = al_uc_ccc_of(b.v[j - 1]);
            if (p <= c) break;
            b.v[j] = b.v[j - 1];
            j--;
        }
        b.v[j] = x;
    }
    /* canonical composition, in place */
    size_t w = 0;
    long starter = -1;
    for (size_t k = 0; k < b.n && !rc; k++) {
        uint32_t cp = b.v[k];
        int c = al_uc_ccc_of(cp);
        if (starter >= 0) {
            int adjacent = (size_t)starter == w - 1;
            int last = adjacent ? 0 : al_uc_ccc_of(b.v[w - 1]);
            if (adjacent || (last != 0 && last < c)) {
                uint32_t comp = compose_pair(b.v[starter], cp);
                if (comp) {
                    b.v[starter] = comp;
                    continue;
                }
            }
        }
        if (c == 0) starter = (long)w;
        b.v[w++] = cp;
    }
    b.n = w;
    char *o = rc ? NULL : malloc(4 * b.n + 1);
    if (!o) {
        free(b.v);
        return -1;
    }
    size_t len = 0;
    for (size_t k = 0; k < b.n; k++) len += (size_t)al_utf8_encode(b.v[k], (unsigned char *)o + len);
    o[len] = 0;
    free(b.v);
    *out = o;
    *out_len = len;
    return 0;
}
