/*
 * data.h: byte corpora. A corpus is the whole file in memory, split
 * deterministically: the first (1 - val_fraction) of the bytes train, the rest
 * validate. The default corpus is the King James Bible printed by Debian's
 * `bible` program (package bible-kjv), cached to a file on first use.
 */
#ifndef AL_DATA_H
#define AL_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "../core/core.h"

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

/* Draws B random windows of T+1 bytes from [lo, hi): inputs[B*T], targets[B*T]. */
void al_sample_batch(const uint8_t *bytes, size_t lo, size_t hi, int B, int T, al_rng *rng, int *inputs, int *targets);

#endif
