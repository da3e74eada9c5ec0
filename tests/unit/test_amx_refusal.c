/*
 * test_amx_refusal.c: an AMX CPU whose OS refuses the process its tile
 * state. Linux refuses ARCH_REQ_XCOMP_PERM (ENOSPC) when a thread's
 * alternate signal stack is too small for the larger signal frame the tiles
 * need, so this test installs a MINSIGSTKSZ one before anything asks for
 * the tiles, then checks that detection reports the refusal, that amx
 * counts as absent (the set below it is used), that BF16 products and the
 * attention kernels run without the tiles (no fault) and give the right
 * values. Its own process: the permission is asked once per process. On a
 * CPU without AMX it checks that nothing is reported refused and says what
 * it could not run.
 */
#include <cpuid.h>
#include <signal.h>
#include <string.h>

#include "attn/attn.h"
#include "core/cpu.h"
#include "nn/nn.h"
#include "test.h"
#include "testutil.h"

static int cpu_has_amx(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    return (d >> 22 & 1) && (d >> 24 & 1); /* AMX-BF16, AMX-TILE */
}

int main(void) {
    static char small_stack[MINSIGSTKSZ];
    stack_t ss = {.ss_sp = small_stack, .ss_size = sizeof small_stack, .ss_flags = 0};
    CHECK(sigaltstack(&ss, NULL) == 0);
    const al_cpu_level level = al_cpu_detect();
    char cpu[160];
    al_cpu_describe(cpu, sizeof cpu);
    fprintf(stderr, "cpu: %s; amx refused: %d\n", cpu, al_cpu_amx_refused());
    if (!cpu_has_amx()) {
        CHECK(!al_cpu_amx_refused());
        fprintf(stderr, "skipped: AMX refusal (the CPU has no AMX)\n");
        return TEST_EXIT();
    }
    CHECK_MSG(al_cpu_amx_refused(), "Linux granted the tiles despite a %d-byte signal stack", (int)MINSIGSTKSZ);
    CHECK(level < AL_CPU_AMX && al_cpu_level_now() < AL_CPU_AMX);
    /* the products: no amx engine, and right values (float64 of the rounded operands) */
    al_precision_set(AL_PREC_BF16);
    CHECK(!al_bf16_engine_runs(AL_BF16_AMX));
    CHECK(al_bf16_engine_force(AL_BF16_AMX) != AL_BF16_AMX);
    al_bf16_engine_force(-1);
    CHECK(al_bf16_engine_now() != AL_BF16_AMX);
    enum { M = 70, N = 45, K = 130 };
    static float A[M * K], B[N * K], C[M * N];
    al_rng r;
    al_rng_seed(&r, 5);
    for (int i = 0; i < M * K; i++) A[i] = al_rng_normal(&r);
    for (int i = 0; i < N * K; i++) B[i] = al_rng_normal(&r);
    al_sgemm(0, 1, M, N, K, 1.0f, A, K, B, K, 0.0f, C, N);
    double worst = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0, mag = 0;
            for (int k = 0; k < K; k++) {
                const double p = (double)al_bf16_to_f32(al_f32_to_bf16(A[i * K + k])) *
                                 al_bf16_to_f32(al_f32_to_bf16(B[j * K + k]));
                s += p, mag += fabs(p);
            }
            const double e = fabs(C[i * N + j] - s) / (mag + 1e-30);
            worst = e > worst || e != e ? e : worst;
        }
    CHECK_MSG(worst < 2e-5, "bf16 product without the tiles (engine %s): error %.3g", al_precision_engine(), worst);
    fprintf(stderr, "ran: bf16 products on engine %s with the tiles refused\n", al_precision_engine());
    /* the attention kernels: the BF16 set below amx, forward values within bf16 error of fp32 */
    CHECK_MSG(strcmp(al_attn_kernel_name(), "amx") != 0, "attention kernels: %s", al_attn_kernel_name());
    enum { T = 40, H = 2, D = 16, LD = H * D };
    static float q[T * LD], k[T * LD], v[T * LD], o[T * LD], o32[T * LD], lse[H * T];
    for (int i = 0; i < T * LD; i++) q[i] = al_rng_normal(&r), k[i] = al_rng_normal(&r), v[i] = al_rng_normal(&r);
    const al_attn_shape sh = {1, T, H, H, D, D, LD, LD, LD, LD, 0.25f};
    al_attn_fwd(&sh, q, k, v, o, lse);
    al_precision_set(AL_PREC_F32);
    al_attn_fwd(&sh, q, k, v, o32, lse);
    CHECK_MSG(test_rel_err(o, o32, T * LD) < 2e-2, "bf16 attention without the tiles: %.3g from fp32",
              test_rel_err(o, o32, T * LD));
    al_precision_set(AL_PREC_BF16);
    fprintf(stderr, "ran: bf16 attention on kernels %s with the tiles refused\n", al_attn_kernel_name());
    al_precision_set(AL_PREC_F32);
    al_precision_release();
    return TEST_EXIT();
}
