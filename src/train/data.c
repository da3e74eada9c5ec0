/*
 * data.c: corpus loading, the default-corpus cache, the corpus as token ids
 * (encoded once, cached beside the run) and batch sampling.
 */
#include "data.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../io/io.h"
#include "dist.h"

/* mkdir -p for the cache directory */
static int make_dirs(char *path) {
    for (char *p = path + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        int rc = mkdir(path, 0777);
        *p = '/';
        if (rc && errno != EEXIST) return -1;
    }
    return mkdir(path, 0777) && errno != EEXIST ? -1 : 0;
}

/* The cache directory of the default corpus (malloc'd; NULL when out of memory). */
static char *corpus_cache_dir(void) {
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (xdg && *xdg) return al_sprintf("%s/attnlab", xdg);
    if (home && *home) return al_sprintf("%s/.cache/attnlab", home);
    return al_sprintf("/tmp/attnlab-cache");
}

/* Writes the default corpus to out (in dir) unless it is there already. */
static int write_default_corpus(char *dir, const char *out, al_err *err) {
    struct stat st;
    if (stat(out, &st) == 0 && st.st_size > 0) return 0;
    if (make_dirs(dir)) return al_errf(err, "default corpus: cannot create %s: %s", dir, strerror(errno));
    FILE *p = popen("bible gen1:1-rev22:21 2>/dev/null", "r");
    if (!p) return al_errf(err, "default corpus: cannot run 'bible': %s", strerror(errno));
    size_t capb = 1 << 23, n = 0, got;
    char *buf = malloc(capb);
    while (buf && (got = fread(buf + n, 1, capb - n, p)) > 0) {
        n += got;
        if (n == capb) {
            char *nb = realloc(buf, capb *= 2);
            if (!nb) {
                free(buf);
                buf = NULL;
            }
            buf = nb;
        }
    }
    int status = pclose(p);
    if (!buf) return al_errf(err, "default corpus: out of memory reading the output of 'bible'");
    if (status != 0 || n < 1000000) {
        free(buf);
        return al_errf(err, "default corpus: 'bible gen1:1-rev22:21' failed (install Debian's bible-kjv, or pass --data FILE)");
    }
    int rc = al_write_file_atomic(out, buf, n, err);
    free(buf);
    return rc ? al_err_prefix(err, "default corpus") : 0;
}

char *al_default_corpus_path(al_err *err) {
    char *dir = corpus_cache_dir(), *out = dir ? al_sprintf("%s/kjv.txt", dir) : NULL;
    if (!out) {
        free(dir);
        al_errf(err, "out of memory");
        return NULL;
    }
    int rc = write_default_corpus(dir, out, err);
    free(dir);
    if (rc) {
        free(out);
        return NULL;
    }
    return out;
}

int al_corpus_load(al_corpus *c, const char *path, double val_fraction, int min_split, al_err *err) {
    memset(c, 0, sizeof *c);
    if (!path || !*path) c->path = al_default_corpus_path(err);
    else if (!(c->path = strdup(path))) al_errf(err, "out of memory");
    if (!c->path) return -1;
    char *data;
    size_t len = 0;
    int rc = 0;
    if (!(val_fraction > 0 && val_fraction < 1))
        rc = al_errf(err, "validation fraction must be in (0, 1)");
    else if (!(rc = al_read_file(c->path, &data, &len, err))) {
        c->bytes = (uint8_t *)data;
        c->n = len;
        c->n_train = len - (size_t)((double)len * val_fraction);
    }
    if (!rc && len == 0)
        rc = al_errf(err, "%s: data file is empty", c->path);
    else if (!rc && (c->n - c->n_train < (size_t)min_split + 1 || c->n_train < (size_t)min_split + 1))
        rc = al_errf(err, "%s: data file too short (%zu bytes) for context %d: each split needs at least %d bytes",
                     c->path, len, min_split, min_split + 1);
    if (rc) al_corpus_free(c);
    return rc;
}

void al_corpus_free(al_corpus *c) {
    free(c->bytes);
    free(c->path);
    memset(c, 0, sizeof *c);
}

void al_sample_batch(const int *ids, size_t lo, size_t hi, int B, int T, al_rng *rng, int *inputs, int *targets) {
    size_t span = hi - lo - (size_t)T; /* window start in [lo, hi - T - 1] */
    for (int b = 0; b < B; b++) {
        size_t start = lo + (size_t)(al_rng_u64(rng) % span);
        for (int t = 0; t < T; t++) {
            inputs[b * T + t] = ids[start + t];
            targets[b * T + t] = ids[start + t + 1];
        }
    }
}

/* ---- the corpus as token ids ---- */

/* The cache file: magic, then four little-endian u64 (format, key, text
 * bytes, ids), then the ids as int32. */
static const char cache_magic[8] = {'A', 'L', 'T', 'O', 'K', 'E', 'N', 'S'};
enum { CACHE_FORMAT = 1, CACHE_HEADER = 8 + 4 * 8 };

/* Hashes dir/name into *h when the file is there (a tokenizer's files). */
static int hash_file(uint64_t *h, const char *dir, const char *name, al_err *err) {
    char *path = al_sprintf("%s/%s", dir, name), *text;
    size_t len;
    struct stat st;
    if (!path) return al_errf(err, "out of memory");
    int rc = 0;
    if (stat(path, &st) == 0) {
        if (!(rc = al_read_file(path, &text, &len, err))) {
            *h = al_dist_hash(*h, name, strlen(name) + 1);
            *h = al_dist_hash(*h, &len, sizeof len);
            *h = al_dist_hash(*h, text, len);
            free(text);
        }
    }
    free(path);
    return rc;
}

/* The cache's ids when its header says key and text_bytes, and every id is
 * below vocab; 0 (d->ids, d->n set) or -1 for a missing, stale or damaged
 * cache (never an error: the text is encoded again). */
static int cache_read(al_token_data *d, const char *path, int vocab) {
    char *blob;
    size_t len;
    al_err ignored;
    uint64_t head[4];
    if (al_read_file(path, &blob, &len, &ignored)) return -1;
    int ok = len >= CACHE_HEADER && !memcmp(blob, cache_magic, 8);
    if (ok) memcpy(head, blob + 8, sizeof head);
    ok = ok && head[0] == CACHE_FORMAT && head[1] == d->key && head[2] == d->text_bytes &&
         head[3] == (len - CACHE_HEADER) / sizeof(int32_t) && (len - CACHE_HEADER) % sizeof(int32_t) == 0;
    int *ids = ok ? malloc(sizeof(int) * (head[3] ? head[3] : 1)) : NULL;
    if (ids) {
        memcpy(ids, blob + CACHE_HEADER, sizeof(int32_t) * head[3]);
        for (size_t i = 0; i < head[3] && ok; i++) ok = ids[i] >= 0 && ids[i] < vocab;
    }
    free(blob);
    if (!ids || !ok) {
        free(ids);
        return -1;
    }
    d->ids = ids;
    d->n = head[3];
    return 0;
}

/* Writes d's ids to path (atomically). */
static int cache_write(const al_token_data *d, const char *path, al_err *err) {
    const uint64_t head[4] = {CACHE_FORMAT, d->key, d->text_bytes, d->n};
    al_afile f;
    if (al_afile_open(&f, path, err)) return -1;
    al_afile_write(&f, cache_magic, 8, err);
    al_afile_write(&f, head, sizeof head, err);
    al_afile_write(&f, d->ids, sizeof(int32_t) * d->n, err);
    return al_afile_commit(&f, err);
}

/* The text encoded by d->tok (ids checked against vocab): from the cache when
 * it matches, else encoded and, when write_cache, cached. */
static int encode_text(al_token_data *d, const char *text, size_t len, const char *tok_dir, const char *cache_dir,
                       int write_cache, int vocab, al_err *err) {
    d->key = al_dist_hash(AL_DIST_HASH0, cache_magic, 8);
    if (hash_file(&d->key, tok_dir, "tokenizer.json", err) || hash_file(&d->key, tok_dir, "tokenizer_config.json", err))
        return -1;
    d->key = al_dist_hash(d->key, text, len);
    char *cache = cache_dir ? al_sprintf("%s/%s", cache_dir, AL_TOKEN_CACHE) : NULL;
    if (cache_dir && !cache) return al_errf(err, "out of memory");
    int rc = 0;
    if (cache && cache_read(d, cache, vocab) == 0) {
        d->source = AL_TOKENS_CACHED;
    } else {
        int n = 0;
        d->source = AL_TOKENS_ENCODED;
        if (al_tok_encode(d->tok, text, len, 1, &d->ids, &n, err)) rc = al_err_prefix(err, "%s", d->path);
        d->n = (size_t)(n > 0 ? n : 0);
        for (size_t i = 0; i < d->n && !rc; i++)
            if (d->ids[i] >= vocab)
                rc = al_errf(err, "%s: token id %d is not in the model's %d-token vocabulary", d->path, d->ids[i], vocab);
        if (!rc && cache && write_cache) rc = cache_write(d, cache, err);
    }
    free(cache);
    return rc;
}

int al_token_data_load(al_token_data *d, const char *text_path, const char *tok_dir, const char *cache_dir,
                       int write_cache, double val_fraction, int min_split, int vocab, al_err *err) {
    memset(d, 0, sizeof *d);
    al_corpus c;
    if (!(d->tok = al_tok_open_dir(tok_dir, err))) return -1;
    if (al_tok_is_bytes(d->tok)) { /* the byte corpus, its split and its errors as they always were */
        if (al_corpus_load(&c, text_path, val_fraction, min_split, err)) return -1;
        d->path = c.path, d->n = c.n, d->n_train = c.n_train, d->text_bytes = c.n;
        c.path = NULL;
        int rc = (d->ids = malloc(sizeof(int) * c.n)) ? 0 : al_errf(err, "out of memory");
        for (size_t i = 0; i < c.n && !rc; i++)
            if ((d->ids[i] = c.bytes[i]) >= vocab)
                rc = al_errf(err, "byte %d is not a token of this model's %d-token vocabulary", c.bytes[i], vocab);
        al_corpus_free(&c);
        if (rc) al_token_data_free(d);
        return rc;
    }
    int rc = 0;
    if (al_tok_vocab_size(d->tok) > vocab)
        rc = al_errf(err, "%s: tokenizer.json has %d token ids but the model only %d", tok_dir,
                     al_tok_vocab_size(d->tok), vocab);
    else if (!(val_fraction > 0 && val_fraction < 1))
        rc = al_errf(err, "validation fraction must be in (0, 1)");
    else if (!text_path || !*text_path) d->path = al_default_corpus_path(err);
    else if (!(d->path = strdup(text_path))) rc = al_errf(err, "out of memory");
    char *text = NULL;
    size_t len = 0;
    if (!rc && (!d->path || al_read_file(d->path, &text, &len, err))) rc = -1;
    d->text_bytes = len;
    if (!rc) rc = encode_text(d, text, len, tok_dir, cache_dir, write_cache, vocab, err);
    free(text);
    if (!rc) {
        d->n_train = d->n - (size_t)((double)d->n * val_fraction);
        if (d->n - d->n_train < (size_t)min_split + 1 || d->n_train < (size_t)min_split + 1)
            rc = al_errf(err, "%s: data too short (%zu tokens) for context %d: each split needs at least %d tokens",
                         d->path, d->n, min_split, min_split + 1);
    }
    if (rc) al_token_data_free(d);
    return rc;
}

void al_token_data_free(al_token_data *d) {
    free(d->ids);
    free(d->path);
    al_tok_free(d->tok);
    memset(d, 0, sizeof *d);
}

int al_tokenizer_copy(const char *from_dir, const char *to_dir, al_err *err) {
    static const char *const names[] = {"tokenizer.json", "tokenizer_config.json"};
    int rc = 0;
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !rc; i++) {
        char *from = al_sprintf("%s/%s", from_dir, names[i]), *to = al_sprintf("%s/%s", to_dir, names[i]), *text;
        size_t len;
        struct stat st;
        if (!from || !to) rc = al_errf(err, "out of memory");
        else if (stat(from, &st) != 0) rc = unlink(to) && errno != ENOENT ? al_errf(err, "%s: %s", to, strerror(errno)) : 0;
        else if (!(rc = al_read_file(from, &text, &len, err))) {
            rc = al_write_file_atomic(to, text, len, err);
            free(text);
        }
        free(from);
        free(to);
    }
    return rc;
}

int al_predicted_bytes(const al_tokenizer *t, const int *ids, size_t count, size_t *bytes, al_err *err) {
    size_t all, first;
    if (count + 1 > (size_t)INT32_MAX) return al_errf(err, "too many tokens to count their bytes");
    if (al_tok_text_bytes(t, ids, (int)count + 1, &all, err) || al_tok_text_bytes(t, ids, 1, &first, err)) return -1;
    *bytes = all - first;
    return 0;
}
