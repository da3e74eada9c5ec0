/*
 * cpu.c: see cpu.h. Detection reads cpuid for the instructions and xgetbv
 * (XCR0) for the register state the OS saves; the AMX tile data state must
 * in addition be requested from Linux per process (arch_prctl), which is
 * what makes the tiles usable, so detecting amx also asks for it. Results
 * are cached in atomic ints (a race only computes the same value twice).
 */
#include "cpu.h"

#include <assert.h>
#include <cpuid.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

/* X(feature, cpuid leaf, subleaf, register, bit) */
#define CPU_FEATURES(X)                                                                                             \
    X(FMA, 1, 0, ECX, 12) X(OSXSAVE, 1, 0, ECX, 27) X(AVX, 1, 0, ECX, 28) X(F16C, 1, 0, ECX, 29)                   \
    X(AVX2, 7, 0, EBX, 5) X(AVX512F, 7, 0, EBX, 16) X(AVX512DQ, 7, 0, EBX, 17) X(AVX512BW, 7, 0, EBX, 30)          \
    X(AVX512VL, 7, 0, EBX, 31) X(AVX512_BF16, 7, 1, EAX, 5) X(AMX_BF16, 7, 0, EDX, 22) X(AMX_TILE, 7, 0, EDX, 24)

enum { EAX, EBX, ECX, EDX };
#define FEATURE_ENUM(f, leaf, sub, reg, bit) F_##f,
enum { CPU_FEATURES(FEATURE_ENUM) F_COUNT };
#undef FEATURE_ENUM
#define FEATURE_ROW(f, leaf, sub, reg, bit) {leaf, sub, reg, bit},
static const struct {
    unsigned leaf, sub, reg, bit;
} features[F_COUNT] = {CPU_FEATURES(FEATURE_ROW)};
#undef FEATURE_ROW
#define BIT(f) (1u << F_##f)

/* XCR0 state components: SSE, AVX (YMM upper halves), AVX-512 (opmask,
 * ZMM upper halves, ZMM16-31), AMX (tile config, tile data) */
enum { XCR0_AVX = 0x6, XCR0_AVX512 = 0xE0, XCR0_AMX = 0x60000, XFEATURE_XTILEDATA = 18 };

/* What each set adds to the one below it (cpu.h's order). */
static const struct {
    unsigned features;
    unsigned long long xcr0;
    int tile_permission;
} adds[AL_CPU_COUNT] = {
    [AL_CPU_GENERIC] = {0, 0, 0},
    [AL_CPU_AVX2] = {BIT(OSXSAVE) | BIT(AVX) | BIT(AVX2) | BIT(FMA) | BIT(F16C), XCR0_AVX, 0},
    [AL_CPU_AVX512] = {BIT(AVX512F) | BIT(AVX512DQ) | BIT(AVX512BW) | BIT(AVX512VL), XCR0_AVX512, 0},
    [AL_CPU_AVX512_BF16] = {BIT(AVX512_BF16), 0, 0},
    [AL_CPU_AMX] = {BIT(AMX_TILE) | BIT(AMX_BF16), XCR0_AMX, 1},
};

#define SET_NAME(id, name) name,
static const char *const set_names[AL_CPU_COUNT] = {AL_CPU_SETS(SET_NAME)};
#undef SET_NAME

enum { NOT_READ = -2, NO_REQUEST = -1 };
static atomic_int detected = -1;
static atomic_int requested = NOT_READ; /* ATTNLAB_CPU's set, NO_REQUEST, or not read yet */
static atomic_int forced = -1;

/* The features cpuid reports, as BIT() flags. */
static unsigned cpu_features(void) {
    unsigned have = 0, r[4];
    for (int f = 0; f < F_COUNT; f++)
        if (__get_cpuid_count(features[f].leaf, features[f].sub, &r[EAX], &r[EBX], &r[ECX], &r[EDX]) &&
            (r[features[f].reg] >> features[f].bit & 1u))
            have |= 1u << f;
    return have;
}

/* XCR0: the register state the OS saves on a context switch (only readable
 * with OSXSAVE). */
static unsigned long long os_xcr0(unsigned have) {
    if (!(have & BIT(OSXSAVE))) return 0;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (unsigned long long)hi << 32 | lo;
}

/* Whether Linux lets this process use the AMX tile data state (asking for
 * it: permission is per process and must be requested before first use). */
static atomic_int tile_refused; /* the CPU has AMX but the OS said no */

static int tile_permission(void) {
#if defined(__linux__) && defined(SYS_arch_prctl)
    enum { ARCH_REQ_XCOMP_PERM = 0x1023 };
    const int granted = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
#else
    const int granted = 0;
#endif
    atomic_store(&tile_refused, !granted);
    return granted;
}

int al_cpu_amx_refused(void) {
    al_cpu_detect();
    return atomic_load(&tile_refused);
}

al_cpu_level al_cpu_detect(void) {
    int d = atomic_load(&detected);
    if (d >= 0) return (al_cpu_level)d;
    const unsigned have = cpu_features();
    const unsigned long long xcr0 = os_xcr0(have);
    d = AL_CPU_GENERIC;
    while (d + 1 < AL_CPU_COUNT && (have & adds[d + 1].features) == adds[d + 1].features &&
           (xcr0 & adds[d + 1].xcr0) == adds[d + 1].xcr0 && (!adds[d + 1].tile_permission || tile_permission()))
        d++;
    atomic_store(&detected, d);
    return (al_cpu_level)d;
}

int al_cpu_bf16_dot_fast(void) {
    unsigned r[4];
    char vendor[13] = {0};
    if (!__get_cpuid(0, &r[EAX], &r[EBX], &r[ECX], &r[EDX])) return 0;
    memcpy(vendor, &r[EBX], 4), memcpy(vendor + 4, &r[EDX], 4), memcpy(vendor + 8, &r[ECX], 4);
    return !strcmp(vendor, "AuthenticAMD");
}

/* The names of sets [from, to) into buf at *len, comma-separated. */
static void append_names(char *buf, size_t cap, size_t *len, int from, int to) {
    for (int l = from; l < to && *len < cap; l++)
        *len += (size_t)snprintf(buf + *len, cap - *len, "%s%s", l > from ? ", " : "", set_names[l]);
}

int al_cpu_level_of_name(const char *name, al_cpu_level *out) {
    for (int l = 0; l < AL_CPU_COUNT; l++)
        if (!strcmp(name, set_names[l])) {
            *out = (al_cpu_level)l;
            return 0;
        }
    return -1;
}

int al_cpu_init(al_err *err) {
    const al_cpu_level top = al_cpu_detect();
    const char *env = getenv("ATTNLAB_CPU");
    al_cpu_level want;
    if (!env || !*env) {
        atomic_store(&requested, NO_REQUEST);
        return 0;
    }
    if (al_cpu_level_of_name(env, &want)) {
        atomic_store(&requested, NO_REQUEST);
        char names[128];
        size_t len = 0;
        append_names(names, sizeof names, &len, 0, AL_CPU_COUNT);
        return al_errf(err, "ATTNLAB_CPU=%.64s: unknown kernel set (%s); using %s", env, names,
                       al_cpu_level_name(top));
    }
    atomic_store(&requested, (int)want);
    return 0;
}

al_cpu_level al_cpu_level_now(void) {
    const int f = atomic_load(&forced);
    if (f >= 0) return (al_cpu_level)f;
    if (atomic_load(&requested) == NOT_READ) al_cpu_init(NULL);
    const int top = (int)al_cpu_detect(), want = atomic_load(&requested);
    return (al_cpu_level)(want >= 0 && want < top ? want : top);
}

al_cpu_level al_cpu_force(int level) {
    const int top = (int)al_cpu_detect();
    atomic_store(&forced, level < 0 ? -1 : level < top ? level : top);
    return al_cpu_level_now();
}

void al_cpu_describe(char *buf, size_t cap) {
    if (!cap) return;
    const int top = (int)al_cpu_detect();
    assert(top >= 0 && top < AL_CPU_COUNT);
    size_t len = (size_t)snprintf(buf, cap, "runs ");
    append_names(buf, cap, &len, 0, top + 1);
    if (top + 1 < AL_CPU_COUNT && len < cap) {
        len += (size_t)snprintf(buf + len, cap - len, "; not ");
        append_names(buf, cap, &len, top + 1, AL_CPU_COUNT);
    }
}

const char *al_cpu_level_name(al_cpu_level l) { return (unsigned)l < AL_CPU_COUNT ? set_names[l] : "?"; }
