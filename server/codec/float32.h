/* float32.h - float32 values as they travel: JSON numbers rounded to
 * float32, little-endian bytes on the wire, and the finiteness check every
 * tensor passes. The lowest part of the codecs: tensor.c, json_lift.c, the
 * model-file readers (store/) and the binary segments of /v2 (v2/) use it.
 */
#ifndef SRV_FLOAT32_H
#define SRV_FLOAT32_H

#include <stdbool.h>
#include <stddef.h>

/* The most dimensions a tensor of a request, an answer or a model file has. */
#define SRV_MAX_DIMS 8

/* A JSON number as a tensor element: false when it is not finite or rounds
 * outside the float32 range; values between FLT_MAX and the rounding limit
 * become FLT_MAX, as IEEE rounding would make them. */
bool srv_double_to_float(double v, float *out);

/* Tensor bytes on the wire are little-endian float32; these serve
 * big-endian hosts (and tell whether this is one). */
bool srv_host_little_endian(void);
/* Whether none of the count floats at p is inf or NaN (one pass, blocks of
 * 16 that GCC vectorizes). */
bool srv_floats_finite(const float *p, size_t count);
/* Reverses the bytes of each of count 4-byte words at p in place. */
void srv_swap_bytes32(void *p, size_t count);

#endif
