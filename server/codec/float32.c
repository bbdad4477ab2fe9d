/* float32.c - see float32.h. */
#include "codec/float32.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* Values this close to FLT_MAX still round to FLT_MAX (half an ulp above it);
 * from here on they would round to infinity. */
#define FLOAT_ROUND_LIMIT 0x1.ffffffp127

bool srv_host_little_endian(void)
{
    const uint32_t one = 1;
    unsigned char b;
    memcpy(&b, &one, 1);
    return b == 1;
}

void srv_swap_bytes32(void *p, size_t count)
{
    unsigned char *b = p;
    for (size_t i = 0; i < count; i++, b += 4) {
        unsigned char t0 = b[0], t1 = b[1];
        b[0] = b[3];
        b[1] = b[2];
        b[2] = t1;
        b[3] = t0;
    }
}

/* Converts one JSON number to float32: false when it is not a number or is
 * outside float range. */
bool srv_double_to_float(double v, float *out)
{
    if (!(fabs(v) < FLOAT_ROUND_LIMIT)) /* catches NaN and inf too */
        return false;
    /* Between FLT_MAX and the limit the conversion is out of range in C's
     * eyes, although IEEE rounds it to FLT_MAX; do that explicitly. */
    *out = fabs(v) > FLT_MAX ? (v > 0 ? FLT_MAX : -FLT_MAX) : (float)v;
    return true;
}

bool srv_floats_finite(const float *p, size_t count)
{
    /* Exponent bits all ones is inf or NaN. The blocks of a fixed 16 are
     * what GCC vectorizes at -O2. */
    uint32_t any = 0;
    size_t i = 0;
    for (; i + 16 <= count; i += 16) {
        uint32_t block = 0;
        for (size_t j = 0; j < 16; j++) {
            uint32_t bits;
            memcpy(&bits, &p[i + j], sizeof bits);
            block |= (uint32_t)((bits & 0x7f800000u) == 0x7f800000u);
        }
        any |= block;
    }
    for (; i < count; i++) {
        uint32_t bits;
        memcpy(&bits, &p[i], sizeof bits);
        any |= (uint32_t)((bits & 0x7f800000u) == 0x7f800000u);
    }
    return any == 0;
}
