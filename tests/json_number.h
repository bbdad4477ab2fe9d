/* json_number.h - JSON number texts for the float formatter's checks
 * (tests/server/codec/test_fmt_float.c and bench/check_fmt_float_exhaustive.c): the
 * grammar, and the split into significant digits and a power of ten.
 */
#ifndef TESTS_JSON_NUMBER_H
#define TESTS_JSON_NUMBER_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

/* JSON's number grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? */
static inline bool is_json_number(const char *s)
{
    if (*s == '-')
        s++;
    if (*s == '0')
        s++;
    else if (*s >= '1' && *s <= '9')
        while (*s >= '0' && *s <= '9')
            s++;
    else
        return false;
    if (*s == '.') {
        s++;
        if (!(*s >= '0' && *s <= '9'))
            return false;
        while (*s >= '0' && *s <= '9')
            s++;
    }
    if (*s == 'e' || *s == 'E') {
        s++;
        if (*s == '+' || *s == '-')
            s++;
        if (!(*s >= '0' && *s <= '9'))
            return false;
        while (*s >= '0' && *s <= '9')
            s++;
    }
    return *s == '\0';
}

/* Splits a JSON number text (no sign) into its significant digits, leading
 * and trailing zeros removed, as an integer D and the exponent K with value
 * D 10^K. Returns the digit count n (0 for zero). */
static inline int decompose(const char *s, uint64_t *d_out, int *k_out)
{
    uint64_t d = 0;
    int k = 0, n = 0;
    bool after_point = false;
    for (; *s && *s != 'e' && *s != 'E'; s++) {
        if (*s == '.') {
            after_point = true;
            continue;
        }
        if (after_point)
            k--;
        if (n == 0 && *s == '0')
            continue; /* leading zero */
        d = d * 10 + (uint64_t)(*s - '0');
        n++;
    }
    if (*s)
        k += atoi(s + 1);
    while (n > 0 && d % 10 == 0) {
        d /= 10;
        k++;
        n--;
    }
    *d_out = d;
    *k_out = k;
    return n;
}

#endif
