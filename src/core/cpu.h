/*
 * cpu.h: run-time selection of the SIMD kernel set (instruction-set dispatch).
 *
 * The library is compiled for x86-64-v3 (AVX2 + FMA) as a whole; the hot
 * attention kernels exist in three versions, and the one that runs is chosen
 * here when they are called, not when the program is built:
 *   AL_CPU_AVX512   16-wide register-blocked kernels (avx512f/bw/dq/vl)
 *   AL_CPU_AVX2      8-wide versions of the same kernels
 *   AL_CPU_GENERIC   the tile kernels built on single-threaded cblas_sgemm
 * The level is the best the CPU supports (__builtin_cpu_supports), lowered
 * by the environment variable ATTNLAB_CPU=avx512|avx2|generic (a request
 * above what the CPU has is lowered to what it has), or by al_cpu_force()
 * (tests compare the paths in one process). Data: one cached level.
 */
#ifndef AL_CPU_H
#define AL_CPU_H

typedef enum { AL_CPU_GENERIC = 0, AL_CPU_AVX2 = 1, AL_CPU_AVX512 = 2 } al_cpu_level;

/* The best level this CPU runs (ignores ATTNLAB_CPU and al_cpu_force). */
al_cpu_level al_cpu_detect(void);
/* The level the kernels use now: al_cpu_force's if set, else
 * min(detected, ATTNLAB_CPU). An unknown ATTNLAB_CPU value is ignored (with
 * one line on stderr). */
al_cpu_level al_cpu_level_now(void);
/* Forces a level for this process (lowered to what the CPU supports);
 * -1 returns to automatic. Returns the level now in effect. */
al_cpu_level al_cpu_force(int level);
/* "avx512", "avx2", "generic" */
const char *al_cpu_level_name(al_cpu_level l);

#endif
