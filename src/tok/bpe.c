/*
 * bpe.c: the BPE model at encode time: the vocabulary and merge hash maps
 * (open addressing, linear probing, FNV-1a / a 64-bit mix), the small
 * containers the tokenizer files share (id arrays, string lists) and the
 * merge loop over one pre-tokenized word.
 *
 * The merge loop is the one Hugging Face tokenizers runs: the word starts as
 * one symbol per character (a doubly linked list over an array), every
 * adjacent pair that has a merge goes into a binary min-heap keyed by (merge
 * rank, position), and the lowest entry is merged until the heap is empty;
 * entries whose pair changed since they were queued are skipped. So the merge
 * ranks decide (never token scores), ties go to the leftmost pair, and a word
 * of n characters costs O(n log n), which matters for SentencePiece-style
 * tokenizers that hand the model a whole paragraph as one word.
 */
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"
#include "unicode.h"

/* ---- string map ---- */

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ULL;
    }
    return h ^ (h >> 29);
}

/* Smallest power of two holding `expected` entries at most half full (the
 * puts grow a table before it passes half). */
static size_t table_cap(size_t expected) {
    size_t cap = 16;
    while (cap < 2 * expected) cap *= 2;
    return cap;
}

int tok_strmap_init(tok_strmap *m, size_t expected) {
    m->cap = table_cap(expected);
    m->n = 0;
    m->slots = calloc(m->cap, sizeof *m->slots);
    return m->slots ? 0 : -1;
}

void tok_strmap_free(tok_strmap *m) {
    free(m->slots);
    m->slots = NULL;
    m->cap = m->n = 0;
}

/* Doubles the table (a freed or zeroed one, cap 0, gets table_cap's least). */
static int strmap_grow(tok_strmap *m) {
    tok_strmap g;
    g.cap = m->cap ? m->cap * 2 : table_cap(0);
    g.n = 0;
    g.slots = calloc(g.cap, sizeof *g.slots);
    if (!g.slots) return -1;
    for (size_t i = 0; i < m->cap; i++)
        if (m->slots[i].key) tok_strmap_put(&g, m->slots[i].key, m->slots[i].len, m->slots[i].val);
    free(m->slots);
    *m = g;
    return 0;
}

int tok_strmap_put(tok_strmap *m, const char *key, size_t len, int val) {
    if (2 * (m->n + 1) > m->cap && strmap_grow(m)) return -1;
    size_t i = hash_bytes(key, len) & (m->cap - 1);
    while (m->slots[i].key) {
        if (m->slots[i].len == len && !memcmp(m->slots[i].key, key, len)) {
            m->slots[i].val = val;
            return 0;
        }
        i = (i + 1) & (m->cap - 1);
    }
    m->slots[i].key = key;
    m->slots[i].len = (uint32_t)len;
    m->slots[i].val = val;
    m->n++;
    return 0;
}

int tok_strmap_get(const tok_strmap *m, const char *key, size_t len) {
    if (!m->cap) return -1;
    size_t i = hash_bytes(key, len) & (m->cap - 1);
    while (m->slots[i].key) {
        if (m->slots[i].len == len && !memcmp(m->slots[i].key, key, len)) return m->slots[i].val;
        i = (i + 1) & (m->cap - 1);
    }
    return -1;
}

/* ---- pair map ---- */

static uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    return x ^ (x >> 33);
}

static uint64_t pair_key(int a, int b) { return (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1; }

int tok_pairmap_init(tok_pairmap *m, size_t expected) {
    m->cap = table_cap(expected);
    m->n = 0;
    m->slots = calloc(m->cap, sizeof *m->slots);
    return m->slots ? 0 : -1;
}

void tok_pairmap_free(tok_pairmap *m) {
    free(m->slots);
    m->slots = NULL;
    m->cap = m->n = 0;
}

int tok_pairmap_put(tok_pairmap *m, int a, int b, int rank, int merged) {
    if (2 * (m->n + 1) > m->cap) {
        tok_pairmap g;
        g.cap = m->cap * 2;
        g.n = 0;
        g.slots = calloc(g.cap, sizeof *g.slots);
        if (!g.slots) return -1;
        for (size_t i = 0; i < m->cap; i++) {
            const struct tok_pair_slot *s = &m->slots[i];
            if (!s->key) continue;
            size_t j = mix64(s->key) & (g.cap - 1);
            while (g.slots[j].key) j = (j + 1) & (g.cap - 1);
            g.slots[j] = *s;
            g.n++;
        }
        free(m->slots);
        *m = g;
    }
    uint64_t key = pair_key(a, b);
    size_t i = mix64(key) & (m->cap - 1);
    while (m->slots[i].key) {
        if (m->slots[i].key == key) { /* a repeated merge: the later one wins, as in Hugging Face's map */
            m->slots[i].rank = rank;
            m->slots[i].merged = merged;
            return 0;
        }
        i = (i + 1) & (m->cap - 1);
    }
    m->slots[i].key = key;
    m->slots[i].rank = rank;
    m->slots[i].merged = merged;
    m->n++;
    return 0;
}

int tok_pairmap_get(const tok_pairmap *m, int a, int b, int *rank, int *merged) {
    if (!m->cap) return 0;
    uint64_t key = pair_key(a, b);
    size_t i = mix64(key) & (m->cap - 1);
    while (m->slots[i].key) {
        if (m->slots[i].key == key) {
            *rank = m->slots[i].rank;
            *merged = m->slots[i].merged;
            return 1;
        }
        i = (i + 1) & (m->cap - 1);
    }
    return 0;
}

/* ---- ids ---- */

int tok_ids_push(tok_ids *a, int id) {
    if (a->n == a->cap) {
        size_t cap = a->cap ? 2 * a->cap : 256;
        int *v = realloc(a->v, cap * sizeof *v);
        if (!v) return -1;
        a->v = v, a->cap = cap;
    }
    a->v[a->n++] = id;
    return 0;
}

/* ---- string lists ---- */

int tok_sl_begin(tok_strlist *l, int flag) {
    if (l->n == l->cap_s) {
        size_t cap = l->cap_s ? 2 * l->cap_s : 64;
        tok_span *s = realloc(l->s, cap * sizeof *s);
        if (!s) return -1;
        l->s = s, l->cap_s = cap;
    }
    l->s[l->n++] = (tok_span){l->len, 0, flag};
    return l->buf ? 0 : tok_sl_append(l, "", 0); /* a span always has a buffer: buf + off is defined */
}

int tok_sl_append(tok_strlist *l, const char *s, size_t n) {
    if (l->len + n + 1 > l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 1024;
        while (cap < l->len + n + 1) cap *= 2;
        char *b = realloc(l->buf, cap);
        if (!b) return -1;
        l->buf = b, l->cap = cap;
    }
    if (n) memcpy(l->buf + l->len, s, n);
    l->len += n;
    l->s[l->n - 1].len += n;
    return 0;
}

int tok_sl_add(tok_strlist *l, const char *s, size_t n, int flag) {
    return tok_sl_begin(l, flag) || tok_sl_append(l, s, n) ? -1 : 0;
}

void tok_sl_free(tok_strlist *l) {
    free(l->buf);
    free(l->s);
    memset(l, 0, sizeof *l);
}

/* ---- the merge loop ---- */

typedef struct {
    int id;
    int prev, next; /* -1: none */
    int alive;
} symbol;

typedef struct {
    int rank, pos, merged;
} pending;

/* heap order: lower rank first, then lower position */
static int before(const pending *x, const pending *y) {
    return x->rank < y->rank || (x->rank == y->rank && x->pos < y->pos);
}

typedef struct {
    pending *v;
    size_t n, cap;
} heap;

static int heap_push(heap *h, pending p) {
    if (h->n == h->cap) {
        size_t cap = h->cap ? 2 * h->cap : 64;
        pending *v = realloc(h->v, cap * sizeof *v);
        if (!v) return -1;
        h->v = v, h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!before(&p, &h->v[parent])) break;
        h->v[i] = h->v[parent];
        i = parent;
    }
    h->v[i] = p;
    return 0;
}

static pending heap_pop(heap *h) {
    pending top = h->v[0], last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const pending *best = &last;
        if (l < h->n && before(&h->v[l], best)) m = l, best = &h->v[l];
        if (r < h->n && before(&h->v[r], best)) m = r;
        if (m == i) break;
        h->v[i] = h->v[m];
        i = m;
    }
    if (h->n) h->v[i] = last;
    return top;
}

/* Queues the pair starting at symbol pos, if it merges. */
static int queue_pair(const al_tokenizer *t, heap *h, const symbol *sym, int pos) {
    int rank, merged;
    if (pos < 0 || sym[pos].next < 0) return 0;
    if (!tok_pairmap_get(&t->merges, sym[pos].id, sym[sym[pos].next].id, &rank, &merged)) return 0;
    return heap_push(h, (pending){rank, pos, merged});
}

int tok_bpe_word(const al_tokenizer *t, const char *s, size_t len, tok_ids *out) {
    if (len == 0) return 0;
    if (t->ignore_merges) {
        int id = tok_strmap_get(&t->vocab, s, len);
        if (id >= 0) return tok_ids_push(out, id);
    }
    symbol *sym = malloc(sizeof *sym * (len + 1));
    if (!sym) return -1;
    int n = 0, pending_unk = 0;
    const unsigned char *u = (const unsigned char *)s;
    /* one symbol per character; unknown ones by byte fallback, <unk> or dropped */
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        int l = al_utf8_decode(u + i, len - i, &cp);
        if (!l) l = 1; /* pieces are well-formed UTF-8; a stray byte is its own character */
        int id = tok_strmap_get(&t->vocab, s + i, (size_t)l);
        if (id >= 0) {
            if (pending_unk) sym[n++].id = t->unk_id, pending_unk = 0;
            sym[n++].id = id;
        } else {
            int all = t->byte_fallback;
            for (int k = 0; k < l && all; k++) all = t->byte_id[u[i + k]] >= 0;
            if (all) {
                if (pending_unk) sym[n++].id = t->unk_id, pending_unk = 0;
                for (int k = 0; k < l; k++) sym[n++].id = t->byte_id[u[i + k]];
            } else if (t->unk_id >= 0) {
                if (pending_unk && !t->fuse_unk) sym[n++].id = t->unk_id;
                pending_unk = 1;
            }
        }
        i += (size_t)l;
    }
    if (pending_unk) sym[n++].id = t->unk_id;
    for (int i = 0; i < n; i++) {
        sym[i].prev = i - 1;
        sym[i].next = i + 1 < n ? i + 1 : -1;
        sym[i].alive = 1;
    }
    heap h = {0};
    int rc = 0;
    for (int i = 0; i + 1 < n && !rc; i++) rc = queue_pair(t, &h, sym, i);
    while (h.n && !rc) {
        pending top = heap_pop(&h);
        symbol *cur = &sym[top.pos];
        if (!cur->alive || cur->next < 0) continue;
        int rank, merged;
        if (!tok_pairmap_get(&t->merges, cur->id, sym[cur->next].id, &rank, &merged) || merged != top.merged)
            continue; /* stale: the pair changed since it was queued */
        symbol *right = &sym[cur->next];
        cur->id = top.merged;
        right->alive = 0;
        cur->next = right->next;
        if (right->next >= 0) sym[right->next].prev = top.pos;
        rc = queue_pair(t, &h, sym, cur->prev);
        if (!rc) rc = queue_pair(t, &h, sym, top.pos);
    }
    for (int i = 0; i < n && !rc; i++)
        if (sym[i].alive) rc = tok_ids_push(out, sym[i].id);
    free(h.v);
    free(sym);
    return rc;
}
