/*
 * blas.h: making sure OpenBLAS runs the kernels this CPU can.
 *
 * Debian's OpenBLAS 0.3.21 picks its kernels at load time from the CPU model.
 * On processors newer than it knows (e.g. recent Xeons behind a hypervisor)
 * it falls back to "Prescott", its SSE3 kernels, 5-10x below what the CPU can
 * do. OpenBLAS only reads OPENBLAS_CORETYPE when it loads, so the fix has to
 * happen before the process starts: al_blas_fix_kernels re-executes the
 * program with OPENBLAS_CORETYPE set to the matching AVX-512 (SkylakeX) or
 * AVX2 (Haswell) kernels. A user's own OPENBLAS_CORETYPE always wins.
 */
#ifndef AL_BLAS_H
#define AL_BLAS_H

/* Call first thing in main(). Returns only if no re-exec was needed (or it
 * failed, in which case the slow kernels stay: still correct). */
void al_blas_fix_kernels(char **argv);
/* The kernel set OpenBLAS is using, e.g. "SkylakeX". */
const char *al_blas_kernels(void);

#endif
