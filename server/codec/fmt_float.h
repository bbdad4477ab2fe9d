/* fmt_float.h - shortest round-trip text for float32, for JSON output.
 *
 * The server prints result tensors as JSON numbers; this replaces
 * snprintf("%.9g"), which is about 5x slower and prints 9 digits where 1 to 8
 * usually suffice ("0.1" instead of "0.100000001").
 */
#ifndef SRV_FMT_FLOAT_H
#define SRV_FMT_FLOAT_H

#include <stdbool.h>
#include <stddef.h>

/* The longest text srv_fmt_float writes, "-1.17549435e-38", without NUL. */
#define SRV_FMT_FLOAT_MAX 15

/* Bytes srv_fmt_float may write at buf: more than the text and its NUL,
 * because it stores whole 8-byte words and leaves scratch after the NUL.
 * Concatenating texts in one buffer needs this room only after the last. */
#define SRV_FMT_FLOAT_BUF 24

/* Writes the finite float v at buf as the shortest decimal that reads back
 * as exactly v both directly as a float (strtof or any correctly rounding
 * parser, round-half-even) and as a double narrowed to float (strtod then a
 * cast: cJSON, JavaScript, NumPy), followed by a NUL, and returns the length
 * without the NUL (1 to SRV_FMT_FLOAT_MAX). Bytes after the NUL, up to
 * SRV_FMT_FLOAT_BUF, may be overwritten. (The two readings differ for one
 * float32 only, 0x15AE43FD: "7.038531e-26" fails the second, so it prints as
 * "7.0385307e-26".)
 *
 * Among decimals of that shortest length it picks the one nearest to v (ties
 * to an even last digit). The text is a JSON number: no '+' sign, "-" only
 * for negative values ("-0" for negative zero), no leading zeros. Plain
 * notation ("3", "100", "0.01", "123.45") is used unless exponent notation
 * is strictly shorter ("1e3", "1e-3", "1.5e20", "-3.4028235e38": lower-case
 * 'e', no '+', no padding zeros in the exponent), to keep responses small.
 *
 * buf: at least SRV_FMT_FLOAT_BUF bytes. Infinities and NaN have no JSON
 * number, so the caller decides what they become (tensor.c writes null); given
 * one anyway, this writes "inf", "-inf" or "nan", which are not JSON.
 * Pure and thread-safe: no state, no locale, no allocation. */
int srv_fmt_float(float v, char *buf);

/* Bytes srv_fmt_float_array may write for count values: at most
 * SRV_FMT_FLOAT_MAX characters and a comma each, the brackets, and the
 * scratch room of the last value. 0 when that does not fit in a size_t. */
size_t srv_fmt_float_array_size(size_t count);

/* Writes the JSON array "[v0,v1,...]" of v[0..count) at buf, followed by a
 * NUL, and returns its length without the NUL. Each finite value is exactly
 * srv_fmt_float's text; infinities and NaN (masked logits) are null. The
 * same as calling srv_fmt_float per value, but with the formatter inlined
 * into the loop and two values converted at a time, or eight in AVX-512
 * registers where the CPU has AVX-512 F, DQ and CD (1.15x and 2.5x
 * srv_fmt_float's speed on an AMD EPYC; bench_json --fmt measures them).
 *
 * v [count]: any floats. buf: srv_fmt_float_array_size(count) bytes (the
 * caller checks that it is not 0); bytes after the NUL may be overwritten.
 * Pure and thread-safe. */
size_t srv_fmt_float_array(const float *v, size_t count, char *buf);

/* On: srv_fmt_float_array converts one value at a time even where the CPU
 * has AVX-512, whose path converts eight (for tests, which check that both
 * write the same bytes). Not thread-safe: set it before any formatting. */
void srv_fmt_float_force_scalar(bool on);

#endif
