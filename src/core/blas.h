/*
 * blas.h: making sure OpenBLAS runs the kernels this CPU can, and that the
 * OpenMP threads (attnlab's and OpenBLAS's: Debian's OpenMP build) wait in a
 * way that holds up on a shared machine.
 *
 * Debian's OpenBLAS 0.3.21 picks its kernels at load time from the CPU model.
 * On processors newer than it knows (e.g. recent Xeons behind a hypervisor)
 * it falls back to "Prescott", its SSE3 kernels, 5-10x below what the CPU can
 * do. OpenBLAS only reads OPENBLAS_CORETYPE when it loads, so the fix has to
 * happen before the process starts: al_blas_fix_kernels re-executes the
 * program with OPENBLAS_CORETYPE set to the matching AVX-512 (SkylakeX) or
 * AVX2 (Haswell) kernels. A user's own OPENBLAS_CORETYPE always wins.
 *
 * libgomp reads its wait policy once, when it loads, too: a thread that
 * reaches a barrier spins GOMP_SPINCOUNT iterations (300,000 by default,
 * milliseconds) before it sleeps. On a quiet machine that saves a wake-up;
 * with another program on the cores it burns the time slices the slower
 * threads need (a training step took 3.9x its quiet time with one of two
 * cores taken). Unless the user set OMP_WAIT_POLICY or GOMP_SPINCOUNT (or
 * ATTNLAB_OMP_DEFAULTS=0), the same re-execution sets AL_OMP_WAIT_DEFAULTS,
 * chosen from `attnlab bench ... --contend 1` (docs/bench.md, "Contention").
 * (Setting them earlier in the process cannot work: glibc's own
 * initialisation resets the environment to the one the process was started
 * with before libgomp's constructor reads it.)
 */
#ifndef AL_BLAS_H
#define AL_BLAS_H

/* X(variable, value): attnlab's OpenMP wait defaults. */
#define AL_OMP_WAIT_DEFAULTS(X) X("GOMP_SPINCOUNT", "1000")

/* Call first thing in main(). Returns only if no re-exec was needed (or it
 * failed, in which case the slow kernels and libgomp's wait policy stay:
 * still correct). The re-executed process has ATTNLAB_BLAS_REEXEC=1. */
void al_blas_fix_kernels(char **argv);
/* The kernel set OpenBLAS is using, e.g. "SkylakeX". */
const char *al_blas_kernels(void);
/* 1 if, on the kernel set OpenBLAS is using, a single-threaded sgemm cut
 * into row blocks at multiples of 48 rows gives the bits of one whole call
 * whatever the shape (the SSE3, AVX and AVX2 sets); 0 on the AVX-512 sets
 * (SkylakeX, Cooperlake, SapphireRapids) and any set not known, where a
 * small block's shape can switch OpenBLAS between its small-matrix, direct
 * and packed paths, which sum in different orders (seen: 210 x 8 x 48 on
 * Cooperlake, Zen 4); al_blas_row_merge_exact says for which shapes. */
int al_blas_row_cuts_exact(void);
/* OpenBLAS's AVX-512 sets take an sgemm of M N K >= this down neither their
 * small-matrix path (M N K <= 100^3) nor their direct one (row-major, not
 * transposed, beta 0: M N K < 28 x 512^2) but the packed path, whose sums
 * over K do not depend on M: there row cuts at multiples of 48 keep the
 * bits (checked on SkylakeX: 6,231 random shapes of 48-row cuts, every
 * transposition, beta 0 and 1, all exact above it; differences only below
 * 100^3). */
#define AL_BLAS_PACKED_MNK (28.0 * 512 * 512)
/* Whether single-threaded sgemm calls over row blocks cut at multiples of
 * 48 rows, the smallest min_rows x N x K, give the bits of fewer calls over
 * merged neighbouring blocks: on the sets of al_blas_row_cuts_exact always;
 * on the AVX-512 sets (SkylakeX, Cooperlake, SapphireRapids) where every
 * call's M N K is at least AL_BLAS_PACKED_MNK; elsewhere never. */
int al_blas_row_merge_exact(long min_rows, long N, long K);
/* The same for column blocks cut at multiples of 64 columns, the smallest
 * call min_rows x min_cols x K: only on the AVX-512 sets past
 * AL_BLAS_PACKED_MNK (SkylakeX: 2,232 random shapes split in two at a
 * multiple of 64 columns, all exact); on the AVX2 sets (Haswell, Zen) a
 * call's column count changes its sums (2,070 of the same 2,232 differed). */
int al_blas_col_merge_exact(long min_rows, long min_cols, long K);

#endif
