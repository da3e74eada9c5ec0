/*
 * cpu.h: the CPU feature sets the kernels are built for, what this CPU (and
 * its operating system) can run, and which set the kernels use now: one
 * table and one switch for every kernel family (the attention score and
 * decode kernels of src/attn/, the BF16/F16 weight products of nn/wmat.c).
 *
 * The sets, each including the ones before it (AL_CPU_SETS below):
 *   generic      no SIMD of our own: BLAS calls and plain C
 *   avx2         AVX2 + FMA + F16C (x86-64-v3, the release build's baseline)
 *   avx512       AVX-512 F, BW, DQ, VL
 *   avx512-bf16  + AVX512_BF16 (vdpbf16ps)
 *   amx          + AMX-TILE, AMX-BF16, with the tile state granted by the OS
 *                (Linux: arch_prctl(ARCH_REQ_XCOMP_PERM))
 * A set counts as present only if the CPU reports its instructions (cpuid)
 * and the OS saves their registers (xgetbv). Kernels exist today for
 * generic, avx2 and avx512; the two higher sets run the avx512 kernels until
 * their own arrive.
 *
 * The set in use is the best present, lowered by the environment variable
 * ATTNLAB_CPU=<set name> (a set above what the CPU has is lowered to what it
 * has) or by al_cpu_force (tests compare the sets in one process). The
 * library never prints: an unknown ATTNLAB_CPU value is reported by
 * al_cpu_init and otherwise ignored. Data: the detected set and the
 * environment's request, each computed once and cached.
 */
#ifndef AL_CPU_H
#define AL_CPU_H

#include "core.h"

/* X(enum suffix, name): in order, each set a superset of the one before. */
#define AL_CPU_SETS(X) X(GENERIC, "generic") X(AVX2, "avx2") X(AVX512, "avx512") \
    X(AVX512_BF16, "avx512-bf16") X(AMX, "amx")

#define AL_CPU_SET_ENUM(id, name) AL_CPU_##id,
typedef enum { AL_CPU_SETS(AL_CPU_SET_ENUM) AL_CPU_COUNT } al_cpu_level;
#undef AL_CPU_SET_ENUM

/* Reads ATTNLAB_CPU again (and detects the CPU if not done yet). Returns 0,
 * or -1 with one line in err for a value that names no set (the variable is
 * then ignored: the kernels use the detected set). Programs call it first
 * thing to tell the user; without it the variable is read on first use. */
int al_cpu_init(al_err *err);
/* The best set this CPU and OS run (ignores ATTNLAB_CPU and al_cpu_force). */
al_cpu_level al_cpu_detect(void);
/* The set the kernels use now: al_cpu_force's if set, else
 * min(detected, ATTNLAB_CPU). */
al_cpu_level al_cpu_level_now(void);
/* Forces a set for this process (lowered to what the CPU runs); -1 returns
 * to automatic. Returns the set now in effect. Not while kernels run. */
al_cpu_level al_cpu_force(int level);
/* Nonzero when the CPU reports AMX but the OS refused this process the
 * tile state (arch_prctl): amx then counts as absent and the kernels use the
 * set below it; callers print a note. */
int al_cpu_amx_refused(void);
/* Nonzero where the CPU's AVX512-BF16 dot product (vdpbf16ps) outruns its
 * fp32 FMAs by enough to pay for rounding the operands: AMD's (Zen 4: the
 * bf16 training step 1.9x fp32's). Intel's cores without AMX run it on one
 * port against two fp32 FMA ports (a Sapphire Rapids with the tile state
 * refused: 0.8x), so there bf16 products pay only on AMX. From cpuid's
 * vendor string; precision.c's `auto` reads it. */
int al_cpu_bf16_dot_fast(void);
/* "generic", "avx2", "avx512", "avx512-bf16", "amx" ("?" out of range) */
const char *al_cpu_level_name(al_cpu_level l);
/* The set named `name` into *out: 0, or -1 for an unknown name. */
int al_cpu_level_of_name(const char *name, al_cpu_level *out);
/* One line for reports and tests, into buf: "runs generic, avx2; not
 * avx512, avx512-bf16, amx" (the sets this CPU cannot run after "not"). */
void al_cpu_describe(char *buf, size_t cap);

#endif
