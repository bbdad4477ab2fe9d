/* testutil.h - helpers shared by the cmocka unit tests: seeded random inputs
 * and comparisons against double-precision references with a stated tolerance.
 */
#ifndef PA_TESTUTIL_H
#define PA_TESTUTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "posattn.h"

/* Deterministic generator (xorshift64*), so a failing case can be replayed. */
typedef struct tu_rng {
    uint64_t s;
} tu_rng;

void tu_rng_seed(tu_rng *r, uint64_t seed);
/* Uniform in [lo, hi). */
double tu_uniform(tu_rng *r, double lo, double hi);
/* Fills x[n] with uniform values in [lo, hi). */
void tu_fill(tu_rng *r, float *x, size_t n, double lo, double hi);
/* calloc that fails the test instead of returning NULL. */
void *tu_alloc(size_t count, size_t elem);

/* Largest |got - want| / (atol + rtol*|want|) over n values; <= 1 means within
 * tolerance. Both -inf (masked logits) compare equal. NaN in got fails. */
double tu_worst(const float *got, const double *want, size_t n, double atol, double rtol,
                size_t *worst_index);

/* Fails the test with the index and values when any element is outside
 * atol + rtol*|want|. */
#define TU_ASSERT_CLOSE(got, want, n, atol, rtol)                                          \
    tu_assert_close((got), (want), (n), (atol), (rtol), #got, __FILE__, __LINE__)
void tu_assert_close(const float *got, const double *want, size_t n, double atol, double rtol,
                     const char *what, const char *file, int line);

/* Fails unless status == want; prints the error message otherwise. */
#define TU_ASSERT_STATUS(st, want, err)                                                    \
    tu_assert_status((st), (want), (err), __FILE__, __LINE__)
void tu_assert_status(pa_status st, pa_status want, const pa_error *err, const char *file,
                      int line);

#endif
