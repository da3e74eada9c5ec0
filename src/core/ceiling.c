/*
 * ceiling.c: the ceiling measurements behind every `attnlab bench` ratio
 * (see ceiling.h), and the process's memory figures the commands report.
 * The sgemm inputs are small integers times 0.1 (no denormals, no
 * overflow); a sgemm's time does not depend on the values. The AMX loop is
 * compiled for AMX by a target pragma and runs only where core/cpu.h's set
 * in use is amx (which includes the OS's permission for the tiles).
 */
#include "ceiling.h"
#include "amx_tiles.h"

#include <cblas.h>
#include <immintrin.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "core.h"
#include "cpu.h"
#include "dtype.h"
#ifdef AL_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#endif

#ifdef AL_HAVE_ONEDNN
/* One n^3 bf16 matmul primitive, its memory and a stream. */
struct al_bf16_probe_impl {
    uint16_t *a, *b;
    float *c;
    dnnl_engine_t eng;
    dnnl_stream_t stream;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    dnnl_memory_t m[3];
};

void al_bf16_probe_free(al_bf16_probe *p) {
    struct al_bf16_probe_impl *x = p->impl;
    if (!x) return;
    for (int i = 0; i < 3; i++)
        if (x->m[i]) dnnl_memory_destroy(x->m[i]);
    if (x->prim) dnnl_primitive_destroy(x->prim);
    if (x->pd) dnnl_primitive_desc_destroy(x->pd);
    if (x->stream) dnnl_stream_destroy(x->stream);
    if (x->eng) dnnl_engine_destroy(x->eng);
    al_free(x->a);
    al_free(x->b);
    al_free(x->c);
    al_free(x);
    p->impl = NULL;
}

int al_bf16_probe_init(al_bf16_probe *p, int n) {
    const size_t nn = (size_t)n * n;
    memset(p, 0, sizeof *p);
    p->n = n, p->best_s = 1e30;
    struct al_bf16_probe_impl *x = al_alloc(sizeof *x);
    if (!x) return p->oom = 1, -1;
    memset(x, 0, sizeof *x);
    p->impl = x;
    x->a = al_alloc(nn * sizeof *x->a), x->b = al_alloc(nn * sizeof *x->b), x->c = al_alloc(nn * sizeof *x->c);
    if (!x->a || !x->b || !x->c) {
        al_bf16_probe_free(p);
        p->oom = 1;
        return -1;
    }
    for (size_t i = 0; i < nn; i++) {
        x->a[i] = al_f32_to_bf16((float)((i * 7) % 13) * 0.1f);
        x->b[i] = al_f32_to_bf16((float)((i * 5) % 11) * 0.1f);
    }
    const dnnl_dims_t dims = {n, n};
    dnnl_memory_desc_t a_md, b_md, c_md;
    dnnl_matmul_desc_t desc;
    dnnl_status_t st;
    if ((st = dnnl_engine_create(&x->eng, dnnl_cpu, 0)) ||
        (st = dnnl_stream_create(&x->stream, x->eng, dnnl_stream_default_flags)) ||
        (st = dnnl_memory_desc_init_by_tag(&a_md, 2, dims, dnnl_bf16, dnnl_ab)) ||
        (st = dnnl_memory_desc_init_by_tag(&b_md, 2, dims, dnnl_bf16, dnnl_ab)) ||
        (st = dnnl_memory_desc_init_by_tag(&c_md, 2, dims, dnnl_f32, dnnl_ab)) ||
        (st = dnnl_matmul_desc_init(&desc, &a_md, &b_md, NULL, &c_md)) ||
        (st = dnnl_primitive_desc_create(&x->pd, &desc, NULL, x->eng, NULL)) ||
        (st = dnnl_primitive_create(&x->prim, x->pd)) || (st = dnnl_memory_create(&x->m[0], &a_md, x->eng, x->a)) ||
        (st = dnnl_memory_create(&x->m[1], &b_md, x->eng, x->b)) ||
        (st = dnnl_memory_create(&x->m[2], &c_md, x->eng, x->c))) {
        al_bf16_probe_free(p);
        p->refused = (int)st;
        return -1;
    }
    if (al_bf16_probe_run(p) <= 0) { /* warm-up: caches, pages, threads */
        al_bf16_probe_free(p);
        return -1;
    }
    p->best_s = 1e30;
    return 0;
}

double al_bf16_probe_run(al_bf16_probe *p) {
    struct al_bf16_probe_impl *x = p->impl;
    if (!x) return 0;
    const dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, x->m[0]}, {DNNL_ARG_WEIGHTS, x->m[1]}, {DNNL_ARG_DST, x->m[2]}};
    const double t0 = al_now();
    if (dnnl_primitive_execute(x->prim, x->stream, 3, args) || dnnl_stream_wait(x->stream)) return 0;
    const double dt = al_now() - t0;
    if (dt < p->best_s) p->best_s = dt;
    return 2.0 * p->n * (double)p->n * p->n / dt / 1e9;
}
#else /* built without oneDNN: no such ceiling (refused stays 0) */
int al_bf16_probe_init(al_bf16_probe *p, int n) {
    memset(p, 0, sizeof *p);
    p->n = n, p->best_s = 1e30;
    return -1;
}
double al_bf16_probe_run(al_bf16_probe *p) {
    (void)p;
    return 0;
}
void al_bf16_probe_free(al_bf16_probe *p) { p->impl = NULL; }
#endif

double al_bf16_probe_gflops(const al_bf16_probe *p) {
    return p->best_s < 1e29 ? 2.0 * p->n * (double)p->n * p->n / p->best_s / 1e9 : 0.0;
}

/* Best of `reps` runs of a probe built for the call. */
double al_measure_bf16_onednn_gflops(int n, int reps) {
    al_bf16_probe p;
    if (al_bf16_probe_init(&p, n)) return p.refused ? -(double)p.refused : 0.0;
    for (int r = 0; r < reps; r++) al_bf16_probe_run(&p);
    const double g = al_bf16_probe_gflops(&p);
    al_bf16_probe_free(&p);
    return g;
}

/* ---- the AMX tile peak ---- */
#pragma GCC push_options
#pragma GCC target("amx-tile,amx-bf16")

/* `iters` rounds of four independent tdpbf16ps on this thread; seconds. */
static double amx_loop(long iters) {
    static const uint16_t zeros[16 * 32] __attribute__((aligned(64))) = {0}; /* the time is the same for any values */
    float out[16 * 16] __attribute__((aligned(64)));
    AL_TILE_LOADCONFIG();
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_loadd(4, zeros, 64);
    _tile_loadd(5, zeros, 64);
    _tile_loadd(6, zeros, 64);
    _tile_loadd(7, zeros, 64);
    const double t0 = al_now();
    for (long i = 0; i < iters; i++) {
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, out, 64); /* the sums are used */
    const double dt = al_now() - t0;
    _tile_release();
    volatile float sink = out[0];
    (void)sink;
    return dt;
}
#pragma GCC pop_options

double al_measure_amx_tile_gflops(int reps) {
    if (al_cpu_level_now() < AL_CPU_AMX) return 0;
    enum { ITERS = 1 << 18 };
    const int threads = omp_get_max_threads();
    double best = 1e30;
    for (int r = 0; r < reps + 1; r++) {
        double slowest = 0; /* all threads at once: the slowest thread's time */
#pragma omp parallel num_threads(threads) reduction(max : slowest)
        slowest = amx_loop(ITERS);
        if (r > 0 && slowest < best) best = slowest;
    }
    return (double)threads * ITERS * 4 * 16384.0 / best / 1e9;
}

double al_measure_triad_gbs(int mbytes, int reps) {
    size_t n = (size_t)mbytes * (1 << 20) / sizeof(float);
    float *a = al_alloc(n * sizeof(float)), *b = al_alloc(n * sizeof(float)), *c = al_alloc(n * sizeof(float));
    if (!a || !b || !c) {
        al_free(a);
        al_free(b);
        al_free(c);
        return -1;
    }
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        b[i] = 1.0f;
        c[i] = 2.0f;
    }
    double best = 1e30;
    for (int r = 0; r < reps + 1; r++) {
        double t0 = al_now();
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) a[i] = b[i] + 0.5f * c[i];
        double dt = al_now() - t0;
        if (r > 0 && dt < best) best = dt;
    }
    volatile float sink = a[n / 2];
    (void)sink;
    al_free(a);
    al_free(b);
    al_free(c);
    return 3.0 * (double)n * sizeof(float) / best / 1e9;
}

int al_sgemm_probe_init(al_sgemm_probe *p, int n) {
    const size_t nn = (size_t)n * n;
    memset(p, 0, sizeof *p);
    p->n = n;
    p->a = al_alloc(nn * sizeof(float)), p->b = al_alloc(nn * sizeof(float)), p->c = al_alloc(nn * sizeof(float));
    if (!p->a || !p->b || !p->c) {
        al_sgemm_probe_free(p);
        return -1;
    }
    for (size_t i = 0; i < nn; i++) {
        p->a[i] = (float)((i * 7) % 13) * 0.1f;
        p->b[i] = (float)((i * 5) % 11) * 0.1f;
    }
    p->best_s = 1e30;
    al_sgemm_probe_run(p); /* warm-up: caches, pages, threads */
    p->best_s = 1e30, p->sum_s = 0, p->runs = 0;
    return 0;
}

double al_sgemm_probe_run(al_sgemm_probe *p) {
    const int n = p->n;
    const double t0 = al_now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, p->a, n, p->b, n, 0.0f, p->c, n);
    const double dt = al_now() - t0;
    if (dt < p->best_s) p->best_s = dt;
    p->sum_s += dt, p->runs++;
    return 2.0 * n * (double)n * n / dt / 1e9;
}

double al_sgemm_probe_gflops(const al_sgemm_probe *p) {
    return p->best_s < 1e29 ? 2.0 * p->n * (double)p->n * p->n / p->best_s / 1e9 : 0.0;
}

double al_sgemm_probe_noise(const al_sgemm_probe *p) {
    return p->runs > 0 ? p->sum_s / p->runs / p->best_s - 1.0 : 0.0;
}

void al_sgemm_probe_free(al_sgemm_probe *p) {
    al_free(p->a);
    al_free(p->b);
    al_free(p->c);
    p->a = p->b = p->c = NULL;
}

double al_loadavg1(void) {
    double l[1];
    return getloadavg(l, 1) == 1 ? l[0] : -1.0;
}

long al_peak_rss_bytes(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru)) return 0;
    return ru.ru_maxrss * 1024L;
}

void al_rss_now(long *total, long *anon, long *file) {
    long v[3] = {-1, -1, -1};
    const char *keys[3] = {"VmRSS:", "RssAnon:", "RssFile:"};
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    while (f && fgets(line, sizeof line, f))
        for (int i = 0; i < 3; i++)
            if (strncmp(line, keys[i], strlen(keys[i])) == 0) v[i] = atol(line + strlen(keys[i])) * 1024L;
    if (f) fclose(f);
    if (total) *total = v[0];
    if (anon) *anon = v[1];
    if (file) *file = v[2];
}
