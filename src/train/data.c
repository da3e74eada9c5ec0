/*
 * data.c: corpus loading, the default-corpus cache and batch sampling.
 */
#include "data.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../io/io.h"

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
    if (!buf || status != 0 || n < 1000000) {
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

void al_sample_batch(const uint8_t *bytes, size_t lo, size_t hi, int B, int T, al_rng *rng, int *inputs, int *targets) {
    size_t span = hi - lo - (size_t)T; /* window start in [lo, hi - T - 1] */
    for (int b = 0; b < B; b++) {
        size_t start = lo + (size_t)(al_rng_u64(rng) % span);
        for (int t = 0; t < T; t++) {
            inputs[b * T + t] = bytes[start + t];
            targets[b * T + t] = bytes[start + t + 1];
        }
    }
}
