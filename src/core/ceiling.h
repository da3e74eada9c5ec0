/*
 * ceiling.h: this machine's ceilings, measured in the same run as a
 * benchmark so ratios survive noisy shared machines: sgemm GFLOP/s (the
 * FLOP ceiling attnlab's kernels are compared with) and triad bandwidth.
 */
#ifndef AL_CEILING_H
#define AL_CEILING_H

/* Best of `reps` n x n x n cblas_sgemm runs, GFLOP/s (all threads). */
double al_measure_sgemm_gflops(int n, int reps);
/* Best of `reps` STREAM-triad passes a[i] = b[i] + s c[i] over `mbytes` MB
 * per array, GB/s counting 3 arrays moved (all threads). */
double al_measure_triad_gbs(int mbytes, int reps);
/* Peak resident set size of this process, bytes. */
long al_peak_rss_bytes(void);
/* Resident memory now, bytes (Linux /proc/self/status): all of it, the
 * anonymous part (heap, stacks) and the file-backed part (e.g. the pages of
 * a memory-mapped checkpoint that have been read). -1 when unknown. */
void al_rss_now(long *total, long *anon, long *file);

#endif
