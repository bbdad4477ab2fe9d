/* dtype.h - 16-bit keys and values (pa_attention.kv_dtype) widened to
 * float32: one element at a time (inline, exact) and whole rows
 * (lib/dtype.c, with F16C where the CPU has it). The kernels that read the
 * rows in place (attention_decode.c) convert in registers themselves.
 */
#ifndef PA_DTYPE_H
#define PA_DTYPE_H

#include "posattn.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Bytes of one element of t. */
static inline size_t pa__dtype_size(pa_dtype t)
{
    return t == PA_DTYPE_F32 ? sizeof(float) : sizeof(uint16_t);
}

/* bf16: the top 16 bits of a float32. */
static inline float pa__bf16_f32(uint16_t h)
{
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* f16 (IEEE binary16) to float32, exactly: normals rebias the exponent,
 * subnormals are normalised (every one is a float32 normal), infinities
 * and NaNs keep their payload. */
static inline float pa__f16_f32(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu, u;
    float f;
    if (exp == 0x1Fu) {
        u = sign | 0x7F800000u | (man << 13);
    } else if (exp != 0) {
        u = sign | ((exp + 112u) << 23) | (man << 13);
    } else if (man == 0) {
        u = sign;
    } else {
        exp = 113u; /* 2^-14, the subnormals' scale, once normalised */
        while ((man & 0x400u) == 0) {
            man <<= 1;
            exp--;
        }
        u = sign | (exp << 23) | ((man & 0x3FFu) << 13);
    }
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Element i of the array x of type t, as a float. */
static inline float pa__dtype_get(pa_dtype t, const void *x, size_t i)
{
    if (t == PA_DTYPE_BF16)
        return pa__bf16_f32(((const uint16_t *)x)[i]);
    if (t == PA_DTYPE_F16)
        return pa__f16_f32(((const uint16_t *)x)[i]);
    return ((const float *)x)[i];
}

/* dst[i] = src[i] widened, i < n (f32: a copy). */
void pa__widen(pa_dtype t, const void *src, size_t n, float *dst);

#endif
