/*
 * test_kvq.c: quantised KV caches (src/attn/kvq.c, kvq_kern.h):
 *  - the group quantiser against its double reference (codes within one
 *    step, ties only) and its error bound per bit width and group size;
 *    planar packing round trips, odd widths included;
 *  - the decode kernels over a quantised cache (AVX-512, AVX2, generic:
 *    every level this CPU runs) against al_attn_decode_ref reading the same
 *    codes dequantised, for the cache layouts of MHA/GQA/MQA, MLA (latent
 *    per channel and per token) and LRKV, every score function, int8/4/2,
 *    odd group sizes and lengths across blocks, chunks and the residual,
 *    head tiles of every size (1 to 4 heads of a group at once, cut short
 *    where 4 heads' padded channels exceed AL_KVQ_MAX_CELL: "MQA wide");
 *  - whole models of every design and score function: decoding through the
 *    quantised cache with the kernels equals decoding through the reference
 *    (al_attn_test_decode_ref); int8 with a residual covering the text equals
 *    the uncompressed decode bit for bit; prefill fills the same cache as
 *    token-by-token decoding;
 *  - bytes allocated equal the closed form, written out per design here.
 */
#include <omp.h>
#include <string.h>

#include "attn/attn.h"
#include "core/cpu.h"
#include "testutil.h"

static float frand(al_rng *r) { return 2.0f * (float)al_rng_uniform(r) - 1.0f; }

/* ---- the quantiser ---- */

static void test_quantiser(void) {
    static const int ns[] = {1, 2, 3, 7, 14, 32, 33, 100};
    static const int bits[] = {8, 4, 2};
    al_rng rng;
    al_rng_seed(&rng, 5);
    for (int bi = 0; bi < 3; bi++)
        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
            const int n = ns[ni], b = bits[bi], levels = (1 << b) - 1;
            float x[200];
            uint8_t c[100], cr[100], packed[100], back[100];
            uint16_t sz[2], szr[2];
            const float off = 3.0f * frand(&rng);
            for (int i = 0; i < 2 * n; i++) x[i] = off + frand(&rng) * (i % 5 == 0 ? 4.0f : 1.0f);
            al_kvq_quantise(x, 2, n, b, c, sz); /* stride 2: a channel across tokens */
            al_kvq_quantise_ref(x, 2, n, b, cr, szr);
            CHECK(sz[0] == szr[0] && sz[1] == szr[1]);
            const double s = al_f16_to_f32(sz[0]), z = al_f16_to_f32(sz[1]);
            double mn = x[0], mx = x[0];
            for (int i = 0; i < n; i++) mn = fmin(mn, x[2 * i]), mx = fmax(mx, x[2 * i]);
            const double bound = 0.5 * s + (mx - mn) * 1e-3 + fabs(mn) * 1e-3 + 1e-6, step_bound = (mx - mn) / levels;
            double worst = 0;
            int differ = 0;
            for (int i = 0; i < n; i++) {
                CHECK(c[i] <= levels && abs((int)c[i] - (int)cr[i]) <= 1);
                differ += c[i] != cr[i];
                worst = fmax(worst, fabs(s * c[i] + z - x[2 * i]));
            }
            CHECK_MSG(differ <= 1, "int%d n %d: %d codes differ from the reference", b, n, differ);
            CHECK_MSG(worst <= bound && s <= step_bound * 1.001 + 1e-7, "int%d n %d: error %.3g > %.3g", b, n, worst,
                      bound);
            al_kvq_pack(c, n, b, packed);
            al_kvq_unpack(packed, n, b, back);
            CHECK(memcmp(c, back, (size_t)n) == 0);
        }
}

/* ---- the kernels on synthetic layouts ---- */

/* MLA's latent per channel but not marked as read as values (al_kv_seg's
 * dual), so its codes lie byte-major and the values pass takes the
 * byte-major reduction kernel (kq_key_wsum), which no design uses today */
enum { LATENT_CHANNEL_BYTE_MAJOR = 2 };

/* the view (tu_decode_view) and segments of a layout: MLA's key is
 * [c (dv) | pe (dk - dv)], its value c; LRKV [K_s | V_s | R_K | R_V] */
static al_decode_view view_and_segs(int layout, int H, int G, int dk, int dv, int r, int latent, al_kv_seg *segs,
                                    int *nseg) {
    if (layout == TU_LAYOUT_MLA) {
        segs[0] = (al_kv_seg){0, dv, dv, latent == AL_KVQ_LATENT_TOKEN ? AL_KV_SEG_VALUE : AL_KV_SEG_KEY,
                              latent == AL_KVQ_LATENT_CHANNEL};
        segs[1] = (al_kv_seg){dv, dk - dv, dk - dv, AL_KV_SEG_KEY, 0};
        *nseg = 2;
    } else if (layout == TU_LAYOUT_LRKV) {
        segs[0] = (al_kv_seg){0, dk, dk, AL_KV_SEG_KEY, 0};
        segs[1] = (al_kv_seg){dk, dv, dv, AL_KV_SEG_VALUE, 0};
        segs[2] = (al_kv_seg){dk + dv, H * r, r, AL_KV_SEG_KEY, 0};
        segs[3] = (al_kv_seg){dk + dv + H * r, H * r, r, AL_KV_SEG_VALUE, 0};
        *nseg = 4;
    } else {
        segs[0] = (al_kv_seg){0, G * dk, dk, AL_KV_SEG_KEY, 0};
        segs[1] = (al_kv_seg){G * dk, G * dv, dv, AL_KV_SEG_VALUE, 0};
        *nseg = 2;
    }
    return tu_decode_view(layout, H, G, dk, dv, r);
}

/* One case: a quantised cache of n positions of random rows (stored one
 * row at a time, as decode appends them), decoded by the kernels and by the
 * reference; returns the relative error (floored). */
static double run_case(al_score_kind score, int H, int G, int dk, int dv, int r, int n, int layout, int latent,
                       int group, int residual, al_kvq_kind kind, al_dtype dt) {
    al_rng rng;
    al_rng_seed(&rng, (uint64_t)(H * 1000003 + G * 1009 + dk * 31 + n + score + 7 * r + group));
    al_attn_shape s = tu_decode_shape(H, G, dk, dv, r, n, score);
    al_kv_seg segs[AL_KV_MAX_SEGS];
    int nseg;
    al_decode_view v = view_and_segs(layout, H, G, dk, dv, r, latent, segs, &nseg);
    const al_kvq_opts o = {kind, group, residual, latent == LATENT_CHANNEL_BYTE_MAJOR ? AL_KVQ_LATENT_CHANNEL : latent};
    al_kvq kq;
    al_err err;
    if (al_kvq_create(&kq, &o, segs, nseg, v.row, n, dt, &err)) {
        CHECK_MSG(0, "%s", err.msg);
        return 1;
    }
    const size_t qsz = (size_t)H * (dk + v.dk2), on = (size_t)H * (dv + v.dv2);
    float *row = malloc(sizeof(float) * v.row), *q = malloc(sizeof(float) * qsz);
    float *o1 = malloc(sizeof(float) * on), *ref = malloc(sizeof(float) * on);
    float *work = malloc(sizeof(float) * al_attn_decode_scratch(&s, v.dv2, n));
    v.cache = (al_kv){kq.res, dt, &kq};
    for (int j = 0; j < n; j++) {
        for (size_t i = 0; i < v.row; i++) row[i] = frand(&rng) + (i % 7 == 3 ? 2.0f : 0.0f); /* outlier channels */
        al_kv_store(v.cache, (size_t)j * v.row, row, v.row);
    }
    for (size_t i = 0; i < qsz; i++) q[i] = 2.0f * frand(&rng);
    al_attn_decode(&s, q, &v, n, o1, work);
    al_attn_decode_ref(&s, q, &v, n, ref);
    const double e = tu_err_floor(o1, ref, on);
    free(row), free(q), free(o1), free(ref), free(work);
    al_kvq_free(&kq);
    return e;
}

static void test_kernels(void) {
    static const int lengths[] = {1, 9, 40, 300, 700};
    omp_set_num_threads(2);
    for (int level = AL_CPU_GENERIC; level <= (int)al_cpu_detect(); level++) {
        al_cpu_force(level);
        const char *ln = al_cpu_level_name((al_cpu_level)level);
        for (int kind = AL_KVQ_INT8; kind <= AL_KVQ_INT2; kind++)
            for (int sc = 0; sc < AL_SCORE_COUNT; sc++)
                for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++) {
                    const int n = lengths[li];
                    const al_kvq_kind k = (al_kvq_kind)kind;
                    const al_dtype dt = (li & 1) ? AL_DT_BF16 : AL_DT_F32;
                    double e;
#define KCASE(what, ...)                                                                                               \
    e = run_case((al_score_kind)sc, __VA_ARGS__, k, dt);                                                               \
    CHECK_MSG(e < 2e-5, "%s %s %s score %d n %d: rel err %.3g", ln, al_kvq_name(k), what, sc, n, e)
                    KCASE("MHA odd", 4, 4, 20, 20, 0, n, TU_LAYOUT_KV, 0, 5, 3);       /* group 5: odd blocks, cells */
                    KCASE("GQA", 6, 2, 16, 16, 0, n, TU_LAYOUT_KV, 0, 8, 0);           /* no residual */
                    KCASE("MQA dv != dk", 5, 1, 36, 12, 0, n, TU_LAYOUT_KV, 0, 12, 17); /* keys beyond one vector */
                    KCASE("MLA channel", 3, 1, 24, 16, 0, n, TU_LAYOUT_MLA, AL_KVQ_LATENT_CHANNEL, 8, 4);
                    KCASE("MLA token", 8, 1, 64, 48, 0, n, TU_LAYOUT_MLA, AL_KVQ_LATENT_TOKEN, 16, 4);
                    KCASE("MLA byte-major", 5, 1, 40, 32, 0, n, TU_LAYOUT_MLA, LATENT_CHANNEL_BYTE_MAJOR, 20, 4);
                    KCASE("LRKV r 14", 8, 1, 32, 32, 14, n, TU_LAYOUT_LRKV, 0, 32, 32); /* the study's r */
                    KCASE("LRKV r 6", 3, 1, 18, 18, 6, n, TU_LAYOUT_LRKV, 0, 3, 2);
                    if (n == 40) { /* head tiles cut short: 4 heads' padded keys exceed AL_KVQ_MAX_CELL */
                        KCASE("MQA wide", 4, 1, 1100, 1030, 0, n, TU_LAYOUT_KV, 0, 10, 3);
                    }
#undef KCASE
                }
    }
    al_cpu_force(al_cpu_detect());
    const al_cpu_level have = al_cpu_detect();
    if (have < AL_CPU_AVX512) fprintf(stderr, "note: AVX-512 kvq kernels not run (this CPU: %s)\n", al_cpu_level_name(have));
}

/* ---- whole models ---- */


static void test_models(void) {
    enum { T = 50 };
    int tok[T];
    al_rng rng;
    al_rng_seed(&rng, 11);
    tu_random_tokens(tok, T, &rng);
    for (int design = 0; design < AL_ATTN_COUNT; design++)
        for (int sc = 0; sc < AL_SCORE_COUNT; sc++) {
            al_config c = tu_design_config(design, (al_score_kind)sc);
            al_model m;
            if (tu_make_model(&m, &c, 3 + (uint64_t)design, TU_GAINS_ONE)) {
                CHECK(0);
                continue;
            }
            const size_t V = (size_t)c.vocab_size;
            float *a = malloc(sizeof(float) * T * V), *b = malloc(sizeof(float) * T * V);
            al_err err;
            const char *dn = al_attn_name(design);
            for (int kind = AL_KVQ_INT8; kind <= AL_KVQ_INT2; kind++) {
                /* the kernels against the reference, the same quantised cache */
                const al_kvq_opts o = {(al_kvq_kind)kind, 8, 5, AL_KVQ_LATENT_CHANNEL};
                al_decoder dec;
                if (al_decoder_create_q(&dec, &m, T, AL_DT_F32, &o, &err)) {
                    CHECK_MSG(0, "%s: %s", dn, err.msg);
                    continue;
                }
                CHECK(tu_decode_all(&dec, tok, T, a, &err) == 0);
                al_attn_test_decode_ref(1);
                CHECK(tu_decode_all(&dec, tok, T, b, &err) == 0);
                al_attn_test_decode_ref(0);
                const double e = tu_err_floor(a, b, T * V);
                CHECK_MSG(e < 2e-3, "%s score %d %s: kernels vs reference %.3g", dn, sc, al_kvq_name(kind), e);
                /* prefill (its forward attends exactly, as KIVI's prefill) fills the
                 * cache with what storing the plain decoder's prefilled rows gives */
                al_decoder dp;
                al_decoder_reset(&dec);
                CHECK(al_decoder_prefill(&dec, tok, T - 1, b, &err) == 0);
                CHECK(al_decoder_create(&dp, &m, T, &err) == 0 && al_decoder_prefill(&dp, tok, T - 1, b, &err) == 0);
                for (int l = 0; l < c.num_layers; l++) {
                    al_kvq ref;
                    const al_kvq *got = &dec.kvq[l];
                    al_kv_seg segs[AL_KV_MAX_SEGS];
                    const int nseg = m.attn->cache_segments(&c, o.latent, segs);
                    CHECK(al_kvq_create(&ref, &o, segs, nseg, dp.values_per_token, T, AL_DT_F32, &err) == 0);
                    const float *rows = (const float *)dp.cache + (size_t)l * T * dp.values_per_token;
                    for (int j = 0; j < T - 1; j++)
                        al_kvq_store(&ref, (size_t)j * ref.vpt, rows + (size_t)j * ref.vpt, ref.vpt);
                    const size_t nres = (size_t)(T - 1 - ref.qn) * ref.vpt * sizeof(float);
                    CHECK_MSG(got->qn == ref.qn && memcmp(got->codes, ref.codes, (size_t)ref.qn * ref.code_row) == 0 &&
                                  memcmp(got->res, ref.res, nres) == 0 &&
                                  memcmp(got->vscale, ref.vscale, sizeof(uint16_t) * 2 * ref.qn * ref.nvcell) == 0 &&
                                  memcmp(got->kscale, ref.kscale, sizeof(uint16_t) * 2 * (ref.qn / 8) * ref.nkey) == 0,
                              "%s score %d %s layer %d: prefill's cache", dn, sc, al_kvq_name(kind), l);
                    al_kvq_free(&ref);
                }
                al_decoder_free(&dp);
                al_decoder_free(&dec);
            }
            /* int8 with a residual covering the text: the uncompressed decode */
            const al_kvq_opts full = {AL_KVQ_INT8, 32, T, AL_KVQ_LATENT_CHANNEL};
            al_decoder dq, dp;
            CHECK(al_decoder_create_q(&dq, &m, T, AL_DT_F32, &full, &err) == 0);
            CHECK(al_decoder_create(&dp, &m, T, &err) == 0);
            CHECK(tu_decode_all(&dq, tok, T, a, &err) == 0 && tu_decode_all(&dp, tok, T, b, &err) == 0);
            CHECK_MSG(memcmp(a, b, sizeof(float) * T * V) == 0, "%s score %d: int8 + full residual differs", dn, sc);
            al_decoder_free(&dq);
            al_decoder_free(&dp);
            free(a), free(b);
            al_model_free(&m);
        }
}

/* ---- bytes: the closed form, per design ---- */

static int ceil_bytes(int w, int bits) { return (w * bits + 7) / 8; }

static void test_bytes(void) {
    for (int design = 0; design < AL_ATTN_COUNT; design++)
        for (int kind = AL_KVQ_INT8; kind <= AL_KVQ_INT2; kind++) {
            const al_config c = tu_design_config(design, AL_SCORE_SOFTMAX);
            const int b = al_kvq_bits((al_kvq_kind)kind), N = 8, R = 5, cap = 64, dh = c.head_dim;
            double per; /* codes + value scales + key scales over N tokens, one layer */
            if (design == AL_ATTN_MLA) { /* c~ per channel (one cell of 24), k_pe one of 8 */
                per = ceil_bytes(24, b) + ceil_bytes(8, b) + 4.0 * (24 + 8) / N;
            } else if (design == AL_ATTN_LRKV) { /* K_s, R_K[h] keys; V_s, R_V[h] values in groups of min(8, unit) */
                const int r = c.lrkv_rank, H = c.num_heads;
                per = ceil_bytes(dh, b) + H * ceil_bytes(r, b) + (dh / N) * ceil_bytes(N, b) + H * ceil_bytes(r, b) +
                      4.0 * (dh / N + H) + 4.0 * (dh + H * r) / N;
            } else {
                const int G = c.num_kv_heads;
                per = G * ceil_bytes(dh, b) + G * (dh / N) * ceil_bytes(N, b) + 4.0 * G * dh / N + 4.0 * G * dh / N;
            }
            al_model m;
            al_err err;
            if (tu_make_model(&m, &c, 1, TU_GAINS_ONE)) {
                CHECK(0);
                continue;
            }
            const al_kvq_opts o = {(al_kvq_kind)kind, N, R, AL_KVQ_LATENT_CHANNEL};
            al_decoder dec;
            CHECK(al_decoder_create_q(&dec, &m, cap, AL_DT_BF16, &o, &err) == 0);
            const double want = c.num_layers * (cap * per + (double)(R + N) * dec.values_per_token * 2);
            CHECK_MSG(dec.cache_bytes == (size_t)want, "%s int%d: %zu bytes allocated, closed form %.0f",
                      al_attn_name(design), b, dec.cache_bytes, want);
            CHECK_CLOSE(al_decoder_kv_bytes_per_token(&dec), c.num_layers * per, 1e-12);
            al_decoder_free(&dec);
            /* a residual beyond the capacity: capacity rows of it */
            const al_kvq_opts wide = {(al_kvq_kind)kind, N, 100, AL_KVQ_LATENT_CHANNEL};
            CHECK(al_decoder_create_q(&dec, &m, cap, AL_DT_F32, &wide, &err) == 0);
            CHECK(dec.cache_bytes == (size_t)(c.num_layers * (cap * per + (double)cap * dec.values_per_token * 4)));
            al_decoder_free(&dec);
            al_model_free(&m);
        }
}

/* ---- refusals ---- */

static void test_refusals(void) {
    al_config c = tu_design_config(AL_ATTN_MHA, AL_SCORE_SOFTMAX);
    al_model m;
    al_err err;
    if (tu_make_model(&m, &c, 1, TU_GAINS_ONE)) {
        CHECK(0);
        return;
    }
    al_decoder dec;
    const al_kvq_opts bad_group = {AL_KVQ_INT4, 12, 4, 0}; /* 12 does not divide a 16-channel value head */
    CHECK(al_decoder_create_q(&dec, &m, 32, AL_DT_F32, &bad_group, &err) == -1 && strstr(err.msg, "does not divide") &&
          !strchr(err.msg, '\n'));
    const al_kvq_opts bad_res = {AL_KVQ_INT4, 8, -1, 0};
    CHECK(al_decoder_create_q(&dec, &m, 32, AL_DT_F32, &bad_res, &err) == -1 && strstr(err.msg, "--kv-residual"));
    CHECK(al_kvq_from_name("int4") == AL_KVQ_INT4 && al_kvq_from_name("int3") == -1);
    al_model_free(&m);
}

int main(void) {
    test_quantiser();
    test_kernels();
    test_models();
    test_bytes();
    test_refusals();
    return TEST_EXIT();
}
