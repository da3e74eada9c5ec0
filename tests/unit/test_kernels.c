/*
 * test_kernels.c: the attention kernel sets behind al_attn_fwd / al_attn_bwd
 * (core/cpu.h: avx512, avx2, generic) against the plain double references
 * and against each other:
 *  - every set the CPU runs == al_attn_fwd_ref / al_attn_bwd_ref on random
 *    shapes with odd sizes (T, d_k, d_v not multiples of 8 or 16, T across
 *    tile edges), random strides, MHA/GQA/MQA, every score function, causal
 *    and bidirectional;
 *  - the fast sets == the generic set on the same inputs (so a machine
 *    without AVX-512 computes what this one does, to fp32 rounding);
 *  - softmax stress: scores of hundreds of units that grow along the
 *    sequence (the online max moves many times, lazy rescaling kicks in),
 *    no overflow, no NaN;
 *  - each fast set gives bitwise the same results for 1 and 3 threads;
 *  - the dispatch itself: al_cpu_force lowers and restores the level, and
 *    never goes above what the CPU has;
 *  - the backward with s->grads_overwrite writes what it otherwise adds into
 *    zeros, every element of the head columns and nothing past them, on the
 *    reference, every set and the generic fallback;
 *  - memory is O(T): the workspace the fast kernels keep grows 8x (not 64x)
 *    from T = 512 to T = 4096;
 *  - without a workspace (memory ran out) every set still computes the
 *    reference; al_attn_reserve plans the arena and al_attn_release frees it;
 *  - sharp attention (most weights below 2^-126, subnormal unless flushed)
 *    costs no more than ordinary attention, within a generous factor, and
 *    the caller's MXCSR (FTZ/DAZ) is what it was after every call.
 */
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xmmintrin.h>

#include "core/blas.h"
#include "core/cpu.h"
#include "test.h"
#include "testutil.h"

static const fn_case FNS[] = {
    {"softmax", AL_SCORE_SOFTMAX, 0, 0}, {"poly1", AL_SCORE_POLY, 1, 0.7f}, {"poly3", AL_SCORE_POLY, 3, 0.1f},
    {"poly4", AL_SCORE_POLY, 4, 0.05f},  {"relu", AL_SCORE_RELU, 0, 0},     {"sigmoid", AL_SCORE_SIGMOID, 0, 0},
};
enum { NFNS = sizeof FNS / sizeof FNS[0] };

typedef struct run {
    size_t nq, nk, nv, no, nl;
    float *o, *lse, *dq, *dk, *dv;
} run;

/* inputs shared by every run of one case */
typedef struct inputs {
    al_attn_shape s;
    size_t nq, nk, nv, no, nl;
    float *q, *k, *v, *dO;
} inputs;

static void inputs_make(inputs *in, const al_attn_shape *s, al_rng *r, float qscale) {
    in->s = *s;
    size_t N = (size_t)s->B * s->T;
    in->nq = N * s->ldq, in->nk = N * s->ldk, in->nv = N * s->ldv, in->no = N * s->ldo;
    in->nl = (size_t)s->B * s->H * s->T;
    in->q = malloc(in->nq * 4), in->k = malloc(in->nk * 4), in->v = malloc(in->nv * 4), in->dO = malloc(in->no * 4);
    tu_fill(in->q, in->nq, r, qscale);
    tu_fill(in->k, in->nk, r, 1.2f);
    tu_fill(in->v, in->nv, r, 1.0f);
    tu_fill(in->dO, in->no, r, 1.0f);
}

static void inputs_free(inputs *in) { free(in->q), free(in->k), free(in->v), free(in->dO); }

/* forward + backward with the reference (level < 0) or a forced kernel set;
 * o and lse of the run feed its own backward */
static void run_do(run *x, const inputs *in, int level) {
    x->nq = in->nq, x->nk = in->nk, x->nv = in->nv, x->no = in->no, x->nl = in->nl;
    x->o = calloc(in->no, 4), x->lse = calloc(in->nl, 4);
    x->dq = calloc(in->nq, 4), x->dk = calloc(in->nk, 4), x->dv = calloc(in->nv, 4);
    const al_attn_shape *s = &in->s;
    if (level < 0) {
        al_attn_fwd_ref(s, in->q, in->k, in->v, x->o, x->lse);
        al_attn_bwd_ref(s, in->q, in->k, in->v, x->o, x->lse, in->dO, x->dq, x->dk, x->dv);
    } else {
        al_cpu_force(level);
        al_attn_fwd(s, in->q, in->k, in->v, x->o, x->lse);
        al_attn_bwd(s, in->q, in->k, in->v, x->o, x->lse, in->dO, x->dq, x->dk, x->dv);
        al_cpu_force(-1);
    }
}

static void run_free(run *x) { free(x->o), free(x->lse), free(x->dq), free(x->dk), free(x->dv); }

static int has_nan(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (x[i] != x[i]) return 1;
    return 0;
}

/* worst relative error (floored, per output row for o) of x against y */
static void compare(const run *x, const run *y, const inputs *in, double *e_o, double *e_l, double *e_g) {
    const al_attn_shape *s = &in->s;
    const size_t N = (size_t)s->B * s->T;
    *e_o = 0;
    for (size_t row = 0; row < N; row++) {
        double e = tu_err_floor(x->o + row * s->ldo, y->o + row * s->ldo, (size_t)s->H * s->dv);
        *e_o = e > *e_o ? e : *e_o;
    }
    *e_l = test_rel_err(x->lse, y->lse, x->nl);
    double a = tu_err_floor(x->dq, y->dq, x->nq), b = tu_err_floor(x->dk, y->dk, x->nk),
           c = tu_err_floor(x->dv, y->dv, x->nv);
    *e_g = a > b ? a : b;
    *e_g = c > *e_g ? c : *e_g;
}

static const char *level_name(int l) { return al_cpu_level_name((al_cpu_level)l); }

/* one random case: every available level vs the reference and vs generic */
static void check_case(const fn_case *f, int bidir, int B, int T, int H, int G, int dk, int dv, int pad, al_rng *r) {
    al_attn_shape s = {B, T, H, G, dk, dv, H * dk + pad, G * dk + pad + 1, G * dv + 2 * pad, H * dv + pad,
                       1.0f / sqrtf((float)dk)};
    tu_set_score(&s, f, bidir, 29.0f);
    inputs in;
    inputs_make(&in, &s, r, 1.2f);
    run ref, gen;
    run_do(&ref, &in, -1);
    run_do(&gen, &in, AL_CPU_GENERIC);
    const int top = al_cpu_detect();
    for (int level = AL_CPU_GENERIC; level <= top; level++) {
        run x;
        run_do(&x, &in, level);
        double eo, el, eg;
        compare(&x, &ref, &in, &eo, &el, &eg);
        CHECK_MSG(eo < 2e-5 && el < 1e-5 && eg < 1e-4,
                  "%s vs reference, %s bidir=%d B=%d T=%d H=%d G=%d dk=%d dv=%d pad=%d: o %g lse %g grads %g",
                  level_name(level), f->name, bidir, B, T, H, G, dk, dv, pad, eo, el, eg);
        if (level > AL_CPU_GENERIC) {
            compare(&x, &gen, &in, &eo, &el, &eg);
            CHECK_MSG(eo < 2e-5 && el < 1e-5 && eg < 1e-4,
                      "%s vs generic, %s bidir=%d B=%d T=%d H=%d G=%d dk=%d dv=%d: o %g lse %g grads %g",
                      level_name(level), f->name, bidir, B, T, H, G, dk, dv, eo, el, eg);
        }
        /* padding columns of o are never written */
        int untouched = 1;
        for (size_t row = 0; row < (size_t)B * T; row++)
            for (int c = H * dv; c < s.ldo; c++) untouched &= x.o[row * s.ldo + c] == 0.0f;
        CHECK_MSG(untouched, "%s %s: the kernel wrote into o's padding", level_name(level), f->name);
        run_free(&x);
    }
    run_free(&ref);
    run_free(&gen);
    inputs_free(&in);
}

/* softmax with large scores that grow along the sequence (q scaled by 30 and
 * keys with a rising offset along one direction): the running max moves on
 * many tiles, weights span far more than 2^8; no overflow, same results */
static void check_softmax_stress(int bidir) {
    const int B = 1, T = 300, H = 2, G = 1, dk = 16, dv = 16;
    al_attn_shape s = {B, T, H, G, dk, dv, H * dk, G * dk, G * dv, H * dv, 1.0f / sqrtf((float)dk)};
    s.bidirectional = bidir;
    al_rng r;
    al_rng_seed(&r, 77);
    inputs in;
    inputs_make(&in, &s, &r, 30.0f);
    for (int t = 0; t < T; t++) { /* key t gets + t/10 along q's first axis, q's first axis positive */
        in.k[(size_t)t * s.ldk] += 0.1f * (float)t;
        for (int h = 0; h < H; h++) in.q[(size_t)t * s.ldq + h * dk] = fabsf(in.q[(size_t)t * s.ldq + h * dk]);
    }
    run ref;
    run_do(&ref, &in, -1);
    for (int level = AL_CPU_GENERIC; level <= (int)al_cpu_detect(); level++) {
        run x;
        run_do(&x, &in, level);
        double eo, el, eg;
        compare(&x, &ref, &in, &eo, &el, &eg);
        CHECK_MSG(!has_nan(x.o, x.no) && !has_nan(x.dq, x.nq) && !has_nan(x.dk, x.nk) && !has_nan(x.dv, x.nv),
                  "%s softmax stress bidir=%d: NaN", level_name(level), bidir);
        /* scores of ~1e3: fp32 rounding of s is ~1e-4 absolute, so looser bounds */
        CHECK_MSG(eo < 2e-3 && el < 1e-5 && eg < 5e-3, "%s softmax stress bidir=%d: o %g lse %g grads %g",
                  level_name(level), bidir, eo, el, eg);
        run_free(&x);
    }
    run_free(&ref);
    inputs_free(&in);
}

/* each level: 1 and 3 threads give bitwise the same results */
static void check_threads(int level, const fn_case *f) {
    const int B = 2, T = 150, H = 6, G = 2, dk = 24, dv = 20;
    al_attn_shape s = {B, T, H, G, dk, dv, H * dk, G * dk, G * dv, H * dv, 1.0f / sqrtf((float)dk)};
    s.score = f->kind, s.poly_power = f->p, s.poly_coef = f->c, s.score_n = 40.0f;
    al_rng r;
    al_rng_seed(&r, 5);
    inputs in;
    inputs_make(&in, &s, &r, 1.2f);
    const int keep = omp_get_max_threads();
    run x, y;
    omp_set_num_threads(1);
    run_do(&x, &in, level);
    omp_set_num_threads(3);
    run_do(&y, &in, level);
    omp_set_num_threads(keep);
    CHECK_MSG(!memcmp(x.o, y.o, x.no * 4) && !memcmp(x.lse, y.lse, x.nl * 4) && !memcmp(x.dq, y.dq, x.nq * 4) &&
                  !memcmp(x.dk, y.dk, x.nk * 4) && !memcmp(x.dv, y.dv, x.nv * 4),
              "%s %s: 1 and 3 threads differ", level_name(level), f->name);
    run_free(&x);
    run_free(&y);
    inputs_free(&in);
}

static double thread_cpu_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* forward + backward of one head at T = 512 with q scaled by qs, one thread:
 * the best thread CPU time of 3 runs (CPU time: other programs on the
 * machine do not count) */
static double time_sharp(int level, float qs) {
    const int T = 512, H = 2, d = 32;
    al_attn_shape s = {1, T, H, H, d, d, H * d, H * d, H * d, H * d, 1.0f / sqrtf((float)d)};
    al_rng r;
    al_rng_seed(&r, 11);
    inputs in;
    inputs_make(&in, &s, &r, qs);
    const int keep = omp_get_max_threads();
    omp_set_num_threads(1);
    double best = 1e30;
    for (int i = 0; i < 3; i++) {
        run x;
        const double t0 = thread_cpu_s();
        run_do(&x, &in, level);
        const double dt = thread_cpu_s() - t0;
        best = dt < best ? dt : best;
        run_free(&x);
    }
    omp_set_num_threads(keep);
    inputs_free(&in);
    return best;
}

static void check_sharp_and_mxcsr(void) {
    for (int level = AL_CPU_GENERIC; level <= (int)al_cpu_detect(); level++) {
        const double plain = time_sharp(level, 1.0f), sharp = time_sharp(level, 40.0f);
        /* flushed: about 1x; with subnormal assists it was 10-20x */
        CHECK_MSG(sharp < 4.0 * plain, "%s: sharp attention %.1f ms vs %.1f ms: subnormal weights not flushed?",
                  level_name(level), 1e3 * sharp, 1e3 * plain);
    }
    const unsigned keep = _mm_getcsr();
    for (unsigned mode = 0; mode < 2; mode++) { /* caller without, then with FTZ/DAZ */
        const unsigned want = mode ? keep | 0x8040u : keep & ~0x8040u;
        _mm_setcsr(want);
        for (int level = AL_CPU_GENERIC; level <= (int)al_cpu_detect(); level++) {
            al_attn_shape s = {1, 70, 2, 1, 8, 8, 16, 8, 8, 16, 0.35f};
            al_rng r;
            al_rng_seed(&r, 12);
            inputs in;
            inputs_make(&in, &s, &r, 1.0f);
            run x;
            run_do(&x, &in, level);
            CHECK_MSG(_mm_getcsr() == want, "%s: MXCSR %#x after the kernels, %#x before", level_name(level),
                      _mm_getcsr(), want);
            run_free(&x);
            inputs_free(&in);
        }
    }
    _mm_setcsr(keep);
}

static void check_dispatch(void) {
    const al_cpu_level top = al_cpu_detect();
    CHECK(al_cpu_force(AL_CPU_GENERIC) == AL_CPU_GENERIC && al_cpu_level_now() == AL_CPU_GENERIC);
    CHECK(al_cpu_force(AL_CPU_COUNT - 1) == top); /* never above what the CPU has */
    al_cpu_force(-1);
    CHECK(al_cpu_level_now() <= top);
    CHECK(!strcmp(al_cpu_level_name(AL_CPU_AVX2), "avx2") && !strcmp(al_cpu_level_name(AL_CPU_GENERIC), "generic") &&
          !strcmp(al_cpu_level_name(AL_CPU_AVX512), "avx512"));
    char sets[160];
    al_cpu_describe(sets, sizeof sets);
    fprintf(stderr, "kernel sets: this CPU %s; tested every set it runs\n", sets);
}

/* first, while the workspace is still small: its size is linear in T */
static void check_workspace_linear(void) {
    size_t bytes[2];
    const int Ts[2] = {512, 4096};
    for (int i = 0; i < 2; i++) {
        const int T = Ts[i], H = 2, d = 16;
        al_attn_shape s = {1, T, H, H, d, d, H * d, H * d, H * d, H * d, 0.25f};
        al_rng r;
        al_rng_seed(&r, 9);
        inputs in;
        inputs_make(&in, &s, &r, 1.0f);
        run x;
        run_do(&x, &in, (int)al_cpu_detect());
        bytes[i] = al_attn_workspace_bytes();
        run_free(&x);
        inputs_free(&in);
    }
    if (al_cpu_detect() == AL_CPU_GENERIC) return; /* the generic set keeps no workspace */
    CHECK_MSG(bytes[0] > 0 && bytes[1] <= 9 * bytes[0] && bytes[1] < (size_t)64 * 4096 * 2 * 32,
              "workspace %zu bytes at T=512, %zu at T=4096: not O(T)", bytes[0], bytes[1]);
}

/* Without a workspace (al_attn_test_no_workspace: what a call gets when
 * memory runs out) every set still computes the reference: the fast sets
 * run the generic one, which then takes whole KV groups per item. And the
 * arena is the owner's: al_attn_reserve plans it (a call of that shape
 * then grows nothing), al_attn_release frees it. */
static void check_no_workspace(al_rng *r) {
    al_attn_test_no_workspace(1);
    for (int bidir = 0; bidir < 2; bidir++) {
        check_case(&FNS[0], bidir, 2, 70, 6, 2, 24, 20, 1, r); /* GQA softmax */
        check_case(&FNS[4], bidir, 1, 130, 3, 1, 16, 8, 0, r); /* MQA relu */
        check_case(&FNS[2], bidir, 2, 33, 2, 2, 8, 8, 2, r);   /* MHA poly */
    }
    al_attn_test_no_workspace(0);
    al_attn_release();
    CHECK(al_attn_workspace_bytes() == 0);
    al_attn_shape s = {2, 200, 6, 2, 24, 24, 6 * 24, 2 * 24, 2 * 24, 6 * 24, 0.2f};
    al_err err;
    al_cpu_force((int)al_cpu_detect()); /* the set run_do runs below, whatever ATTNLAB_CPU says */
    CHECK(al_attn_reserve(&s, &err) == 0);
    const size_t planned = al_attn_workspace_bytes();
    CHECK_MSG(planned > 0, "al_attn_reserve planned no workspace for a GQA shape");
    inputs in;
    inputs_make(&in, &s, r, 1.0f);
    run x;
    run_do(&x, &in, (int)al_cpu_detect());
    CHECK_MSG(al_attn_workspace_bytes() == planned, "a call of the reserved shape grew the arena: %zu -> %zu bytes",
              planned, al_attn_workspace_bytes());
    run_free(&x);
    inputs_free(&in);
    al_attn_release();
    CHECK(al_attn_workspace_bytes() == 0);
}

/* s->grads_overwrite (tu_grads_overwrite_ok) on the reference, every set
 * the CPU runs and, without a workspace, the generic backward they fall
 * back to: MHA with rows that stream (no padding, d 64), GQA padded, MQA
 * whose heads split into chunks with partial sums; causal and not. */
static int ow_level; /* the set ow_bwd forces; -1: the reference */
static void ow_bwd(const al_attn_shape *s, const float *q, const float *k, const float *v, const float *o,
                   const float *lse, const float *dO, float *dq, float *dk, float *dv) {
    if (ow_level < 0) {
        al_attn_bwd_ref(s, q, k, v, o, lse, dO, dq, dk, dv);
        return;
    }
    al_cpu_force(ow_level);
    al_attn_bwd(s, q, k, v, o, lse, dO, dq, dk, dv);
    al_cpu_force(-1);
}

static void check_overwrite(al_rng *r) {
    const int shapes[][7] = {{1, 130, 4, 4, 64, 64, 0}, {2, 77, 6, 2, 24, 40, 3}, {1, 90, 8, 1, 32, 32, 0}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int no_ws = 0; no_ws < 2; no_ws++)
            for (int level = -1; level <= (int)al_cpu_detect(); level++) {
                if (level < 0 && no_ws) continue;
                const int *v = shapes[i], pad = v[6];
                al_attn_shape s = {v[0], v[1], v[2], v[3], v[4], v[5], v[2] * v[4] + pad, v[3] * v[4] + pad,
                                   v[3] * v[5] + pad, v[2] * v[5] + pad, 1.0f / sqrtf((float)v[4])};
                tu_set_score(&s, &FNS[i % NFNS], (int)i % 2, 29.0f);
                inputs in;
                inputs_make(&in, &s, r, 1.0f);
                run x;
                run_do(&x, &in, level);
                al_attn_test_no_workspace(no_ws);
                ow_level = level;
                CHECK_MSG(tu_grads_overwrite_ok(&s, ow_bwd, in.q, in.k, in.v, x.o, x.lse, in.dO),
                          "set %d%s: the overwriting backward differs from adding into zeros (shape %zu)", level,
                          no_ws ? " without workspace" : "", i);
                al_attn_test_no_workspace(0);
                run_free(&x);
                inputs_free(&in);
            }
}

int main(int argc, char **argv) {
    (void)argc;
    al_blas_fix_kernels(argv);
    al_attn_test_poison_workspace(1); /* a workspace part read before written fails */
    check_workspace_linear();
    check_dispatch();
    al_rng r;
    al_rng_seed(&r, 2024);
    /* fixed edge cases: one token; one tile plus one; d of 1; the bench's d_h with a ragged T */
    const int fixed[][7] = {{1, 1, 1, 1, 8, 8, 0},   {1, 65, 2, 1, 16, 16, 0}, {2, 17, 4, 2, 1, 1, 3},
                            {1, 129, 3, 3, 64, 64, 0}, {1, 70, 4, 1, 96, 40, 2}, {3, 5, 6, 3, 33, 17, 1}};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
        const int *v = fixed[i];
        for (int bidir = 0; bidir < 2; bidir++)
            check_case(&FNS[i % NFNS], bidir, v[0], v[1], v[2], v[3], v[4], v[5], v[6], &r);
    }
    /* random shapes: T up to 200, odd head dims, any grouping */
    for (int n = 0; n < 36; n++) {
        const int B = 1 + (int)(al_rng_u64(&r) % 3), T = 1 + (int)(al_rng_u64(&r) % 200);
        const int Gs[] = {1, 2, 3}, G = Gs[al_rng_u64(&r) % 3], H = G * (1 + (int)(al_rng_u64(&r) % 3));
        const int dk = 1 + (int)(al_rng_u64(&r) % 72), dv = 1 + (int)(al_rng_u64(&r) % 72);
        const int pad = (int)(al_rng_u64(&r) % 4), bidir = (int)(al_rng_u64(&r) % 2);
        check_case(&FNS[n % NFNS], bidir, B, T, H, G, dk, dv, pad, &r);
    }
    check_no_workspace(&r);
    check_overwrite(&r);
    check_softmax_stress(0);
    check_softmax_stress(1);
    check_sharp_and_mxcsr();
    for (int level = AL_CPU_AVX2; level <= (int)al_cpu_detect(); level++)
        for (int fi = 0; fi < NFNS; fi++) check_threads(level, &FNS[fi]);
    return TEST_EXIT();
}
