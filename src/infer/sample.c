/*
 * sample.c: next-token sampling. Candidates are sorted by probability once;
 * top-k and top-p then keep a prefix of that order and we draw from it.
 */
#include "sample.h"

#include <math.h>
#include <stdlib.h>

static const float *sort_keys;
static int by_prob_desc(const void *a, const void *b) {
    float x = sort_keys[*(const int *)a], y = sort_keys[*(const int *)b];
    return (x < y) - (x > y);
}

int al_sample(const al_sampler *s, const float *logits, float *probs, int V, al_rng *rng) {
    int best = 0;
    for (int i = 1; i < V; i++) best = logits[i] > logits[best] ? i : best;
    if (!(s->temperature > 0)) return best;
    double sum = 0;
    for (int i = 0; i < V; i++) {
        probs[i] = expf((logits[i] - logits[best]) / s->temperature);
        sum += probs[i];
    }
    int order[V > 0 ? V : 1];
    for (int i = 0; i < V; i++) order[i] = i;
    sort_keys = probs;
    qsort(order, (size_t)V, sizeof order[0], by_prob_desc);
    int keep = s->top_k > 0 && s->top_k < V ? s->top_k : V;
    if (s->top_p > 0 && s->top_p < 1) {
        double acc = 0;
        for (int i = 0; i < keep; i++) {
            acc += probs[order[i]] / sum;
            if (acc >= s->top_p) {
                keep = i + 1;
                break;
            }
        }
    }
    double total = 0;
    for (int i = 0; i < keep; i++) total += probs[order[i]];
    double r = al_rng_uniform(rng) * total;
    for (int i = 0; i < keep; i++) {
        r -= probs[order[i]];
        if (r <= 0) return order[i];
    }
    return order[keep - 1];
}
