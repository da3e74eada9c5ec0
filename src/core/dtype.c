/*
 * dtype.c: the dtype table's lookups and the f16/bf16 scalar conversions
 * (see dtype.h). The conversions work on the bits (memcpy, no type punning
 * through pointers), so they are exact and independent of the FPU's modes.
 */
#include "dtype.h"

#include <string.h>

static const struct {
    const char *name;
    size_t bytes;
} dtype_table[] = {
#define AL_DTYPE_ROW(name, bytes) {#name, bytes},
    AL_DTYPES(AL_DTYPE_ROW)
#undef AL_DTYPE_ROW
};

size_t al_dtype_size(al_dtype dt) { return (unsigned)dt < AL_DT_COUNT ? dtype_table[dt].bytes : 0; }

const char *al_dtype_name(al_dtype dt) { return (unsigned)dt < AL_DT_COUNT ? dtype_table[dt].name : "?"; }

int al_dtype_from_name(const char *name, al_dtype *out) {
    for (int k = 0; k < AL_DT_COUNT; k++)
        if (!strcmp(dtype_table[k].name, name)) {
            *out = (al_dtype)k;
            return 0;
        }
    return -1;
}

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Exact widening; subnormal halves are renormalised into f32's range. */
float al_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    int e = (h >> 10) & 0x1F;
    uint32_t m = h & 0x3FF;
    if (e == 31) return bits_f32(sign | 0x7F800000u | (m << 13));  /* inf / nan */
    if (e == 0) {
        if (m == 0) return bits_f32(sign);
        e = 1;
        while (!(m & 0x400)) {
            m <<= 1;
            e--;
        }
        m &= 0x3FF;
    }
    return bits_f32(sign | ((uint32_t)(e + 112) << 23) | (m << 13));
}

float al_bf16_to_f32(uint16_t b) { return bits_f32((uint32_t)b << 16); }

/* Round to nearest, ties to even; NaNs stay NaN (forced quiet). */
uint16_t al_f32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x0040);
    u += 0x7FFFu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

/* Round to nearest, ties to even, with overflow to inf, gradual underflow to
 * f16 subnormals and NaNs kept NaN (forced quiet). */
uint16_t al_f32_to_f16(float f) {
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return sign | 0x7E00 | (uint16_t)((a >> 13) & 0x3FF);
    if (a >= 0x477FF000u) return sign | 0x7C00;  /* >= 65520 rounds to inf */
    uint32_t m, shift;
    if (a >= 0x38800000u) {  /* normal f16: rebias exponent, drop 13 bits */
        m = a - 0x38000000u;
        shift = 13;
    } else {
        if (a <= 0x33000000u) return sign;  /* <= 2^-25: rounds to zero */
        m = (a & 0x7FFFFF) | 0x800000;      /* subnormal f16: units of 2^-24 */
        shift = 126 - (a >> 23);
    }
    uint32_t h = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1))) h++;  /* carry may bump exponent: still right */
    return sign | (uint16_t)h;
}
