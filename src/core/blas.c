/*
 * blas.c: see blas.h. The pre-AVX2 core names below are the ones OpenBLAS's
 * DYNAMIC_ARCH uses for its oldest kernel sets; a CPU with AVX2 or AVX-512
 * reported as one of them has been mis-detected.
 */
#include "blas.h"
#include "cpu.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

char *openblas_get_corename(void);

static const char *const generic_cores[] = {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom",
                                            "Katmai", "Coppermine", "Northwood", "Banias", "Sandybridge",
                                            "Athlon", "Opteron", "Opteron_SSE3", "Barcelona", "Bobcat", NULL};

const char *al_blas_kernels(void) { return openblas_get_corename(); }

/* The AVX and AVX2 kernel sets above the pre-AVX2 ones of generic_cores:
 * with those, the sets on which row cuts at multiples of 48 keep the bits of
 * one whole call (checked: test_nn's sgemm shapes at 1, 2 and 3 threads). */
static const char *const avx2_cores[] = {"Haswell", "Zen", "Excavator", "Steamroller", "Piledriver", "Bulldozer",
                                         NULL};

/* Whether core (may be NULL) is one of the names of list. */
static int core_in(const char *core, const char *const *list) {
    int in = 0;
    for (int i = 0; core && list[i]; i++) in |= strcasecmp(core, list[i]) == 0;
    return in;
}

/* Whether the kernel set OpenBLAS runs is in list a or b (b may be NULL),
 * answered through *known: the core does not change in a process, so it is
 * looked up once (any thread may be first; they all store the same answer). */
static int core_in_cached(_Atomic int *known, const char *const *a, const char *const *b) {
    int in = atomic_load_explicit(known, memory_order_relaxed);
    if (in < 0) {
        const char *core = openblas_get_corename();
        in = core_in(core, a) || (b && core_in(core, b));
        atomic_store_explicit(known, in, memory_order_relaxed);
    }
    return in;
}

int al_blas_row_cuts_exact(void) {
    static _Atomic int exact = -1;
    return core_in_cached(&exact, generic_cores, avx2_cores);
}

/* The AVX-512 kernel sets, whose small-matrix and direct paths sum in
 * another order than their packed one (blas.h). */
static const char *const avx512_cores[] = {"SkylakeX", "Cooperlake", "SapphireRapids", NULL};

/* Whether OpenBLAS runs one of avx512_cores and the smallest call of a cut,
 * rows x cols x K, takes its packed path there (blas.h). */
static int avx512_packed(long rows, long cols, long K) {
    static _Atomic int avx512 = -1;
    return core_in_cached(&avx512, avx512_cores, NULL) &&
           (double)rows * (double)cols * (double)K >= AL_BLAS_PACKED_MNK;
}

int al_blas_row_merge_exact(long min_rows, long N, long K) {
    return al_blas_row_cuts_exact() || avx512_packed(min_rows, N, K);
}

int al_blas_col_merge_exact(long min_rows, long min_cols, long K) { return avx512_packed(min_rows, min_cols, K); }

/* The OpenBLAS kernel set to ask for (OPENBLAS_CORETYPE), or NULL when the
 * one it picked is right or the user chose one. */
static const char *blas_coretype_wanted(void) {
    if (getenv("OPENBLAS_CORETYPE")) return NULL;
    const char *core = openblas_get_corename();
    if (!core_in(core, generic_cores)) return NULL;
    const al_cpu_level top = al_cpu_detect();
    return top >= AL_CPU_AVX512 ? "SkylakeX" : top >= AL_CPU_AVX2 ? "Haswell" : NULL;
}

/* Whether attnlab's OpenMP wait defaults (AL_OMP_WAIT_DEFAULTS) apply: the
 * user set neither variable of the wait policy, nor ATTNLAB_OMP_DEFAULTS=0. */
static int omp_defaults_wanted(void) {
    const char *off = getenv("ATTNLAB_OMP_DEFAULTS");
    if (off && !strcmp(off, "0")) return 0;
    return !getenv("OMP_WAIT_POLICY") && !getenv("GOMP_SPINCOUNT");
}

void al_blas_fix_kernels(char **argv) {
    if (getenv("ATTNLAB_BLAS_REEXEC")) return; /* this is the re-executed process: never loop */
    const char *coretype = blas_coretype_wanted();
    const int omp = omp_defaults_wanted();
    if (!coretype && !omp) return;
    if (coretype) setenv("OPENBLAS_CORETYPE", coretype, 1);
#define AL_OMP_SET(name, value) \
    if (omp) setenv(name, value, 1);
    AL_OMP_WAIT_DEFAULTS(AL_OMP_SET)
#undef AL_OMP_SET
    setenv("ATTNLAB_BLAS_REEXEC", "1", 1);
    /* by its own path, so that ps and top still name the program (not "exe") */
    char self[4096];
    const ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len > 0) {
        self[len] = '\0';
        execv(self, argv);
    }
    execv("/proc/self/exe", argv);
    /* exec failed: carry on with the kernels and wait policy we have */
    if (coretype) unsetenv("OPENBLAS_CORETYPE");
#define AL_OMP_UNSET(name, value) \
    if (omp) unsetenv(name);
    AL_OMP_WAIT_DEFAULTS(AL_OMP_UNSET)
#undef AL_OMP_UNSET
    unsetenv("ATTNLAB_BLAS_REEXEC");
}
