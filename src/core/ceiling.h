/*
 * ceiling.h: this machine's ceilings, measured in the same run as a
 * benchmark so ratios survive noisy shared machines: sgemm GFLOP/s (the
 * FLOP ceiling attnlab's kernels are compared with), the two BF16 ceilings
 * (oneDNN's bf16 matmul, the AMX tile peak) and triad bandwidth.
 *
 * On a machine other people use, the load changes within seconds, so a
 * ceiling measured once before a benchmark can be taken at another load than
 * the benchmark itself. al_sgemm_probe lets a benchmark interleave the
 * ceiling with its own timed runs (one sgemm before each of them) and keep
 * the best of each, so both bests come from the same quiet moments; the
 * probe's mean run beside its best says how noisy those moments were.
 */
#ifndef AL_CEILING_H
#define AL_CEILING_H

/* Best of `reps` n x n x n oneDNN bf16 matmuls (bf16 A and B, fp32 C, one
 * primitive over all threads, as PyTorch runs torch.mm in bf16), GFLOP/s:
 * the ceiling of BF16 products. 0 when the library was built without
 * oneDNN or memory ran out; a negative value, minus oneDNN's status, when
 * oneDNN refuses (-3, dnnl_unimplemented: no bf16 matmul on this CPU, e.g.
 * AVX2 only). */
double al_measure_bf16_onednn_gflops(int n, int reps);
/* The AMX tile peak, GFLOP/s over all threads: on each OpenMP thread a loop
 * of tdpbf16ps on four independent 16 x 16 fp32 tiles (16 x 32 by 32 x 16
 * bf16 each, 16384 FLOPs), best of `reps` timed loops. 0 when the CPU set
 * in use (core/cpu.h) is below amx: no AMX, or the OS refused the tiles. */
double al_measure_amx_tile_gflops(int reps);
/* Best of `reps` STREAM-triad passes a[i] = b[i] + s c[i] over `mbytes` MB
 * per array, GB/s counting 3 arrays moved (all threads); -1 when the arrays
 * cannot be allocated. */
double al_measure_triad_gbs(int mbytes, int reps);

/* An sgemm ceiling to interleave with a benchmark's runs: three n x n
 * matrices (12 n^2 bytes), one warm-up run at init. */
typedef struct al_sgemm_probe {
    int n;
    float *a, *b, *c;
    double best_s; /* fastest run so far, seconds */
    double sum_s;  /* all runs since the warm-up, seconds */
    int runs;
} al_sgemm_probe;
/* 0, or -1 when out of memory. */
int al_sgemm_probe_init(al_sgemm_probe *p, int n);
/* One timed n^3 sgemm (all threads); returns its GFLOP/s and keeps the best. */
double al_sgemm_probe_run(al_sgemm_probe *p);
/* GFLOP/s of the fastest run so far (0 before any). */
double al_sgemm_probe_gflops(const al_sgemm_probe *p);
/* The machine's noise over the runs so far: how much slower the probe's
 * mean run was than its best, mean time / best time - 1 (0 before a run).
 * The runs are spread over a benchmark's whole span, so this is how far
 * its timings could be thrown by other work on the machine in bursts,
 * which bend a long run's ratio to a short ceiling run; a steady load
 * leaves it near 0 and shows in the ceilings' level instead
 * (docs/bench.md). */
double al_sgemm_probe_noise(const al_sgemm_probe *p);
void al_sgemm_probe_free(al_sgemm_probe *p);

/* The oneDNN bf16 ceiling to interleave the same way: one n x n x n bf16
 * matmul primitive (as al_measure_bf16_onednn_gflops) and its operands
 * (8 n^2 bytes), built once, one warm-up run at init. */
typedef struct al_bf16_probe {
    int n;
    struct al_bf16_probe_impl *impl; /* oneDNN's objects and the operands */
    double best_s;                   /* fastest run so far, seconds */
    int refused;                     /* init failed on oneDNN: its status (0: no oneDNN, or out of memory) */
    int oom;                         /* init failed for want of memory for its operands */
} al_bf16_probe;
/* 0 when ready; -1 when there is no such ceiling here (p->refused says
 * why) and p holds nothing. */
int al_bf16_probe_init(al_bf16_probe *p, int n);
/* One timed n^3 bf16 matmul (all threads); its GFLOP/s (0 if oneDNN
 * failed), the best kept. */
double al_bf16_probe_run(al_bf16_probe *p);
/* GFLOP/s of the fastest run so far (0 before any). */
double al_bf16_probe_gflops(const al_bf16_probe *p);
void al_bf16_probe_free(al_bf16_probe *p);

/* Peak resident set size of this process, bytes. */
long al_peak_rss_bytes(void);
/* Resident memory now, bytes (Linux /proc/self/status): all of it, the
 * anonymous part (heap, stacks) and the file-backed part (e.g. the pages of
 * a memory-mapped checkpoint that have been read). -1 when unknown. */
void al_rss_now(long *total, long *anon, long *file);
/* The 1-minute load average (runnable threads on the machine), -1 if unknown. */
double al_loadavg1(void);

#endif
