/*
 * test_kve.c: KV-cache eviction (src/attn/kve.c, the eviction parts of
 * decode.c and the decoder):
 *  - every policy (window, h2o, snapkv; fraction and count budgets, sinks
 *    0 and 4) over the cache layouts of MHA/GQA/MQA, MLA and LRKV and every
 *    score function, against a reference written here: the full weights of
 *    each step materialised in double over the positions the reference
 *    holds, the same policy applied by brute force (sorting). The decode
 *    output of every step and the positions held after it must agree;
 *  - whole models of every design and score function: eviction at budget 1
 *    (fraction) decodes bit for bit as the uncompressed cache; the kernels
 *    evict as the decode reference (al_attn_test_decode_ref) does; SnapKV
 *    after a prefill keeps what token-by-token decoding keeps; window after
 *    a prefill too;
 *  - the prefill's column sums against their double reference;
 *  - held bytes equal the closed form (per-layer budgets, pyramid too);
 *  - option refusals are one line naming the flag.
 */
#include <string.h>

#include "attn/attn.h"
#include "attn/kve.h"
#include "core/cpu.h"
#include "testutil.h"

static float frand(al_rng *r) { return 2.0f * (float)al_rng_uniform(r) - 1.0f; }


/* ---- the reference policy, by brute force over positions ---- */

static int ref_keep(double b, int t) {
    if (b <= 1.0) {
        int k = (int)ceil(b * t - 1e-9);
        return k < 1 ? 1 : k > t ? t : k;
    }
    return (int)b < t ? (int)b : t;
}
static int ref_snap_window(int P) { return P / 2 < 1 ? 1 : P / 2 > 32 ? 32 : P / 2; }

/* sort keys: ascending = evicted first */
static const double *cmp_key;
static int cmp_desc_pos; /* ties: 1 the newer first (evicted first) */
static int by_key(const void *a, const void *b) {
    const int i = *(const int *)a, j = *(const int *)b;
    if (cmp_key[i] != cmp_key[j]) return cmp_key[i] < cmp_key[j] ? -1 : 1;
    return cmp_desc_pos ? j - i : i - j;
}

/* Applies the policy after t positions were seen: held[p] (0/1), mass[p]. */
static void ref_policy(const al_kve_opts *o, int t, char *held, const double *mass) {
    int n = 0, cand[4096], nc = 0;
    double key[4096];
    for (int p = 0; p < t; p++)
        n += held[p];
    if (o->method == AL_KVE_WINDOW || o->method == AL_KVE_H2O) {
        const int k = ref_keep(o->budget, t);
        if (n <= k) return;
        const int s = o->sinks < k - 1 ? o->sinks : k - 1, r = k - s;
        const int recent = o->method == AL_KVE_WINDOW ? r : r - r / 2;
        for (int p = 0; p < t; p++) {
            key[p] = o->method == AL_KVE_WINDOW ? p : mass[p];
            if (held[p] && p >= s && p < t - recent) cand[nc++] = p;
        }
        cmp_key = key, cmp_desc_pos = 1;
        qsort(cand, (size_t)nc, sizeof(int), by_key);
        for (int c = 0; c < n - k; c++)
            held[cand[c]] = 0;
    } else if (o->method == AL_KVE_SNAPKV && t == o->prompt) {
        const int P = t, k = ref_keep(o->budget, P);
        if (n <= k) return;
        const int s = o->sinks < k - 1 ? o->sinks : k - 1;
        const int w = ref_snap_window(P) < k - s ? ref_snap_window(P) : k - s, lim = P - w;
        for (int p = 0; p < P; p++) {
            key[p] = -INFINITY;
            for (int q = p - 3; q <= p + 3; q++)
                if (q >= 0 && q < lim && held[q] && mass[q] > key[p]) key[p] = mass[q];
            if (held[p] && p >= s && p < lim) cand[nc++] = p;
        }
        cmp_key = key, cmp_desc_pos = 1; /* ascending pooled vote, ties the newer first: the rest is kept */
        qsort(cand, (size_t)nc, sizeof(int), by_key);
        for (int c = 0; c < nc - (k - s - w); c++)
            held[cand[c]] = 0;
    }
}

/* whether step t's weights add to the mass (kve.h) */
static int ref_wants(const al_kve_opts *o, int t) {
    if (o->method == AL_KVE_H2O) return 1;
    return o->method == AL_KVE_SNAPKV && t < o->prompt && t >= o->prompt - ref_snap_window(o->prompt);
}

/* One stream: N steps of random rows and queries through an evicting layer
 * (fast: al_kv_store + al_attn_decode) and through the reference (all rows
 * kept, weights materialised over the held positions). Returns the worst
 * relative output error; *sets_differ counts steps whose held sets differ. */
static double run_stream(int layout, al_score_kind score, const al_kve_opts *o, int N, int *sets_differ) {
    const int H = 4, G = layout == TU_LAYOUT_KV ? 2 : 1, dk = layout == TU_LAYOUT_MLA ? 12 : 8, dv = 8,
              r = layout == TU_LAYOUT_LRKV ? 3 : 0;
    al_rng rng;
    al_rng_seed(&rng, (uint64_t)(layout * 101 + score * 7 + o->method * 13 + N + o->sinks));
    al_attn_shape s = tu_decode_shape(H, G, dk, dv, r, N, score);
    al_decode_view v = tu_decode_view(layout, H, G, dk, dv, r);
    const int dq = dk + v.dk2, dov = dv + v.dv2, pg = H / G;
    float *rows = malloc(sizeof(float) * v.row * N), *cache = malloc(sizeof(float) * v.row * N);
    float *q = malloc(sizeof(float) * H * dq), *out = malloc(sizeof(float) * H * dov);
    float *work = malloc(sizeof(float) * al_attn_decode_scratch(&s, v.dv2, N));
    double *mass = calloc((size_t)N, sizeof(double)), *w = malloc(sizeof(double) * N), worst = 0;
    char *held = calloc((size_t)N, 1), *got = malloc((size_t)N);
    al_kve e;
    al_err err;
    *sets_differ = 0;
    if (al_kve_create(&e, o, 0, 1, N, v.row, &err)) {
        CHECK_MSG(0, "%s", err.msg);
        return 1;
    }
    v.cache = (al_kv){cache, AL_DT_F32, NULL, &e};
    *sets_differ = 0;
    for (int t = 0; t < N; t++) {
        float *row = rows + (size_t)t * v.row;
        for (size_t i = 0; i < v.row; i++)
            row[i] = frand(&rng);
        for (int i = 0; i < H * dq; i++)
            q[i] = 2.5f * frand(&rng);
        al_kv_store(v.cache, (size_t)t * v.row, row, v.row);
        al_attn_decode(&s, q, &v, t + 1, out, work);
        held[t] = 1;
        /* the reference: each head's weights over the held positions, then the output */
        for (int h = 0; h < H; h++) {
            const int g = h / pg;
            const float *qh = q + (size_t)h * dq;
            double mx = -INFINITY, sum = 0;
            for (int j = 0; j <= t; j++) {
                if (!held[j]) continue;
                const float *kr = rows + (size_t)j * v.row;
                double a = 0;
                for (int c = 0; c < dk; c++)
                    a += (double)qh[c] * kr[v.k_off + (size_t)g * v.k_group + c];
                for (int c = 0; c < v.dk2; c++)
                    a += (double)qh[dk + c] * kr[v.k2_off + (size_t)h * v.dk2 + c];
                w[j] = (float)(a * s.scale);
                mx = w[j] > mx ? w[j] : mx;
            }
            for (int j = 0; j <= t; j++) {
                if (!held[j]) continue;
                if (score == AL_SCORE_SOFTMAX) {
                    w[j] = exp(w[j] - mx);
                    sum += w[j];
                } else {
                    float f = (float)w[j];
                    al_score_row(&s, &f, 1);
                    w[j] = f;
                }
            }
            double onorm = 0, diff = 0;
            for (int c = 0; c < dov; c++) {
                double acc = 0;
                for (int j = 0; j <= t; j++) {
                    if (!held[j]) continue;
                    const float *vr = rows + (size_t)j * v.row;
                    const double p = score == AL_SCORE_SOFTMAX ? w[j] / sum : w[j];
                    acc += p * (c < dv ? vr[v.v_off + (size_t)g * v.v_group + c]
                                       : vr[v.v2_off + (size_t)h * v.dv2 + c - dv]);
                }
                diff += (acc - out[h * dov + c]) * (acc - out[h * dov + c]);
                onorm += acc * acc;
            }
            const double rel = sqrt(diff / (onorm > 1e-12 ? onorm : 1e-12));
            worst = rel > worst ? rel : worst;
            for (int j = 0; j <= t && ref_wants(o, t); j++)
                if (held[j]) mass[j] += fabs(score == AL_SCORE_SOFTMAX ? w[j] / sum : w[j]);
        }
        ref_policy(o, t + 1, held, mass);
        memset(got, 0, (size_t)N);
        for (int i = 0; i < e.n; i++)
            got[e.pos[i]] = 1;
        *sets_differ += memcmp(got, held, (size_t)t + 1) != 0;
        /* the rows held are the rows stored for those positions */
        for (int i = 0; i < e.n; i++)
            if (memcmp(cache + (size_t)i * v.row, rows + (size_t)e.pos[i] * v.row, sizeof(float) * v.row)) {
                *sets_differ += 1;
                break;
            }
    }
    al_kve_free(&e);
    free(rows), free(cache), free(q), free(out), free(work), free(mass), free(w), free(held), free(got);
    return worst;
}

static void test_policies(void) {
    static const char *const lname[] = {"kv", "mla", "lrkv"};
    const al_kve_opts cases[] = {
        {AL_KVE_WINDOW, 0.5, 4, 0, 0}, {AL_KVE_WINDOW, 12, 0, 0, 0},    {AL_KVE_H2O, 0.5, 4, 0, 0},
        {AL_KVE_H2O, 0.3, 0, 0, 0},    {AL_KVE_H2O, 16, 4, 0, 0},       {AL_KVE_SNAPKV, 0.4, 0, 40, 0},
        {AL_KVE_SNAPKV, 9, 2, 30, 0},  {AL_KVE_SNAPKV, 0.25, 4, 61, 0},
    };
    for (int layout = 0; layout < 3; layout++)
        for (int sc = 0; sc < AL_SCORE_COUNT; sc++)
            for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
                int differ;
                const double e = run_stream(layout, (al_score_kind)sc, &cases[ci], 67, &differ);
                CHECK_MSG(e < 1e-4 && differ == 0,
                          "%s score %d %s budget %g sinks %d: output error %.3g, %d steps hold "
                          "other positions than the reference",
                          lname[layout], sc, al_kve_name(cases[ci].method), cases[ci].budget, cases[ci].sinks, e,
                          differ);
            }
    /* more than one decode chunk (256 positions) held */
    const al_kve_opts big[] = {
        {AL_KVE_H2O, 300, 4, 0, 0}, {AL_KVE_WINDOW, 0.9, 4, 0, 0}, {AL_KVE_SNAPKV, 0.8, 0, 400, 0}};
    for (size_t ci = 0; ci < 3; ci++) {
        int differ;
        const double e = run_stream(TU_LAYOUT_KV, AL_SCORE_SOFTMAX, &big[ci], 420, &differ);
        CHECK_MSG(e < 1e-4 && differ == 0, "420 steps %s: output error %.3g, %d steps differ",
                  al_kve_name(big[ci].method), e, differ);
    }
}

/* ---- whole models ---- */


/* whether two decoders' layers hold the same positions */
static int same_held(const al_decoder *a, const al_decoder *b) {
    for (int l = 0; l < a->m->cfg.num_layers; l++) {
        const al_kve *x = &a->kve[l], *y = &b->kve[l];
        if (x->n != y->n) return 0;
        char seen[256] = {0};
        for (int i = 0; i < x->n; i++)
            seen[x->pos[i]] = 1;
        for (int i = 0; i < y->n; i++)
            if (!seen[y->pos[i]]) return 0;
    }
    return 1;
}

/* One case on one model: m (design and score function sc), tok[T], two
 * logit buffers [T][vocab] */
typedef void (*model_case)(const al_model *m, int sc, const int *tok, int T, float *a, float *b);

/* Runs f on a small model of every design and score function, T random tokens from seed. */
static void each_model(uint64_t seed, int T, model_case f) {
    int tok[64];
    al_rng rng;
    al_rng_seed(&rng, seed);
    tu_random_tokens(tok, T, &rng);
    for (int design = 0; design < AL_ATTN_COUNT; design++)
        for (int sc = 0; sc < AL_SCORE_COUNT; sc++) {
            al_config c = tu_design_config(design, (al_score_kind)sc);
            al_model m;
            if (tu_make_model(&m, &c, seed + (uint64_t)design, TU_GAINS_ONE)) {
                CHECK(0);
                continue;
            }
            float *a = malloc(sizeof(float) * T * c.vocab_size), *b = malloc(sizeof(float) * T * c.vocab_size);
            f(&m, sc, tok, T, a, b);
            free(a), free(b);
            al_model_free(&m);
        }
}

/* budget 1 = uncompressed; kernels = reference; prefill = token by token */
static void model_case_plain(const al_model *mp, int sc, const int *tok, int T, float *a, float *b) {
    const al_model m = *mp;
    const al_config c = m.cfg;
    const size_t V = (size_t)c.vocab_size;
    al_err err;
    const char *dn = al_attn_name(c.attention);
    al_decoder plain, dec, ref;
    CHECK(al_decoder_create(&plain, &m, T, &err) == 0 && tu_decode_all(&plain, tok, T, b, &err) == 0);
    for (int method = AL_KVE_WINDOW; method < AL_KVE_COUNT; method++) {
        /* budget 1: every position kept, the uncompressed decode bit for bit */
        const al_kv_opts one = {{0}, {(al_kve_method)method, 1.0, 4, 20, AL_KVE_UNIFORM}};
        CHECK(al_decoder_create_opts(&dec, &m, T, AL_DT_F32, &one, &err) == 0);
        CHECK(tu_decode_all(&dec, tok, T, a, &err) == 0);
        CHECK_MSG(memcmp(a, b, sizeof(float) * T * V) == 0, "%s score %d %s budget 1 differs", dn, sc,
                  al_kve_name(method));
        CHECK(al_decoder_kv_held_bytes(&dec) == al_decoder_kv_held_bytes(&plain));
        al_decoder_free(&dec);
        /* a real budget: the kernels evict as the decode reference does */
        const al_kv_opts half = {{0}, {(al_kve_method)method, 0.4, 2, 30, AL_KVE_PYRAMID}};
        float *r = malloc(sizeof(float) * T * V);
        CHECK(al_decoder_create_opts(&dec, &m, T, AL_DT_F32, &half, &err) == 0);
        CHECK(al_decoder_create_opts(&ref, &m, T, AL_DT_F32, &half, &err) == 0);
        CHECK(tu_decode_all(&dec, tok, T, a, &err) == 0);
        al_attn_test_decode_ref(1);
        CHECK(tu_decode_all(&ref, tok, T, r, &err) == 0);
        al_attn_test_decode_ref(0);
        const double e = tu_err_floor(a, r, T * V);
        CHECK_MSG(e < 2e-3 && same_held(&dec, &ref), "%s score %d %s: kernels vs reference %.3g, same held %d", dn, sc,
                  al_kve_name(method), e, same_held(&dec, &ref));
        CHECK_MSG(memcmp(a, b, sizeof(float) * T * V) != 0, "%s score %d %s at 0.4 evicts nothing", dn, sc,
                  al_kve_name(method));
        al_decoder_free(&ref);
        /* prefill of the prompt then decode: window (at a count budget: a fraction's sinks grow
         * with it) and snapkv keep what token by token keeps */
        if (method != AL_KVE_H2O) {
            const int P = 30;
            const al_kv_opts pre = {{0},
                                    {(al_kve_method)method, method == AL_KVE_WINDOW ? 12 : 0.4, 2, 30, AL_KVE_PYRAMID}};
            al_decoder_free(&dec);
            CHECK(al_decoder_create_opts(&dec, &m, T, AL_DT_F32, &pre, &err) == 0);
            CHECK(al_decoder_create_opts(&ref, &m, T, AL_DT_F32, &pre, &err) == 0);
            CHECK(al_decoder_prefill(&ref, tok, P, r, &err) == 0);
            for (int t = 0; t < P; t++)
                CHECK(al_decoder_step(&dec, tok[t], a, &err) == 0);
            CHECK_MSG(same_held(&dec, &ref), "%s score %d %s: prefill holds other positions", dn, sc,
                      al_kve_name(method));
            for (int t = P; t < T; t++) {
                CHECK(al_decoder_step(&dec, tok[t], a, &err) == 0 && al_decoder_step(&ref, tok[t], r, &err) == 0);
            }
            CHECK_MSG(tu_err_floor(a, r, V) < 1e-3 && same_held(&dec, &ref), "%s score %d %s: after prefill %.3g", dn,
                      sc, al_kve_name(method), tu_err_floor(a, r, V));
            al_decoder_free(&ref);
        }
        free(r);
        al_decoder_free(&dec);
    }
    al_decoder_free(&plain);
}

static void test_models(void) { each_model(21, 50, model_case_plain); }

/* ---- prefill mass: tiled column sums ---- */

static void test_colsum(void) {
    for (int sc = 0; sc < AL_SCORE_COUNT; sc++)
        for (int r0 = 0; r0 < 40; r0 += 23) {
            enum { T = 37, d = 11 };
            al_rng rng;
            al_rng_seed(&rng, 40 + (uint64_t)sc);
            float q[T * d], k[T * d], work[T], mass[T] = {0};
            double ref[T] = {0};
            for (int i = 0; i < T * d; i++)
                q[i] = 2 * frand(&rng), k[i] = frand(&rng);
            al_attn_shape s = {1, T, 1, 1, d, d, d, d, d, d, 1.0f / sqrtf((float)d)};
            s.score = (al_score_kind)sc;
            s.poly_power = 3, s.poly_coef = 0.2f, s.score_n = T;
            CHECK(al_kve_colsum_work(T) <= T);
            al_kve_colsum(&s, q, k, d, T, r0, mass, work);
            al_kve_colsum_ref(&s, q, k, d, T, r0, ref);
            double worst = 0, tot = 0;
            for (int j = 0; j < T; j++)
                worst = fmax(worst, fabs(mass[j] - ref[j])), tot += ref[j];
            CHECK_MSG(worst < 1e-4 * fmax(1, tot / T) && tot > 0, "score %d r0 %d: column sums off by %.3g", sc, r0,
                      worst);
            if (sc == AL_SCORE_SOFTMAX) CHECK_CLOSE(tot, T - r0, 1e-9); /* each softmax row sums to 1 */
        }
}

/* ---- held bytes: the closed form ---- */

static void test_bytes(void) {
    enum { T = 40 };
    al_config c = tu_design_config(AL_ATTN_GQA, AL_SCORE_SOFTMAX);
    c.num_layers = 3;
    al_model m;
    if (tu_make_model(&m, &c, 9, TU_GAINS_ONE)) {
        CHECK(0);
        return;
    }
    int tok[T];
    al_rng rng;
    al_rng_seed(&rng, 3);
    tu_random_tokens(tok, T, &rng);
    const double vpt = (double)m.attn->cache_values_per_token(&c); /* 2 groups x (16 + 16) */
    CHECK(vpt == 64);
    const struct {
        al_kve_method method;
        double budget;
        int layer_budget;
        int kept[3];
    } cases[] = {
        {AL_KVE_WINDOW, 10, AL_KVE_UNIFORM, {10, 10, 10}},
        {AL_KVE_H2O, 0.25, AL_KVE_UNIFORM, {10, 10, 10}},
        /* pyramid: factors 1.5, 1, 0.5 */
        {AL_KVE_H2O, 10, AL_KVE_PYRAMID, {15, 10, 5}},
        {AL_KVE_WINDOW, 0.5, AL_KVE_PYRAMID, {30, 20, 10}},
        {AL_KVE_SNAPKV, 0.5, AL_KVE_UNIFORM, {10 + 20, 10 + 20, 10 + 20}}, /* half the 20-token prompt + the 20 after */
    };
    float *logits = malloc(sizeof(float) * (size_t)c.vocab_size);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const al_kv_opts o = {{0}, {cases[i].method, cases[i].budget, 4, 20, cases[i].layer_budget}};
        al_decoder dec;
        al_err err;
        CHECK(al_decoder_create_opts(&dec, &m, T, AL_DT_F32, &o, &err) == 0);
        for (int t = 0; t < T; t++)
            CHECK(al_decoder_step(&dec, tok[t], logits, &err) == 0);
        const double want = (cases[i].kept[0] + cases[i].kept[1] + cases[i].kept[2]) * vpt * sizeof(float);
        CHECK_MSG(al_decoder_kv_held_bytes(&dec) == want, "%s %g: held %.0f bytes, closed form %.0f",
                  al_kve_name(cases[i].method), cases[i].budget, al_decoder_kv_held_bytes(&dec), want);
        al_decoder_free(&dec);
    }
    free(logits);
    al_model_free(&m);
}

static void test_refusals(void) {
    al_err err;
    const struct {
        al_kve_opts o;
        const char *flag;
    } bad[] = {
        {{AL_KVE_H2O, 0, 4, 0, 0}, "--kv-budget"},        {{AL_KVE_H2O, -0.5, 4, 0, 0}, "--kv-budget"},
        {{AL_KVE_H2O, 2.5, 4, 0, 0}, "--kv-budget"},      {{AL_KVE_H2O, 1.5, 4, 0, 0}, "--kv-budget"},
        {{AL_KVE_WINDOW, 0.5, -1, 0, 0}, "--kv-sinks"},   {{AL_KVE_SNAPKV, 0.5, 0, 65, 0}, "--kv-prompt"},
        {{AL_KVE_SNAPKV, 0.5, 0, -3, 0}, "--kv-prompt"},  {{AL_KVE_H2O, 0.5, 4, 0, 7}, "--kv-layer-budget"},
        {{(al_kve_method)9, 0.5, 4, 0, 0}, "--kv-evict"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK_MSG(al_kve_check(&bad[i].o, 64, &err) == -1 && strstr(err.msg, bad[i].flag) && !strchr(err.msg, '\n'),
                  "case %zu", i);
    const al_kve_opts ok[] = {{AL_KVE_H2O, 1.0, 0, 0, 0}, {AL_KVE_H2O, 2, 0, 0, 0}, {AL_KVE_SNAPKV, 0.1, 0, 64, 1}};
    for (size_t i = 0; i < 3; i++)
        CHECK(al_kve_check(&ok[i], 64, &err) == 0);
    CHECK(al_kve_from_name("h2o") == AL_KVE_H2O && al_kve_from_name("lru") == -1);
    /* a quantised cache's own refusals pass through */
    al_config c = tu_design_config(AL_ATTN_MHA, AL_SCORE_SOFTMAX);
    al_model m;
    if (tu_make_model(&m, &c, 1, TU_GAINS_ONE)) {
        CHECK(0);
        return;
    }
    al_decoder dec;
    const al_kv_opts q = {{AL_KVQ_INT2, 12, 4, 0}, {AL_KVE_H2O, 0.5, 4, 0, 0}};
    CHECK(al_decoder_create_opts(&dec, &m, 32, AL_DT_F32, &q, &err) == -1 && strstr(err.msg, "does not divide"));
    al_model_free(&m);
}

/* ---- eviction of a quantised cache (MiniKV: h2o + int2 KIVI) ---- */

static void model_case_quantised(const al_model *mp, int sc, const int *tok, int T, float *a, float *b) {
    const al_model m = *mp;
    const al_config c = m.cfg;
    const size_t V = (size_t)c.vocab_size;
    al_err err;
    const char *dn = al_attn_name(c.attention);
    for (int method = AL_KVE_WINDOW; method < AL_KVE_COUNT; method++) {
        /* int8 with a residual covering the text: the plain cache's eviction */
        const al_kv_opts wide = {{AL_KVQ_INT8, 8, T, 0}, {(al_kve_method)method, 0.5, 2, 36, 0}};
        const al_kv_opts plain = {{0}, wide.e};
        al_decoder dq, dp;
        CHECK(al_decoder_create_opts(&dq, &m, T, AL_DT_F32, &wide, &err) == 0);
        CHECK(al_decoder_create_opts(&dp, &m, T, AL_DT_F32, &plain, &err) == 0);
        CHECK(tu_decode_all(&dq, tok, T, a, &err) == 0 && tu_decode_all(&dp, tok, T, b, &err) == 0);
        CHECK_MSG(tu_err_floor(a, b, T * V) < 1e-4 && same_held(&dq, &dp) &&
                      al_decoder_kv_held_bytes(&dq) == al_decoder_kv_held_bytes(&dp),
                  "%s score %d %s: int8 + full residual vs plain %.3g", dn, sc, al_kve_name(method),
                  tu_err_floor(a, b, T * V));
        al_decoder_free(&dq);
        al_decoder_free(&dp);
        /* int2 (blocks of 8, residual 4): kernels vs the decode reference, held bytes the closed form */
        { /* MiniKV's bits */
            const int kind = AL_KVQ_INT2;
            const al_kv_opts o = {{(al_kvq_kind)kind, 8, 4, 0}, {(al_kve_method)method, 0.5, 2, 36, 0}};
            CHECK(al_decoder_create_opts(&dq, &m, T, AL_DT_F32, &o, &err) == 0);
            CHECK(al_decoder_create_opts(&dp, &m, T, AL_DT_F32, &o, &err) == 0);
            CHECK(tu_decode_all(&dq, tok, T, a, &err) == 0);
            al_attn_test_decode_ref(1);
            CHECK(tu_decode_all(&dp, tok, T, b, &err) == 0);
            al_attn_test_decode_ref(0);
            /* Every token within 2e-3, but for a few: with ReLU scores many
             * keys have no mass, and a score a rounding away from 0 (the
             * kernels and the reference sum in different orders) can break
             * such a tie the other way; the held sets then differ for a few
             * steps (an int2 value differs by a step) until the policy
             * selects again. Such a token stays within 1e-2. */
            const double e = tu_err_floor(a, b, T * V);
            int off = 0;
            for (int t = 0; t < T; t++) off += tu_err_floor(a + t * V, b + t * V, V) >= 2e-3;
            CHECK_MSG(e < 1e-2 && off <= 3 && same_held(&dq, &dp),
                      "%s score %d %s + %s: kernels vs reference %.3g, %d tokens over 2e-3", dn, sc,
                      al_kve_name(method), al_kvq_name(kind), e, off);
            double want = 0;
            for (int l = 0; l < c.num_layers; l++) {
                const al_kvq *q = &dq.kvq[l];
                CHECK(q->qn % q->group == 0 && q->qn <= dq.kve[l].n);
                want += q->qn * al_kvq_bytes_per_token(q) + (dq.kve[l].n - q->qn) * (double)q->vpt * 4;
            }
            CHECK_MSG(al_decoder_kv_held_bytes(&dq) == want && want < 0.6 * T * dq.values_per_token * 4 * 2,
                      "%s %s + %s: held %.0f, closed form %.0f", dn, al_kve_name(method), al_kvq_name(kind),
                      al_decoder_kv_held_bytes(&dq), want);
            al_decoder_free(&dq);
            al_decoder_free(&dp);
        }
    }
}

/* Several quantised victims at once: the kept slots quantised anew hold
 * their positions' rows within int8's error (twice rounded), the policy's
 * positions, and the split of a cache that stored them one by one. */
static void test_requantise(void) {
    const al_kv_seg segs[2] = {{0, 8, 8, AL_KV_SEG_KEY}, {8, 8, 8, AL_KV_SEG_VALUE}};
    const al_kvq_opts qo = {AL_KVQ_INT8, 4, 2, 0};
    const al_kve_opts eo = {AL_KVE_WINDOW, 10, 2, 0, 0};
    enum { N = 30, R = 16 };
    al_kvq q;
    al_kve e;
    al_err err;
    if (al_kvq_create(&q, &qo, segs, 2, R, N, AL_DT_F32, &err) || al_kve_create(&e, &eo, 0, 1, N, R, &err) ||
        al_kve_attach_quantised(&e, &q, &err)) {
        CHECK_MSG(0, "%s", err.msg);
        return;
    }
    al_rng rng;
    al_rng_seed(&rng, 8);
    float rows[N][R];
    const al_kv kv = {q.res, AL_DT_F32, &q, &e};
    for (int t = 0; t < N; t++) {
        for (int i = 0; i < R; i++) rows[t][i] = frand(&rng);
        al_kv_store(kv, (size_t)t * R, rows[t], R);
    }
    CHECK(q.qn == 28 && e.n == N);
    al_kve_evict(&e, &kv); /* 20 victims at once, all quantised */
    CHECK(e.n == 10 && e.n_gone == 20 && q.qn == 8);
    for (int i = 0; i < e.n; i++) {
        const int p = e.pos[i];
        CHECK_MSG(p < 2 || p >= 22, "slot %d holds position %d", i, p);
        double worst = 0;
        for (int c = 0; c < R; c++) worst = fmax(worst, fabs(al_kvq_get(&q, i, (size_t)c) - rows[p][c]));
        CHECK_MSG(worst < 2.0 / 255 + 1e-3, "slot %d (position %d): error %.3g", i, p, worst);
    }
    al_kve_free(&e);
    al_kvq_free(&q);
}

static void test_quantised(void) { each_model(7, 60, model_case_quantised); }

/* A row written into a quantised slot with its block's key scales: keys
 * within half a step of their value where inside the block's range, clamped
 * to it outside; values with their own scales. */
static void test_put_quantised(void) {
    const al_kv_seg segs[2] = {{0, 8, 8, AL_KV_SEG_KEY}, {8, 8, 8, AL_KV_SEG_VALUE}};
    const al_kvq_opts o = {AL_KVQ_INT4, 4, 0, 0};
    al_kvq q;
    al_err err;
    if (al_kvq_create(&q, &o, segs, 2, 16, 16, AL_DT_F32, &err)) {
        CHECK_MSG(0, "%s", err.msg);
        return;
    }
    al_rng rng;
    al_rng_seed(&rng, 4);
    float x[16];
    for (int t = 0; t < 8; t++) {
        for (int i = 0; i < 16; i++)
            x[i] = frand(&rng);
        al_kvq_store(&q, (size_t)t * 16, x, 16);
    }
    CHECK(q.qn == 8);
    for (int i = 0; i < 16; i++)
        x[i] = 1.5f * frand(&rng);
    x[0] = 5.0f; /* far outside block 1's range: clamped to its top */
    al_kve_put_quantised(&q, 5, x);
    for (int i = 0; i < 16; i++) {
        const float got = al_kvq_get(&q, 5, (size_t)i);
        if (i < 8) {
            const uint16_t *sz = q.kscale + 2 * (1 * q.nkey + i);
            const float s = al_f16_to_f32(sz[0]), z = al_f16_to_f32(sz[1]);
            const float lo = z, hi = z + 15 * s, want = x[i] < lo ? lo : x[i] > hi ? hi : x[i];
            CHECK_MSG(fabsf(got - want) <= 0.5f * s + 1e-3f, "key %d: %g for %g (range %g..%g)", i, got, x[i], lo, hi);
        } else {
            CHECK_MSG(fabsf(got - x[i]) <= 3.0f / 15 * 0.5f + 1e-2f, "value %d: %g for %g", i, got, x[i]);
        }
    }
    al_kvq_free(&q);
}

int main(void) {
    const al_cpu_level have = al_cpu_detect(); /* the decode kernels run at this level only */
    if (have < AL_CPU_AVX512)
        fprintf(stderr, "note: eviction through the AVX-512 decode kernels not run (this CPU: %s)\n",
                al_cpu_level_name(have));
    test_policies();
    test_colsum();
    test_models();
    test_bytes();
    test_refusals();
    test_put_quantised();
    test_requantise();
    test_quantised();
    return TEST_EXIT();
}
