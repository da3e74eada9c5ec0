/*
 * test_decode.c: al_attn_decode (src/attn/decode.c), the chunked one-token
 * attention over a cache that MHA/GQA/MQA and MLA decode with, against its
 * plain double-precision reference al_attn_decode_ref on random caches:
 * every score function, MHA/GQA/MQA group shapes and MLA's shared-latent
 * layout, odd head sizes, lengths below, at and across the 256-position
 * chunk boundary; and the result must not depend on the thread count.
 */
#include <omp.h>
#include <string.h>

#include "attn/attn.h"
#include "test.h"

static float frand(al_rng *r) { return 2.0f * (float)al_rng_uniform(r) - 1.0f; }

/* One case: H heads over G groups, head sizes dk/dv, n positions in a cache
 * laid out as `mla` (one group, value = first dv key columns) or as
 * [K groups | V groups]. Returns the relative error against the reference. */
static double run_case(al_score_kind score, int H, int G, int dk, int dv, int n, int mla, int threads) {
    al_rng rng;
    al_rng_seed(&rng, (uint64_t)(H * 1000003 + G * 1009 + dk * 31 + n + score));
    al_attn_shape s = {1, n, H, G, dk, dv, 0, 0, 0, 0, 1.0f / sqrtf((float)dk)};
    s.score = score;
    s.poly_power = 3;
    s.poly_coef = 1.0f / sqrtf((float)n);
    s.score_n = (float)n;
    al_decode_view v = {0};
    if (mla) {
        v.row = (size_t)dk; /* [latent (dv) | rope part], one group */
        v.k_off = v.v_off = v.k_group = v.v_group = 0;
    } else {
        v.row = (size_t)G * (dk + dv);
        v.k_off = 0, v.k_group = (size_t)dk, v.v_off = (size_t)G * dk, v.v_group = (size_t)dv;
    }
    float *cache = malloc(sizeof(float) * v.row * n), *q = malloc(sizeof(float) * H * dk);
    float *o = malloc(sizeof(float) * H * dv), *ref = malloc(sizeof(float) * H * dv);
    float *work = malloc(sizeof(float) * al_attn_decode_scratch(&s, n));
    for (size_t i = 0; i < v.row * n; i++) cache[i] = frand(&rng);
    for (int i = 0; i < H * dk; i++) q[i] = 3.0f * frand(&rng); /* peaked softmax rows */
    v.cache = cache;
    omp_set_num_threads(threads);
    al_attn_decode(&s, q, &v, n, o, work);
    al_attn_decode_ref(&s, q, &v, n, ref);
    double err = test_rel_err(o, ref, (size_t)H * dv);
    free(cache), free(q), free(o), free(ref), free(work);
    return err;
}

int main(void) {
    static const int lengths[] = {1, 2, 37, 255, 256, 257, 600, 1030};
    for (int sc = 0; sc < AL_SCORE_COUNT; sc++)
        for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++) {
            const int n = lengths[li];
            double e;
            e = run_case((al_score_kind)sc, 4, 4, 17, 17, n, 0, 2); /* MHA, odd head size */
            CHECK_MSG(e < 2e-5, "MHA score %d n %d: rel err %.3g", sc, n, e);
            e = run_case((al_score_kind)sc, 6, 2, 16, 16, n, 0, 2); /* GQA */
            CHECK_MSG(e < 2e-5, "GQA score %d n %d: rel err %.3g", sc, n, e);
            e = run_case((al_score_kind)sc, 5, 1, 8, 12, n, 0, 2); /* MQA, dv != dk */
            CHECK_MSG(e < 2e-5, "MQA score %d n %d: rel err %.3g", sc, n, e);
            e = run_case((al_score_kind)sc, 3, 1, 24, 16, n, 1, 2); /* MLA latent layout */
            CHECK_MSG(e < 2e-5, "MLA score %d n %d: rel err %.3g", sc, n, e);
        }

    /* the same bits with 1 and 2 threads (chunks, not threads, fix every sum) */
    for (int sc = 0; sc < AL_SCORE_COUNT; sc++) {
        al_attn_shape s = {1, 700, 4, 2, 16, 16, 0, 0, 0, 0, 0.25f};
        s.score = (al_score_kind)sc, s.poly_power = 2, s.poly_coef = 0.1f, s.score_n = 700;
        al_rng rng;
        al_rng_seed(&rng, 7);
        const int n = 700;
        al_decode_view v = {NULL, 64, 0, 16, 32, 16};
        float *cache = malloc(sizeof(float) * 64 * n), q[64], o1[64], o2[64];
        float *work = malloc(sizeof(float) * al_attn_decode_scratch(&s, n));
        for (int i = 0; i < 64 * n; i++) cache[i] = frand(&rng);
        for (int i = 0; i < 64; i++) q[i] = frand(&rng);
        v.cache = cache;
        omp_set_num_threads(1);
        al_attn_decode(&s, q, &v, n, o1, work);
        omp_set_num_threads(2);
        al_attn_decode(&s, q, &v, n, o2, work);
        CHECK_MSG(!memcmp(o1, o2, sizeof o1), "score %d: 1 and 2 threads differ", sc);
        free(cache), free(work);
    }
    return TEST_EXIT();
}
