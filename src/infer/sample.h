/*
 * sample.h: choosing the next token from logits: temperature, top-k, top-p
 * (nucleus); temperature 0 is greedy.
 */
#ifndef AL_SAMPLE_H
#define AL_SAMPLE_H

#include "../core/core.h"

typedef struct al_sampler {
    float temperature;  /* 0: argmax */
    int top_k;          /* 0: off */
    float top_p;        /* 1: off */
} al_sampler;

/* The next token from logits[V] (not modified); keys[V] is scratch (the
 * weights and ids in sampling order). Thread-safe: no state outside the
 * arguments. */
int al_sample(const al_sampler *s, const float *logits, uint64_t *keys, int V, al_rng *rng);

#endif
