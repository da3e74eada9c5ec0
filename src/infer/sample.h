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

/* logits[V] are not modified; probs[V] is scratch. */
int al_sample(const al_sampler *s, const float *logits, float *probs, int V, al_rng *rng);

#endif
