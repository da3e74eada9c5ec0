/*
 * blas.c: see blas.h. The pre-AVX2 core names below are the ones OpenBLAS's
 * DYNAMIC_ARCH uses for its oldest kernel sets; a CPU with AVX2 or AVX-512
 * reported as one of them has been mis-detected.
 */
#include "blas.h"
#include "cpu.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

char *openblas_get_corename(void);

static const char *const generic_cores[] = {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom",
                                            "Katmai", "Coppermine", "Northwood", "Banias", "Sandybridge",
                                            "Athlon", "Opteron", "Opteron_SSE3", "Barcelona", "Bobcat", NULL};

const char *al_blas_kernels(void) { return openblas_get_corename(); }

void al_blas_fix_kernels(char **argv) {
    if (getenv("OPENBLAS_CORETYPE") || getenv("ATTNLAB_BLAS_REEXEC")) return;
    const char *core = openblas_get_corename();
    int generic = 0;
    for (int i = 0; generic_cores[i]; i++) generic |= core && strcasecmp(core, generic_cores[i]) == 0;
    if (!generic) return;
    const al_cpu_level top = al_cpu_detect();
    const char *want = top >= AL_CPU_AVX512 ? "SkylakeX" : top >= AL_CPU_AVX2 ? "Haswell" : NULL;
    if (!want) return;
    setenv("OPENBLAS_CORETYPE", want, 1);
    setenv("ATTNLAB_BLAS_REEXEC", "1", 1); /* never loop */
    execv("/proc/self/exe", argv);
    /* exec failed: carry on with the kernels we have */
    unsetenv("OPENBLAS_CORETYPE");
}
