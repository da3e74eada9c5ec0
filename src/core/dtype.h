/*
 * dtype.h: element types of tensors and the scalar conversions between them,
 * for every layer of the library (files in io/, weights in nn/, KV caches in
 * attn/): one table, so a name, a size and an enum value never disagree.
 *
 * Element types are those of safetensors files (F32, F16, BF16, F64, I32,
 * I64); the inference kernels read matrices and caches in F32, F16 or BF16.
 * Conversions are exact when widening and round to nearest, ties to even,
 * when narrowing; NaNs stay NaN.
 */
#ifndef AL_DTYPE_H
#define AL_DTYPE_H

#include <stddef.h>
#include <stdint.h>

/* X(name, bytes): the enum is AL_DT_<name>, the safetensors spelling "<name>".
 * Order fixes the enum's values (F32 = 0: a zeroed struct holds fp32). */
#define AL_DTYPES(X) X(F32, 4) X(F16, 2) X(BF16, 2) X(F64, 8) X(I32, 4) X(I64, 8)

#define AL_DTYPE_ENUM(name, bytes) AL_DT_##name,
typedef enum { AL_DTYPES(AL_DTYPE_ENUM) AL_DT_COUNT } al_dtype;
#undef AL_DTYPE_ENUM

/* Bytes per element (0 for an unknown value). */
size_t al_dtype_size(al_dtype dt);
/* "F32", "BF16", ...: the safetensors spelling ("?" if unknown). */
const char *al_dtype_name(al_dtype dt);
/* The dtype spelled `name` (exactly, as safetensors does) into *out;
 * 0, or -1 for an unknown name. */
int al_dtype_from_name(const char *name, al_dtype *out);

/* Scalar conversions: exact widening (subnormal halves renormalised);
 * narrowing rounds to nearest even, F16 overflows to inf and underflows
 * gradually; NaNs stay NaN (forced quiet). */
float al_f16_to_f32(uint16_t h);
float al_bf16_to_f32(uint16_t b);
uint16_t al_f32_to_bf16(float f);
uint16_t al_f32_to_f16(float f);

#endif
