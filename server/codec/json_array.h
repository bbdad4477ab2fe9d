/* json_array.h - a JSON array of numbers straight to float32, for the
 * lifter (json_lift.h), which finds the arrays in a body and keeps what
 * this reads.
 *
 * The numbers are read in JSON's grammar exactly (RFC 8259: what it does
 * not allow is refused, for the body's own check to name) to the float
 * cJSON would give, strtod's double then the float conversion: eight at a
 * time where the CPU has AVX-512 VBMI2 and they are short, one at a time
 * by their digits elsewhere (exactly, to 19 significant digits), strtod
 * past that.
 */
#ifndef SRV_JSON_ARRAY_H
#define SRV_JSON_ARRAY_H

#include "codec/float32.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The floats of an array, row-major, and its nesting. Zeroed with leaf -1
 * before the first call. */
typedef struct srv_json_floats {
    float *data; /* malloc'd; the caller's to free */
    size_t n, cap;
    int leaf;                   /* depth of the numbers; -1 until the first */
    int64_t dims[SRV_MAX_DIMS]; /* 0 until the first array of that depth ends */
} srv_json_floats;

/* JSON's white space. */
static inline bool srv_json_is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* The array at s[*pos] == '[' at nesting depth level (0 for the outer
 * one), its numbers appended to a: true with *pos past its ']' when it is
 * a regular array of numbers (equal lengths at each depth, numbers within
 * float32's range); false otherwise (a has what was read so far). */
bool srv_json_array(const char *s, size_t len, size_t *pos, int level, srv_json_floats *a);

/* Tests: the one JSON number s[0..len) as the arrays read it, the double
 * it becomes before float32 (strtod's, bit for bit): false when s is not
 * exactly one number. */
bool srv_json_number(const char *s, size_t len, double *out);

/* Tests: true reads with the scalar code only, as on a CPU without AVX-512
 * VBMI2 (the default, false, picks by CPU). */
void srv_json_array_force_scalar(bool on);

#endif
