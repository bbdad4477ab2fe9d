/* ref_half.h - IEEE binary16 and bfloat16 from their definitions, for the
 * tests of server/codec/half.c: values by formula, and rounding by search
 * over every finite value of the type (nearest; a tie goes to the even
 * pattern). Slow, and shares no code with server/.
 */
#ifndef REF_HALF_H
#define REF_HALF_H

#include <stdint.h>

/* The value of a pattern: (-1)^s 2^(e - bias) (1 + m / 2^frac), subnormals
 * 2^(1 - bias) m / 2^frac, e all ones inf or NaN. */
double ref_f16_value(uint16_t h);
double ref_bf16_value(uint16_t b);

/* The pattern nearest to finite x, ties to even; past the largest finite
 * value by half an ulp or more: infinity. */
uint16_t ref_f16_round(double x);
uint16_t ref_bf16_round(double x);

#endif
