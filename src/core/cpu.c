/*
 * cpu.c: see cpu.h. The detected level and the environment's request are
 * read once and cached in an atomic int (a race only computes the same
 * value twice); al_cpu_force overrides both.
 */
#include "cpu.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static atomic_int cached = -1; /* min(detected, ATTNLAB_CPU) */
static atomic_int forced = -1;

al_cpu_level al_cpu_detect(void) {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("fma"))
        return AL_CPU_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return AL_CPU_AVX2;
    return AL_CPU_GENERIC;
}

/* The level a name asks for, or -1 for an unknown name. */
static int level_of_name(const char *s) {
    if (!strcmp(s, "avx512")) return AL_CPU_AVX512;
    if (!strcmp(s, "avx2")) return AL_CPU_AVX2;
    if (!strcmp(s, "generic")) return AL_CPU_GENERIC;
    return -1;
}

al_cpu_level al_cpu_level_now(void) {
    const int f = atomic_load(&forced);
    if (f >= 0) return (al_cpu_level)f;
    int c = atomic_load(&cached);
    if (c >= 0) return (al_cpu_level)c;
    c = al_cpu_detect();
    const char *env = getenv("ATTNLAB_CPU");
    if (env && *env) {
        const int want = level_of_name(env);
        if (want < 0)
            fprintf(stderr, "attnlab: ATTNLAB_CPU=%s: unknown kernel set (avx512, avx2, generic); using %s\n", env,
                    al_cpu_level_name((al_cpu_level)c));
        else if (want < c)
            c = want;
    }
    atomic_store(&cached, c);
    return (al_cpu_level)c;
}

al_cpu_level al_cpu_force(int level) {
    if (level < 0) {
        atomic_store(&forced, -1);
    } else {
        const int d = al_cpu_detect();
        atomic_store(&forced, level < d ? level : d);
    }
    return al_cpu_level_now();
}

const char *al_cpu_level_name(al_cpu_level l) {
    switch (l) {
    case AL_CPU_AVX512: return "avx512";
    case AL_CPU_AVX2: return "avx2";
    default: return "generic";
    }
}
