/*
 * test_precision.c: the precision of the matrix products (src/nn/precision.c):
 * names and parsing; every BF16 engine this machine runs (and oneDNN's fp32
 * test mode, which runs anywhere) against the float64 product of the
 * bf16-rounded operands on odd shapes, all four transpositions, alpha and
 * beta, beta = 0 over NaN garbage; BF16 copies of weight arenas (the same
 * bits with and without); the same bits at 1, 2, 3 and 8 threads (where
 * row blocks merge and where they do not) and where the onednn engine
 * merges them (AVX512-BF16 only; CTest runs this a second time with
 * ATTNLAB_CPU=avx512-bf16), there also across its rows-only and
 * columns-first cuts of deep products; a linear's backward with its dy
 * rounded once (the onednn engine) against its two products alone; the own
 * kernels' packing and plain reference, and the fast kernels against it
 * where the CPU has them (the AMX kernel also on emulated tiles, amx_emu.h,
 * wherever the CPU has AVX-512); the rounding of fp32 runs to bf16 in
 * every set against its plain loop; compensated products (al_bf16_split)
 * to fp32's accuracy on every engine, and the products MLA runs so. Prints
 * what it could not run.
 */
#include <omp.h>
#include <string.h>

#include "core/ceiling.h"
#include "core/cpu.h"
#include "nn/nn.h"
#include "nn/precision_internal.h"
#include "test.h"
#include "testutil.h"

/* ---- the amx engine's kernel (nn/gemm_amx.c) on emulated tiles ----
 * compiled here a second time over amx_emu.h's model of the tile
 * registers, as al_bf16_tiles_kernel_amxemu: its blocking, K blocks, edges
 * and alpha / beta paths run on CPUs without AMX too (its non-tile code is
 * AVX-512: run where the CPU has it). */
#include "amx_emu.h"
#define al_bf16_tiles_kernel_amx al_bf16_tiles_kernel_amxemu
#define al_bf16_tiles_set_pass_steps al_bf16_tiles_set_pass_steps_emu
#include "nn/gemm_amx.c"
#undef al_bf16_tiles_kernel_amx
#undef al_bf16_tiles_set_pass_steps

static float rnd(al_rng *r) { return al_rng_normal(r); }
static double bf(float x) { return (double)al_bf16_to_f32(al_f32_to_bf16(x)); }

/* One product case: C[M, N] = alpha op(A) op(B) + beta C, leading
 * dimensions a little wider than needed. */
typedef struct gemm_case {
    int ta, tb, M, N, K;
    float alpha, beta;
} gemm_case;

typedef struct gemm_data {
    gemm_case c;
    int lda, ldb, ldc;
    float *A, *B, *C0;
    size_t a_n, b_n, c_n;
} gemm_data;

static void data_make(gemm_data *d, gemm_case c, al_rng *r) {
    d->c = c;
    const int a_rows = c.ta ? c.K : c.M, a_cols = c.ta ? c.M : c.K;
    const int b_rows = c.tb ? c.N : c.K, b_cols = c.tb ? c.K : c.N;
    d->lda = a_cols + 3, d->ldb = b_cols + 5, d->ldc = c.N + 2;
    d->a_n = (size_t)a_rows * d->lda, d->b_n = (size_t)b_rows * d->ldb, d->c_n = (size_t)c.M * d->ldc;
    d->A = malloc(sizeof(float) * d->a_n), d->B = malloc(sizeof(float) * d->b_n), d->C0 = malloc(sizeof(float) * d->c_n);
    for (size_t i = 0; i < d->a_n; i++) d->A[i] = rnd(r);
    for (size_t i = 0; i < d->b_n; i++) d->B[i] = rnd(r);
    for (size_t i = 0; i < d->c_n; i++) d->C0[i] = c.beta == 0.0f ? NAN : rnd(r); /* beta 0: C must not be read */
}

static void data_free(gemm_data *d) {
    free(d->A);
    free(d->B);
    free(d->C0);
}

/* op(A)(i, k), op(B)(k, j) */
static float a_at(const gemm_data *d, int i, int k) { return d->c.ta ? d->A[(size_t)k * d->lda + i] : d->A[(size_t)i * d->lda + k]; }
static float b_at(const gemm_data *d, int k, int j) { return d->c.tb ? d->B[(size_t)j * d->ldb + k] : d->B[(size_t)k * d->ldb + j]; }

/* The product through al_sgemm into a fresh copy of C0 (caller frees). */
static float *run(const gemm_data *d) {
    float *C = malloc(sizeof(float) * d->c_n);
    memcpy(C, d->C0, sizeof(float) * d->c_n);
    al_sgemm(d->c.ta, d->c.tb, d->c.M, d->c.N, d->c.K, d->c.alpha, d->A, d->lda, d->B, d->ldb, d->c.beta, C, d->ldc);
    return C;
}

/* Worst |C - ref| / (|alpha| sum |a b| + |beta c0| + 1e-30) over C, with ref
 * the float64 product of the bf16-rounded operands (rounded = 1) or of the
 * fp32 ones (0); NaN counts as infinitely wrong. */
static double worst_err(const gemm_data *d, const float *C, int rounded) {
    double worst = 0;
    for (int i = 0; i < d->c.M; i++)
        for (int j = 0; j < d->c.N; j++) {
            double s = 0, mag = 0;
            for (int k = 0; k < d->c.K; k++) {
                const double a = rounded ? bf(a_at(d, i, k)) : a_at(d, i, k), b = rounded ? bf(b_at(d, k, j)) : b_at(d, k, j);
                s += a * b, mag += fabs(a * b);
            }
            const double c0 = d->c.beta == 0.0f ? 0 : d->C0[(size_t)i * d->ldc + j];
            const double ref = d->c.alpha * s + d->c.beta * c0;
            const double e = fabs(C[(size_t)i * d->ldc + j] - ref) / (fabs(d->c.alpha) * mag + fabs(d->c.beta * c0) + 1e-30);
            if (e > worst || e != e) worst = e != e ? INFINITY : e;
        }
    return worst;
}

static const gemm_case cases[] = {
    {0, 1, 37, 29, 61, 1.0f, 0.0f},    {0, 0, 53, 41, 300, 0.5f, 1.0f}, {1, 0, 45, 19, 517, 1.0f, 0.75f},
    {1, 1, 23, 67, 33, -2.0f, 0.0f},   {0, 1, 301, 77, 1100, 1.0f, 1.0f}, {1, 0, 97, 1301, 67, 1.0f, 0.0f},
    {0, 1, 1000, 33, 270, 1.0f, 0.0f}, {0, 0, 7, 3, 1, 1.0f, 0.5f},
    /* wide C: onednn cuts columns first, so its tiles copy strided op(A), op(B) and C dense (gemm_onednn.c) */
    {0, 0, 130, 700, 90, 1.0f, 0.5f},  {1, 1, 200, 600, 75, 0.5f, 1.0f},
};
enum { N_CASES = sizeof cases / sizeof cases[0] };

/* Every case on the engine in effect: against the rounded reference within
 * fp32 summation error, and visibly not the fp32 product. */
static void check_engine(const char *label, al_rng *r) {
    for (int ci = 0; ci < N_CASES; ci++) {
        gemm_data d;
        data_make(&d, cases[ci], r);
        float *C = run(&d);
        const gemm_case c = cases[ci];
        const double e = worst_err(&d, C, 1), e32 = worst_err(&d, C, 0);
        CHECK_MSG(e < 2e-5, "%s: case %d (%c%c %dx%dx%d alpha %g beta %g): error %.3g against the bf16 reference",
                  label, ci, c.ta ? 'T' : 'N', c.tb ? 'T' : 'N', c.M, c.N, c.K, c.alpha, c.beta, e);
        if (c.K > 8) CHECK_MSG(e32 > 1e-4, "%s: case %d: error %.3g against fp32: operands not rounded?", label, ci, e32);
        /* untouched: the columns of C beyond N */
        int kept = 1;
        for (int i = 0; i < c.M; i++)
            for (int j = c.N; j < d.ldc; j++) {
                const float a = C[(size_t)i * d.ldc + j], b = d.C0[(size_t)i * d.ldc + j];
                kept &= a == b || (a != a && b != b);
            }
        CHECK_MSG(kept, "%s: case %d wrote beyond its columns", label, ci);
        free(C);
        data_free(&d);
    }
}

/* The same bits with the operands' BF16 copies attached (B, then A too) as
 * without, as A and B given as BF16 values, and at 1, 2, 3 and 8 threads. */
static void check_shadow_and_threads(const char *label, al_rng *r) {
    for (int ci = 0; ci < N_CASES; ci++) {
        gemm_data d;
        data_make(&d, cases[ci], r);
        float *plain = run(&d);
        al_err err = {0};
        CHECK(al_bf16_shadow_attach(d.B, d.b_n, &err) == 0);
        CHECK(al_bf16_shadow_of(d.B + 7) != NULL && al_bf16_shadow_of(d.A) == NULL);
        float *with_b = run(&d);
        CHECK(al_bf16_shadow_attach(d.A, d.a_n, &err) == 0);
        float *with_ab = run(&d);
        al_bf16_shadow_detach(d.A);
        al_bf16_shadow_detach(d.B);
        CHECK(al_bf16_shadow_of(d.B) == NULL);
        CHECK_MSG(!memcmp(plain, with_b, sizeof(float) * d.c_n) && !memcmp(plain, with_ab, sizeof(float) * d.c_n),
                  "%s: case %d: BF16 copies change the result", label, ci);
        /* A, B or both given as BF16 themselves (a mapped checkpoint's
         * weights, activations BF16 training stores rounded): the bits of
         * their BF16 copies */
        uint16_t *Abf = malloc(sizeof(uint16_t) * d.a_n), *Bbf = malloc(sizeof(uint16_t) * d.b_n);
        float *given = malloc(sizeof(float) * d.c_n);
        for (size_t i = 0; i < d.a_n; i++) Abf[i] = al_f32_to_bf16(d.A[i]);
        for (size_t i = 0; i < d.b_n; i++) Bbf[i] = al_f32_to_bf16(d.B[i]);
        for (int which = 1; which <= 3; which++) { /* 1: A, 2: B, 3: both */
            const al_wref a = which & 1 ? (al_wref){Abf, AL_DT_BF16} : al_wref_f32(d.A),
                          b = which & 2 ? (al_wref){Bbf, AL_DT_BF16} : al_wref_f32(d.B);
            memcpy(given, d.C0, sizeof(float) * d.c_n);
            al_sgemm_ref(d.c.ta, d.c.tb, d.c.M, d.c.N, d.c.K, d.c.alpha, a, d.lda, b, d.ldb, d.c.beta, given, d.ldc);
            CHECK_MSG(!memcmp(plain, given, sizeof(float) * d.c_n),
                      "%s: case %d: a BF16 %s differs from its fp32 values", label, ci,
                      which == 1 ? "A" : which == 2 ? "B" : "A and B");
        }
        free(Abf), free(Bbf), free(given);
        /* 3 threads too: the amx engine's cut depends on the thread count
         * (linear.c's amx_cut); and 8, where a 1,000-row C keeps all of its
         * 8 row blocks, which fewer threads run merged where the engine
         * allows (merge_rows: 1, 2 or 4 tiles) */
        const int threads = omp_get_max_threads(), counts[] = {1, 2, 3, 8};
        float *at[4];
        int same = 1;
        for (int t = 0; t < 4; t++) {
            omp_set_num_threads(counts[t]);
            at[t] = run(&d);
            same &= !memcmp(at[t], plain, sizeof(float) * d.c_n);
        }
        omp_set_num_threads(threads);
        CHECK_MSG(same, "%s: case %d: 1, 2, 3 and 8 threads differ", label, ci);
        for (int t = 0; t < 4; t++) free(at[t]);
        free(plain), free(with_b), free(with_ab);
        data_free(&d);
    }
}

/* Deep products where onednn on AVX512-BF16 cuts C by rows only at 1 and
 * 2 threads and columns first at 3 and 8 (linear.c's rows_only_cheaper:
 * 768 rows, K past the rows-only rule, 2 column blocks): the same bits at
 * every count, beta 0 and 1, dx-like and dW-like. */
static void check_onednn_rows_only(al_rng *r) {
    static const gemm_case deep[] = {{0, 0, 768, 520, 800, 1.0f, 0.0f}, {1, 0, 768, 600, 1000, 1.0f, 1.0f}};
    const int threads = omp_get_max_threads(), counts[] = {1, 2, 3, 8};
    for (int ci = 0; ci < 2; ci++) {
        gemm_data d;
        data_make(&d, deep[ci], r);
        float *first = NULL;
        int same = 1;
        for (int t = 0; t < 4; t++) {
            omp_set_num_threads(counts[t]);
            float *C = run(&d);
            if (!first) first = C;
            else same &= !memcmp(first, C, sizeof(float) * d.c_n), free(C);
        }
        omp_set_num_threads(threads);
        CHECK_MSG(same, "onednn rows-only cut: case %d: 1, 2, 3 and 8 threads differ", ci);
        free(first);
        data_free(&d);
    }
}

/* Where the onednn engine may merge row blocks (gemm_onednn.c): on
 * oneDNN's AVX512-BF16 kernels (the set in use avx512-bf16: Zen 4, or
 * ATTNLAB_CPU=avx512-bf16 on AMX, which CTest runs as
 * unit.test_precision_avx512bf16), where check_shadow_and_threads has just
 * compared merged and unmerged cuts (and check_onednn_rows_only compares
 * the cuts the thread count picks); never on AMX, never in fp32 test mode. */
static void check_onednn_merge(al_rng *r) {
    const al_cpu_level level = al_cpu_level_now();
    if (level == AL_CPU_AVX512_BF16) {
        CHECK_MSG(al_onednn_rows_merge_exact(0), "onednn on AVX512-BF16: row blocks not merged");
        check_onednn_rows_only(r);
        fprintf(stderr, "ran: onednn's row blocks merged (AVX512-BF16 kernels), rows-only cuts by thread count\n");
    } else {
        if (level == AL_CPU_AMX) CHECK_MSG(!al_onednn_rows_merge_exact(0), "onednn on AMX: row blocks merged");
        fprintf(stderr, "skipped: onednn's merged row blocks (run where the set is avx512-bf16: "
                        "ATTNLAB_CPU=avx512-bf16, unit.test_precision_avx512bf16)\n");
    }
    CHECK(!al_onednn_rows_merge_exact(1));
}

/* A linear's backward (linear.c): both products read dy, which the onednn
 * engine rounds once for both (al_bf16_round_shared) and every other engine
 * leaves to each product. Either way dx and dW have the bits of the two
 * products run alone (dx = dy W, dW = dy^T x), accumulating or not; and
 * the shared values are dy rounded, offered exactly where they pay (the
 * onednn engine outside its fp32 test mode). Shapes: odd, and one whose dW
 * has several row blocks, so that its dy^T is laid out blocked. offered:
 * whether the engine in effect should get the shared values. */
static void check_linear_bwd_shared(const char *label, int offered, al_rng *r) {
    static const int shapes[][3] = {{37, 45, 29}, {150, 300, 400}}; /* N, in, out */
    for (int si = 0; si < 2; si++) {
        const int N = shapes[si][0], in = shapes[si][1], out = shapes[si][2];
        float *dy = malloc(sizeof(float) * N * out), *x = malloc(sizeof(float) * N * in),
              *W = malloc(sizeof(float) * out * in), *dx = malloc(sizeof(float) * N * in),
              *dW = malloc(sizeof(float) * out * in), *dx1 = malloc(sizeof(float) * N * in),
              *dW1 = malloc(sizeof(float) * out * in);
        for (int i = 0; i < N * out; i++) dy[i] = rnd(r);
        for (int i = 0; i < N * in; i++) x[i] = rnd(r);
        for (int i = 0; i < out * in; i++) W[i] = rnd(r);
        const uint16_t *shared = al_bf16_round_shared(dy, (size_t)N * out);
        CHECK_MSG((shared != NULL) == offered, "%s: dy rounded once %s", label, offered ? "not offered" : "offered");
        int rounded = 1;
        for (int i = 0; shared && i < N * out; i++) rounded &= shared[i] == al_f32_to_bf16(dy[i]);
        CHECK_MSG(rounded, "%s: the shared dy is not dy rounded", label);
        for (int add = 0; add <= 1; add++) {
            for (int i = 0; i < N * in; i++) dx[i] = dx1[i] = add ? rnd(r) : NAN;
            for (int i = 0; i < out * in; i++) dW[i] = dW1[i] = add ? rnd(r) : NAN;
            al_linear_bwd_ref(dx, add, dW, add, al_wref_f32(dy), al_wref_f32(x), W, N, in, out);
            al_sgemm(0, 0, N, in, out, 1.0f, dy, out, W, in, add ? 1.0f : 0.0f, dx1, in);
            al_sgemm(1, 0, out, in, N, 1.0f, dy, out, x, in, add ? 1.0f : 0.0f, dW1, in);
            CHECK_MSG(!memcmp(dx, dx1, sizeof(float) * N * in) && !memcmp(dW, dW1, sizeof(float) * out * in),
                      "%s: linear backward %dx%dx%d (add %d): not the bits of its products alone", label, N, in,
                      out, add);
        }
        free(dy), free(x), free(W), free(dx), free(dW), free(dx1), free(dW1);
    }
}

/* Worst |C - ref| / sum |a b| over C[M, N] (dense), ref the float64
 * product of op(A)(i, k) = A[i a_rs + k a_cs] and op(B)(k, j) = B[k b_rs +
 * j b_cs] over K. */
static double worst_vs_f64(const float *C, int M, int N, int K, const float *A, int a_rs, int a_cs, const float *B,
                           int b_rs, int b_cs) {
    double worst = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0, mag = 0;
            for (int k = 0; k < K; k++) {
                const double t = (double)A[(size_t)i * a_rs + (size_t)k * a_cs] * B[(size_t)k * b_rs + (size_t)j * b_cs];
                s += t, mag += fabs(t);
            }
            worst = fmax(worst, fabs(C[(size_t)i * N + j] - s) / mag);
        }
    return worst;
}

/* Compensated products (al_bf16_split, linear.c's sgemm_split) on the
 * engine in effect: every case within 1.5e-5 of the fp32 operands' float64
 * product, relative to sum |a b| (the split's own bound: lo_A lo_B left
 * out and each lo rounded, 3 x 2^-18 = 1.14e-5 per term, plus fp32 sums;
 * a plain BF16 product misses it by over 1e-4, check_engine, and one of
 * the three terms left out by about 2^-9), the same bits at
 * 1, 2 and 3 threads and with B's BF16 copy attached; A given as BF16 is
 * its own high part (the product of A's bf16 values with B's fp32 ones);
 * a linear's backward with the flag reads dy's fp32 values (not the shared
 * rounding); the flag is the calling thread's, returns what it was, and
 * leaves F32 products alone. */
static void check_split(const char *label, al_rng *r) {
    CHECK(al_bf16_split(1) == 0 && al_bf16_split(1) == 1);
    int other_thread = -1; /* another thread's flag, unset while this one's is set */
#pragma omp parallel num_threads(2)
    if (omp_get_thread_num() == 1) other_thread = al_bf16_split(0);
    CHECK_MSG(other_thread != 1, "%s: the split flag is not the calling thread's", label);
    for (int ci = 0; ci < N_CASES; ci++) {
        gemm_data d;
        data_make(&d, cases[ci], r);
        const gemm_case c = cases[ci];
        float *C = run(&d);
        const double e = worst_err(&d, C, 0);
        CHECK_MSG(e < 1.5e-5, "%s: split case %d (%c%c %dx%dx%d alpha %g beta %g): error %.3g against fp32", label, ci,
                  c.ta ? 'T' : 'N', c.tb ? 'T' : 'N', c.M, c.N, c.K, c.alpha, c.beta, e);
        al_err err = {0};
        CHECK(al_bf16_shadow_attach(d.B, d.b_n, &err) == 0);
        const int threads = omp_get_max_threads();
        int same = 1;
        for (int t = 1; t <= 3; t++) {
            omp_set_num_threads(t);
            float *again = run(&d);
            same &= !memcmp(again, C, sizeof(float) * d.c_n);
            free(again);
        }
        omp_set_num_threads(threads);
        al_bf16_shadow_detach(d.B);
        CHECK_MSG(same, "%s: split case %d: threads or B's copy change the bits", label, ci);
        /* A as BF16 values: the reference takes A rounded, B exact */
        uint16_t *Abf = malloc(sizeof(uint16_t) * d.a_n);
        for (size_t i = 0; i < d.a_n; i++) Abf[i] = al_f32_to_bf16(d.A[i]);
        memcpy(C, d.C0, sizeof(float) * d.c_n);
        al_sgemm_ref(c.ta, c.tb, c.M, c.N, c.K, c.alpha, (al_wref){Abf, AL_DT_BF16}, d.lda, al_wref_f32(d.B), d.ldb,
                     c.beta, C, d.ldc);
        for (size_t i = 0; i < d.a_n; i++) d.A[i] = (float)bf(d.A[i]);
        const double ea = worst_err(&d, C, 0);
        CHECK_MSG(ea < 1.5e-5, "%s: split case %d with A as BF16: error %.3g", label, ci, ea);
        free(Abf), free(C);
        data_free(&d);
    }
    /* a linear's backward: both products to fp32's accuracy */
    enum { N = 67, IN = 45, OUT = 130 };
    float *dy = malloc(sizeof(float) * N * OUT), *x = malloc(sizeof(float) * N * IN),
          *W = malloc(sizeof(float) * OUT * IN), *dx = malloc(sizeof(float) * N * IN),
          *dW = malloc(sizeof(float) * OUT * IN);
    for (int i = 0; i < N * OUT; i++) dy[i] = rnd(r);
    for (int i = 0; i < N * IN; i++) x[i] = rnd(r);
    for (int i = 0; i < OUT * IN; i++) W[i] = rnd(r);
    al_linear_bwd_into(dx, 0, dW, 0, dy, x, W, N, IN, OUT);
    const double worst = fmax(worst_vs_f64(dx, N, IN, OUT, dy, OUT, 1, W, IN, 1),   /* dx = dy W */
                              worst_vs_f64(dW, OUT, IN, N, dy, 1, OUT, x, IN, 1)); /* dW = dy^T x */
    CHECK_MSG(worst < 1.5e-5, "%s: split linear backward: error %.3g against fp32", label, worst);
    free(dy), free(x), free(W), free(dx), free(dW);
    CHECK(al_bf16_split(0) == 1);
    /* F32 products ignore the flag: OpenBLAS's bits */
    gemm_data d;
    data_make(&d, cases[1], r);
    al_precision_set(AL_PREC_F32);
    float *plain = run(&d);
    al_bf16_split(1);
    float *flagged = run(&d);
    al_bf16_split(0);
    al_precision_set(AL_PREC_BF16);
    CHECK_MSG(!memcmp(plain, flagged, sizeof(float) * d.c_n), "%s: the flag changed an F32 product", label);
    free(plain), free(flagged);
    data_free(&d);
}

/* The amx engine keeps a weight's packed tiles between products
 * (precision.c): a B operand read from a BF16 copy is only noted by its
 * first product, packed into the table by its second, read from there by
 * the third (still one kept), all with the bits of a product that keeps
 * nothing; after the weights change and their copy is refreshed (which
 * empties the table) the product is the new weights' one; detaching the
 * copy empties the table too. */
static void check_packed_cache(const char *label, al_rng *r) {
    for (int ci = 0; ci < N_CASES; ci++) {
        gemm_data d;
        data_make(&d, cases[ci], r);
        al_err err = {0};
        CHECK(al_bf16_shadow_attach(d.B, d.b_n, &err) == 0);
        al_bf16_packed_cache(0);
        float *plain = run(&d);
        al_bf16_packed_cache(1);
        float *first = run(&d);
        const size_t kept1 = al_bf16_packed_count();
        float *second = run(&d);
        const size_t kept2 = al_bf16_packed_count();
        float *third = run(&d);
        CHECK_MSG(kept1 == 0 && kept2 == 1 && al_bf16_packed_count() == 1,
                  "%s: case %d: %zu, %zu, %zu weights kept after 1, 2, 3 products, want 0, 1, 1", label, ci, kept1, kept2,
                  al_bf16_packed_count());
        CHECK_MSG(!memcmp(plain, first, sizeof(float) * d.c_n) && !memcmp(plain, second, sizeof(float) * d.c_n) &&
                      !memcmp(plain, third, sizeof(float) * d.c_n),
                  "%s: case %d: kept tiles change the product", label, ci);
        for (size_t i = 0; i < d.b_n; i++) d.B[i] = 0.25f - 0.5f * d.B[i];
        al_bf16_shadow_refresh(d.B);
        CHECK_MSG(al_bf16_packed_count() == 0, "%s: case %d: a refresh left %zu kept", label, ci,
                  al_bf16_packed_count());
        float *fresh = run(&d);
        free(run(&d)); /* noted again after the refresh: this one packs into the table, the next reads it */
        float *fresh3 = run(&d);
        al_bf16_packed_cache(0);
        float *want = run(&d);
        al_bf16_packed_cache(1);
        CHECK_MSG(!memcmp(fresh, want, sizeof(float) * d.c_n) && !memcmp(fresh3, want, sizeof(float) * d.c_n) &&
                      memcmp(fresh, first, sizeof(float) * d.c_n),
                  "%s: case %d: after a refresh, not the new weights' product", label, ci);
        al_bf16_shadow_detach(d.B);
        CHECK_MSG(al_bf16_packed_count() == 0, "%s: case %d: a detach left weights kept", label, ci);
        free(plain), free(first), free(second), free(third), free(fresh), free(fresh3), free(want);
        data_free(&d);
    }
}

/* al_matmul over BF16 weights (a Hugging Face BF16 checkpoint) in BF16 mode
 * feeds them to the engine as they are (no fp32 panel): the very bits of
 * al_sgemm in BF16 mode over their widened values, for products of more rows
 * than the direct (decode) kernel takes, and al_sgemm_ref with a BF16 B,
 * alpha and beta likewise. Shapes: odd ones, and whole tiles over several K blocks
 * with a partial strip of rows. */
static void check_bf16_weights(const char *label, al_rng *r) {
    static const int shapes[][3] = {{37, 83, 61}, {37, 96, 64}, {50, 2080, 96}}; /* N rows, IN, OUT */
    enum { MAXN = 50, MAXIN = 2080, MAXOUT = 96, PAD = 7 };
    static float x[MAXN * (MAXIN + PAD)], Wf[MAXOUT * MAXIN], got[MAXN * (MAXOUT + PAD)], want[MAXN * (MAXOUT + PAD)];
    static uint16_t Wb[MAXOUT * MAXIN];
    for (int sh = 0; sh < 3; sh++) {
        const int N = shapes[sh][0], IN = shapes[sh][1], OUT = shapes[sh][2], LDX = IN + PAD, LDY = OUT + PAD;
        for (int i = 0; i < N * LDX; i++) x[i] = rnd(r);
        for (int i = 0; i < OUT * IN; i++) Wb[i] = al_f32_to_bf16(rnd(r)), Wf[i] = al_bf16_to_f32(Wb[i]);
        for (int accumulate = 0; accumulate < 2; accumulate++) {
            for (int i = 0; i < N * LDY; i++) got[i] = want[i] = accumulate ? rnd(r) : NAN;
            al_matmul(got, LDY, x, LDX, (al_wref){Wb, AL_DT_BF16}, N, IN, OUT, accumulate);
            al_sgemm(0, 1, N, OUT, IN, 1.0f, x, LDX, Wf, IN, accumulate ? 1.0f : 0.0f, want, LDY);
            int same = 1;
            for (int n = 0; n < N; n++) same &= !memcmp(got + n * LDY, want + n * LDY, sizeof(float) * OUT);
            CHECK_MSG(same, "%s: al_matmul over BF16 weights %dx%dx%d (accumulate %d) differs from BF16 al_sgemm",
                      label, N, IN, OUT, accumulate);
        }
        for (int i = 0; i < N * LDY; i++) got[i] = want[i] = rnd(r);
        al_sgemm_ref(0, 1, N, OUT, IN, 1.5f, al_wref_f32(x), LDX, (al_wref){Wb, AL_DT_BF16}, IN, 0.5f, got, LDY);
        al_sgemm(0, 1, N, OUT, IN, 1.5f, x, LDX, Wf, IN, 0.5f, want, LDY);
        CHECK_MSG(!memcmp(got, want, sizeof(float) * N * LDY), "%s: al_sgemm_ref, a BF16 B %dx%dx%d (alpha, beta) differs "
                  "from BF16 al_sgemm", label, N, IN, OUT);
    }
}

/* The own kernels' packing and reference on odd blocks, and the fast
 * kernels (where they run) against the reference. */
static void check_own_kernels(al_rng *r) {
    static const int shapes[][3] = {{1, 1, 1}, {5, 17, 33}, {33, 31, 64}, {64, 64, 96}, {29, 45, 7}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int mb = shapes[si][0], nb = shapes[si][1], kb = shapes[si][2];
        const int mp = al_round_up(mb, AL_BF16_PAD_M), np = al_round_up(nb, AL_BF16_PAD_N), kp = al_round_up(kb, AL_BF16_PAD_K);
        float *A = malloc(sizeof(float) * mb * kb), *Bt = malloc(sizeof(float) * kb * nb); /* Bt: B's columns as rows */
        for (int i = 0; i < mb * kb; i++) A[i] = rnd(r);
        for (int i = 0; i < kb * nb; i++) Bt[i] = rnd(r);
        uint16_t *Ap = malloc(sizeof(uint16_t) * mp * kp), *Bp = malloc(sizeof(uint16_t) * kp * np);
        memset(Ap, 0xFF, sizeof(uint16_t) * mp * kp), memset(Bp, 0xFF, sizeof(uint16_t) * kp * np); /* garbage */
        al_bf16_pack_rows(Ap, A, NULL, (size_t)kb, 1, mb, kb);
        al_bf16_pack_vnni(Bp, Bt, NULL, (size_t)kb, 1, nb, kb);
        const int ldc = nb + 1;
        float *ref = malloc(sizeof(float) * mb * ldc), *C = malloc(sizeof(float) * mb * ldc);
        for (int i = 0; i < mb * ldc; i++) ref[i] = rnd(r);
        memcpy(C, ref, sizeof(float) * mb * ldc);
        al_bf16_kernel_ref(mb, nb, kp, np, 1.5f, Ap, Bp, 0.5f, ref, ldc);
        double worst = 0;
        for (int i = 0; i < mb; i++)
            for (int j = 0; j < nb; j++) {
                double s = 0, mag = 0;
                for (int k = 0; k < kb; k++) s += bf(A[i * kb + k]) * bf(Bt[j * kb + k]), mag += fabs(bf(A[i * kb + k]) * bf(Bt[j * kb + k]));
                const double want = 1.5 * s + 0.5 * C[i * ldc + j];
                const double e = fabs(ref[i * ldc + j] - want) / (1.5 * mag + fabs(0.5 * C[i * ldc + j]) + 1e-30);
                worst = e > worst || e != e ? e : worst;
            }
        CHECK_MSG(worst < 1e-5, "own-kernel reference %dx%dx%d: error %.3g", mb, nb, kb, worst);
        typedef void (*kernel_fn)(int, int, int, int, float, const uint16_t *, const uint16_t *, float, float *, int);
        const struct {
            const char *name;
            al_cpu_level needs;
            kernel_fn fn;
        } fast[] = {{"avx512-bf16", AL_CPU_AVX512_BF16, al_bf16_kernel_avx512bf16}};
        for (size_t f = 0; f < sizeof fast / sizeof fast[0]; f++) {
            if (al_cpu_level_now() < fast[f].needs) continue;
            float *got = malloc(sizeof(float) * mb * ldc);
            memcpy(got, C, sizeof(float) * mb * ldc);
            fast[f].fn(mb, nb, kp, np, 1.5f, Ap, Bp, 0.5f, got, ldc);
            CHECK_MSG(test_rel_err(got, ref, (size_t)mb * ldc) < 1e-5, "%s kernel %dx%dx%d: error %.3g", fast[f].name, mb,
                      nb, kb, test_rel_err(got, ref, (size_t)mb * ldc));
            for (int i = 0; i < mb * ldc; i++) got[i] = NAN; /* beta 0 must not read C */
            fast[f].fn(mb, nb, kp, np, 1.0f, Ap, Bp, 0.0f, got, ldc);
            int finite = 1;
            for (int i = 0; i < mb; i++)
                for (int j = 0; j < nb; j++) finite &= isfinite(got[i * ldc + j]);
            CHECK_MSG(finite, "%s kernel: beta 0 read C", fast[f].name);
            free(got);
        }
        free(A), free(Bt), free(Ap), free(Bp), free(ref), free(C);
    }
}

typedef void (*tiles_kernel)(const uint16_t *Ap, const uint16_t *Bp, int ksteps, int r0, int r1, int c0, int c1,
                             float alpha, float beta, float *C, size_t ldc);

/* An AMX tiles kernel against the plain one over the packed Ap, Bp (M x K
 * times K x N, C's rows ldc apart from C0; mag: sum |a b| per element), C's
 * tile [r0, r1) x [c0, c1): alpha 1.5 beta 0.5; alpha 1 beta 1 (the tiles
 * straight into C); beta 0 over NaN (C never read); nothing outside it
 * touched. */
static void check_tiles_kernel(tiles_kernel kernel, const char *name, const uint16_t *Ap, const uint16_t *Bp, int ks,
                               int M, int N, int K, int r0, int r1, int c0, int c1, const float *C0, int ldc,
                               const double *mag) {
    for (int pass = 0; pass < 3; pass++) {
        const float alpha = pass == 0 ? 1.5f : 1.0f, beta = pass == 0 ? 0.5f : pass == 1 ? 1.0f : 0.0f;
        float *want = malloc(sizeof(float) * M * ldc), *got = malloc(sizeof(float) * M * ldc);
        memcpy(want, C0, sizeof(float) * M * ldc);
        for (int i = 0; i < M * ldc; i++) got[i] = beta == 0.0f && i / ldc >= r0 && i / ldc < r1 ? NAN : C0[i];
        for (int i = 0; i < M * ldc && beta == 0.0f; i++) want[i] = got[i];
        al_bf16_tiles_kernel_ref(Ap, Bp, ks, r0, r1, c0, c1, alpha, beta, want, (size_t)ldc);
        kernel(Ap, Bp, ks, r0, r1, c0, c1, alpha, beta, got, (size_t)ldc);
        double w = 0;
        int same_outside = 1;
        for (int i = 0; i < M; i++)
            for (int j = 0; j < ldc; j++) {
                const size_t at = (size_t)i * ldc + j;
                const float g = got[at], h = want[at];
                if (i < r0 || i >= r1 || j < c0 || j >= c1) {
                    same_outside &= g == h || (g != g && h != h);
                    continue;
                }
                const double e = g != g ? INFINITY : fabs(g - h) / (fabs(alpha) * mag[at] + fabs(h) + 1e-30);
                w = e > w ? e : w;
            }
        CHECK_MSG(w < 1e-5 && same_outside, "%s %dx%dx%d pass %d: error %.3g%s", name, M, N, K, pass, w,
                  same_outside ? "" : ", wrote outside its tile");
        free(want), free(got);
    }
}

/* The AMX kernel's passes over a K block (gemm_amx.c: PASS_STEPS steps at a
 * time, the sums sent to C and loaded back between passes) against one
 * pass per K block (the order before passes) and passes of 3 steps: the
 * same bits, since an fp32 store and load give back the same values, for
 * the three alpha / beta cases of check_tiles_kernel. */
static void check_tiles_passes(tiles_kernel kernel, void (*set_pass_steps)(int), const char *name, const uint16_t *Ap,
                               const uint16_t *Bp, int ks, int M, int N, int K, int r0, int r1, int c0, int c1,
                               const float *C0, int ldc) {
    static const int splits[] = {AL_TILES_KBLOCK, 3};
    for (int pass = 0; pass < 3; pass++) {
        const float alpha = pass == 0 ? 1.5f : 1.0f, beta = pass == 0 ? 0.5f : pass == 1 ? 1.0f : 0.0f;
        float *want = malloc(sizeof(float) * M * ldc), *got = malloc(sizeof(float) * M * ldc);
        memcpy(want, C0, sizeof(float) * M * ldc);
        set_pass_steps(0);
        kernel(Ap, Bp, ks, r0, r1, c0, c1, alpha, beta, want, (size_t)ldc);
        for (size_t si = 0; si < sizeof splits / sizeof splits[0]; si++) {
            memcpy(got, C0, sizeof(float) * M * ldc);
            set_pass_steps(splits[si]);
            kernel(Ap, Bp, ks, r0, r1, c0, c1, alpha, beta, got, (size_t)ldc);
            CHECK_MSG(memcmp(got, want, sizeof(float) * M * ldc) == 0,
                      "%s %dx%dx%d pass %d: passes of %d steps change the bits", name, M, N, K, pass, splits[si]);
        }
        set_pass_steps(0);
        free(want), free(got);
    }
}

/* The amx engine's tiles (bf16_tiles.c): the packer on odd shapes from
 * every orientation of the source (line runs contiguous or the lines'
 * values contiguous; fp32 or BF16), the plain kernel over the packed tiles
 * against float64 for a tile of C away from its corner (K past one K
 * block: the blocks' sums added into C), and the AMX kernel against the
 * plain one where it runs and on emulated tiles; beta 0 never reads C. */
static void check_tiles(al_rng *r) {
    static const int shapes[][7] = {/* M, N, K, r0, r1, c0, c1 */
                                    {1, 1, 1, 0, 1, 0, 1},           {37, 45, 61, 16, 37, 0, 45},
                                    {64, 96, 64, 0, 64, 32, 96},     {70, 33, 1100, 48, 70, 16, 33},
                                    {100, 300, 2100, 0, 100, 0, 300}, {33, 290, 40, 32, 33, 256, 290},
                                    {96, 160, 700, 32, 96, 64, 160}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int M = shapes[si][0], N = shapes[si][1], K = shapes[si][2], r0 = shapes[si][3], r1 = shapes[si][4],
                  c0 = shapes[si][5], c1 = shapes[si][6];
        const int ta = si % 2, tb = (si / 2) % 2, bf_src = si % 3 == 0; /* orientations and sources vary by shape */
        const int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5, ldc = N + 2;
        const size_t a_n = (size_t)(ta ? K : M) * lda, b_n = (size_t)(tb ? N : K) * ldb;
        float *A = malloc(sizeof(float) * a_n), *B = malloc(sizeof(float) * b_n);
        uint16_t *Bb = malloc(sizeof(uint16_t) * b_n);
        for (size_t i = 0; i < a_n; i++) A[i] = rnd(r);
        for (size_t i = 0; i < b_n; i++) B[i] = rnd(r), Bb[i] = al_f32_to_bf16(B[i]);
        /* op(A)(i, k) at A[i ars + k acs]; op(B)(k, j) at B[j brs + k bcs] */
        const size_t ars = ta ? 1 : (size_t)lda, acs = ta ? (size_t)lda : 1, brs = tb ? (size_t)ldb : 1,
                     bcs = tb ? 1 : (size_t)ldb;
        const size_t a_el = al_bf16_tiles_elems(M, K), b_el = al_bf16_tiles_elems(N, K);
        uint16_t *Ap = malloc(sizeof(uint16_t) * a_el), *Bp = malloc(sizeof(uint16_t) * b_el);
        memset(Ap, 0xFF, sizeof(uint16_t) * a_el), memset(Bp, 0xFF, sizeof(uint16_t) * b_el); /* garbage */
        for (int part = 0; part < 3; part++) { /* in parts, as precision.c's plan packs */
            al_bf16_tiles_pack(Ap, 0, A, NULL, ars, acs, M, K, part, 3);
            al_bf16_tiles_pack(Bp, 1, bf_src ? NULL : B, bf_src ? Bb : NULL, brs, bcs, N, K, part, 3);
        }
        /* the packed layout itself, element by element (zeros in all padding) */
        const int ks = al_bf16_tiles_ksteps(K);
        int layout_ok = 1;
        for (int g = 0; g < (int)al_bf16_tiles_groups(M) && layout_ok; g++)
            for (int k = 0; k < ks * AL_TILE_K; k++)
                for (int l = 0; l < 16; l++) {
                    const int i = g * 16 + l;
                    const uint16_t want = i < M && k < K ? al_f32_to_bf16(A[i * ars + k * acs]) : 0;
                    layout_ok &= Ap[((size_t)g * ks + k / 32) * AL_TILE_ELEMS + l * 32 + k % 32] == want;
                }
        for (int g = 0; g < (int)al_bf16_tiles_groups(N) && layout_ok; g++)
            for (int k = 0; k < ks * AL_TILE_K; k++)
                for (int l = 0; l < 16; l++) {
                    const int j = g * 16 + l;
                    const uint16_t want = j < N && k < K ? Bb[j * brs + k * bcs] : 0;
                    layout_ok &= Bp[((size_t)g * ks + k / 32) * AL_TILE_ELEMS + (k % 32 / 2) * 32 + 2 * l + k % 2] == want;
                }
        CHECK_MSG(layout_ok, "tiles %dx%dx%d (A%c B%c): packed layout wrong", M, N, K, ta ? 'T' : 'N', tb ? 'T' : 'N');
        float *C0 = malloc(sizeof(float) * M * ldc), *ref = malloc(sizeof(float) * M * ldc);
        for (int i = 0; i < M * ldc; i++) C0[i] = rnd(r);
        memcpy(ref, C0, sizeof(float) * M * ldc);
        al_bf16_tiles_kernel_ref(Ap, Bp, ks, r0, r1, c0, c1, 1.5f, 0.5f, ref, (size_t)ldc);
        double worst = 0, *mag = calloc((size_t)M * ldc, sizeof(double)); /* sum |a b| of each element */
        int outside_kept = 1;
        for (int i = 0; i < M; i++)
            for (int j = 0; j < ldc; j++) {
                const size_t at = (size_t)i * ldc + j;
                if (i < r0 || i >= r1 || j < c0 || j >= c1) {
                    outside_kept &= ref[at] == C0[at];
                    continue;
                }
                double s = 0;
                for (int k = 0; k < K; k++) {
                    const double p = bf(A[i * ars + k * acs]) * bf(B[j * brs + k * bcs]);
                    s += p, mag[at] += fabs(p);
                }
                const double e = fabs(ref[at] - (1.5 * s + 0.5 * C0[at])) / (1.5 * mag[at] + fabs(0.5 * C0[at]) + 1e-30);
                worst = e > worst || e != e ? e : worst;
            }
        CHECK_MSG(worst < 1e-5 && outside_kept, "tiles reference %dx%dx%d: error %.3g%s", M, N, K, worst,
                  outside_kept ? "" : ", wrote outside its tile");
        for (int emu = 0; emu < 2; emu++) /* the AMX kernel on tiles where the CPU has them, and emulated */
            if (emu ? al_cpu_detect() >= AL_CPU_AVX512 : al_cpu_level_now() >= AL_CPU_AMX) {
                const tiles_kernel kernel = emu ? al_bf16_tiles_kernel_amxemu : al_bf16_tiles_kernel_amx;
                const char *name = emu ? "amx tiles kernel (emulated tiles)" : "amx tiles kernel";
                check_tiles_kernel(kernel, name, Ap, Bp, ks, M, N, K, r0, r1, c0, c1, C0, ldc, mag);
                check_tiles_passes(kernel, emu ? al_bf16_tiles_set_pass_steps_emu : al_bf16_tiles_set_pass_steps, name,
                                   Ap, Bp, ks, M, N, K, r0, r1, c0, c1, C0, ldc);
            }
        free(A), free(B), free(Bb), free(Ap), free(Bp), free(C0), free(ref), free(mag);
    }
    if (al_cpu_level_now() < AL_CPU_AMX) fprintf(stderr, "skipped: amx tiles kernel (CPU set lacks amx)\n");
    if (al_cpu_detect() < AL_CPU_AVX512) fprintf(stderr, "skipped: amx tiles kernel on emulated tiles (no AVX-512)\n");
}

/* The packer of the set in use (named `set`) against the plain one: the
 * test of check_tiles_packers below */
static void check_tiles_packer(al_rng *r, const char *set) {
    static const int shapes[][2] = {{1, 1}, {17, 33}, {16, 64}, {45, 70}, {3, 300}};
    for (int denormals = 0; denormals < 2; denormals++) {
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
            for (int kind = 0; kind < 8; kind++) { /* pairs form, line runs (cs 1), BF16 source */
                const int n = shapes[si][0], K = shapes[si][1];
                const int pairs = kind & 1, line_runs = kind & 2, bf_src = kind & 4;
                const size_t n_special = denormals ? TU_BF16_SPECIALS : TU_BF16_SPECIAL_NORMAL;
                const int ld = (line_runs ? K : n) + 3;
                const size_t total = (size_t)(line_runs ? n : K) * ld;
                float *X = malloc(sizeof(float) * total);
                uint16_t *Xb = malloc(sizeof(uint16_t) * total);
                for (size_t i = 0; i < total; i++) {
                    const uint32_t bits = tu_bf16_special[al_rng_u64(r) % n_special];
                    float v;
                    memcpy(&v, &bits, sizeof v);
                    X[i] = i % 3 ? rnd(r) : v;
                    Xb[i] = (uint16_t)(al_rng_u64(r) & 0xFFFF);
                }
                const size_t el = al_bf16_tiles_elems(n, K);
                uint16_t *fast = malloc(sizeof(uint16_t) * el), *plain = malloc(sizeof(uint16_t) * el);
                memset(fast, 0xAB, sizeof(uint16_t) * el), memset(plain, 0xCD, sizeof(uint16_t) * el);
                const size_t rs = line_runs ? (size_t)ld : 1, cs = line_runs ? 1 : (size_t)ld;
                al_bf16_tiles_pack(fast, pairs, bf_src ? NULL : X, bf_src ? Xb : NULL, rs, cs, n, K, 0, 1);
                for (int part = 0; part < 5; part++) /* more parts than some shapes' steps or groups */
                    al_bf16_tiles_pack_ref(plain, pairs, bf_src ? NULL : X, bf_src ? Xb : NULL, rs, cs, n, K, part, 5);
                CHECK_MSG(!memcmp(fast, plain, sizeof(uint16_t) * el),
                          "tiles packers differ, set %s: %d lines x %d (%s form, %s, %s%s)", set, n, K,
                          pairs ? "pairs" : "rows", line_runs ? "line runs" : "runs of lines", bf_src ? "bf16" : "fp32",
                          denormals ? ", with denormals" : "");
                free(X), free(Xb), free(fast), free(plain);
            }
    }
}

/* Each AVX-512 packer the CPU has (AVX-512's integer rounding, AVX512-BF16's
 * conversion: the set forced in turn, since al_bf16_tiles_pack picks by the
 * set in use and a machine with AVX512-BF16 would otherwise never run the
 * first) against the plain one, bit for bit, on odd shapes in both forms
 * from both kinds of views and sources, over values that test the
 * rounding: ties, infinities, signalling and quiet NaNs, and in a second
 * round denormals too (the conversion reads them as zero, so a vector
 * holding one takes the integer rounding: the first round is the one that
 * tests the conversion). */
static void check_tiles_packers(al_rng *r) {
    static const al_cpu_level sets[] = {AL_CPU_AVX512, AL_CPU_AVX512_BF16};
    for (size_t li = 0; li < sizeof sets / sizeof sets[0]; li++) {
        if (al_cpu_detect() < sets[li]) {
            fprintf(stderr, "skipped: tiles packer, set %s (the CPU lacks it)\n", al_cpu_level_name(sets[li]));
            continue;
        }
        CHECK(al_cpu_force(sets[li]) == sets[li]);
        check_tiles_packer(r, al_cpu_level_name(sets[li]));
        fprintf(stderr, "ran: tiles packer, set %s\n", al_cpu_level_name(sets[li]));
    }
    al_cpu_force(-1);
}

/* al_bf16_round_run and al_bf16_round_stream (whole 64-byte lines of dst
 * streamed) in every set with a loop of its own that the CPU has (forced
 * down in turn; below AVX-512 both are the plain loop) against the plain
 * loop, bit for bit: lengths 0-70 (the vector loops' whole steps, 16 and
 * 32, and every tail), dst starting at each bf16 of a 64-byte line and
 * past it (the streamed lines' head, body and tail), ties, infinities, NaNs,
 * and in a second round denormals (vcvtne2ps2bf16 reads them as zero: a
 * step holding one takes the integer rounding). */
static void check_round_runs(al_rng *r) {
    static const al_cpu_level sets[] = {AL_CPU_AVX512, AL_CPU_AVX512_BF16};
    typedef void (*round_fn)(uint16_t *restrict, const float *restrict, size_t);
    static const round_fn fns[] = {al_bf16_round_run, al_bf16_round_stream};
    static const char *fn_names[] = {"run", "stream"};
    enum { MAX_N = 70, SHIFT = 34 };
    float src[MAX_N + SHIFT];
    uint16_t want[MAX_N + SHIFT];
    _Alignas(64) uint16_t got[MAX_N + SHIFT + 1];
    for (size_t si = 0; si < sizeof sets / sizeof sets[0]; si++) {
        if (al_cpu_detect() < sets[si]) {
            fprintf(stderr, "skipped: bf16 round run and stream, set %s (the CPU lacks it)\n",
                    al_cpu_level_name(sets[si]));
            continue;
        }
        CHECK(al_cpu_force(sets[si]) == sets[si]);
        for (size_t fi = 0; fi < sizeof fns / sizeof fns[0]; fi++) {
            int bad = 0;
            for (int denormals = 0; denormals < 2; denormals++)
                for (int n = 0; n <= MAX_N; n++)
                    for (int shift = 0; shift < SHIFT; shift++) {
                        const size_t n_special = denormals ? TU_BF16_SPECIALS : TU_BF16_SPECIAL_NORMAL;
                        for (int i = 0; i < n; i++) {
                            const uint32_t bits = tu_bf16_special[al_rng_u64(r) % n_special];
                            memcpy(&src[shift + i], &bits, sizeof bits);
                            if (al_rng_u64(r) % 4) src[shift + i] = rnd(r) * 1e3f;
                        }
                        al_bf16_round_run_ref(want, src + shift, (size_t)n);
                        memset(got, 0xA5, sizeof got);
                        fns[fi](got + shift, src + shift, (size_t)n);
                        bad += memcmp(got + shift, want, sizeof(uint16_t) * (size_t)n) != 0;
                        for (int i = 0; i < shift; i++) bad += got[i] != 0xA5A5; /* nothing before dst */
                        bad += got[shift + n] != 0xA5A5;                          /* nor past n */
                    }
            CHECK_MSG(!bad, "bf16 round %s, set %s: %d wrong runs or stores outside them in %d runs", fn_names[fi],
                      al_cpu_level_name(sets[si]), bad, 2 * (MAX_N + 1) * SHIFT);
        }
        fprintf(stderr, "ran: bf16 round run and stream, set %s\n", al_cpu_level_name(sets[si]));
    }
    al_cpu_force(-1);
}

/* Whole models (GQA, MLA, LRKV), forward and backward in BF16 on the
 * emulated engine: the same bits at 1 and 2 threads and with or without the
 * weights' BF16 copy, close to fp32 (loss 1e-2, gradients 3e-2) yet not
 * equal to it. */
static void check_models(void) {
    al_config cfgs[3] = {tu_config(48, 80, 2, 4, 2, 12, 64), tu_mla_config(16, 0), tu_config(48, 80, 2, 4, 4, 12, 64)};
    cfgs[1].max_position = 64;
    cfgs[2].attention = AL_ATTN_LRKV;
    cfgs[2].lrkv_rank = 4;
    const char *names[3] = {"gqa", "mla", "lrkv"};
    enum { B = 4, T = 64 };
    for (int ci = 0; ci < 3; ci++) {
        al_model m;
        al_acts a;
        al_err err;
        if (tu_make_model(&m, &cfgs[ci], 21 + ci, TU_GAINS_ONE) || al_model_alloc_grads(&m, &err) ||
            al_acts_create(&a, &m, B, T, &err)) {
            CHECK_MSG(0, "%s: model", names[ci]);
            continue;
        }
        int in[B * T], tg[B * T];
        al_rng r;
        al_rng_seed(&r, 7 + ci);
        tu_random_tokens(in, B * T, &r);
        tu_random_tokens(tg, B * T, &r);
        al_precision_set(AL_PREC_F32);
        const double loss_f = tu_loss_and_grads(&m, &a, in, tg);
        float *g_f = malloc(sizeof(float) * m.n_floats), *g_b = malloc(sizeof(float) * m.n_floats);
        memcpy(g_f, m.g, sizeof(float) * m.n_floats);
        al_precision_set(AL_PREC_BF16);
        al_bf16_engine_force(AL_BF16_EMULATED);
        const size_t split_before = al_bf16_split_products();
        const double loss_b = tu_loss_and_grads(&m, &a, in, tg);
        /* MLA's up-projections out of its normalised latents run compensated
         * (attn/mla.c): per layer kv and q forward, each one's two backward
         * products; no other design's */
        const size_t split_made = al_bf16_split_products() - split_before;
        const size_t split_want = cfgs[ci].attention == AL_ATTN_MLA ? (size_t)6 * cfgs[ci].num_layers : 0;
        CHECK_MSG(split_made == split_want, "%s: %zu compensated products, want %zu", names[ci], split_made,
                  split_want);
        memcpy(g_b, m.g, sizeof(float) * m.n_floats);
        CHECK(al_bf16_shadow_attach(m.w, m.n_floats, &err) == 0);
        CHECK_MSG(tu_same_bits_1_2_threads(&m, &a, in, tg), "%s: bf16 gradients differ between 1 and 2 threads",
                  names[ci]);
        CHECK_MSG(!memcmp(g_b, m.g, sizeof(float) * m.n_floats), "%s: the BF16 copy changes the gradients", names[ci]);
        al_bf16_shadow_detach(m.w);
        al_bf16_engine_force(-1);
        al_precision_set(AL_PREC_F32);
        const double ge = test_rel_err(g_b, g_f, m.n_floats);
        CHECK_MSG(fabs(loss_b - loss_f) <= 1e-2 * fabs(loss_f) && loss_b != loss_f, "%s: loss bf16 %.6f f32 %.6f",
                  names[ci], loss_b, loss_f);
        CHECK_MSG(ge <= 3e-2 && ge > 1e-5, "%s: gradients bf16 vs f32: %.3g", names[ci], ge);
        fprintf(stderr, "%s: loss bf16 %.6f f32 %.6f, gradients %.2g apart\n", names[ci], loss_b, loss_f, ge);
        free(g_f), free(g_b);
        al_acts_free(&a);
        al_model_free(&m);
    }
}

static void check_names(void) {
    al_precision p;
    CHECK(al_precision_from_name("f32", &p) == 0 && p == AL_PREC_F32);
    CHECK(al_precision_from_name("BF16", &p) == 0 && p == AL_PREC_BF16);
    CHECK(al_precision_from_name("auto", &p) == 0 && p == al_precision_auto());
    CHECK(al_precision_from_name("fp16", &p) == -1 && al_precision_from_name("", &p) == -1);
    CHECK(!strcmp(al_precision_name(AL_PREC_BF16), "BF16") && !strcmp(al_precision_name(AL_PREC_F32), "F32"));
    /* auto: bf16 on amx; on avx512-bf16 only where vdpbf16ps is fast (AMD) */
    CHECK(al_precision_auto() == al_precision_auto_for(al_cpu_level_now(), al_cpu_bf16_dot_fast()));
    for (int l = 0; l < AL_CPU_COUNT; l++)
        for (int fast = 0; fast < 2; fast++)
            CHECK_MSG(al_precision_auto_for(l, fast) ==
                          (l == AL_CPU_AMX || (l == AL_CPU_AVX512_BF16 && fast) ? AL_PREC_BF16 : AL_PREC_F32),
                      "auto on %s, fast dot %d", al_cpu_level_name((al_cpu_level)l), fast);
    {
        FILE *f = fopen("/proc/cpuinfo", "r");
        char line[256];
        int amd = -1;
        while (f && amd < 0 && fgets(line, sizeof line, f))
            if (!strncmp(line, "vendor_id", 9)) amd = strstr(line, "AuthenticAMD") != NULL;
        if (f) fclose(f);
        if (amd >= 0) CHECK_MSG(al_cpu_bf16_dot_fast() == amd, "cpuid vendor disagrees with /proc/cpuinfo");
    }
    for (int e = 0; e < AL_BF16_ENGINE_COUNT; e++) {
        al_bf16_engine back;
        CHECK(al_bf16_engine_of_name(al_bf16_engine_name((al_bf16_engine)e), &back) == 0 && (int)back == e);
    }
    al_bf16_engine own;
    CHECK(al_bf16_engine_of_name("own", &own) == 0 && (own == AL_BF16_AMX || own == AL_BF16_AVX512BF16));
    CHECK(al_bf16_engine_of_name("tpu", &own) == -1);
    CHECK(!strcmp(al_bf16_engine_name(AL_BF16_ONEDNN), "onednn") && !strcmp(al_bf16_engine_name(AL_BF16_EMULATED), "emulated"));
    CHECK(al_bf16_engine_runs(AL_BF16_EMULATED));
    CHECK(al_bf16_engine_force(AL_BF16_EMULATED) == AL_BF16_EMULATED && !strcmp(al_precision_engine(), "emulated"));
    /* a forced engine that cannot run falls to one that can */
    for (int e = 0; e < AL_BF16_ENGINE_COUNT; e++) {
        const al_bf16_engine now = al_bf16_engine_force(e);
        CHECK(al_bf16_engine_runs(now) && (now == (al_bf16_engine)e || !al_bf16_engine_runs((al_bf16_engine)e)));
        CHECK(!strcmp(al_precision_engine(), al_bf16_engine_name(now)));
    }
    al_bf16_engine_force(-1);
    /* the environment's choice, lowered like a forced one; unknown: default */
    const char *names[] = {"emulated", "onednn", "own", "amx", "avx512-bf16", "bogus"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        setenv("ATTNLAB_BF16_ENGINE", names[i], 1);
        al_bf16_engine want = AL_BF16_DEFAULT;
        al_bf16_engine_of_name(names[i], &want);
        const al_bf16_engine now = al_bf16_engine_now();
        CHECK_MSG(al_bf16_engine_runs(now) && (now == want || !al_bf16_engine_runs(want)),
                  "ATTNLAB_BF16_ENGINE=%s gave %s", names[i], al_bf16_engine_name(now));
        if (!strcmp(names[i], "emulated")) CHECK(now == AL_BF16_EMULATED);
    }
    unsetenv("ATTNLAB_BF16_ENGINE");
    /* without bf16 products oneDNN is never the automatic engine */
    if (al_cpu_level_now() < AL_CPU_AVX512_BF16) CHECK(al_bf16_engine_now() == AL_BF16_EMULATED);
}

int main(void) {
    al_rng r;
    al_rng_seed(&r, 14);
    char cpu[160];
    al_cpu_describe(cpu, sizeof cpu);
    fprintf(stderr, "cpu: %s%s\n", cpu, al_cpu_amx_refused() ? " (amx: tile state refused by the OS)" : "");
    check_names();

    al_precision_set(AL_PREC_BF16);
    al_err err = {0};
    CHECK(al_precision_reserve(&err) == 0);
    for (int e = 0; e < AL_BF16_ENGINE_COUNT; e++) {
        if (!al_bf16_engine_runs((al_bf16_engine)e)) {
            fprintf(stderr, "skipped: engine %s (does not run here)\n", al_bf16_engine_name((al_bf16_engine)e));
            continue;
        }
        CHECK(al_bf16_engine_force(e) == (al_bf16_engine)e);
        check_engine(al_bf16_engine_name((al_bf16_engine)e), &r);
        check_shadow_and_threads(al_bf16_engine_name((al_bf16_engine)e), &r);
        check_linear_bwd_shared(al_bf16_engine_name((al_bf16_engine)e), e == AL_BF16_ONEDNN, &r);
        if (e == AL_BF16_ONEDNN) check_onednn_merge(&r);
        check_bf16_weights(al_bf16_engine_name((al_bf16_engine)e), &r);
        check_split(al_bf16_engine_name((al_bf16_engine)e), &r);
        if (e == AL_BF16_AMX) check_packed_cache("amx", &r);
        fprintf(stderr, "ran: engine %s\n", al_bf16_engine_name((al_bf16_engine)e));
    }
    /* oneDNN's plumbing with fp32 primitives over rounded operands */
    al_bf16_onednn_test_f32(1);
    if (al_bf16_engine_runs(AL_BF16_ONEDNN)) {
        CHECK(al_bf16_engine_force(AL_BF16_ONEDNN) == AL_BF16_ONEDNN);
        check_engine("onednn (fp32 test mode)", &r);
        check_shadow_and_threads("onednn (fp32 test mode)", &r);
        check_linear_bwd_shared("onednn (fp32 test mode)", 0, &r);
        check_split("onednn (fp32 test mode)", &r);
        fprintf(stderr, "ran: engine onednn in its fp32 test mode\n");
    } else {
        fprintf(stderr, "skipped: onednn fp32 test mode (built without oneDNN)\n");
    }
    al_bf16_onednn_test_f32(0);
    /* the own engines' packing and blocking, with the plain kernel */
    al_bf16_own_test_ref(1);
    CHECK(al_bf16_engine_force(AL_BF16_AVX512BF16) == AL_BF16_AVX512BF16);
    check_engine("own engine (reference kernel)", &r);
    check_shadow_and_threads("own engine (reference kernel)", &r);
    CHECK(al_bf16_engine_force(AL_BF16_AMX) == AL_BF16_AMX);
    check_engine("amx engine (reference kernel)", &r);
    check_shadow_and_threads("amx engine (reference kernel)", &r);
    check_packed_cache("amx engine (reference kernel)", &r);
    al_bf16_own_test_ref(0);
    al_bf16_engine_force(-1);
    al_precision_release();
    /* no workspace: the emulated engine's stack blocks, same values */
    {
        gemm_data d;
        data_make(&d, cases[4], &r);
        al_bf16_engine_force(AL_BF16_EMULATED);
        float *C = run(&d);
        CHECK_MSG(worst_err(&d, C, 1) < 2e-5, "emulated after release: error %.3g", worst_err(&d, C, 1));
        free(C);
        data_free(&d);
        al_bf16_engine_force(-1);
    }
    al_precision_set(AL_PREC_F32);
    { /* fp32 products: nothing is rounded, shared or not */
        const float one[3] = {1.0f, 2.0f, 3.0f};
        CHECK(al_bf16_round_shared(one, 3) == NULL);
    }

    check_own_kernels(&r);
    check_tiles(&r);
    check_tiles_packers(&r);
    check_round_runs(&r);
    check_models();
    /* the two ceilings: a rate where the engine runs, else "unavailable" */
    const double dnn = al_measure_bf16_onednn_gflops(64, 1), amx = al_measure_amx_tile_gflops(1);
    fprintf(stderr, "ceilings: onednn bf16 matmul %g, amx tile peak %g (<= 0: unavailable)\n", dnn, amx);
    if (al_bf16_engine_runs(AL_BF16_ONEDNN)) CHECK(dnn > 0);
    else if (!al_onednn_available(0)) CHECK(dnn <= 0);
    CHECK(al_cpu_level_now() >= AL_CPU_AMX ? amx > 0 : amx == 0);
    /* the interleaved oneDNN probe: ready exactly where the ceiling is, no
     * rate before a timed run, its best kept over runs, freed twice safely */
    al_bf16_probe bp;
    const int bp_ready = !al_bf16_probe_init(&bp, 48);
    CHECK(bp_ready == (dnn > 0));
    CHECK(al_bf16_probe_gflops(&bp) == 0);
    if (bp_ready) {
        double best = 0;
        for (int i = 0; i < 3; i++) {
            const double g = al_bf16_probe_run(&bp);
            CHECK(g > 0);
            if (g > best) best = g;
        }
        CHECK(fabs(al_bf16_probe_gflops(&bp) - best) <= 1e-9 * best);
    } else CHECK(bp.impl == NULL && al_bf16_probe_run(&bp) == 0);
    al_bf16_probe_free(&bp);
    al_bf16_probe_free(&bp);
    CHECK(bp.impl == NULL);
    /* the interleaved sgemm probe: its best and its noise (mean time / best
     * time - 1) over the runs after the warm-up, from the runs' own rates */
    al_sgemm_probe sp;
    CHECK(al_sgemm_probe_init(&sp, 40) == 0);
    CHECK(al_sgemm_probe_gflops(&sp) == 0 && al_sgemm_probe_noise(&sp) == 0);
    double t_sum = 0, t_best = 1e30;
    for (int i = 0; i < 5; i++) {
        const double t = 2.0 * 40 * 40 * 40 / al_sgemm_probe_run(&sp) / 1e9;
        t_sum += t, t_best = t < t_best ? t : t_best;
    }
    CHECK(fabs(al_sgemm_probe_gflops(&sp) - 2.0 * 40 * 40 * 40 / t_best / 1e9) <= 1e-9 * al_sgemm_probe_gflops(&sp));
    CHECK(al_sgemm_probe_noise(&sp) >= 0 && fabs(al_sgemm_probe_noise(&sp) - (t_sum / 5 / t_best - 1)) <= 1e-9);
    al_sgemm_probe_free(&sp);
    for (int l = AL_CPU_AVX512_BF16; l <= AL_CPU_AMX; l++)
        if ((int)al_cpu_level_now() < l) fprintf(stderr, "skipped: %s kernel (CPU set lacks it)\n", al_cpu_level_name((al_cpu_level)l));
    al_precision_release();
    return TEST_EXIT();
}
