/*
 * test_sample.c: al_sample (infer/sample.c) against the distributions it
 * promises, measured by drawing: greedy picks the first largest logit;
 * temperature draws each token with softmax(logits / T) probability; top-k
 * keeps the k most probable (equal ones by lower id); top-p keeps the
 * smallest most-probable prefix whose mass reaches p. Frequencies over many
 * draws must land within 5 standard errors of the exact probabilities
 * (computed here in double, independently of the sampler's sort). Also: the
 * same seed gives the same draws, NaN logits give an id in range, and two
 * threads sampling at once draw what each draws alone (the sampler once
 * sorted through a static pointer, which concurrent callers overwrote).
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/infer/sample.h"
#include "test.h"

enum { DRAWS = 200000 };

/* Draws DRAWS tokens and checks their frequencies against want[V] (0 where
 * a token must never be drawn). */
static void check_frequencies(const char *what, const al_sampler *s, const float *logits, int V, const double *want) {
    uint64_t *keys = malloc(sizeof(uint64_t) * (size_t)V);
    long *count = calloc((size_t)V, sizeof(long));
    al_rng rng;
    al_rng_seed(&rng, 42);
    int out_of_range = 0;
    for (int n = 0; n < DRAWS; n++) {
        const int t = al_sample(s, logits, keys, V, &rng);
        if (t < 0 || t >= V) out_of_range++;
        else count[t]++;
    }
    CHECK_MSG(!out_of_range, "%s: %d ids out of range", what, out_of_range);
    for (int i = 0; i < V; i++) {
        const double f = (double)count[i] / DRAWS, p = want[i];
        if (p == 0) {
            CHECK_MSG(count[i] == 0, "%s: token %d drawn %ld times, never allowed", what, i, count[i]);
            continue;
        }
        const double se = sqrt(p * (1 - p) / DRAWS);
        CHECK_MSG(fabs(f - p) <= 5 * se, "%s: token %d drawn with frequency %.5f, probability %.5f (se %.5f)", what,
                  i, f, p, se);
    }
    free(keys);
    free(count);
}

/* want[V] = softmax(logits / T) over the ids in keep (keep[i] != 0). */
static void softmax_over(const float *logits, int V, double T, const int *keep, double *want) {
    double mx = -INFINITY, sum = 0;
    for (int i = 0; i < V; i++)
        if (keep[i] && logits[i] > mx) mx = logits[i];
    for (int i = 0; i < V; i++) sum += want[i] = keep[i] ? exp((logits[i] - mx) / T) : 0.0;
    for (int i = 0; i < V; i++) want[i] /= sum;
}

static void check_greedy(void) {
    const float logits[] = {0.5f, 2.0f, -1.0f, 2.0f, 1.9f};
    uint64_t keys[5];
    al_rng rng;
    al_rng_seed(&rng, 1);
    const al_sampler greedy = {0.0f, 0, 1.0f}, negative = {-1.0f, 0, 1.0f}, nan_t = {NAN, 3, 0.5f};
    CHECK(al_sample(&greedy, logits, keys, 5, &rng) == 1); /* the first of the two largest */
    CHECK(al_sample(&negative, logits, keys, 5, &rng) == 1);
    CHECK(al_sample(&nan_t, logits, keys, 5, &rng) == 1);
    const al_sampler warm = {1.0f, 0, 1.0f};
    CHECK(al_sample(&warm, logits, keys, 1, &rng) == 0); /* one token: always it */
}

static void check_distributions(void) {
    enum { V = 6 };
    const float logits[V] = {2.0f, 1.0f, 0.5f, 0.5f, -1.0f, -3.0f};
    double want[V];
    const int all[V] = {1, 1, 1, 1, 1, 1};
    softmax_over(logits, V, 0.7, all, want);
    check_frequencies("temperature 0.7", &(al_sampler){0.7f, 0, 1.0f}, logits, V, want);
    softmax_over(logits, V, 2.5, all, want);
    check_frequencies("temperature 2.5", &(al_sampler){2.5f, 0, 1.0f}, logits, V, want);
    /* top-k 3: tokens 2 and 3 are equally probable: the lower id is kept */
    const int top3[V] = {1, 1, 1, 0, 0, 0};
    softmax_over(logits, V, 1.0, top3, want);
    check_frequencies("top-k 3", &(al_sampler){1.0f, 3, 1.0f}, logits, V, want);
    /* top-k of V or more is no limit */
    softmax_over(logits, V, 1.0, all, want);
    check_frequencies("top-k V", &(al_sampler){1.0f, V, 1.0f}, logits, V, want);
}

/* Probabilities 1/2, 1/4, 1/8, 1/16, 1/16 (logits their logs, T 1): top-p
 * keeps the prefix whose mass first reaches p. */
static void check_top_p(void) {
    enum { V = 5 };
    const float logits[V] = {logf(0.5f), logf(0.25f), logf(0.125f), logf(0.0625f), logf(0.0625f)};
    double want[V];
    const int two[V] = {1, 1, 0, 0, 0}, three[V] = {1, 1, 1, 0, 0}, one[V] = {1, 0, 0, 0, 0};
    softmax_over(logits, V, 1.0, two, want);
    check_frequencies("top-p 0.7 (mass 0.75 after two)", &(al_sampler){1.0f, 0, 0.7f}, logits, V, want);
    softmax_over(logits, V, 1.0, three, want);
    check_frequencies("top-p 0.8 (mass 0.875 after three)", &(al_sampler){1.0f, 0, 0.8f}, logits, V, want);
    softmax_over(logits, V, 1.0, one, want);
    check_frequencies("top-p 0.3 (the first alone)", &(al_sampler){1.0f, 0, 0.3f}, logits, V, want);
    softmax_over(logits, V, 1.0, two, want);
    check_frequencies("top-p 0.95 within top-k 2", &(al_sampler){1.0f, 2, 0.95f}, logits, V, want);
}

/* The same seed, the same draws; NaN logits, ids in range. */
static void check_repeat_and_nan(void) {
    enum { V = 300, N = 2000 };
    float logits[V];
    al_rng r;
    al_rng_seed(&r, 9);
    for (int i = 0; i < V; i++) logits[i] = 3.0f * al_rng_normal(&r);
    uint64_t keys[V];
    const al_sampler s = {0.9f, 40, 0.9f};
    int a[N], b[N], bad = 0;
    for (int pass = 0; pass < 2; pass++) {
        al_rng rng;
        al_rng_seed(&rng, 77);
        for (int n = 0; n < N; n++) (pass ? b : a)[n] = al_sample(&s, logits, keys, V, &rng);
    }
    CHECK(!memcmp(a, b, sizeof a));
    logits[5] = NAN, logits[17] = NAN;
    al_rng rng;
    al_rng_seed(&rng, 3);
    for (int n = 0; n < N; n++) {
        const int t = al_sample(&s, logits, keys, V, &rng);
        bad += t < 0 || t >= V;
    }
    CHECK_MSG(!bad, "NaN logits: %d ids out of range", bad);
}

/* Two threads, each its own distribution (sizes differ, so a sort through
 * another thread's weights would misorder or overrun), draw what each
 * draws alone. */
static void check_threads(void) {
    enum { N = 20000, T = 2 };
    static const int sizes[T] = {1000, 257};
    float *logits[T];
    int *alone[T], *together[T];
    al_rng r;
    al_rng_seed(&r, 5);
    for (int t = 0; t < T; t++) {
        logits[t] = malloc(sizeof(float) * (size_t)sizes[t]);
        alone[t] = malloc(sizeof(int) * N), together[t] = malloc(sizeof(int) * N);
        for (int i = 0; i < sizes[t]; i++) logits[t][i] = 2.0f * al_rng_normal(&r);
    }
    const al_sampler s = {1.0f, 0, 0.95f};
    for (int t = 0; t < T; t++) {
        uint64_t *keys = malloc(sizeof(uint64_t) * (size_t)sizes[t]);
        al_rng rng;
        al_rng_seed(&rng, 100 + (uint64_t)t);
        for (int n = 0; n < N; n++) alone[t][n] = al_sample(&s, logits[t], keys, sizes[t], &rng);
        free(keys);
    }
    int ran = 0;
#pragma omp parallel num_threads(T) reduction(+ : ran)
    {
        const int t = omp_get_thread_num();
        ran = 1;
        uint64_t *keys = malloc(sizeof(uint64_t) * (size_t)sizes[t]);
        al_rng rng;
        al_rng_seed(&rng, 100 + (uint64_t)t);
        for (int n = 0; n < N; n++) together[t][n] = al_sample(&s, logits[t], keys, sizes[t], &rng);
        free(keys);
    }
    if (ran < T) fprintf(stderr, "skipped: concurrent sampling (OpenMP gave %d thread)\n", ran);
    for (int t = 0; t < ran; t++)
        CHECK_MSG(!memcmp(alone[t], together[t], sizeof(int) * N), "thread %d drew other tokens beside another", t);
    for (int t = 0; t < T; t++) free(logits[t]), free(alone[t]), free(together[t]);
}

int main(void) {
    check_greedy();
    check_distributions();
    check_top_p();
    check_repeat_and_nan();
    check_threads();
    return TEST_EXIT();
}
