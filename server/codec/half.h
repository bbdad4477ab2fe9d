/* half.h - IEEE binary16 (f16) and bfloat16 (bf16) on the wire: the
 * conversions between them and float32 (and double, for JSON numbers), and
 * the bulk widening of a tensor's bytes. Tensors arrive in these types and
 * are computed in float32 (codec/tensor.c, v2/); answers may leave in them.
 *
 * Rounding is to nearest, ties to even, as IEEE 754 and every framework's
 * cast do. Narrowing keeps the sign of zero, turns NaN into a quiet NaN of
 * the same sign, and a value beyond the type's range into infinity (the
 * callers refuse those: a tensor's values must be finite). bf16 has
 * float32's exponent range, so only its precision shrinks.
 */
#ifndef SRV_HALF_H
#define SRV_HALF_H

#include <stddef.h>
#include <stdint.h>

/* Whether float32 f lies exactly halfway between two neighbours of the
 * 16-bit type (f16, or bf16 when bf16 is set), where rounding it ties. A
 * decimal number rounded to float32 and then to the type is rounded as if
 * directly unless that float32 is such a tie: the tie points are float32
 * values, and rounding to float32 cannot cross one without landing on it. */
int srv_f32_is_tie(float f, int bf16);

/* Exact widenings. */
float srv_f16_to_f32(uint16_t h);
float srv_bf16_to_f32(uint16_t b);

/* Narrowings, to nearest even. */
uint16_t srv_f32_to_f16(float f);
uint16_t srv_f32_to_bf16(float f);
/* From double directly (a JSON number is a double): one rounding, not two
 * through float32. */
uint16_t srv_f64_to_f16(double d);
uint16_t srv_f64_to_bf16(double d);

/* x[0..n) rounded in place to the 16-bit type and widened back, as
 * srv_f32_to_f16 or srv_f32_to_bf16 then the widening do, except the ties
 * (srv_f32_is_tie), which are left as they are for the caller to round
 * from their text. Returns how many ties were left, or SIZE_MAX when a
 * value rounds to infinity or is not finite (x is then partly rounded).
 * One loop with no call per value: a JSON tensor of dtype bf16 or f16
 * takes it for every element. */
size_t srv_f32_round_through_half(float *x, size_t n, int bf16);

/* dst[i] = the float32 value of the n little-endian f16 / bf16 values at
 * src (any alignment). F16C's vcvtph2ps where the CPU has it (chosen at run
 * time), portable code elsewhere: the same bits either way. */
void srv_f16_to_f32_n(const void *src, float *dst, size_t n);
void srv_bf16_to_f32_n(const void *src, float *dst, size_t n);

/* dst[i] = src[i] narrowed to f16 (bf16 when bf16 is set), for the n
 * values: srv_f32_to_f16 and srv_f32_to_bf16's bits, NaN included, with
 * F16C's vcvtps2ph for f16 where the CPU has it and one loop without a
 * call per value elsewhere. */
void srv_f32_to_half_n(const float *src, uint16_t *dst, size_t n, int bf16);

/* True when the widenings above run F16C code here (for tests and
 * benchmarks). */
int srv_half_native(void);

#endif
