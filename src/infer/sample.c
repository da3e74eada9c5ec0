/*
 * sample.c: next-token sampling. Candidates are sorted by probability once
 * (most probable first, equal ones by id); top-k and top-p then keep a
 * prefix of that order and we draw from it.
 *
 * The sort works on 64-bit keys, a weight's bits over its id's complement:
 * a weight is a float in [0, 1], whose bits order as the values do, so the
 * keys in descending order are the weights in descending order with equal
 * weights by ascending id, and no two keys are equal. That makes the order
 * the same under any sort algorithm, needs no comparison context (a static
 * pointer for qsort made concurrent samplers race) and keeps the weight
 * beside its id, so the caller's scratch is the keys alone.
 */
#include "sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The weight and the id of a key. */
static float key_weight(uint64_t key) {
    const uint32_t bits = (uint32_t)(key >> 32);
    float w;
    memcpy(&w, &bits, sizeof w);
    return w;
}
static int key_id(uint64_t key) { return (int)(UINT32_MAX - (uint32_t)key); }

static int by_key_desc(const void *a, const void *b) {
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x < y) - (x > y);
}

int al_sample(const al_sampler *s, const float *logits, uint64_t *keys, int V, al_rng *rng) {
    int best = 0;
    for (int i = 1; i < V; i++) best = logits[i] > logits[best] ? i : best;
    if (!(s->temperature > 0)) return best;
    double sum = 0;
    for (int i = 0; i < V; i++) {
        const float w = expf((logits[i] - logits[best]) / s->temperature);
        uint32_t bits;
        memcpy(&bits, &w, sizeof bits);
        keys[i] = (uint64_t)bits << 32 | (UINT32_MAX - (uint32_t)i);
        sum += w;
    }
    qsort(keys, (size_t)V, sizeof keys[0], by_key_desc);
    int keep = s->top_k > 0 && s->top_k < V ? s->top_k : V;
    if (s->top_p > 0 && s->top_p < 1) {
        double acc = 0;
        for (int i = 0; i < keep; i++) {
            acc += key_weight(keys[i]) / sum;
            if (acc >= s->top_p) {
                keep = i + 1;
                break;
            }
        }
    }
    double total = 0;
    for (int i = 0; i < keep; i++) total += key_weight(keys[i]);
    double r = al_rng_uniform(rng) * total;
    for (int i = 0; i < keep; i++) {
        r -= key_weight(keys[i]);
        if (r <= 0) return key_id(keys[i]);
    }
    return key_id(keys[keep - 1]);
}
