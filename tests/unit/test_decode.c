/*
 * test_decode.c: al_attn_decode (src/attn/decode.c), the chunked one-token
 * attention over a cache that every design decodes with, against its plain
 * double-precision reference al_attn_decode_ref on random caches: every
 * score function, MHA/GQA/MQA group shapes (1-6 heads a group against the
 * value blocks of every width), MLA's shared-latent layout and
 * LRKV's shared part plus per-head latents, odd head sizes (vector tails),
 * lengths below, at and across the 256-position chunk boundary; on every
 * kernel level this CPU runs (core/cpu.h: AVX-512, AVX2, generic BLAS); with
 * F32 and BF16 caches (the reference reads the same BF16 values, so the
 * bound stays tight); and the result must not depend on the thread count.
 */
#include <omp.h>
#include <string.h>

#include "attn/attn.h"
#include "core/cpu.h"
#include "testutil.h"

static float frand(al_rng *r) { return 2.0f * (float)al_rng_uniform(r) - 1.0f; }


/* One case: H heads over G groups, head sizes dk/dv (+ r per head for LRKV),
 * n positions, a cache of dtype dt. Returns the relative error against the
 * reference. */
static double run_case(al_score_kind score, int H, int G, int dk, int dv, int r, int n, int layout, al_dtype dt) {
    al_rng rng;
    al_rng_seed(&rng, (uint64_t)(H * 1000003 + G * 1009 + dk * 31 + n + score + 7 * r));
    al_attn_shape s = tu_decode_shape(H, G, dk, dv, r, n, score);
    al_decode_view v = tu_decode_view(layout, H, G, dk, dv, r);
    const size_t qn = (size_t)H * (dk + v.dk2), on = (size_t)H * (dv + v.dv2);
    float *cache = malloc(sizeof(float) * v.row * n), *q = malloc(sizeof(float) * qn);
    void *stored = malloc(al_dtype_size(dt) * v.row * n);
    float *o = malloc(sizeof(float) * on), *ref = malloc(sizeof(float) * on);
    float *work = malloc(sizeof(float) * al_attn_decode_scratch(&s, v.dv2, n));
    for (size_t i = 0; i < v.row * n; i++) cache[i] = frand(&rng);
    for (size_t i = 0; i < qn; i++) q[i] = 3.0f * frand(&rng); /* peaked softmax rows */
    v.cache = (al_kv){stored, dt};
    al_kv_store(v.cache, 0, cache, v.row * n);
    al_attn_decode(&s, q, &v, n, o, work);
    al_attn_decode_ref(&s, q, &v, n, ref);
    double err = test_rel_err(o, ref, on);
    free(cache), free(stored), free(q), free(o), free(ref), free(work);
    return err;
}

int main(void) {
    static const int lengths[] = {1, 2, 37, 255, 256, 257, 600, 1030};
    omp_set_num_threads(2);
    for (int level = AL_CPU_GENERIC; level <= (int)al_cpu_detect(); level++) {
        al_cpu_force(level);
        const char *ln = al_cpu_level_name((al_cpu_level)level);
        for (int bf = 0; bf < 2; bf++)
            for (int sc = 0; sc < AL_SCORE_COUNT; sc++)
                for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++) {
                    const int n = lengths[li];
                    const al_dtype dt = bf ? AL_DT_BF16 : AL_DT_F32;
                    const char *dn = bf ? "bf16" : "f32";
                    double e;
                    e = run_case((al_score_kind)sc, 4, 4, 17, 17, 0, n, TU_LAYOUT_KV, dt); /* MHA, odd head size */
                    CHECK_MSG(e < 2e-5, "%s %s MHA score %d n %d: rel err %.3g", ln, dn, sc, n, e);
                    e = run_case((al_score_kind)sc, 6, 2, 16, 16, 0, n, TU_LAYOUT_KV, dt); /* GQA */
                    CHECK_MSG(e < 2e-5, "%s %s GQA score %d n %d: rel err %.3g", ln, dn, sc, n, e);
                    e = run_case((al_score_kind)sc, 5, 1, 8, 12, 0, n, TU_LAYOUT_KV, dt); /* MQA, dv != dk */
                    CHECK_MSG(e < 2e-5, "%s %s MQA score %d n %d: rel err %.3g", ln, dn, sc, n, e);
                    e = run_case((al_score_kind)sc, 3, 1, 24, 16, 0, n, TU_LAYOUT_MLA, dt); /* MLA latent layout */
                    CHECK_MSG(e < 2e-5, "%s %s MLA score %d n %d: rel err %.3g", ln, dn, sc, n, e);
                    e = run_case((al_score_kind)sc, 8, 1, 64, 48, 0, n, TU_LAYOUT_MLA, dt); /* MLA, the study's sizes */
                    CHECK_MSG(e < 2e-5, "%s %s MLA-64 score %d n %d: rel err %.3g", ln, dn, sc, n, e);
                    e = run_case((al_score_kind)sc, 8, 1, 32, 32, 14, n, TU_LAYOUT_LRKV, dt); /* LRKV, r 14 */
                    CHECK_MSG(e < 2e-5, "%s %s LRKV score %d n %d: rel err %.3g", ln, dn, sc, n, e);
                    e = run_case((al_score_kind)sc, 3, 1, 18, 18, 20, n, TU_LAYOUT_LRKV, dt); /* r > one vector */
                    CHECK_MSG(e < 2e-5, "%s %s LRKV-odd score %d n %d: rel err %.3g", ln, dn, sc, n, e);
                }
        /* every register block of the weighted sum of values: 1-6 heads a group (the rows of a block) times
         * d_v of 3 and 4 vectors of 16 (AVX-512's column blocks; 5 and 8 of AVX2's 8), on both caches */
        for (int bf = 0; bf < 2; bf++)
            for (int pg = 1; pg <= 6; pg++)
                for (int dv = 40; dv <= 64; dv += 24) {
                    const int sc = (pg + dv) % AL_SCORE_COUNT;
                    const double e = run_case((al_score_kind)sc, 2 * pg, 2, 24, dv, 0, 300, TU_LAYOUT_KV,
                                              bf ? AL_DT_BF16 : AL_DT_F32);
                    CHECK_MSG(e < 2e-5, "%s %s %d heads a group, d_v %d, score %d: rel err %.3g", ln,
                              bf ? "bf16" : "f32", pg, dv, sc, e);
                }

        /* the same bits with 1 and 2 threads (chunks, not threads, fix every sum) */
        for (int sc = 0; sc < AL_SCORE_COUNT; sc++) {
            al_attn_shape s = {1, 700, 4, 2, 16, 16, 0, 0, 0, 0, 0.25f};
            s.score = (al_score_kind)sc, s.poly_power = 2, s.poly_coef = 0.1f, s.score_n = 700;
            al_rng rng;
            al_rng_seed(&rng, 7);
            const int n = 700;
            al_decode_view v = {{NULL, AL_DT_F32}, 64, 0, 16, 32, 16, 0, 0, 0, 0};
            float *cache = malloc(sizeof(float) * 64 * n), q[64], o1[64], o2[64];
            float *work = malloc(sizeof(float) * al_attn_decode_scratch(&s, 0, n));
            for (int i = 0; i < 64 * n; i++) cache[i] = frand(&rng);
            for (int i = 0; i < 64; i++) q[i] = frand(&rng);
            v.cache.data = cache;
            omp_set_num_threads(1);
            al_attn_decode(&s, q, &v, n, o1, work);
            omp_set_num_threads(2);
            al_attn_decode(&s, q, &v, n, o2, work);
            CHECK_MSG(!memcmp(o1, o2, sizeof o1), "%s score %d: 1 and 2 threads differ", ln, sc);
            free(cache), free(work);
        }
    }
    al_cpu_force(-1);
    char sets[160];
    al_cpu_describe(sets, sizeof sets);
    fprintf(stderr, "kernel sets: this CPU %s; tested every set it runs\n", sets);
    return TEST_EXIT();
}
