/* ref_half.c - see ref_half.h. */
#include "ref_half.h"

#include <math.h>

static double value(uint32_t bits, int frac, int ebits)
{
    const uint32_t mmask = (1u << frac) - 1, emask = (1u << ebits) - 1;
    const int bias = (int)(emask >> 1);
    uint32_t s = bits >> (frac + ebits), e = (bits >> frac) & emask, m = bits & mmask;
    double v;
    if (e == emask)
        v = m ? NAN : INFINITY;
    else if (e == 0)
        v = ldexp((double)m, 1 - bias - frac);
    else
        v = ldexp(1.0 + ldexp((double)m, -frac), (int)e - bias);
    return s ? -v : v;
}

double ref_f16_value(uint16_t h)
{
    return value(h, 10, 5);
}

double ref_bf16_value(uint16_t b)
{
    return value(b, 7, 8);
}

/* Binary search over the non-negative finite patterns 0 .. max, whose values
 * increase with the pattern. */
static uint16_t round_to(double x, double (*val)(uint16_t), uint16_t max, uint16_t inf)
{
    uint16_t sign = signbit(x) ? 0x8000u : 0;
    double a = fabs(x);
    double top = val(max), ulp = top - val((uint16_t)(max - 1));
    uint32_t lo = 0, hi = max;
    if (a >= top + ulp / 2)
        return (uint16_t)(sign | inf); /* the tie past the top goes up: max is odd */
    while (lo < hi) {                  /* the last pattern whose value is <= a */
        uint32_t mid = (lo + hi + 1) / 2;
        if (val((uint16_t)mid) <= a)
            lo = mid;
        else
            hi = mid - 1;
    }
    if (lo < max) {
        double below = val((uint16_t)lo), above = val((uint16_t)(lo + 1));
        if (a - below > above - a || (a - below == above - a && (lo & 1)))
            lo++;
    }
    return (uint16_t)(sign | lo);
}

uint16_t ref_f16_round(double x)
{
    return round_to(x, ref_f16_value, 0x7bffu, 0x7c00u);
}

uint16_t ref_bf16_round(double x)
{
    return round_to(x, ref_bf16_value, 0x7f7fu, 0x7f80u);
}
