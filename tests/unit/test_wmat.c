/*
 * test_wmat.c: the products over weights in their checkpoint dtype
 * (src/nn/wmat.c) against the plain double-precision reference
 * al_matmul_ref, on random odd sizes, for F32, BF16 and F16 weights, through
 * the three implementations (AVX-512 when the CPU has it, AVX2 + F16C, and
 * the plain-C fallback: core/cpu.h's sets avx512, avx2 and generic, forced
 * with al_cpu_force) and both paths (direct kernel, panels):
 *   - al_matmul for N = 1..5, 7, 33 rows, row strides wider than the rows,
 *     overwrite and accumulate;
 *   - al_matvec and al_matvec_t; F32 al_matvec (attnlab's own kernel) also
 *     on parallel sizes, 1 vs 2 threads bit for bit, and against cblas_sgemv
 *     (ATTNLAB_MATVEC=blas);
 *   - the widening of every one of the 65536 BF16 and F16 bit patterns
 *     against the scalar conversions of core/dtype.h (exact);
 *   - the AVX-512, AVX2 and plain-C results agree within fp32 rounding, and a
 *     result does not depend on the number of threads (bit for bit).
 * Tolerance: |y - ref| <= 2e-6 * sum_i |W_ri x_ni| per element (fp32
 * accumulation of `in` products, with room for the grouping).
 */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cpu.h"
#include "nn/nn.h"
#include "test.h"

/* The kernel sets a check runs through: the one in use (the best this CPU
 * runs), plain C (generic) and AVX2 (core/cpu.h; lowered to what the CPU
 * has). */
enum { SET_BEST = -1 };
static const int SETS[] = {SET_BEST, AL_CPU_GENERIC, AL_CPU_AVX2};
enum { NSETS = sizeof SETS / sizeof SETS[0] };

/* Forces kernel set `set` and panels of `panel_rows` rows (0: automatic) for
 * the next products; returns whether they use AVX-512. */
static int use_set(int set, int panel_rows) {
    al_cpu_force(set);
    al_wmat_panel_rows(panel_rows);
    return !strcmp(al_wmat_kernel_name(), "avx512");
}

static uint64_t rng_state = 0x243f6a8885a308d3ull;
static double rnd(void) { /* [-1, 1) */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return 2.0 * (double)((rng_state * 2685821657736338717ull) >> 11) * (1.0 / 9007199254740992.0) - 1.0;
}

/* A random W[out, in] in dtype dt (data malloc'd; *f32 gets its exact fp32 values). */
static void *make_w(al_dtype dt, int out, int in, float **f32) {
    size_t n = (size_t)out * in;
    *f32 = malloc(sizeof(float) * (n ? n : 1));
    void *w = malloc(al_dtype_size(dt) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) {
        float v = (float)rnd();
        if (dt == AL_DT_F32) {
            ((float *)w)[i] = v;
        } else if (dt == AL_DT_BF16) {
            uint16_t b = al_f32_to_bf16(v);
            ((uint16_t *)w)[i] = b;
            v = al_bf16_to_f32(b);
        } else {
            uint16_t h = al_f32_to_f16(v * 0.01f); /* small values reach f16 subnormals too */
            ((uint16_t *)w)[i] = h;
            v = al_f16_to_f32(h);
        }
        (*f32)[i] = v;
    }
    return w;
}

/* Worst |y - ref| / (|y0| + sum |W x| + 1e-30) over the N x out block (y0:
 * what an accumulating product added to, NULL for none). */
static double worst_err(const float *y, const float *ref, int ldy, const float *Wf, const float *x, int ldx, int N,
                        int in, int out, const float *y0) {
    double worst = 0;
    for (int n = 0; n < N; n++)
        for (int r = 0; r < out; r++) {
            double mag = 1e-30 + (y0 ? fabs((double)y0[(size_t)n * ldy + r]) : 0.0);
            for (int i = 0; i < in; i++) mag += fabs((double)Wf[(size_t)r * in + i] * x[(size_t)n * ldx + i]);
            double e = fabs((double)y[(size_t)n * ldy + r] - ref[(size_t)n * ldy + r]) / mag;
            if (!(e <= worst)) worst = e; /* NaN counts as worst */
        }
    return worst;
}

static const char *dt_name(al_dtype dt) { return al_dtype_name(dt); }

/* al_matmul against the reference for one shape, in every mode. */
static void check_matmul(al_dtype dt, int N, int in, int out) {
    float *Wf;
    void *W = make_w(dt, out, in, &Wf);
    const int ldx = in + 3, ldy = out + 5;
    float *x = malloc(sizeof(float) * (size_t)N * ldx), *y0 = malloc(sizeof(float) * (size_t)N * ldy);
    float *ref = malloc(sizeof(float) * (size_t)N * ldy), *y = malloc(sizeof(float) * (size_t)N * ldy);
    float *ya = malloc(sizeof(float) * (size_t)N * ldy);
    for (size_t i = 0; i < (size_t)N * ldx; i++) x[i] = (float)rnd();
    for (size_t i = 0; i < (size_t)N * ldy; i++) y0[i] = (float)rnd();
    const al_wref w = {W, dt};
    /* modes: {kernel set (SETS), panel rows}; panel 0 = automatic (direct for N <= 4) */
    const int modes[][2] = {{SET_BEST, 0},       {AL_CPU_GENERIC, 0}, {AL_CPU_AVX2, 0}, {SET_BEST, 16},
                            {AL_CPU_GENERIC, 48}, {AL_CPU_AVX2, 16},   {SET_BEST, 1}};
    for (int acc = 0; acc <= 1; acc++) {
        memcpy(ref, y0, sizeof(float) * (size_t)N * ldy);
        al_matmul_ref(ref, ldy, x, ldx, w, N, in, out, acc);
        for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
            use_set(modes[m][0], modes[m][1]);
            memcpy(y, y0, sizeof(float) * (size_t)N * ldy);
            al_matmul(y, ldy, x, ldx, w, N, in, out, acc);
            double e = worst_err(y, ref, ldy, Wf, x, ldx, N, in, out, acc ? y0 : NULL);
            CHECK_MSG(e <= 2e-6, "matmul %s N=%d in=%d out=%d acc=%d set=%d panel=%d: err %.3g", dt_name(dt), N,
                      in, out, acc, modes[m][0], modes[m][1], e);
            /* the padding between rows of y is untouched */
            int pad_ok = 1;
            for (int n = 0; n < N; n++)
                for (int r = out; r < ldy; r++) pad_ok &= y[(size_t)n * ldy + r] == y0[(size_t)n * ldy + r];
            CHECK_MSG(pad_ok, "matmul %s N=%d in=%d out=%d wrote outside its columns", dt_name(dt), N, in, out);
            if (m == 0) memcpy(ya, y, sizeof(float) * (size_t)N * ldy);
        }
    }
    /* thread-count independence (bits) of the kernels' own paths: direct for
     * N <= 4, forced panels (single-threaded sgemm per panel) otherwise; the
     * whole-matrix path threads one sgemm and is as thread-stable as
     * OpenBLAS is for fp32 */
    use_set(SET_BEST, dt == AL_DT_F32 || N <= AL_WMAT_SMALL_N ? 0 : 16);
    memcpy(y, y0, sizeof(float) * (size_t)N * ldy);
    int th = omp_get_max_threads();
    omp_set_num_threads(1);
    al_matmul(y, ldy, x, ldx, w, N, in, out, 1);
    omp_set_num_threads(th > 1 ? th : 2);
    al_matmul(ya, ldy, x, ldx, w, N, in, out, 0); /* ya: overwrite form */
    memcpy(ref, y0, sizeof(float) * (size_t)N * ldy);
    al_matmul(ref, ldy, x, ldx, w, N, in, out, 1);
    omp_set_num_threads(th);
    use_set(SET_BEST, 0);
    CHECK_MSG(dt == AL_DT_F32 || memcmp(y, ref, sizeof(float) * (size_t)N * ldy) == 0,
              "matmul %s N=%d in=%d out=%d: 1 vs 2 threads differ", dt_name(dt), N, in, out);
    free(W);
    free(Wf);
    free(x);
    free(y0);
    free(ref);
    free(y);
    free(ya);
}

/* al_matvec and al_matvec_t against the reference (as N = 1 products). */
static void check_matvec(al_dtype dt, int in, int out) {
    float *Wf;
    void *W = make_w(dt, out, in, &Wf);
    const al_wref w = {W, dt};
    float *x = malloc(sizeof(float) * (size_t)in), *xt = malloc(sizeof(float) * (size_t)out);
    float *y = malloc(sizeof(float) * (size_t)out), *ref = malloc(sizeof(float) * (size_t)out);
    float *yt = malloc(sizeof(float) * (size_t)in), *reft = malloc(sizeof(float) * (size_t)in);
    float *WT = malloc(sizeof(float) * (size_t)in * out);
    for (int i = 0; i < in; i++) x[i] = (float)rnd();
    for (int i = 0; i < out; i++) xt[i] = (float)rnd();
    for (int r = 0; r < out; r++)
        for (int i = 0; i < in; i++) WT[(size_t)i * out + r] = Wf[(size_t)r * in + i];
    for (int si = 0; si < NSETS; si++) {
        const int set = SETS[si];
        use_set(set, 0);
        for (int acc = 0; acc <= 1; acc++) {
            for (int r = 0; r < out; r++) y[r] = ref[r] = 0.5f;
            al_matmul_ref(ref, out, x, in, w, 1, in, out, acc);
            al_matvec(y, x, w, out, in, acc);
            double e = worst_err(y, ref, out, Wf, x, in, 1, in, out, acc ? y : NULL);
            CHECK_MSG(e <= 2e-6, "matvec %s in=%d out=%d acc=%d set=%d: err %.3g", dt_name(dt), in, out, acc, set,
                      e);
            /* transposed: y[in] = W^T xt, the reference on W^T as fp32 */
            for (int i = 0; i < in; i++) yt[i] = reft[i] = -0.25f;
            al_matmul_ref(reft, in, xt, out, al_wref_f32(WT), 1, out, in, acc);
            al_matvec_t(yt, xt, w, out, in, acc);
            e = worst_err(yt, reft, in, WT, xt, out, 1, out, in, acc ? yt : NULL);
            CHECK_MSG(e <= 2e-6, "matvec_t %s in=%d out=%d acc=%d set=%d: err %.3g", dt_name(dt), in, out, acc, set,
                      e);
        }
    }
    use_set(SET_BEST, 0);
    free(W);
    free(Wf);
    free(x);
    free(xt);
    free(y);
    free(ref);
    free(yt);
    free(reft);
    free(WT);
}

/* Every 16-bit pattern widened by both implementations equals core/dtype.h's scalar
 * conversion (NaNs: still NaN), through al_wread at odd offsets and lengths. */
static void check_widening(void) {
    uint16_t *all = malloc(sizeof(uint16_t) * 65536);
    float *got = malloc(sizeof(float) * 65536);
    for (int i = 0; i < 65536; i++) all[i] = (uint16_t)i;
    for (int si = 0; si < NSETS; si++) {
        const int set = SETS[si];
        use_set(set, 0);
        for (int f16 = 0; f16 <= 1; f16++) {
            const al_wref w = {all, f16 ? AL_DT_F16 : AL_DT_BF16};
            size_t bad = 0;
            /* pieces of odd lengths so every tail length of the vector loop occurs */
            for (size_t off = 0, len = 1; off < 65536; off += len, len = len % 37 + 1) {
                size_t n = off + len <= 65536 ? len : 65536 - off;
                al_wread(got + off, w, off, n);
            }
            for (int i = 0; i < 65536; i++) {
                float want = f16 ? al_f16_to_f32((uint16_t)i) : al_bf16_to_f32((uint16_t)i);
                uint32_t a, b;
                memcpy(&a, &got[i], 4);
                memcpy(&b, &want, 4);
                if (isnan(want) ? !isnan(got[i]) : a != b) bad++;
            }
            CHECK_MSG(bad == 0, "%s widening (set=%d): %zu of 65536 patterns differ", f16 ? "F16" : "BF16", set,
                      bad);
        }
    }
    use_set(SET_BEST, 0);
    free(all);
    free(got);
}

/* The two implementations agree within rounding on a decode-sized product. */
static void check_paths_agree(void) {
    const int in = 1000, out = 77;
    for (int d = 0; d < 2; d++) {
        al_dtype dt = d ? AL_DT_F16 : AL_DT_BF16;
        float *Wf, *x = malloc(sizeof(float) * in), ya[77], yp[77];
        void *W = make_w(dt, out, in, &Wf);
        for (int i = 0; i < in; i++) x[i] = (float)rnd();
        int avx = use_set(SET_BEST, 0);
        al_matvec(ya, x, (al_wref){W, dt}, out, in, 0);
        use_set(AL_CPU_GENERIC, 0);
        al_matvec(yp, x, (al_wref){W, dt}, out, in, 0);
        double e = worst_err(ya, yp, out, Wf, x, in, 1, in, out, NULL);
        CHECK_MSG(e <= 2e-6, "%s: AVX-512 (%s) and plain C differ by %.3g", dt_name(dt), avx ? "used" : "absent", e);
        use_set(AL_CPU_AVX2, 0);
        al_matvec(ya, x, (al_wref){W, dt}, out, in, 0);
        use_set(SET_BEST, 0);
        e = worst_err(ya, yp, out, Wf, x, in, 1, in, out, NULL);
        CHECK_MSG(e <= 2e-6, "%s: AVX2 and plain C differ by %.3g", dt_name(dt), e);
        free(W);
        free(Wf);
        free(x);
    }
}

/* F32 al_matvec, attnlab's own kernel, on a product big enough to run in
 * parallel (rows not a multiple of the kernel's blocks, columns with a
 * partial tail): every kernel set against the reference, the same bits
 * with 1 and 2 threads, and within rounding of cblas_sgemv (the
 * ATTNLAB_MATVEC=blas path, also checked against the reference). */
static void check_matvec_f32_own(int in, int out) {
    float *Wf;
    float *W = make_w(AL_DT_F32, out, in, &Wf);
    const al_wref w = al_wref_f32(W);
    float *x = malloc(sizeof(float) * (size_t)in), *ref = malloc(sizeof(float) * (size_t)out);
    float *y1 = malloc(sizeof(float) * (size_t)out), *y2 = malloc(sizeof(float) * (size_t)out);
    float *yb = malloc(sizeof(float) * (size_t)out);
    for (int i = 0; i < in; i++) x[i] = (float)rnd();
    al_matmul_ref(ref, out, x, in, w, 1, in, out, 0);
    const int th = omp_get_max_threads();
    for (int si = 0; si < NSETS; si++) {
        use_set(SETS[si], 0);
        omp_set_num_threads(1);
        al_matvec(y1, x, w, out, in, 0);
        omp_set_num_threads(2);
        al_matvec(y2, x, w, out, in, 0);
        omp_set_num_threads(th);
        double e = worst_err(y2, ref, out, Wf, x, in, 1, in, out, NULL);
        CHECK_MSG(e <= 2e-6, "own F32 matvec in=%d out=%d set=%d (%s): err %.3g", in, out, SETS[si],
                  al_wmat_kernel_name(), e);
        CHECK_MSG(memcmp(y1, y2, sizeof(float) * (size_t)out) == 0,
                  "own F32 matvec in=%d out=%d set=%s: 1 vs 2 threads differ", in, out, al_wmat_kernel_name());
    }
    use_set(SET_BEST, 0);
    al_wmat_matvec_blas(1);
    CHECK(!strcmp(al_wmat_matvec_name(), "blas"));
    al_matvec(yb, x, w, out, in, 0);
    al_wmat_matvec_blas(0);
    CHECK(!strcmp(al_wmat_matvec_name(), "own"));
    double e = worst_err(yb, ref, out, Wf, x, in, 1, in, out, NULL);
    CHECK_MSG(e <= 2e-6, "blas F32 matvec in=%d out=%d: err %.3g", in, out, e);
    e = worst_err(yb, y2, out, Wf, x, in, 1, in, out, NULL);
    CHECK_MSG(e <= 4e-6, "own and blas F32 matvec in=%d out=%d differ by %.3g", in, out, e);
    free(W);
    free(Wf);
    free(x);
    free(ref);
    free(y1);
    free(y2);
    free(yb);
}

int main(void) {
    char sets[160];
    al_cpu_describe(sets, sizeof sets);
    printf("wmat kernels: %s available (kernel sets: this CPU %s)\n",
           use_set(SET_BEST, 0) ? "AVX-512" : "no AVX-512 (AVX2 twice)", sets);
    check_widening();
    const al_dtype dts[] = {AL_DT_F32, AL_DT_BF16, AL_DT_F16};
    const int Ns[] = {1, 2, 3, 4, 5, 7, 33};
    const int shapes[][2] = {{1, 1}, {7, 3}, {15, 17}, {16, 16}, {17, 33}, {33, 100}, {100, 5}, {257, 19}, {515, 70}};
    for (int d = 0; d < 3; d++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (size_t n = 0; n < sizeof Ns / sizeof Ns[0]; n++) check_matmul(dts[d], Ns[n], shapes[s][0], shapes[s][1]);
    for (int d = 0; d < 3; d++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) check_matvec(dts[d], shapes[s][0], shapes[s][1]);
    check_matvec(AL_DT_BF16, 4099, 300); /* several column blocks of the transposed kernel, parallel rows */
    check_matmul(AL_DT_BF16, 9, 1100, 700); /* whole-matrix widening with threads, and panels */
    check_paths_agree();
    check_matvec_f32_own(771, 301); /* 232k weights: parallel; 301 rows = 75 blocks of 4 + 1 */
    check_matvec_f32_own(3001, 37);
    return TEST_EXIT();
}
