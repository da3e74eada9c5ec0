/*
 * test_score.c: the score functions (attention.md 2) in the shared kernels.
 *  - streamed kernels (al_attn_fwd/bwd) == plain double references for
 *    softmax, poly (p = 1..5), relu and sigmoid, causal and bidirectional, on
 *    lengths around the tile sizes, GQA/MQA grouping, dv != dk, strided rows;
 *  - masked pairs contribute exactly 0: changing keys and values a query
 *    must not see leaves its output and its dq bit for bit the same;
 *  - each function's backward == central finite differences;
 *  - results are bit-identical for 1 and 3 threads;
 *  - al_score_row and al_attn_set_score (poly "auto" = 1/sqrt(N));
 *  - config.json: the score block parses, saves and refuses bad values;
 *  - decoding with the KV cache == the full forward for every function.
 */
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/blas.h"
#include "model/model.h"
#include "test.h"
#include "testutil.h"

static const fn_case FNS[] = {
    {"softmax", AL_SCORE_SOFTMAX, 0, 0},  {"poly1", AL_SCORE_POLY, 1, 0.7f}, {"poly2", AL_SCORE_POLY, 2, 0.3f},
    {"poly3", AL_SCORE_POLY, 3, 0.1f},    {"poly5", AL_SCORE_POLY, 5, 0.02f}, {"relu", AL_SCORE_RELU, 0, 0},
    {"sigmoid", AL_SCORE_SIGMOID, 0, 0},
};
enum { NFNS = sizeof FNS / sizeof FNS[0] };

static al_attn_shape make_shape(const fn_case *f, int bidir, int B, int T, int H, int G, int dk, int dv, int pad) {
    /* q, k rows hold H (resp. G) heads of dk; v, o of dv; extra columns test strides */
    al_attn_shape s = {B, T, H, G, dk, dv, H * dk + pad, G * dk + pad + 3, G * dv + pad, H * dv + pad,
                       1.0f / sqrtf((float)dk)};
    tu_set_score(&s, f, bidir, 37.0f); /* N = 37, not T: the kernels must use N, not the length */
    return s;
}

typedef struct bufs {
    size_t nq, nk, nv, no, nl;
    float *q, *k, *v, *dO, *o, *lse, *dq, *dk, *dv;
} bufs;

static void bufs_alloc(bufs *b, const al_attn_shape *s, al_rng *r) {
    size_t N = (size_t)s->B * s->T;
    b->nq = N * s->ldq, b->nk = N * s->ldk, b->nv = N * s->ldv, b->no = N * s->ldo, b->nl = (size_t)s->B * s->H * s->T;
    b->q = malloc(b->nq * 4), b->k = malloc(b->nk * 4), b->v = malloc(b->nv * 4), b->dO = malloc(b->no * 4);
    b->o = calloc(b->no, 4), b->lse = calloc(b->nl, 4);
    b->dq = calloc(b->nq, 4), b->dk = calloc(b->nk, 4), b->dv = calloc(b->nv, 4);
    /* scores of a few units: softmax rows neither flat nor one-hot, poly values of mixed sign */
    tu_fill(b->q, b->nq, r, 1.2f);
    tu_fill(b->k, b->nk, r, 1.2f);
    tu_fill(b->v, b->nv, r, 1.0f);
    tu_fill(b->dO, b->no, r, 1.0f);
}

/* x and y with the same random inputs q, k, v, dO (y drawn, then overwritten) */
static void bufs_alloc_pair(bufs *x, bufs *y, const al_attn_shape *s, al_rng *r) {
    bufs_alloc(x, s, r);
    bufs_alloc(y, s, r);
    memcpy(y->q, x->q, x->nq * 4), memcpy(y->k, x->k, x->nk * 4), memcpy(y->v, x->v, x->nv * 4);
    memcpy(y->dO, x->dO, x->no * 4);
}

static void bufs_free(bufs *b) {
    free(b->q), free(b->k), free(b->v), free(b->dO), free(b->o), free(b->lse), free(b->dq), free(b->dk), free(b->dv);
}

static void check_kernels(const fn_case *f, int bidir, int B, int T, int H, int G, int dk, int dv, int pad) {
    al_attn_shape s = make_shape(f, bidir, B, T, H, G, dk, dv, pad);
    al_rng r;
    al_rng_seed(&r, (uint64_t)(B * 1000 + T * 10 + H + G + f->kind * 7 + f->p));
    bufs x, y;
    bufs_alloc_pair(&x, &y, &s, &r);
    al_attn_fwd(&s, x.q, x.k, x.v, x.o, x.lse);
    al_attn_fwd_ref(&s, y.q, y.k, y.v, y.o, y.lse);
    const size_t N = (size_t)B * T;
    /* o can be tiny against its rounding when poly/relu weights cancel: floor the scale */
    double e_o = 0;
    for (size_t row = 0; row < N; row++) {
        double e = tu_err_floor(x.o + row * s.ldo, y.o + row * s.ldo, (size_t)H * dv);
        e_o = e > e_o ? e : e_o;
    }
    double e_l = test_rel_err(x.lse, y.lse, x.nl);
    al_attn_bwd(&s, x.q, x.k, x.v, x.o, x.lse, x.dO, x.dq, x.dk, x.dv);
    al_attn_bwd_ref(&s, y.q, y.k, y.v, y.o, y.lse, y.dO, y.dq, y.dk, y.dv);
    double e_dq = tu_err_floor(x.dq, y.dq, x.nq), e_dk = tu_err_floor(x.dk, y.dk, x.nk),
           e_dv = tu_err_floor(x.dv, y.dv, x.nv);
    CHECK_MSG(e_o < 2e-5 && e_l < 1e-5, "%s bidir=%d B=%d T=%d H=%d G=%d dk=%d dv=%d: o err %g lse err %g", f->name,
              bidir, B, T, H, G, dk, dv, e_o, e_l);
    CHECK_MSG(e_dq < 1e-4 && e_dk < 1e-4 && e_dv < 1e-4, "%s bidir=%d B=%d T=%d H=%d G=%d: dq %g dk %g dv %g",
              f->name, bidir, B, T, H, G, e_dq, e_dk, e_dv);
    /* padding columns of o stay untouched (never written) */
    if (pad) {
        int untouched = 1;
        for (size_t row = 0; row < N; row++)
            for (int c = H * dv; c < s.ldo; c++) untouched &= x.o[row * s.ldo + c] == 0.0f;
        CHECK_MSG(untouched, "%s: the kernel wrote into o's padding", f->name);
    }
    bufs_free(&x);
    bufs_free(&y);
}

/* Causal: rows i < t0 must not see keys/values j >= t0. Replacing those with
 * other (large) values leaves o and dq of rows < t0 bitwise unchanged. */
static void check_masked_zero(const fn_case *f) {
    const int B = 2, T = 150, H = 4, G = 2, dk = 8, dv = 8, t0 = 71;
    al_attn_shape s = make_shape(f, 0, B, T, H, G, dk, dv, 0);
    al_rng r;
    al_rng_seed(&r, 99);
    bufs x, y;
    bufs_alloc_pair(&x, &y, &s, &r);
    for (int b = 0; b < B; b++)
        for (int t = t0; t < T; t++) {
            tu_fill(y.k + ((size_t)b * T + t) * s.ldk, (size_t)s.ldk, &r, 30.0f);
            tu_fill(y.v + ((size_t)b * T + t) * s.ldv, (size_t)s.ldv, &r, 1000.0f);
        }
    al_attn_fwd(&s, x.q, x.k, x.v, x.o, x.lse);
    al_attn_fwd(&s, y.q, y.k, y.v, y.o, y.lse);
    al_attn_bwd(&s, x.q, x.k, x.v, x.o, x.lse, x.dO, x.dq, x.dk, x.dv);
    al_attn_bwd(&s, y.q, y.k, y.v, y.o, y.lse, y.dO, y.dq, y.dk, y.dv);
    int same = 1;
    for (int b = 0; b < B; b++) {
        size_t r0 = (size_t)b * T;
        same &= memcmp(x.o + r0 * s.ldo, y.o + r0 * s.ldo, sizeof(float) * t0 * s.ldo) == 0;
        same &= memcmp(x.dq + r0 * s.ldq, y.dq + r0 * s.ldq, sizeof(float) * t0 * s.ldq) == 0;
        for (int h = 0; h < H; h++)
            same &= memcmp(x.lse + ((size_t)b * H + h) * T, y.lse + ((size_t)b * H + h) * T, sizeof(float) * t0) == 0;
    }
    CHECK_MSG(same, "%s: keys a query must not see changed its output or dq", f->name);
    /* and the reference's masked weights are exactly zero too (same check through it) */
    al_attn_fwd_ref(&s, x.q, x.k, x.v, x.o, x.lse);
    al_attn_fwd_ref(&s, y.q, y.k, y.v, y.o, y.lse);
    CHECK_MSG(memcmp(x.o, y.o, sizeof(float) * t0 * s.ldo) == 0, "%s: reference masks incompletely", f->name);
    bufs_free(&x);
    bufs_free(&y);
}

/* L = sum(o * R): the streamed backward against central differences of the
 * double reference forward. */
static void check_fd(const fn_case *f, int bidir) {
    const int B = 1, T = 9, H = 4, G = 2, dk = 6, dv = 5;
    al_attn_shape s = make_shape(f, bidir, B, T, H, G, dk, dv, 0);
    s.score_n = 3.0f; /* sigmoid(s - log 3) away from saturation: a useful derivative */
    al_rng r;
    al_rng_seed(&r, 7 + (uint64_t)f->kind);
    bufs x;
    bufs_alloc(&x, &s, &r);
    float *in[3] = {x.q, x.k, x.v}, *grad[3] = {x.dq, x.dk, x.dv};
    size_t n[3] = {x.nq, x.nk, x.nv};
    al_attn_fwd(&s, x.q, x.k, x.v, x.o, x.lse);
    al_attn_bwd(&s, x.q, x.k, x.v, x.o, x.lse, x.dO, x.dq, x.dk, x.dv);
    double worst = tu_attn_fd_worst(&s, in, grad, n, x.dO, x.no, x.lse, 3, (size_t)s.ldk); /* every 3rd entry */
    /* relu's kink can sit inside +-h of a score: a looser bound, still far below a wrong formula */
    double tol = f->kind == AL_SCORE_RELU ? 1e-2 : 2e-3;
    CHECK_MSG(worst < tol, "%s bidir=%d: backward vs finite differences: worst %g", f->name, bidir, worst);
    bufs_free(&x);
}

/* Same inputs, 1 vs 3 threads: bitwise equal (fixed reduction order). */
static void check_threads(const fn_case *f) {
    const int B = 2, T = 200, H = 6, G = 2, dk = 16, dv = 16;
    al_attn_shape s = make_shape(f, 0, B, T, H, G, dk, dv, 1);
    al_rng r;
    al_rng_seed(&r, 5);
    bufs x, y;
    bufs_alloc_pair(&x, &y, &s, &r);
    int keep = omp_get_max_threads();
    omp_set_num_threads(1);
    al_attn_fwd(&s, x.q, x.k, x.v, x.o, x.lse);
    al_attn_bwd(&s, x.q, x.k, x.v, x.o, x.lse, x.dO, x.dq, x.dk, x.dv);
    omp_set_num_threads(3);
    al_attn_fwd(&s, y.q, y.k, y.v, y.o, y.lse);
    al_attn_bwd(&s, y.q, y.k, y.v, y.o, y.lse, y.dO, y.dq, y.dk, y.dv);
    omp_set_num_threads(keep);
    CHECK_MSG(!memcmp(x.o, y.o, x.no * 4) && !memcmp(x.lse, y.lse, x.nl * 4) && !memcmp(x.dq, y.dq, x.nq * 4) &&
                  !memcmp(x.dk, y.dk, x.nk * 4) && !memcmp(x.dv, y.dv, x.nv * 4),
              "%s: 1 and 3 threads differ", f->name);
    bufs_free(&x);
    bufs_free(&y);
}

static void check_score_row(void) {
    al_attn_shape s = {0};
    float row[3] = {1.0f, 2.0f, -1.0f};
    al_score_row(&s, row, 3); /* zeroed shape: softmax */
    double z = exp(1.0) + exp(2.0) + exp(-1.0);
    CHECK_CLOSE(row[0], exp(1.0) / z, 1e-6);
    CHECK_CLOSE(row[1], exp(2.0) / z, 1e-6);
    CHECK_CLOSE(row[2], exp(-1.0) / z, 1e-6);
    al_config c;
    al_config_default(&c);
    c.score = AL_SCORE_POLY;
    c.poly_power = 3;
    c.score_n = 196;
    al_attn_set_score(&s, &c);
    CHECK_CLOSE(s.poly_coef, 1.0 / 14.0, 1e-7); /* "auto": the seed's (1/14) x^3 at N = 196 */
    float p[2] = {2.0f, -1.5f};
    al_score_row(&s, p, 2);
    CHECK_CLOSE(p[0], 8.0 / 14.0, 1e-6);
    CHECK_CLOSE(p[1], -3.375 / 14.0, 1e-6); /* odd powers keep their sign */
    c.poly_scale_auto = 0;
    c.poly_scale = 0.25;
    c.poly_power = 2;
    al_attn_set_score(&s, &c);
    float p2[2] = {2.0f, -1.5f};
    al_score_row(&s, p2, 2);
    CHECK_CLOSE(p2[0], 1.0, 1e-6);
    CHECK_CLOSE(p2[1], 0.5625, 1e-6);
    c.score = AL_SCORE_RELU;
    c.score_n = 4;
    al_attn_set_score(&s, &c);
    float rl[3] = {2.0f, -3.0f, 0.0f};
    al_score_row(&s, rl, 3);
    CHECK(rl[0] == 0.5f && rl[1] == 0.0f && rl[2] == 0.0f);
    c.score = AL_SCORE_SIGMOID;
    al_attn_set_score(&s, &c);
    float sg[2] = {(float)log(4.0), 0.0f};
    al_score_row(&s, sg, 2);
    CHECK_CLOSE(sg[0], 0.5, 1e-6);
    CHECK_CLOSE(sg[1], 0.2, 1e-6); /* sigmoid(-log 4) = 1/5 */
}

/* ---- config.json ---- */

/* a config.json whose "attnlab" block is the %s (printf format) */
#define BLOCK_JSON                                                                                            \
    "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,\"intermediate_size\":96,"                    \
    "\"num_hidden_layers\":1,\"num_attention_heads\":4,\"vocab_size\":256,\"max_position_embeddings\":128,"     \
    "\"attnlab\":{%s}}"

static int parse_block(const char *block, al_config *c, al_err *err) {
    char json[1024];
    snprintf(json, sizeof json, BLOCK_JSON, block);
    return al_config_parse(c, json, NULL, err);
}

static void expect_error(const char *block, const char *want) {
    tu_expect_config_error(want, 0, BLOCK_JSON, block);
}

static void check_config(void) {
    al_config c;
    al_err err = {{0}};
    /* absent: softmax, p = 3, auto, N = the positions the model was set up for */
    CHECK(parse_block("\"attention\":\"mha\"", &c, &err) == 0 && c.score == AL_SCORE_SOFTMAX && c.poly_power == 3 &&
          c.poly_scale_auto == 1 && c.score_n == 128);
    CHECK_MSG(parse_block("\"score\":\"poly\",\"poly_power\":2,\"poly_scale\":0.125,\"score_n\":64", &c, &err) == 0,
              "%s", err.msg);
    CHECK(c.score == AL_SCORE_POLY && c.poly_power == 2 && !c.poly_scale_auto && c.poly_scale == 0.125 &&
          c.score_n == 64);
    CHECK(parse_block("\"score\":\"poly\",\"poly_scale\":\"auto\"", &c, &err) == 0 && c.poly_scale_auto == 1);
    CHECK(parse_block("\"score\":\"relu\",\"score_n\":9", &c, &err) == 0 && c.score == AL_SCORE_RELU && c.score_n == 9);
    CHECK(parse_block("\"score\":\"sigmoid\"", &c, &err) == 0 && c.score == AL_SCORE_SIGMOID);
    expect_error("\"score\":\"poly\",\"poly_power\":0", "invalid config: poly_power must be an integer >= 1, got 0");
    expect_error("\"score\":\"poly\",\"poly_power\":2.5", "invalid config: poly_power must be an integer");
    expect_error("\"score\":\"poly\",\"poly_scale\":0", "invalid config: poly_scale must be a positive number or \"auto\"");
    expect_error("\"score\":\"poly\",\"poly_scale\":-1", "invalid config: poly_scale must be a positive number");
    expect_error("\"score\":\"poly\",\"poly_scale\":\"big\"", "invalid config: poly_scale must be a positive number or \"auto\"");
    expect_error("\"score\":\"relu\",\"score_n\":0", "invalid config: score_n must be positive, got 0");
    expect_error("\"score\":\"relu\",\"score_n\":-3", "invalid config: score_n must be positive, got -3");
    expect_error("\"score\":\"tanh\"", "invalid config: unknown score 'tanh'");
    /* save -> load keeps the function; explicit scale survives exactly */
    char dir[] = "/tmp/al_test_score_XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(0);
        return;
    }
    char path[256];
    snprintf(path, sizeof path, "%s/config.json", dir);
    const struct { al_score_kind k; int p; double sc; int aut; int n; } rt[] = {
        {AL_SCORE_POLY, 3, 1.0 / 14.0, 0, 196}, {AL_SCORE_POLY, 1, 1.0, 1, 77},
        {AL_SCORE_RELU, 3, 1.0, 1, 33},         {AL_SCORE_SIGMOID, 3, 1.0, 1, 500},
    };
    for (size_t i = 0; i < sizeof rt / sizeof rt[0]; i++) {
        al_config a, b;
        CHECK(parse_block("\"attention\":\"mha\"", &a, &err) == 0);
        a.score = rt[i].k, a.poly_power = rt[i].p, a.poly_scale = rt[i].sc, a.poly_scale_auto = rt[i].aut;
        a.score_n = rt[i].n;
        CHECK(al_config_save(&a, path, "{\"score_n\":1,\"train\":{}}", &err) == 0);
        CHECK_MSG(al_config_load(&b, path, NULL, &err) == 0, "%s", err.msg);
        CHECK_MSG(b.score == a.score && b.score_n == a.score_n &&
                      (a.score != AL_SCORE_POLY || (b.poly_power == a.poly_power &&
                                                    b.poly_scale_auto == a.poly_scale_auto &&
                                                    (a.poly_scale_auto || b.poly_scale == a.poly_scale))),
                  "round trip %zu", i);
    }
    unlink(path);
    rmdir(dir);
}

/* ---- decode == forward ---- */

static void check_decode(const fn_case *f, int G) {
    const int T = 70, H = 4; /* T: more than one query block */
    al_config c = tu_config(48, 80, 2, H, G, 8, T);
    c.score = f->kind;
    c.poly_power = f->p > 0 ? f->p : 3;
    c.poly_scale_auto = f->kind == AL_SCORE_POLY && f->p == 3; /* one "auto" among the poly cases */
    c.poly_scale = f->c > 0 ? f->c : 1.0;
    c.score_n = 50;
    al_model m;
    al_err err;
    if (al_model_create(&m, &c, &err)) {
        CHECK_MSG(0, "%s", err.msg);
        return;
    }
    al_rng r;
    al_rng_seed(&r, (uint64_t)(17 + f->kind * 5 + f->p));
    tu_random_weights(&m, &r, TU_FLAT);
    int tok[T];
    tu_random_tokens(tok, T, &r);
    tu_decode d = tu_decode_vs_forward(&m, tok, T);
    CHECK_MSG(d.worst < 1e-4, "%s G=%d: decode vs forward rel err %g", f->name, G, d.worst);
    al_model_free(&m);
}

int main(int argc, char **argv) {
    (void)argc;
    al_blas_fix_kernels(argv); /* test the kernels users get */
    /* B, T, H, G, dk, dv, pad */
    const int shapes[][7] = {
        {1, 1, 1, 1, 8, 8, 0},    {1, 7, 2, 1, 4, 6, 3},    {2, 65, 4, 2, 8, 8, 0},
        {1, 130, 6, 3, 16, 12, 5}, {1, 200, 8, 1, 32, 32, 1}, {3, 64, 4, 4, 8, 8, 2},
    };
    for (int fi = 0; fi < NFNS; fi++)
        for (int bidir = 0; bidir < 2; bidir++)
            for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
                const int *v = shapes[i];
                check_kernels(&FNS[fi], bidir, v[0], v[1], v[2], v[3], v[4], v[5], v[6]);
            }
    for (int fi = 0; fi < NFNS; fi++) {
        check_masked_zero(&FNS[fi]);
        check_fd(&FNS[fi], 0);
        check_fd(&FNS[fi], 1);
        check_threads(&FNS[fi]);
    }
    check_score_row();
    check_config();
    for (int fi = 0; fi < NFNS; fi++) check_decode(&FNS[fi], 4);
    check_decode(&FNS[3], 2); /* GQA, poly 3 auto */
    check_decode(&FNS[6], 1); /* MQA, sigmoid */
    return TEST_EXIT();
}
