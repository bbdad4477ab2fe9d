/* test_softmax.c - lib/softmax.c: the row passes of the online softmax
 * against double-precision exp, on every length up to past two vectors (the
 * 16-lane tails), with -inf (masked), NaN (overflowed) and extreme logits;
 * and the softcap pass against double tanh.
 *
 * The argument row[j] - m is a float difference (rounded before the exp);
 * the references take the same float. Tolerance: softmax.h promises exp
 * within 2 ulp of the exact exp (1.999 and 1.63e-7 relative measured over
 * every float); with a margin, rtol 3 * 2^-23 = 3.6e-7. Sums: n terms,
 * each within that, added in float: rtol 3.6e-7 + n * 2^-24.
 */
#include "softmax.h" /* tests may reach inside lib/ */
#include "testutil.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define EXP_RTOL 3.6e-7

static void test_max_all_tails(void **state)
{
    (void)state;
    tu_rng rng;
    tu_rng_seed(&rng, 21);
    float row[67];
    for (int32_t n = 1; n <= 67; n++) {
        tu_fill(&rng, row, (size_t)n, -50, 50);
        for (int32_t at = 0; at < n; at++) {
            float keep = row[at];
            float want = -INFINITY;
            row[at] = 1000.0f; /* the max at every position, tails included */
            for (int32_t j = 0; j < n; j++)
                want = row[j] > want ? row[j] : want;
            assert_true(pa__row_max(row, n) == want);
            row[at] = keep;
        }
    }
}

static void test_max_special(void **state)
{
    (void)state;
    float row[40];
    for (int j = 0; j < 40; j++)
        row[j] = -INFINITY;
    assert_true(pa__row_max(row, 40) == -INFINITY); /* fully masked */
    assert_true(pa__row_max(row, 0) == -INFINITY);  /* empty */
    row[33] = NAN; /* ignored by the max; the exp pass reports it */
    row[7] = -3.0f;
    assert_true(pa__row_max(row, 40) == -3.0f);
}

static void test_exp_sum_against_double(void **state)
{
    (void)state;
    tu_rng rng;
    tu_rng_seed(&rng, 22);
    float row[300];
    double want[300];
    const int32_t lens[] = {1, 2, 15, 16, 17, 31, 32, 33, 255, 256, 300};
    for (size_t c = 0; c < sizeof lens / sizeof *lens; c++) {
        const int32_t n = lens[c];
        /* x - m spans [-87, 0]: the whole range the softmax feeds it. */
        tu_fill(&rng, row, (size_t)n, -80, 7);
        const float m = 7.0f;
        double sum = 0;
        for (int32_t j = 0; j < n; j++) {
            want[j] = exp((double)(float)(row[j] - m)); /* the argument is a float */
            sum += want[j];
        }
        float got = pa__row_exp_sum(row, n, m);
        TU_ASSERT_CLOSE(row, want, (size_t)n, 0.0, EXP_RTOL);
        assert_true(fabs(got - sum) <= sum * (EXP_RTOL + n * 6e-8));
    }
}

static void test_exp_sum_special(void **state)
{
    (void)state;
    float row[20];
    for (int j = 0; j < 20; j++)
        row[j] = (float)j;
    row[3] = -INFINITY; /* masked: exactly 0 */
    row[18] = -200.0f;  /* underflows: exactly 0 */
    float s = pa__row_exp_sum(row, 20, 19.0f);
    assert_true(row[3] == 0.0f && row[18] == 0.0f);
    assert_true(row[19] == 1.0f); /* exp(0) */
    assert_true(isfinite(s) && s > 1.0f);
    for (int j = 0; j < 20; j++)
        row[j] = 0.0f;
    row[17] = NAN; /* an overflowed logit: the sum shows it */
    s = pa__row_exp_sum(row, 20, 0.0f);
    assert_true(isnan(row[17]) && isnan(s));
}

static void test_exp_scale(void **state)
{
    (void)state;
    tu_rng rng;
    tu_rng_seed(&rng, 23);
    float row[45];
    double want[45];
    tu_fill(&rng, row, 45, -30, 2);
    row[40] = -INFINITY;
    for (int j = 0; j < 45; j++)
        want[j] = exp((double)(float)(row[j] - 2.0f)) * 0.25;
    pa__row_exp_scale(row, 45, 2.0f, 0.25f);
    TU_ASSERT_CLOSE(row, want, 45, 0.0, EXP_RTOL);
    assert_true(row[40] == 0.0f);
}

/* Scale (in place and into another row) and fill: every element of every
 * length through the vector bodies and tails, nothing past the end. */
static void test_scale_and_fill(void **state)
{
    (void)state;
    for (int32_t n = 0; n <= 70; n++) {
        float src[72], dst[72];
        for (int32_t j = 0; j < 72; j++) {
            src[j] = (float)j * 0.75f - 20.0f;
            dst[j] = 99.0f;
        }
        pa__row_scale(dst, src, n, -1.5f);
        for (int32_t j = 0; j < 72; j++)
            assert_true(dst[j] == (j < n ? src[j] * -1.5f : 99.0f));
        pa__row_scale(src, src, n, 0.5f);
        for (int32_t j = 0; j < 72; j++)
            assert_true(src[j] == ((float)j * 0.75f - 20.0f) * (j < n ? 0.5f : 1.0f));
        pa__row_fill(dst, n, -INFINITY);
        for (int32_t j = 0; j < 72; j++)
            assert_true(j < n ? dst[j] == -INFINITY : dst[j] == 99.0f);
    }
}

/* The spacing of floats at |r| (r a double): 2^-149 below the normals. */
static double ulp_at(double r)
{
    int e;
    if (fabs(r) < 0x1p-126)
        return 0x1p-149;
    frexp(fabs(r), &e);
    return ldexp(1.0, e - 24);
}

/* softcap: cap * tanh(x / cap) within softmax.h's 3.2 ulp and 1.5e-7 cap of
 * the double value over the whole range, both pieces of the tanh and their
 * boundary at |x / cap| = 1; -inf stays -inf (a masked logit must not come
 * back as -cap), NaN stays NaN, and huge values give exactly +-cap. */
static void test_softcap(void **state)
{
    (void)state;
    enum { N = 4099 };
    const float caps[] = {1.0f, 30.0f, 50.0f, 0.7f};
    float *row = malloc(N * sizeof *row), *x = malloc(N * sizeof *x);
    assert_non_null(row);
    assert_non_null(x);
    for (size_t c = 0; c < sizeof caps / sizeof caps[0]; c++) {
        const float cap = caps[c];
        for (int j = 0; j < N; j++)
            x[j] = row[j] = cap * (float)(-12.0 + 24.0 * j / (N - 1)); /* x / cap in [-12, 12] */
        x[7] = row[7] = cap;
        x[8] = row[8] = -cap;
        x[9] = row[9] = nextafterf(cap, 0.0f);
        x[10] = row[10] = 9.1f * cap;
        x[11] = row[11] = 9.0f * cap;
        pa__row_softcap(row, N, cap);
        for (int j = 0; j < N; j++) {
            double want = cap * tanh((double)x[j] / cap), err = fabs(row[j] - want);
            assert_true(err <= 3.2 * ulp_at(want) && err <= 1.5e-7 * cap);
        }
        row[0] = -INFINITY;
        row[1] = NAN;
        row[2] = 1e30f;
        row[3] = -1e30f;
        row[4] = INFINITY;
        pa__row_softcap(row, 5, cap);
        assert_true(row[0] == -INFINITY);
        assert_true(isnan(row[1]));
        assert_true(row[2] == cap && row[3] == -cap && row[4] == cap);
    }
    free(row);
    free(x);
}

/* The tanh alone (cap = 1: x * (1 / cap) and the product are exact) on
 * every 61st float from 2^-12 to 10 (every 4093rd below) and every float
 * near where its pieces meet (1) and where it saturates (9.01, 9.1), in
 * rows of 4096 so that whole blocks take each path: within 1.32 ulp of
 * tanh; exactly x below 2^-12 (tanh(x) rounds to x there), subnormals and
 * -0 included; exactly +-1 from 9.1 to inf; odd to the bit (but -0, which
 * gives +0, as before). bench_attention checks all 2^32 floats. */
static void test_tanh_dense(void **state)
{
    (void)state;
    enum { C = 4096 };
    static float in[C], out[C], neg[C];
    const float near[] = {1.0f, 9.01f, 9.1f};
    double worst = 0.0;
    for (int pass = 0; pass < 4; pass++) {
        /* pass 0: 0 to 10 by 61 floats; 1-3: 2^16 floats around near[] */
        uint32_t lo, hi, tiny;
        const float t12 = 0x1p-12f;
        memcpy(&tiny, &t12, sizeof tiny);
        if (pass == 0) {
            const float ten = 10.0f;
            lo = 0;
            memcpy(&hi, &ten, sizeof hi);
        } else {
            memcpy(&lo, &near[pass - 1], sizeof lo);
            lo -= 1u << 15;
            hi = lo + (1u << 16);
        }
        for (uint32_t b = lo; b < hi;) {
            int n = 0;
            for (; n < C && b < hi; n++) {
                memcpy(&in[n], &b, sizeof b);
                b += pass > 0 ? 1 : b < tiny ? 4093 : 61;
                out[n] = in[n];
                neg[n] = -in[n];
            }
            pa__row_softcap(out, n, 1.0f);
            pa__row_softcap(neg, n, 1.0f);
            for (int j = 0; j < n; j++) {
                const double want = tanh((double)in[j]);
                const double ulps = fabs(out[j] - want) / ulp_at(want);
                worst = ulps > worst ? ulps : worst;
                if (!(ulps <= 1.32))
                    fail_msg("tanh(%.9g) = %.9g, want %.9g (%.2f ulp)", (double)in[j],
                             (double)out[j], want, ulps);
                if (in[j] < 0x1p-12f)
                    assert_true(out[j] == in[j]);
                if (in[j] >= 9.1f)
                    assert_true(out[j] == 1.0f);
                assert_true(neg[j] == -out[j] && (signbit(neg[j]) || in[j] == 0.0f));
            }
        }
    }
    assert_true(worst > 1.0); /* the check saw the pieces' worst cases */
    in[0] = 1e5f;
    in[1] = FLT_MAX;
    in[2] = -FLT_MAX;
    in[3] = NAN;
    in[4] = -NAN;
    pa__row_softcap(in, 5, 1.0f);
    assert_true(in[0] == 1.0f && in[1] == 1.0f && in[2] == -1.0f);
    assert_true(isnan(in[3]) && isnan(in[4]));
}

/* Rows mixing logits within the cap, past it, -inf and NaN at every length
 * to past four blocks of 16: a block takes the first piece alone only when
 * none of its finite logits reaches the cap. Each logit as it would be on
 * its own. */
static void test_softcap_mixed_rows(void **state)
{
    (void)state;
    tu_rng rng;
    tu_rng_seed(&rng, 24);
    float row[70], x[70];
    for (int32_t n = 1; n <= 70; n++)
        for (int rep = 0; rep < 40; rep++) {
            /* Mostly within the cap; every fourth row has one logit past it. */
            tu_fill(&rng, x, (size_t)n, -45.0, 45.0);
            if (rep % 4 == 1)
                x[(int32_t)tu_uniform(&rng, 0, n - 0.5)] = (float)tu_uniform(&rng, 50.0, 60.0);
            if (rep % 4 == 2)
                tu_fill(&rng, x, (size_t)n, -500.0, 500.0);
            if (rep % 4 == 3) {
                x[(int32_t)tu_uniform(&rng, 0, n - 0.5)] = -INFINITY;
                x[(int32_t)tu_uniform(&rng, 0, n - 0.5)] = NAN;
            }
            memcpy(row, x, (size_t)n * sizeof *row);
            pa__row_softcap(row, n, 50.0f);
            for (int32_t j = 0; j < n; j++) {
                float one = x[j];
                pa__row_softcap(&one, 1, 50.0f);
                assert_memory_equal(&row[j], &one, sizeof one);
                if (x[j] == -INFINITY)
                    assert_true(row[j] == -INFINITY);
                else if (isnan(x[j]))
                    assert_true(isnan(row[j]));
                else
                    assert_true(fabs(row[j] - 50.0 * tanh(x[j] / 50.0)) <= 1.5e-7 * 50);
            }
        }
}

/* FNV-1a over the softcap's bits on fixed rows (NaN counted as one value):
 * the AVX-512 code and the portable code (POSATTN_KERNEL=portable, GCC's
 * FMA clone, or any IEEE machine with fmaf) must give these same bits.
 * Changing the tanh's arithmetic on purpose changes the value below. */
static void test_softcap_bits(void **state)
{
    (void)state;
    enum { N = 20000 };
    const float caps[] = {1.0f, 50.0f, 30.0f};
    float *row = malloc(N * sizeof *row);
    uint64_t h = 1469598103934665603u;
    tu_rng rng;
    assert_non_null(row);
    tu_rng_seed(&rng, 25);
    for (size_t c = 0; c < sizeof caps / sizeof caps[0]; c++) {
        tu_fill(&rng, row, N, -12.0 * caps[c], 12.0 * caps[c]);
        for (int j = 0; j < N; j += 97)
            row[j] = j % 3 ? -INFINITY : NAN;
        pa__row_softcap(row, N, caps[c]);
        for (int j = 0; j < N; j++) {
            uint32_t b;
            memcpy(&b, &row[j], sizeof b);
            b = isnan(row[j]) ? 0x7fc00000u : b;
            for (int k = 0; k < 4; k++)
                h = (h ^ ((b >> (8 * k)) & 0xffu)) * 1099511628211u;
        }
    }
    free(row);
    if (h != UINT64_C(0x11d15804c2a48037))
        fail_msg("softcap bits hash %#" PRIx64, h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_max_all_tails),
        cmocka_unit_test(test_max_special),
        cmocka_unit_test(test_exp_sum_against_double),
        cmocka_unit_test(test_exp_sum_special),
        cmocka_unit_test(test_exp_scale),
        cmocka_unit_test(test_scale_and_fill),
        cmocka_unit_test(test_softcap),
        cmocka_unit_test(test_tanh_dense),
        cmocka_unit_test(test_softcap_mixed_rows),
        cmocka_unit_test(test_softcap_bits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
