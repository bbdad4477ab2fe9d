/* test_softmax_avx2.c - lib/softmax_avx2.c against lib/softmax.c, bit for
 * bit: the max, exp-and-sum, exp-and-scale and exp-and-statistics passes
 * written out for AVX2 and FMA must give exactly what the C passes give
 * (the decode kernel's AVX2 path is the portable one,
 * tests/lib/test_attention_decode.c), on
 * every length past two 16-lane blocks and their tails, over arguments
 * from below the exp's -87 floor to past its 88 ceiling, with -inf, NaN,
 * signed zeros and the rounding trick's ties (x * log2e at k + 0.5).
 *
 * main() sets POSATTN_KERNEL=portable before the first call, so that
 * softmax.c's own passes run (lib/cpu.h) while the AVX2 ones are called by
 * name. Where the CPU lacks AVX2 or FMA there is nothing to compare.
 */
#include "cpu.h"
#include "softmax.h" /* tests may reach inside lib/ */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { N = 70 };

static bool no_avx2(void)
{
    /* pa__cpu_avx2_fma is off under POSATTN_KERNEL=portable: ask the CPU. */
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return false;
#endif
    print_message("no AVX2 with FMA here: nothing to compare\n");
    return true;
}

static void assert_same_bits(const float *a, const float *b, int32_t n, const char *what,
                             int32_t len)
{
    for (int32_t j = 0; j < n; j++)
        if (memcmp(&a[j], &b[j], sizeof(float)) != 0)
            fail_msg("%s, length %d, element %d: AVX2 %.9g (0x%08x), C %.9g", what, len, j,
                     (double)a[j], *(const unsigned *)(const void *)&a[j], (double)b[j]);
}

/* A row of n logits of the kind r draws: 0 uniform in [-100, 100], 1 near
 * the floor and ceiling, 2 ties of the rounding (k + 0.5) / log2e and
 * specials, 3 small. */
static void fill(tu_rng *r, float *row, int32_t n, int kind)
{
    static const float special[] = {-INFINITY, NAN,   0.0f,   -0.0f,   -87.0f, -86.99999f,
                                    88.0f,     88.5f, 1e-30f, -1e-30f, 87.5f,  -87.00001f};
    for (int32_t j = 0; j < n; j++) {
        switch (kind) {
        case 0:
            row[j] = (float)tu_uniform(r, -100, 100);
            break;
        case 1:
            row[j] = (float)(tu_uniform(r, 0, 1) < 0.5 ? tu_uniform(r, -88, -86)
                                                       : tu_uniform(r, 86, 90));
            break;
        case 2:
            row[j] = tu_uniform(r, 0, 1) < 0.3
                         ? special[(size_t)tu_uniform(r, 0, 11.99)]
                         : (float)((floor(tu_uniform(r, -120, 120)) + 0.5) / 1.4426950408889634);
            break;
        default:
            row[j] = (float)tu_uniform(r, -1e-3, 1e-3);
            break;
        }
    }
}

static void test_max(void **state)
{
    tu_rng r;
    float row[N];
    (void)state;
    if (no_avx2())
        return;
    tu_rng_seed(&r, 71);
    for (int kind = 0; kind < 4; kind++)
        for (int32_t n = 0; n <= N; n++) {
            float a, b;
            fill(&r, row, n, kind);
            a = pa__row_max_avx2(row, n);
            b = pa__row_max(row, n);
            assert_same_bits(&a, &b, 1, "max", n);
        }
}

static void test_exp_sum(void **state)
{
    tu_rng r;
    float row[N], mine[N], theirs[N];
    (void)state;
    if (no_avx2())
        return;
    tu_rng_seed(&r, 72);
    for (int kind = 0; kind < 4; kind++)
        for (int32_t n = 0; n <= N; n++)
            for (int rep = 0; rep < 4; rep++) {
                /* m: the row's max as the kernels pass it, or 0 (raw
                 * arguments, floor and ceiling included), or -inf */
                float m, a, b;
                fill(&r, row, n, kind);
                m = rep == 0 ? pa__row_max(row, n) : rep == 1 ? 0.0f : rep == 2 ? -1.5f : 30.0f;
                if (!isfinite(m))
                    m = 0.0f;
                memcpy(mine, row, sizeof row);
                memcpy(theirs, row, sizeof row);
                a = pa__row_exp_sum_avx2(mine, n, m);
                b = pa__row_exp_sum(theirs, n, m);
                assert_same_bits(mine, theirs, n, "exp_sum row", n);
                assert_same_bits(&a, &b, 1, "exp_sum sum", n);
            }
}

static void test_exp_scale(void **state)
{
    tu_rng r;
    float row[N], mine[N], theirs[N];
    (void)state;
    if (no_avx2())
        return;
    tu_rng_seed(&r, 73);
    for (int kind = 0; kind < 4; kind++)
        for (int32_t n = 0; n <= N; n++) {
            const float m = kind == 1 ? 0.0f : 2.5f, scale = 1.0f / 3.0f;
            fill(&r, row, n, kind);
            memcpy(mine, row, sizeof row);
            memcpy(theirs, row, sizeof row);
            pa__row_exp_scale_avx2(mine, n, m, scale);
            pa__row_exp_scale(theirs, n, m, scale);
            assert_same_bits(mine, theirs, n, "exp_scale", n);
        }
}

/* The exp pass with the row statistics' three sums, over positions up to
 * 2^31 apart (where the distance's conversion must round the exact uint32
 * difference once), far thresholds below and above them, and rows with
 * -inf and NaN: the row, the sum and the three statistics bit for bit. */
static void test_exp_sum_stats(void **state)
{
    tu_rng r;
    float row[N], mine[N], theirs[N];
    int32_t kpos[N];
    (void)state;
    if (no_avx2())
        return;
    tu_rng_seed(&r, 74);
    for (int kind = 0; kind < 4; kind++)
        for (int32_t n = 0; n <= N; n++)
            for (int rep = 0; rep < 3; rep++) {
                const int32_t qpos = rep == 0 ? 100 : rep == 1 ? INT32_MAX - 7 : INT32_MIN + 3;
                const float far = rep == 0 ? 20.0f : rep == 1 ? 3e9f : 1e5f;
                float m, a[4], b[4];
                fill(&r, row, n, kind);
                for (int32_t j = 0; j < n; j++)
                    kpos[j] = rep == 0   ? j + (int32_t)tu_uniform(&r, 0, 200)
                              : rep == 1 ? (int32_t)tu_uniform(&r, -2147483648.0, 2147483647.0)
                                         : INT32_MAX - (int32_t)tu_uniform(&r, 0, 1 << 20);
                m = pa__row_max(row, n);
                if (!isfinite(m))
                    m = 0.0f;
                memcpy(mine, row, sizeof row);
                memcpy(theirs, row, sizeof row);
                a[0] = pa__row_exp_sum_stats_avx2(mine, n, m, kpos, qpos, far, &a[1], &a[2], &a[3]);
                b[0] = pa__row_exp_sum_stats(theirs, n, m, kpos, qpos, far, &b[1], &b[2], &b[3]);
                assert_same_bits(mine, theirs, n, "exp_sum_stats row", n);
                assert_same_bits(a, b, 4, "exp_sum_stats sums (sum, entropy, distance, far)", n);
            }
}

/* Every float argument in [-90, 90] at a stride, and the rounding ties:
 * exp alone (a row of one, m = 0), both ways. */
static void test_exp_arguments(void **state)
{
    float mine[16], theirs[16];
    (void)state;
    if (no_avx2())
        return;
    for (float x = -90.0f; x < 90.0f; x = nextafterf(x, INFINITY) + 1e-4f * fabsf(x) + 1e-9f) {
        for (int k = 0; k < 16; k++)
            mine[k] = theirs[k] = x;
        pa__row_exp_sum_avx2(mine, 16, 0.0f);
        pa__row_exp_sum(theirs, 16, 0.0f);
        assert_same_bits(mine, theirs, 1, "exp", 16);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_max),           cmocka_unit_test(test_exp_sum),
        cmocka_unit_test(test_exp_scale),     cmocka_unit_test(test_exp_sum_stats),
        cmocka_unit_test(test_exp_arguments),
    };
    setenv("POSATTN_KERNEL", "portable", 1);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
