/*
 * ceiling.h: this machine's ceilings, measured in the same run as a
 * benchmark so ratios survive noisy shared machines: sgemm GFLOP/s (the
 * FLOP ceiling attnlab's kernels are compared with) and triad bandwidth.
 *
 * On a machine other people use, the load changes within seconds, so a
 * ceiling measured once before a benchmark can be taken at another load than
 * the benchmark itself. al_sgemm_probe lets a benchmark interleave the
 * ceiling with its own timed runs (one sgemm before each of them) and keep
 * the best of each, so both bests come from the same quiet moments.
 */
#ifndef AL_CEILING_H
#define AL_CEILING_H

/* Best of `reps` n x n x n cblas_sgemm runs, GFLOP/s (all threads). */
double al_measure_sgemm_gflops(int n, int reps);
/* Best of `reps` STREAM-triad passes a[i] = b[i] + s c[i] over `mbytes` MB
 * per array, GB/s counting 3 arrays moved (all threads). */
double al_measure_triad_gbs(int mbytes, int reps);

/* An sgemm ceiling to interleave with a benchmark's runs: three n x n
 * matrices (12 n^2 bytes), one warm-up run at init. */
typedef struct al_sgemm_probe {
    int n;
    float *a, *b, *c;
    double best_s; /* fastest run so far, seconds */
} al_sgemm_probe;
/* 0, or -1 when out of memory. */
int al_sgemm_probe_init(al_sgemm_probe *p, int n);
/* One timed n^3 sgemm (all threads); returns its GFLOP/s and keeps the best. */
double al_sgemm_probe_run(al_sgemm_probe *p);
/* GFLOP/s of the fastest run so far (0 before any). */
double al_sgemm_probe_gflops(const al_sgemm_probe *p);
void al_sgemm_probe_free(al_sgemm_probe *p);

/* Peak resident set size of this process, bytes. */
long al_peak_rss_bytes(void);
/* Resident memory now, bytes (Linux /proc/self/status): all of it, the
 * anonymous part (heap, stacks) and the file-backed part (e.g. the pages of
 * a memory-mapped checkpoint that have been read). -1 when unknown. */
void al_rss_now(long *total, long *anon, long *file);
/* The 1-minute load average (runnable threads on the machine), -1 if unknown. */
double al_loadavg1(void);

#endif
