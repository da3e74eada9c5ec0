/*
 * test_study_pace.c: the factors by which the study's first ETA scales the
 * budgets' nominal step times (al_study_pace, study.c): 1 for BF16 on AMX
 * (the machine the nominal times come from); every precision and CPU set
 * covered with a positive finite factor; and the measured order of speeds
 * they encode: fp32 slower than bf16 wherever bf16 has instructions
 * (language models more than ViTs), emulated bf16 slower than fp32 on the
 * same set, AVX2's fp32 no faster than AVX-512's (the ViT's slower).
 */
#include <math.h>

#include "study/study.h"
#include "test.h"

static double pace(al_precision p, al_cpu_level cpu, int vision) { return al_study_pace(p, cpu, vision); }

static void test_every_set(void) {
    for (int cpu = 0; cpu < AL_CPU_COUNT; cpu++)
        for (int vision = 0; vision < 2; vision++) {
            const double f = pace(AL_PREC_F32, cpu, vision), b = pace(AL_PREC_BF16, cpu, vision);
            CHECK(isfinite(f) && f >= 1.0 && f < 20);
            CHECK(isfinite(b) && b >= 1.0 && b < 20);
            if (cpu >= AL_CPU_AVX512_BF16)
                CHECK(f > b); /* bf16 instructions: bf16 is faster */
            else
                CHECK(b > f); /* emulated bf16: slower than fp32 */
            if (cpu >= AL_CPU_AVX2) CHECK(f <= pace(AL_PREC_F32, AL_CPU_AVX2, vision));
        }
}

static void test_measured(void) {
    CHECK(pace(AL_PREC_BF16, AL_CPU_AMX, 0) == 1.0);
    CHECK(pace(AL_PREC_BF16, AL_CPU_AMX, 1) == 1.0);
    CHECK(pace(AL_PREC_BF16, AL_CPU_AVX512_BF16, 0) > 1.5);                           /* Zen 4 */
    CHECK(pace(AL_PREC_F32, AL_CPU_AVX512, 0) > pace(AL_PREC_F32, AL_CPU_AVX512, 1)); /* ViTs gain less from bf16 */
    CHECK(pace(AL_PREC_F32, AL_CPU_AVX2, 1) > pace(AL_PREC_F32, AL_CPU_AVX512, 1));
    CHECK(pace(AL_PREC_BF16, AL_CPU_AVX512, 0) > pace(AL_PREC_F32, AL_CPU_AVX512, 0)); /* Skylake: emulated */
    CHECK(pace(AL_PREC_F32, AL_CPU_GENERIC, 0) == pace(AL_PREC_F32, AL_CPU_AVX2, 0));
}

int main(void) {
    test_every_set();
    test_measured();
    return TEST_EXIT();
}
