/*
 * fastmath.h: element functions the kernels inline into their loops.
 *
 * al_expf is the scalar exp that gcc vectorises inside plain loops (the
 * generic attention set, the element-wise ops). The attention micro-kernels
 * use their own explicitly vectorised exp2 (16 lanes with AVX-512, 8 with
 * AVX2: v_exp2 in src/attn/score_kern.h, written once for both widths, with
 * vscalefps where it exists); docs/kernels.md compares the two.
 */
#ifndef AL_FASTMATH_H
#define AL_FASTMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* exp(x) for float, within about 1.5 ulp of the true value over the whole
 * range (0 below about -103.9, inf above about 88.72, NaN stays NaN),
 * written without branches or float compares so that gcc vectorises loops
 * that call it: the argument is clamped in the integer domain to |x| <= 104,
 * reduced as x = n ln2 + r with |r| <= ln2/2, exp(r) comes from its degree-7
 * Taylor polynomial (truncation error < 1e-8) and 2^n is applied as two
 * factors 2^(n/2) 2^(n - n/2) so that underflow and overflow round
 * correctly. Relies on IEEE float semantics (no -ffast-math needed or
 * wanted) and round-to-nearest. */
static inline float al_expf(float x) {
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    const uint32_t mag = bits & 0x7fffffffu;
    const uint32_t lim = 0x42d00000u; /* 104.0f */
    /* clamp |x| to 104 but keep NaN (mag above the infinity pattern) */
    const uint32_t cm = (mag < lim || mag > 0x7f800000u) ? mag : lim;
    const uint32_t cb = cm | (bits & 0x80000000u);
    float xc;
    memcpy(&xc, &cb, sizeof xc);
    const float n = rintf(xc * 1.44269504088896341f); /* round(x / ln2) */
    /* integer n without a float->int conversion (NaN must not be UB):
     * n + 1.5*2^23 holds n in its low mantissa bits */
    const float t = n + 12582912.0f;
    uint32_t tb;
    memcpy(&tb, &t, sizeof tb);
    const int32_t ni = (int32_t)(tb - 0x4b400000u);
    const int32_t n1 = ni / 2, n2 = ni - n1;
    const uint32_t e1 = (uint32_t)(n1 + 127) << 23, e2 = (uint32_t)(n2 + 127) << 23;
    float s1, s2;
    memcpy(&s1, &e1, sizeof s1);
    memcpy(&s2, &e2, sizeof s2);
    /* ln2 split in a high part with few mantissa bits (n * hi is exact) and
     * the remainder */
    float r = xc - n * 0.693145751953125f;
    r = r - n * 1.428606765330187e-06f;
    const float p =
        1.0f +
        r * (1.0f +
             r * (0.5f +
                  r * (1.0f / 6.0f +
                       r * (1.0f / 24.0f +
                            r * (1.0f / 120.0f + r * (1.0f / 720.0f + r * (1.0f / 5040.0f)))))));
    return (p * s1) * s2;
}

#endif
