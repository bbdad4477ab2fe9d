/* testutil.c - see testutil.h. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

void tu_rng_seed(tu_rng *r, uint64_t seed)
{
    r->s = seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
    if (r->s == 0)
        r->s = 1;
}

double tu_uniform(tu_rng *r, double lo, double hi)
{
    r->s ^= r->s >> 12;
    r->s ^= r->s << 25;
    r->s ^= r->s >> 27;
    uint64_t v = r->s * 0x2545F4914F6CDD1Dull;
    return lo + (hi - lo) * ((double)(v >> 11) / 9007199254740992.0);
}

void tu_fill(tu_rng *r, float *x, size_t n, double lo, double hi)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)tu_uniform(r, lo, hi);
}

void *tu_alloc(size_t count, size_t elem)
{
    void *p = calloc(count ? count : 1, elem ? elem : 1);
    if (p == NULL)
        fail_msg("out of memory allocating %zu x %zu", count, elem);
    return p;
}

double tu_worst(const float *got, const double *want, size_t n, double atol, double rtol,
                size_t *worst_index)
{
    double worst = 0.0;
    size_t wi = 0;
    for (size_t i = 0; i < n; i++) {
        double g = got[i], w = want[i], e;
        if (isinf(w) && isinf(g) && (w < 0) == (g < 0))
            continue;
        if (isnan(g) || isnan(w) || isinf(g) || isinf(w))
            e = INFINITY;
        else
            e = fabs(g - w) / (atol + rtol * fabs(w));
        if (e > worst) {
            worst = e;
            wi = i;
        }
    }
    if (worst_index != NULL)
        *worst_index = wi;
    return worst;
}

void tu_assert_close(const float *got, const double *want, size_t n, double atol, double rtol,
                     const char *what, const char *file, int line)
{
    size_t wi;
    double worst = tu_worst(got, want, n, atol, rtol, &wi);
    if (worst > 1.0) {
        print_error("%s:%d: %s[%zu] = %.9g, reference %.9g (atol %.1e, rtol %.1e, %zu values)\n",
                    file, line, what, wi, (double)got[wi], want[wi], atol, rtol, n);
        _fail(file, line);
    }
}

void tu_assert_status(pa_status st, pa_status want, const pa_error *err, const char *file,
                      int line)
{
    if (st != want) {
        print_error("%s:%d: status %s, expected %s (field '%s': %s)\n", file, line,
                    pa_status_name(st), pa_status_name(want), err ? err->field : "",
                    err ? err->message : "");
        _fail(file, line);
    }
}
