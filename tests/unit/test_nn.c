/*
 * test_nn.c: unit tests of the building blocks in src/nn/ops.c (RMSNorm,
 * RoPE, SwiGLU, embedding, softmax cross-entropy): forward values against
 * plain double-precision references written here, every backward against
 * central finite differences of a scalar objective, the OpenMP paths against
 * the serial references, and thread-count independence of the reductions;
 * and al_sgemm (linear.c): values against a double reference, the same bits
 * at 1, 2 and 3 threads (with shapes whose blocks merge and shapes whose
 * blocks must not), and the rules that say which may (core/blas.c).
 */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/blas.h"
#include "nn/nn.h"
#include "test.h"

/* ---- small helpers ---- */

/* xorshift64* generator, private to the tests so they need nothing else */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static double rnd_u(void) { /* [0, 1) */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (double)((rng_state * 2685821657736338717ull) >> 11) * (1.0 / 9007199254740992.0);
}
/* fills a[n] uniformly in [lo, hi) */
static void fill(float *a, size_t n, double lo, double hi) {
    for (size_t i = 0; i < n; i++) a[i] = (float)(lo + (hi - lo) * rnd_u());
}
static float *falloc(size_t n) {
    float *p = calloc(n ? n : 1, sizeof(float));
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return p;
}
static float *fdup(const float *a, size_t n) {
    float *p = falloc(n);
    memcpy(p, a, n * sizeof(float));
    return p;
}
/* sum a[i] * b[i] in double */
static double ddot(const float *a, const float *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * (double)b[i];
    return s;
}
/* b - a for two float arrays, as float (the increment a backward added) */
static void fdiff(float *out, const float *after, const float *before, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = (float)((double)after[i] - (double)before[i]);
}

#define FD_TOL 5e-3 /* relative-to-max tolerance of a float finite difference */

/* ---------------------------------------------------------------- RMSNorm */

/* double reference: y, rstd, and (for dy) dx, dw (not accumulated) */
static void ref_rmsnorm(float *y, float *rstd, float *dx, float *dw, const float *dy,
                        const float *x, const float *w, int N, int d, float eps) {
    if (dw)
        for (int j = 0; j < d; j++) dw[j] = 0;
    double *dwd = calloc(d > 0 ? (size_t)d : 1, sizeof(double));
    for (int n = 0; n < N; n++) {
        const float *xr = x + (size_t)n * d;
        double ss = 0;
        for (int j = 0; j < d; j++) ss += (double)xr[j] * xr[j];
        double r = 1.0 / sqrt(ss / d + eps);
        if (rstd) rstd[n] = (float)r;
        if (y)
            for (int j = 0; j < d; j++) y[(size_t)n * d + j] = (float)(w[j] * xr[j] * r);
        if (dy) {
            const float *dyr = dy + (size_t)n * d;
            double dot = 0;
            for (int j = 0; j < d; j++) dot += (double)dyr[j] * w[j] * xr[j];
            for (int j = 0; j < d; j++) {
                if (dx)
                    dx[(size_t)n * d + j] =
                        (float)(r * dyr[j] * w[j] - r * r * r * xr[j] * dot / d);
                dwd[j] += (double)dyr[j] * xr[j] * r;
            }
        }
    }
    if (dw)
        for (int j = 0; j < d; j++) dw[j] = (float)dwd[j];
    free(dwd);
}

/* L = sum y * R for y = rmsnorm(x, w) */
static double rms_obj(const float *x, const float *w, const float *R, int N, int d, float eps) {
    float *y = falloc((size_t)N * d), *rs = falloc((size_t)N);
    al_rmsnorm_fwd(y, rs, x, w, N, d, eps);
    double L = ddot(y, R, (size_t)N * d);
    free(y);
    free(rs);
    return L;
}

/* forward against the reference, backward against finite differences;
 * the backward starts from random dx, dw to check it accumulates */
static void test_rmsnorm_fd(int N, int d) {
    const float eps = 1e-5f;
    size_t nd = (size_t)N * d;
    float *x = falloc(nd), *w = falloc((size_t)d), *R = falloc(nd);
    fill(x, nd, -2, 2);
    fill(w, (size_t)d, 0.5, 1.5);
    fill(R, nd, -1, 1);
    float *y = falloc(nd), *rs = falloc((size_t)N), *yr = falloc(nd), *rsr = falloc((size_t)N);
    al_rmsnorm_fwd(y, rs, x, w, N, d, eps);
    ref_rmsnorm(yr, rsr, NULL, NULL, NULL, x, w, N, d, eps);
    CHECK_MSG(test_rel_err(y, yr, nd) < 1e-6, "rmsnorm fwd N=%d d=%d err %g", N, d,
              test_rel_err(y, yr, nd));
    CHECK_MSG(test_rel_err(rs, rsr, (size_t)N) < 1e-6, "rmsnorm rstd N=%d d=%d", N, d);

    float *dx0 = falloc(nd), *dw0 = falloc((size_t)d);
    fill(dx0, nd, -1, 1);
    fill(dw0, (size_t)d, -1, 1);
    float *dx = fdup(dx0, nd), *dw = fdup(dw0, (size_t)d);
    al_rmsnorm_bwd(dx, dw, R, x, w, rs, N, d);
    float *gx = falloc(nd), *gw = falloc((size_t)d);
    fdiff(gx, dx, dx0, nd);
    fdiff(gw, dw, dw0, (size_t)d);

    float *nx = falloc(nd), *nw = falloc((size_t)d);
    const float h = 1e-3f;
    for (size_t i = 0; i < nd; i++) {
        float *xp = fdup(x, nd);
        xp[i] = x[i] + h;
        float a = xp[i];
        double Lp = rms_obj(xp, w, R, N, d, eps);
        xp[i] = x[i] - h;
        double Lm = rms_obj(xp, w, R, N, d, eps);
        nx[i] = (float)((Lp - Lm) / ((double)a - (double)xp[i]));
        free(xp);
    }
    for (int j = 0; j < d; j++) {
        float *wp = fdup(w, (size_t)d);
        wp[j] = w[j] + h;
        float a = wp[j];
        double Lp = rms_obj(x, wp, R, N, d, eps);
        wp[j] = w[j] - h;
        double Lm = rms_obj(x, wp, R, N, d, eps);
        nw[j] = (float)((Lp - Lm) / ((double)a - (double)wp[j]));
        free(wp);
    }
    CHECK_MSG(test_rel_err(gx, nx, nd) < FD_TOL, "rmsnorm dx fd N=%d d=%d err %g", N, d,
              test_rel_err(gx, nx, nd));
    CHECK_MSG(test_rel_err(gw, nw, (size_t)d) < FD_TOL, "rmsnorm dw fd N=%d d=%d err %g", N, d,
              test_rel_err(gw, nw, (size_t)d));

    /* NULL dx or dw: the other gradient unchanged */
    float *dx2 = falloc(nd), *dw2 = falloc((size_t)d);
    al_rmsnorm_bwd(NULL, dw2, R, x, w, rs, N, d);
    al_rmsnorm_bwd(dx2, NULL, R, x, w, rs, N, d);
    CHECK(test_rel_err(dx2, gx, nd) < 1e-5);
    CHECK(test_rel_err(dw2, gw, (size_t)d) < 1e-5);

    free(x), free(w), free(R), free(y), free(rs), free(yr), free(rsr), free(dx0), free(dw0);
    free(dx), free(dw), free(gx), free(gw), free(nx), free(nw), free(dx2), free(dw2);
}

/* al_add_rmsnorm_fwd = the add, then al_rmsnorm_fwd, bit for bit (sum,
 * norm and rstd), on 1 and 2 threads, also with the sum written over its
 * first input (the blocks' use) */
static void test_add_rmsnorm(int N, int d) {
    const float eps = 1e-6f;
    const size_t nd = (size_t)N * d;
    float *a = falloc(nd), *b = falloc(nd), *w = falloc((size_t)d);
    fill(a, nd, -3, 3);
    fill(b, nd, -2, 2);
    fill(w, (size_t)d, -1.5, 1.5);
    float *s0 = falloc(nd), *y0 = falloc(nd), *r0 = falloc((size_t)N);
    for (size_t i = 0; i < nd; i++) s0[i] = a[i] + b[i];
    al_rmsnorm_fwd(y0, r0, s0, w, N, d, eps);
    float *s = falloc(nd), *y = falloc(nd), *r = falloc((size_t)N), *a2 = falloc(nd);
    const int saved = omp_get_max_threads();
    for (int threads = 1; threads <= 2; threads++) {
        omp_set_num_threads(threads);
        al_add_rmsnorm_fwd(s, y, r, a, b, w, N, d, eps);
        CHECK_MSG(!memcmp(s, s0, nd * sizeof(float)) && !memcmp(y, y0, nd * sizeof(float)) &&
                      !memcmp(r, r0, (size_t)N * sizeof(float)),
                  "add+rmsnorm differs from add then rmsnorm (N=%d d=%d, %d threads)", N, d, threads);
        memcpy(a2, a, nd * sizeof(float));
        al_add_rmsnorm_fwd(a2, y, NULL, a2, b, w, N, d, eps);
        CHECK_MSG(!memcmp(a2, s0, nd * sizeof(float)) && !memcmp(y, y0, nd * sizeof(float)),
                  "add+rmsnorm in place differs (N=%d d=%d, %d threads)", N, d, threads);
    }
    omp_set_num_threads(saved);
    free(a), free(b), free(w), free(s0), free(y0), free(r0), free(s), free(y), free(r), free(a2);
}

/* sizes that take the OpenMP path, against the double reference, and the
 * thread-count independence of dw (and dx) bit for bit */
static void test_rmsnorm_large(int N, int d) {
    const float eps = 1e-6f;
    size_t nd = (size_t)N * d;
    float *x = falloc(nd), *w = falloc((size_t)d), *dy = falloc(nd);
    fill(x, nd, -3, 3);
    fill(w, (size_t)d, -1.5, 1.5);
    fill(dy, nd, -1, 1);
    float *y = falloc(nd), *rs = falloc((size_t)N), *yr = falloc(nd), *rsr = falloc((size_t)N);
    float *dxr = falloc(nd), *dwr = falloc((size_t)d);
    ref_rmsnorm(yr, rsr, dxr, dwr, dy, x, w, N, d, eps);

    const int saved = omp_get_max_threads();
    float *dx[2], *dw[2];
    for (int k = 0; k < 2; k++) {
        omp_set_num_threads(k + 1);
        al_rmsnorm_fwd(y, rs, x, w, N, d, eps);
        dx[k] = falloc(nd);
        dw[k] = falloc((size_t)d);
        al_rmsnorm_bwd(dx[k], dw[k], dy, x, w, rs, N, d);
    }
    omp_set_num_threads(saved);
    CHECK_MSG(test_rel_err(y, yr, nd) < 1e-6, "rmsnorm fwd large N=%d d=%d", N, d);
    CHECK_MSG(test_rel_err(rs, rsr, (size_t)N) < 1e-6, "rmsnorm rstd large");
    CHECK_MSG(test_rel_err(dx[1], dxr, nd) < 1e-5, "rmsnorm dx large N=%d d=%d err %g", N, d,
              test_rel_err(dx[1], dxr, nd));
    CHECK_MSG(test_rel_err(dw[1], dwr, (size_t)d) < 1e-5, "rmsnorm dw large N=%d d=%d err %g", N,
              d, test_rel_err(dw[1], dwr, (size_t)d));
    CHECK_MSG(memcmp(dw[0], dw[1], (size_t)d * sizeof(float)) == 0,
              "rmsnorm dw differs between 1 and 2 threads (N=%d d=%d)", N, d);
    CHECK_MSG(memcmp(dx[0], dx[1], nd * sizeof(float)) == 0,
              "rmsnorm dx differs between 1 and 2 threads (N=%d d=%d)", N, d);

    /* the no-scratch fallback gives the same bits (and still accumulates) */
    float *dxf = falloc(nd), *dwf = falloc((size_t)d);
    al_rmsnorm_test_no_scratch(1);
    al_rmsnorm_bwd(dxf, dwf, dy, x, w, rs, N, d);
    al_rmsnorm_test_no_scratch(0);
    CHECK_MSG(memcmp(dwf, dw[1], (size_t)d * sizeof(float)) == 0,
              "rmsnorm dw no-scratch path differs (N=%d d=%d)", N, d);
    CHECK(memcmp(dxf, dx[1], nd * sizeof(float)) == 0);
    al_rmsnorm_test_no_scratch(1);
    al_rmsnorm_bwd(dxf, dwf, dy, x, w, rs, N, d);
    al_rmsnorm_test_no_scratch(0);
    float *dw2 = fdup(dw[1], (size_t)d);
    al_rmsnorm_bwd(NULL, dw2, dy, x, w, rs, N, d);
    CHECK(memcmp(dwf, dw2, (size_t)d * sizeof(float)) == 0);
    free(dxf), free(dwf), free(dw2);

    /* in-place forward (y == x) equals out-of-place */
    float *xi = fdup(x, nd);
    al_rmsnorm_fwd(xi, NULL, xi, w, N, d, eps);
    CHECK(memcmp(xi, y, nd * sizeof(float)) == 0);
    /* dx aliasing dy equals dy + dx */
    float *dyi = fdup(dy, nd), *acc = fdup(dy, nd);
    float *dwa = falloc((size_t)d), *dwb = falloc((size_t)d);
    al_rmsnorm_bwd(acc, dwa, dy, x, w, rs, N, d);
    al_rmsnorm_bwd(dyi, dwb, dyi, x, w, rs, N, d);
    CHECK(memcmp(acc, dyi, nd * sizeof(float)) == 0);
    CHECK(memcmp(dwa, dwb, (size_t)d * sizeof(float)) == 0);

    free(x), free(w), free(dy), free(y), free(rs), free(yr), free(rsr), free(dxr), free(dwr);
    free(dx[0]), free(dx[1]), free(dw[0]), free(dw[1]), free(xi), free(dyi), free(acc), free(dwa),
        free(dwb);
}

/* ------------------------------------------------------------------- RoPE */

/* double reference rotation of one vector at position pos */
static void ref_rope_vec(float *out, const float *in, int dim, int pos, double theta, int half_pair,
                         int sign) {
    int half = dim / 2;
    for (int i = 0; i < half; i++) {
        double a = sign * (double)pos * pow(theta, -2.0 * i / dim);
        int i0 = half_pair ? i : 2 * i, i1 = half_pair ? i + half : 2 * i + 1;
        double x0 = in[i0], x1 = in[i1];
        out[i0] = (float)(x0 * cos(a) - x1 * sin(a));
        out[i1] = (float)(x1 * cos(a) + x0 * sin(a));
    }
}

typedef void (*rope_fn)(float *, int, int, int, int, int, const al_rope_table *, int);

static void test_rope_known(void) {
    al_rope_table t;
    CHECK(al_rope_table_init(&t, 16, 5, 10000.0) == -1); /* odd dim */
    CHECK(al_rope_table_init(&t, 0, 4, 10000.0) == -1);
    CHECK(al_rope_table_init(&t, 16, 4, 10000.0) == 0);
    CHECK(t.half == 2 && t.max_pos == 16);
    /* table: angle(p, i) = p * 10000^(-i/2) */
    for (int p = 0; p < 16; p++)
        for (int i = 0; i < 2; i++) {
            double a = p * pow(10000.0, -2.0 * i / 4);
            CHECK_CLOSE(t.cos[p * 2 + i], cos(a), 1e-7);
            CHECK_CLOSE(t.sin[p * 2 + i], sin(a), 1e-7);
        }

    /* position 0 is the identity (exactly) */
    const float x0[4] = {1.5f, -2.25f, 3.0f, -0.125f};
    float v[4];
    memcpy(v, x0, sizeof v);
    al_rope_half(v, 1, 1, 0, 1, 4, &t, 1);
    CHECK(memcmp(v, x0, sizeof v) == 0);
    al_rope_interleaved(v, 1, 1, 0, 1, 4, &t, 1);
    CHECK(memcmp(v, x0, sizeof v) == 0);

    /* hand-computed: x = (1,2,3,4), pos 1, angles 1 and 0.01 */
    const float x1[4] = {1, 2, 3, 4};
    const double want_half[4] = {-1.9841106485555495, 1.959900667496664, 2.4623779024123156,
                                 4.019799668334994};
    const double want_inter[4] = {-1.1426396637476532, 1.922075596544176, 2.9598506679133294,
                                  4.029799501669161};
    memcpy(v, x1, sizeof v);
    al_rope_half(v, 1, 1, 1, 1, 4, &t, 1);
    for (int i = 0; i < 4; i++) CHECK_CLOSE(v[i], want_half[i], 1e-6);
    al_rope_half(v, 1, 1, 1, 1, 4, &t, -1);
    for (int i = 0; i < 4; i++) CHECK_CLOSE(v[i], x1[i], 1e-6);
    memcpy(v, x1, sizeof v);
    al_rope_interleaved(v, 1, 1, 1, 1, 4, &t, 1);
    for (int i = 0; i < 4; i++) CHECK_CLOSE(v[i], want_inter[i], 1e-6);
    al_rope_interleaved(v, 1, 1, 1, 1, 4, &t, -1);
    for (int i = 0; i < 4; i++) CHECK_CLOSE(v[i], x1[i], 1e-6);
    al_rope_table_free(&t);
    CHECK(t.cos == NULL && t.sin == NULL);
    al_rope_table_free(&t); /* twice is harmless */
}

/* pos0, T, n_vec and a padded row stride against the double reference;
 * transpose and inverse properties of sign = -1 */
static void test_rope_general(rope_fn fn, int half_pair, int rows, int T, int pos0, int n_vec,
                              int dim, int pad) {
    const double theta = 500000.0;
    al_rope_table t;
    CHECK(al_rope_table_init(&t, pos0 + T, dim, theta) == 0);
    int stride = n_vec * dim + pad;
    size_t n = (size_t)rows * stride;
    float *x = falloc(n), *y = falloc(n), *want = falloc(n);
    fill(x, n, -2, 2);
    fill(y, n, -2, 2);
    memcpy(want, x, n * sizeof(float));
    for (int r = 0; r < rows; r++)
        for (int k = 0; k < n_vec; k++) {
            size_t off = (size_t)r * stride + (size_t)k * dim;
            ref_rope_vec(want + off, x + off, dim, pos0 + r % T, theta, half_pair, 1);
        }
    float *rx = fdup(x, n);
    fn(rx, rows, T, pos0, n_vec, stride, &t, 1);
    CHECK_MSG(test_rel_err(rx, want, n) < 2e-6, "rope fwd (%s) rows=%d dim=%d err %g",
              half_pair ? "half" : "inter", rows, dim, test_rel_err(rx, want, n));
    /* padding untouched */
    int pad_ok = 1;
    for (int r = 0; r < rows; r++)
        for (int j = n_vec * dim; j < stride; j++)
            pad_ok &= rx[(size_t)r * stride + j] == x[(size_t)r * stride + j];
    CHECK(pad_ok);
    /* <rope(x), y> == <x, rope^-1(y)> */
    float *ry = fdup(y, n);
    fn(ry, rows, T, pos0, n_vec, stride, &t, -1);
    double lhs = ddot(rx, y, n), rhs = ddot(x, ry, n);
    CHECK_MSG(fabs(lhs - rhs) <= 1e-5 * (fabs(lhs) + sqrt((double)n)), "rope transpose %g vs %g",
              lhs, rhs);
    /* rope^-1(rope(x)) == x */
    fn(rx, rows, T, pos0, n_vec, stride, &t, -1);
    CHECK_MSG(test_rel_err(rx, x, n) < 1e-6, "rope inverse err %g", test_rel_err(rx, x, n));
    al_rope_table_free(&t);
    free(x), free(y), free(want), free(rx), free(ry);
}

/* ----------------------------------------------------------------- SwiGLU */

static double ref_silu(double g) { return g / (1.0 + exp(-g)); }

/* L = sum h * R */
static double swiglu_obj(const float *g, const float *u, const float *R, size_t n) {
    float *h = falloc(n);
    al_swiglu_fwd(h, g, u, n);
    double L = ddot(h, R, n);
    free(h);
    return L;
}

static void test_swiglu_fd(size_t n) {
    float *g = falloc(n), *u = falloc(n), *R = falloc(n), *dg = falloc(n), *du = falloc(n);
    float *ng = falloc(n), *nu = falloc(n);
    fill(g, n, -6, 6);
    fill(u, n, -2, 2);
    fill(R, n, -1, 1);
    al_swiglu_bwd(dg, du, R, g, u, n);
    const float h = 1e-3f;
    for (size_t i = 0; i < n; i++) {
        float sv = g[i];
        g[i] = sv + h;
        float a = g[i];
        double Lp = swiglu_obj(g, u, R, n);
        g[i] = sv - h;
        double Lm = swiglu_obj(g, u, R, n);
        ng[i] = (float)((Lp - Lm) / ((double)a - (double)g[i]));
        g[i] = sv;
        sv = u[i];
        u[i] = sv + h;
        a = u[i];
        Lp = swiglu_obj(g, u, R, n);
        u[i] = sv - h;
        Lm = swiglu_obj(g, u, R, n);
        nu[i] = (float)((Lp - Lm) / ((double)a - (double)u[i]));
        u[i] = sv;
    }
    CHECK_MSG(test_rel_err(dg, ng, n) < FD_TOL, "swiglu dg fd n=%zu err %g", n,
              test_rel_err(dg, ng, n));
    CHECK_MSG(test_rel_err(du, nu, n) < FD_TOL, "swiglu du fd n=%zu err %g", n,
              test_rel_err(du, nu, n));
    free(g), free(u), free(R), free(dg), free(du), free(ng), free(nu);
}

/* element-wise accuracy (this also checks the vectorised exp) over a wide
 * range, the OpenMP path, extremes, and in-place use */
static void test_swiglu_values(size_t n) {
    float *g = falloc(n), *u = falloc(n), *dh = falloc(n), *h = falloc(n), *dg = falloc(n),
          *du = falloc(n);
    fill(g, n, -90, 90);
    for (size_t i = 0; i < n / 2; i++) g[i] *= 0.05f; /* half of them near 0 */
    fill(u, n, -2, 2);
    fill(dh, n, -1, 1);
    al_swiglu_fwd(h, g, u, n);
    al_swiglu_bwd(dg, du, dh, g, u, n);
    double eh = 0, eg = 0, eu = 0;
    for (size_t i = 0; i < n; i++) {
        double gd = g[i], s = 1.0 / (1.0 + exp(-gd));
        double wh = ref_silu(gd) * u[i], wu = dh[i] * ref_silu(gd);
        double wg = dh[i] * u[i] * s * (1.0 + gd * (1.0 - s));
        /* relative per element, absolute below 1e-30 (denormal range) */
        double e1 = fabs(h[i] - wh) / fmax(fabs(wh), 1e-30);
        double e2 = fabs(du[i] - wu) / fmax(fabs(wu), 1e-30);
        /* dg: relative to the size of its terms (it crosses 0 near g = -1.28) */
        double sc = fabs((double)dh[i] * u[i]) * (s + fabs(gd * s * (1.0 - s)));
        double e3 = fabs(dg[i] - wg) / fmax(sc, 1e-30);
        if (fabs(wh) > 1e-30 && e1 > eh) eh = e1;
        if (fabs(wu) > 1e-30 && e2 > eu) eu = e2;
        if (sc > 1e-30 && e3 > eg) eg = e3;
    }
    CHECK_MSG(eh < 2e-6, "swiglu h element rel err %g", eh);
    CHECK_MSG(eu < 2e-6, "swiglu du element rel err %g", eu);
    CHECK_MSG(eg < 2e-6, "swiglu dg element rel err %g", eg);

    /* in place: h over g; dg over g and du over u */
    float *g2 = fdup(g, n), *u2 = fdup(u, n);
    al_swiglu_fwd(g2, g2, u, n);
    CHECK(memcmp(g2, h, n * sizeof(float)) == 0);
    memcpy(g2, g, n * sizeof(float));
    al_swiglu_bwd(g2, u2, dh, g2, u2, n);
    CHECK(memcmp(g2, dg, n * sizeof(float)) == 0);
    CHECK(memcmp(u2, du, n * sizeof(float)) == 0);

    /* extremes stay finite and correct */
    const float ge[] = {0.0f, -0.0f, 30.0f, -30.0f, 100.0f, -100.0f, 1000.0f, -1000.0f, 1e30f,
                        -1e30f};
    const size_t ne = sizeof ge / sizeof ge[0];
    float ue[sizeof ge / sizeof ge[0]], he[sizeof ge / sizeof ge[0]], dge[sizeof ge / sizeof ge[0]],
        due[sizeof ge / sizeof ge[0]], dhe[sizeof ge / sizeof ge[0]];
    for (size_t i = 0; i < ne; i++) ue[i] = dhe[i] = 1.0f;
    al_swiglu_fwd(he, ge, ue, ne);
    al_swiglu_bwd(dge, due, dhe, ge, ue, ne);
    int fin = 1;
    for (size_t i = 0; i < ne; i++) fin &= isfinite(he[i]) && isfinite(dge[i]) && isfinite(due[i]);
    CHECK(fin);
    CHECK(he[0] == 0.0f && he[2] == 30.0f && he[4] == 100.0f && he[6] == 1000.0f);
    CHECK(fabsf(he[3]) < 1e-11f && fabsf(he[5]) < 1e-30f && he[7] == 0.0f && he[9] == 0.0f);
    CHECK_CLOSE(dge[0], 0.5, 1e-7);
    CHECK(dge[4] == 1.0f && dge[6] == 1.0f && dge[7] == 0.0f);
    free(g), free(u), free(dh), free(h), free(dg), free(du), free(g2), free(u2);
}

/* -------------------------------------------------------------- embedding */

static void test_embed(int N, int V, int d) {
    size_t nd = (size_t)N * d, vd = (size_t)V * d;
    float *E = falloc(vd), *x = falloc(nd), *dx = falloc(nd);
    int *tok = malloc((size_t)N * sizeof(int));
    fill(E, vd, -1, 1);
    fill(dx, nd, -1, 1);
    for (int n = 0; n < N; n++) tok[n] = (int)(rnd_u() * V);
    if (N > 2) tok[1] = tok[0]; /* a repeat for sure */

    al_embed_fwd(x, E, tok, N, d);
    int ok = 1;
    for (int n = 0; n < N; n++)
        ok &= memcmp(x + (size_t)n * d, E + (size_t)tok[n] * d, (size_t)d * sizeof(float)) == 0;
    CHECK_MSG(ok, "embed fwd N=%d d=%d", N, d);

    /* serial reference in row order: bitwise equal, also across threads */
    float *want = falloc(vd);
    fill(want, vd, -1, 1);
    float *dE0 = fdup(want, vd);
    for (int n = 0; n < N; n++)
        for (int j = 0; j < d; j++) want[(size_t)tok[n] * d + j] += dx[(size_t)n * d + j];
    const int saved = omp_get_max_threads();
    for (int k = 1; k <= 2; k++) {
        omp_set_num_threads(k);
        float *dE = fdup(dE0, vd);
        al_embed_bwd(dE, dx, tok, N, d);
        CHECK_MSG(memcmp(dE, want, vd * sizeof(float)) == 0, "embed bwd N=%d d=%d threads=%d", N,
                  d, k);
        free(dE);
    }
    omp_set_num_threads(saved);

    /* finite differences of L = sum x * R with respect to E (small sizes) */
    if (vd <= 4096) {
        float *R = dx, *dE = falloc(vd), *nE = falloc(vd);
        al_embed_bwd(dE, R, tok, N, d);
        const float h = 1e-3f;
        for (size_t i = 0; i < vd; i++) {
            float sv = E[i];
            E[i] = sv + h;
            float a = E[i];
            al_embed_fwd(x, E, tok, N, d);
            double Lp = ddot(x, R, nd);
            E[i] = sv - h;
            al_embed_fwd(x, E, tok, N, d);
            double Lm = ddot(x, R, nd);
            nE[i] = (float)((Lp - Lm) / ((double)a - (double)E[i]));
            E[i] = sv;
        }
        CHECK_MSG(test_rel_err(dE, nE, vd) < FD_TOL, "embed dE fd err %g",
                  test_rel_err(dE, nE, vd));
        free(dE), free(nE);
    }

    /* negative token: zero row forward, skipped backward */
    tok[0] = -1;
    al_embed_fwd(x, E, tok, N, d);
    int zero = 1;
    for (int j = 0; j < d; j++) zero &= x[j] == 0.0f;
    CHECK(zero);
    float *dE = falloc(vd);
    al_embed_bwd(dE, dx, tok, 1, d);
    int untouched = 1;
    for (size_t i = 0; i < vd; i++) untouched &= dE[i] == 0.0f;
    CHECK(untouched);
    free(dE);
    free(E), free(x), free(dx), free(tok), free(want), free(dE0);
}

/* ------------------------------------------------------------------ xent */

/* double reference: loss and dlogits = (softmax - onehot) * scale */
static double ref_xent(float *dl, const float *lg, const int *tg, int N, int V, double scale) {
    double total = 0;
    for (int n = 0; n < N; n++) {
        const float *r = lg + (size_t)n * V;
        if (tg[n] < 0) {
            if (dl)
                for (int j = 0; j < V; j++) dl[(size_t)n * V + j] = 0;
            continue;
        }
        double m = -INFINITY, s = 0;
        for (int j = 0; j < V; j++) m = fmax(m, r[j]);
        for (int j = 0; j < V; j++) s += exp(r[j] - m);
        total += m + log(s) - r[tg[n]];
        if (dl)
            for (int j = 0; j < V; j++)
                dl[(size_t)n * V + j] = (float)((exp(r[j] - m) / s - (j == tg[n])) * scale);
    }
    return total;
}

static void test_xent_fd(int N, int V) {
    size_t nv = (size_t)N * V;
    float *lg = falloc(nv), *dl = falloc(nv), *nl = falloc(nv), *want = falloc(nv);
    int *tg = malloc((size_t)N * sizeof(int));
    fill(lg, nv, -3, 3);
    for (int n = 0; n < N; n++) tg[n] = (int)(rnd_u() * V);
    tg[N / 2] = -1; /* an ignored row */
    const float scale = 0.5f;
    double loss = al_xent_fwd_bwd(dl, lg, tg, N, V, scale);
    double wl = ref_xent(want, lg, tg, N, V, scale);
    CHECK_CLOSE(loss, wl, 1e-6);
    CHECK_MSG(test_rel_err(dl, want, nv) < 1e-5, "xent dlogits vs ref err %g",
              test_rel_err(dl, want, nv));
    /* dlogits = scale * d(loss)/d(logits) */
    const float h = 3e-3f;
    for (size_t i = 0; i < nv; i++) {
        float sv = lg[i];
        lg[i] = sv + h;
        float a = lg[i];
        double Lp = al_xent_fwd_bwd(NULL, lg, tg, N, V, 1.0f);
        lg[i] = sv - h;
        double Lm = al_xent_fwd_bwd(NULL, lg, tg, N, V, 1.0f);
        nl[i] = (float)(scale * (Lp - Lm) / ((double)a - (double)lg[i]));
        lg[i] = sv;
    }
    CHECK_MSG(test_rel_err(dl, nl, nv) < FD_TOL, "xent fd N=%d V=%d err %g", N, V,
              test_rel_err(dl, nl, nv));
    int zero = 1;
    for (int j = 0; j < V; j++) zero &= dl[(size_t)(N / 2) * V + j] == 0.0f;
    CHECK_MSG(zero, "ignored row has a gradient");
    /* the ignored row contributes no loss: same as dropping it */
    double without = 0;
    for (int n = 0; n < N; n++)
        if (n != N / 2) without += al_xent_fwd_bwd(NULL, lg + (size_t)n * V, tg + n, 1, V, 1.0f);
    CHECK_CLOSE(loss, without, 1e-12);
    free(lg), free(dl), free(nl), free(want), free(tg);
}

static void test_xent_values(void) {
    /* uniform logits: each row's loss is log V, gradient (1/V - onehot) */
    const int N = 5, V = 37;
    float *lg = falloc((size_t)N * V), *dl = falloc((size_t)N * V);
    for (int i = 0; i < N * V; i++) lg[i] = 0.25f;
    int tg[5] = {0, 36, 5, 5, 17};
    double loss = al_xent_fwd_bwd(dl, lg, tg, N, V, 1.0f);
    CHECK_CLOSE(loss, N * log((double)V), 1e-6);
    CHECK_CLOSE(dl[0], 1.0 / V - 1.0, 1e-6);
    CHECK_CLOSE(dl[1], 1.0 / V, 1e-6);
    CHECK_CLOSE(dl[V + 36], 1.0 / V - 1.0, 1e-6);
    /* no dlogits: same loss */
    CHECK(al_xent_fwd_bwd(NULL, lg, tg, N, V, 1.0f) == loss);
    free(lg), free(dl);

    /* extreme logits: max-subtraction keeps things finite */
    float ex[6] = {1e4f, -1e4f, 0.0f, 80.0f, 80.0f, -1e30f};
    float dex[6];
    int te[2] = {1, 2};
    double le = al_xent_fwd_bwd(dex, ex, te, 2, 3, 1.0f);
    /* row 0: 2e4; row 1: (80 + log 2) - (-1e30) */
    CHECK_CLOSE(al_xent_fwd_bwd(NULL, ex, te, 1, 3, 1.0f), 2e4, 1e-9);
    CHECK(isfinite(le));
    CHECK_CLOSE(dex[0], 1.0, 1e-7);
    CHECK_CLOSE(dex[1], -1.0, 1e-7);
    CHECK_CLOSE(dex[3], 0.5, 1e-7);
    CHECK_CLOSE(dex[5], -1.0, 1e-7);
    /* target out of range: NaN */
    int bad = 3;
    CHECK(isnan(al_xent_fwd_bwd(NULL, ex, &bad, 1, 3, 1.0f)));
    /* all rows ignored: 0 */
    int ign[2] = {-1, -1};
    CHECK(al_xent_fwd_bwd(dex, ex, ign, 2, 3, 1.0f) == 0.0);
}

/* the OpenMP path against the reference; in-place equals out-of-place bit
 * for bit; the loss does not depend on the thread count */
static void test_xent_large(int N, int V) {
    size_t nv = (size_t)N * V;
    float *lg = falloc(nv), *dl = falloc(nv), *want = falloc(nv);
    int *tg = malloc((size_t)N * sizeof(int));
    fill(lg, nv, -8, 8);
    for (int n = 0; n < N; n++) tg[n] = n % 11 == 3 ? -1 : (int)(rnd_u() * V);
    const float scale = 1.0f / (float)N;
    double wl = ref_xent(want, lg, tg, N, V, scale);
    const int saved = omp_get_max_threads();
    double l[2];
    float *dk[2];
    for (int k = 0; k < 2; k++) {
        omp_set_num_threads(k + 1);
        dk[k] = falloc(nv);
        l[k] = al_xent_fwd_bwd(dk[k], lg, tg, N, V, scale);
    }
    omp_set_num_threads(saved);
    CHECK_MSG(memcmp(&l[0], &l[1], sizeof(double)) == 0, "xent loss differs across threads");
    CHECK(memcmp(dk[0], dk[1], nv * sizeof(float)) == 0);
    CHECK_MSG(fabs(l[1] - wl) <= 1e-6 * fabs(wl), "xent loss %.12g vs ref %.12g", l[1], wl);
    CHECK_MSG(test_rel_err(dk[1], want, nv) < 1e-5, "xent large grad err %g",
              test_rel_err(dk[1], want, nv));
    float *ip = fdup(lg, nv);
    double li = al_xent_fwd_bwd(ip, ip, tg, N, V, scale);
    CHECK(li == l[1]);
    CHECK_MSG(memcmp(ip, dk[1], nv * sizeof(float)) == 0, "xent in-place differs");
    free(lg), free(dl), free(want), free(tg), free(dk[0]), free(dk[1]), free(ip);
}

/* ---------------------------------------------------------------- sgemm */

/* al_sgemm over every transposition, overwrite and accumulate, C with a
 * wider row stride than N: within rounding of a double reference, the same
 * bits at 1, 2 and 3 threads, and the thread count left as it was.
 * 280 x 48 x 48 (two blocks) and 48 x 48 x 280 (one) are shapes whose
 * 2-thread OpenBLAS sgemm differs from the 1-thread one on the AVX2
 * kernels; 1000 rows make eight blocks, the last one clipped; wide
 * products of few rows are cut into columns too. */
static void test_sgemm_threads(int M, int N, int K) {
    const int ldc = N + 3;
    float *A = falloc((size_t)M * K), *B = falloc((size_t)K * N), *C0 = falloc((size_t)M * ldc);
    float *C[3] = {falloc((size_t)M * ldc), falloc((size_t)M * ldc), falloc((size_t)M * ldc)};
    double *want = malloc(sizeof(double) * (size_t)M * N);
    fill(A, (size_t)M * K, -1, 1);
    fill(B, (size_t)K * N, -1, 1);
    fill(C0, (size_t)M * ldc, -1, 1);
    const int saved = omp_get_max_threads();
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (int acc = 0; acc < 2; acc++) {
                const int lda = ta ? M : K, ldb = tb ? K : N;
                double worst = 0, scale = 0;
                for (int i = 0; i < M; i++)
                    for (int j = 0; j < N; j++) {
                        double s = acc ? C0[(size_t)i * ldc + j] : 0;
                        for (int k = 0; k < K; k++)
                            s += (double)(ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k]) *
                                 (tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j]);
                        want[(size_t)i * N + j] = s;
                        scale = fmax(scale, fabs(s));
                    }
                for (int t = 0; t < 3; t++) {
                    memcpy(C[t], C0, sizeof(float) * (size_t)M * ldc);
                    omp_set_num_threads(t + 1);
                    al_sgemm(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, acc ? 1.0f : 0.0f, C[t], ldc);
                    CHECK_MSG(omp_get_max_threads() == t + 1, "al_sgemm left the thread count at %d",
                              omp_get_max_threads());
                }
                omp_set_num_threads(saved);
                for (int i = 0; i < M; i++)
                    for (int j = 0; j < N; j++)
                        worst = fmax(worst, fabs(C[0][(size_t)i * ldc + j] - want[(size_t)i * N + j]));
                CHECK_MSG(worst <= 1e-5 * fmax(scale, 1), "sgemm %dx%dx%d ta=%d tb=%d acc=%d: err %g", M, N, K, ta,
                          tb, acc, worst);
                for (int t = 1; t < 3; t++)
                    CHECK_MSG(memcmp(C[0], C[t], sizeof(float) * (size_t)M * ldc) == 0,
                              "sgemm %dx%dx%d ta=%d tb=%d acc=%d: 1 and %d threads differ", M, N, K, ta, tb, acc,
                              t + 1);
            }
    free(A), free(B), free(C0), free(C[0]), free(C[1]), free(C[2]), free(want);
}

/* al_blas_row_merge_exact: on the exact sets always; on the AVX-512 ones
 * from AL_BLAS_PACKED_MNK on (210 x 8 x 48, which merged changed bits on
 * Zen 4, stays cut); elsewhere never. al_blas_col_merge_exact: on the
 * AVX-512 sets likewise, elsewhere never (the AVX2 sets' sums depend on a
 * call's columns). */
static void test_merge_rules(void) {
    const char *core = al_blas_kernels();
    const int avx512 = core && (!strcasecmp(core, "SkylakeX") || !strcasecmp(core, "Cooperlake") ||
                                !strcasecmp(core, "SapphireRapids"));
    const long big = 144, at = (long)AL_BLAS_PACKED_MNK / (320 * 256) + 1;
    const int small = al_blas_row_merge_exact(210, 8, 48), large = al_blas_row_merge_exact(big, 320, 256);
    const int edge_below = al_blas_row_merge_exact(at - 1, 320, 256), edge = al_blas_row_merge_exact(at, 320, 256);
    if (al_blas_row_cuts_exact())
        CHECK_MSG(small && large && edge_below && edge, "%s: an exact set refused a merge", core);
    else if (avx512)
        CHECK_MSG(!small && large && !edge_below && edge, "%s: merges %d %d %d %d, want 0 1 0 1", core, small, large,
                  edge_below, edge);
    else CHECK_MSG(!small && !large && !edge, "%s: an unknown set merged", core);
    const int col_small = al_blas_col_merge_exact(210, 8, 48), col_large = al_blas_col_merge_exact(big, 320, 256);
    const int col_below = al_blas_col_merge_exact(at - 1, 320, 256), col_edge = al_blas_col_merge_exact(at, 320, 256);
    if (avx512)
        CHECK_MSG(!col_small && col_large && !col_below && col_edge, "%s: column merges %d %d %d %d, want 0 1 0 1",
                  core, col_small, col_large, col_below, col_edge);
    else CHECK_MSG(!col_small && !col_large && !col_edge, "%s: a set without the AVX-512 kernels merged columns", core);
}

int main(void) {
    /* RMSNorm */
    test_rmsnorm_fd(7, 10);
    test_rmsnorm_fd(3, 17);
    test_rmsnorm_fd(1, 1);
    test_rmsnorm_large(300, 256);
    test_rmsnorm_large(1000, 77);
    test_rmsnorm_large(130, 1000);
    test_add_rmsnorm(7, 10);
    test_add_rmsnorm(300, 257); /* OpenMP path */

    /* RoPE */
    test_rope_known();
    test_rope_general(al_rope_half, 1, 6, 3, 2, 3, 8, 5);
    test_rope_general(al_rope_interleaved, 0, 6, 3, 2, 3, 8, 5);
    test_rope_general(al_rope_half, 1, 7, 7, 0, 1, 10, 0);
    test_rope_general(al_rope_interleaved, 0, 7, 7, 0, 1, 10, 0);
    test_rope_general(al_rope_half, 1, 300, 100, 17, 4, 64, 3);   /* OpenMP path */
    test_rope_general(al_rope_interleaved, 0, 300, 100, 17, 4, 64, 3);

    /* SwiGLU */
    test_swiglu_fd(10);
    test_swiglu_fd(37);
    test_swiglu_values(13);
    test_swiglu_values(100003); /* OpenMP path */

    /* embedding */
    test_embed(7, 5, 10);
    test_embed(50, 13, 3);
    test_embed(400, 50, 300); /* OpenMP path */

    /* cross-entropy */
    test_xent_fd(7, 10);
    test_xent_fd(4, 33);
    test_xent_values();
    test_xent_large(300, 1000); /* OpenMP path */
    test_xent_large(5, 50000);

    /* matrix products */
    test_sgemm_threads(280, 48, 48);
    test_sgemm_threads(48, 48, 280);
    test_sgemm_threads(1000, 77, 33);
    test_sgemm_threads(16, 1100, 40);  /* one block of rows, two of columns */
    test_sgemm_threads(200, 2100, 20); /* two x four blocks */
    /* shapes whose row blocks switch OpenBLAS's AVX-512 kernels (Cooperlake,
     * Zen 4) between their small-matrix and packed paths */
    test_sgemm_threads(210, 8, 48);
    test_sgemm_threads(300, 16, 384);
    test_sgemm_threads(210, 8, 1000);
    /* row blocks of at least 144 x 320 x 256, past AL_BLAS_PACKED_MNK: on
     * every set, the AVX-512 ones included, 2 and 3 threads merge them */
    test_sgemm_threads(600, 320, 256);
    /* column blocks of at least 100 x 512 x 160 (one row block, four
     * column blocks): on the AVX-512 sets 1, 2 and 3 threads merge them */
    test_sgemm_threads(100, 2100, 160);
    test_merge_rules();

    return TEST_EXIT();
}
