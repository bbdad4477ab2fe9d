/* base64.h - standard base64 (RFC 4648 section 4: the standard alphabet,
 * padded, no line breaks), the wire format of float32 tensors' "b64" field.
 * On CPUs with AVX-512 VBMI both directions run a vector kernel, chosen at
 * run time, on others with AVX2 an AVX2 one; elsewhere a scalar one.
 * Both give the same answers byte for byte, errors included.
 */
#ifndef SRV_BASE64_H
#define SRV_BASE64_H

#include <stdbool.h>
#include <stddef.h>

/* Why srv_b64_decode_detail refused its input. */
typedef enum srv_b64_fault {
    SRV_B64_FAULT_NONE = 0,
    SRV_B64_FAULT_LENGTH,  /* len is not a multiple of 4 */
    SRV_B64_FAULT_CHAR,    /* a byte outside the alphabet, or '=' before the end */
    SRV_B64_FAULT_PADDING, /* non-zero bits under the padding (RFC 4648 3.5) */
    SRV_B64_FAULT_TOO_BIG, /* decodes to more than dst_cap bytes */
} srv_b64_fault;

/* Characters that n bytes encode to (a multiple of 4), without the NUL. */
size_t srv_b64_encoded_len(size_t n);

/* Encodes the n bytes at src into dst, which has room for
 * srv_b64_encoded_len(n) + 1 bytes: the text, then a NUL. */
void srv_b64_encode(const unsigned char *src, size_t n, char *dst);

/* Decodes the len characters at src (no NUL needed) into dst, which has room
 * for dst_cap bytes. Returns true and sets *out_len to the byte count, having
 * written exactly that many bytes. Returns false on any invalid character,
 * bad padding, a len that is not a multiple of 4, or more than dst_cap
 * bytes; then *out_len is untouched and dst holds unspecified bytes (never
 * more than the decoded length). */
bool srv_b64_decode(const char *src, size_t len, unsigned char *dst, size_t dst_cap,
                    size_t *out_len);

/* srv_b64_decode that says why it failed: returns SRV_B64_FAULT_NONE (and
 * sets *out_len) or the fault; *bad_at gets the offset of the offending
 * character for SRV_B64_FAULT_CHAR (the first byte outside the alphabet, or
 * the misplaced '=') and SRV_B64_FAULT_PADDING (the last character before
 * the padding), 0 otherwise. */
srv_b64_fault srv_b64_decode_detail(const char *src, size_t len, unsigned char *dst, size_t dst_cap,
                                    size_t *out_len, size_t *bad_at);

/* Whether the vector kernels are in use (the CPU has AVX-512 VBMI and the
 * scalar code is not forced). */
bool srv_b64_vector(void);
/* Whether the AVX2 kernels are in use instead (the CPU has AVX2 but not
 * AVX-512 VBMI, and the scalar code is not forced). */
bool srv_b64_avx2(void);

/* For tests and benchmarks: true makes every call take the scalar code, so
 * that it stays tested on machines with AVX-512 and the two can be compared.
 * Not synchronised: set it while no other thread uses base64. */
void srv_b64_force_scalar(bool on);

#endif
