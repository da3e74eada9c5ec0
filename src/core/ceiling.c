/*
 * ceiling.c: the ceiling measurements behind every `attnlab bench` ratio
 * (see ceiling.h), and the process's memory figures the commands report.
 * The sgemm inputs are small integers times 0.1 (no denormals, no
 * overflow); a sgemm's time does not depend on the values.
 */
#include "ceiling.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "core.h"

double al_measure_sgemm_gflops(int n, int reps) {
    size_t nn = (size_t)n * n;
    float *a = al_alloc(nn * sizeof(float)), *b = al_alloc(nn * sizeof(float)), *c = al_alloc(nn * sizeof(float));
    if (!a || !b || !c) {
        al_free(a);
        al_free(b);
        al_free(c);
        return 0;
    }
    for (size_t i = 0; i < nn; i++) {
        a[i] = (float)((i * 7) % 13) * 0.1f;
        b[i] = (float)((i * 5) % 11) * 0.1f;
    }
    double best = 1e30;
    for (int r = 0; r < reps + 1; r++) {
        double t0 = al_now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        double dt = al_now() - t0;
        if (r > 0 && dt < best) best = dt; /* the first run warms caches and threads */
    }
    al_free(a);
    al_free(b);
    al_free(c);
    return 2.0 * n * (double)n * n / best / 1e9;
}

double al_measure_triad_gbs(int mbytes, int reps) {
    size_t n = (size_t)mbytes * (1 << 20) / sizeof(float);
    float *a = al_alloc(n * sizeof(float)), *b = al_alloc(n * sizeof(float)), *c = al_alloc(n * sizeof(float));
    if (!a || !b || !c) {
        al_free(a);
        al_free(b);
        al_free(c);
        return 0;
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
    p->best_s = 1e30;
    return 0;
}

double al_sgemm_probe_run(al_sgemm_probe *p) {
    const int n = p->n;
    const double t0 = al_now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, p->a, n, p->b, n, 0.0f, p->c, n);
    const double dt = al_now() - t0;
    if (dt < p->best_s) p->best_s = dt;
    return 2.0 * n * (double)n * n / dt / 1e9;
}

double al_sgemm_probe_gflops(const al_sgemm_probe *p) {
    return p->best_s < 1e29 ? 2.0 * p->n * (double)p->n * p->n / p->best_s / 1e9 : 0.0;
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
