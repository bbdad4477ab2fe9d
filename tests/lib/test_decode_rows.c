/* test_decode_rows.c - the decode kernel's row kernels (lib/decode_rows.h),
 * called directly.
 *
 * A key's logit is its own sum whichever way the keys are grouped: one key
 * alone (nk = 1, as the key-major AVX-512 decode calls it) gives the bits
 * of the same key among four, for every row count and head size, over
 * float keys and over 16-bit ones, which give the bits of the float keys
 * they widen to. The logits are then checked against a double dot
 * product. make test runs it with the kernels this CPU picks and with
 * POSATTN_KERNEL=portable and =avx2.
 */
#include "decode_rows.h"
#include "ref_half.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint32_t bits_of(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

/* n rows against 4 keys of dimension d (row stride ldk), float keys and
 * their 16-bit twins of type t: every grouping gives the same bits. */
static void check_groupings(pa_dtype t, int n, int d, tu_rng *r)
{
    const pa__row_ops ops = pa__row_ops_pick(t);
    const size_t ldk = (size_t)d + 3, lds = 4;
    float *q = tu_alloc((size_t)n * d, sizeof(float));
    float *kf = tu_alloc(4 * ldk, sizeof(float));
    uint16_t *kh = tu_alloc(4 * ldk, sizeof(uint16_t));
    float *s4 = tu_alloc((size_t)n * lds, sizeof(float)), *s1 = tu_alloc((size_t)n, sizeof(float));
    float *s16 = tu_alloc((size_t)n * lds, sizeof(float));
    const float scale = 0.125f;
    tu_fill(r, q, (size_t)n * d, -2, 2);
    for (size_t i = 0; i < 4 * ldk; i++) { /* 16-bit keys, and the floats they widen to */
        const float x = (float)tu_uniform(r, -2, 2);
        kh[i] = t == PA_DTYPE_F16 ? ref_f16_round(x) : ref_bf16_round(x);
        kf[i] = (float)(t == PA_DTYPE_F16 ? ref_f16_value(kh[i]) : ref_bf16_value(kh[i]));
    }
    ops.dot(q, n, d, kf, ldk, 4, scale, s4, lds);
    ops.dot16(q, n, d, kh, ldk, 4, scale, s16, lds);
    for (int u = 0; u < 4; u++) {
        memset(s1, 0xFF, (size_t)n * sizeof(float));
        ops.dot(q, n, d, kf + (size_t)u * ldk, ldk, 1, scale, s1, 1);
        for (int i = 0; i < n; i++) {
            double want = 0.0;
            for (int c = 0; c < d; c++)
                want += (double)q[(size_t)i * d + c] * kf[(size_t)u * ldk + (size_t)c];
            want *= scale;
            if (bits_of(s1[i]) != bits_of(s4[(size_t)i * lds + (size_t)u]) ||
                bits_of(s16[(size_t)i * lds + (size_t)u]) !=
                    bits_of(s4[(size_t)i * lds + (size_t)u]) ||
                fabs(s1[i] - want) > 1e-5 * (1.0 + sqrt((double)d) * 4.0)) {
                fprintf(stderr,
                        "%s n=%d d=%d row %d key %d: alone %a, among four %a, 16-bit %a, double "
                        "%a\n",
                        t == PA_DTYPE_F16 ? "f16" : "bf16", n, d, i, u, (double)s1[i],
                        (double)s4[(size_t)i * lds + (size_t)u],
                        (double)s16[(size_t)i * lds + (size_t)u], want);
                fail();
            }
        }
    }
    free(q);
    free(kf);
    free(kh);
    free(s4);
    free(s1);
    free(s16);
}

static void test_one_key_among_four(void **state)
{
    (void)state;
    static const int dims[] = {1, 15, 16, 37, 64, 80, 128, 256};
    tu_rng r;
    tu_rng_seed(&r, 31);
    for (int t = 0; t < 2; t++)
        for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++)
            for (int n = 1; n <= 9; n++)
                check_groupings(t == 0 ? PA_DTYPE_BF16 : PA_DTYPE_F16, n, dims[di], &r);
}

/* dot_heads16, where the ops have it: one key's rows of several kv heads
 * in one call give, head by head, dot16's bits for that head's rows and
 * row of the key (nk = 1), and write nothing else; its look-ahead
 * (ka, va) changes nothing. */
static void test_heads_in_one_call(void **state)
{
    (void)state;
    static const int dims[] = {16, 37, 64, 128};
    tu_rng r;
    tu_rng_seed(&r, 37);
    for (int t = 0; t < 2; t++) {
        const pa_dtype dt = t == 0 ? PA_DTYPE_BF16 : PA_DTYPE_F16;
        const pa__row_ops ops = pa__row_ops_pick(dt);
        if (ops.dot_heads16 == NULL) {
            print_message("%s: no dot_heads16 with these kernels\n", t == 0 ? "bf16" : "f16");
            continue;
        }
        for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++)
            for (int n = 1; n <= 9; n += 2)
                for (int heads = 1; heads <= 8; heads += 3) {
                    const int d = dims[di];
                    const size_t lds = 5, rows = (size_t)heads * n;
                    float *q = tu_alloc(rows * d, sizeof(float));
                    uint16_t *k = tu_alloc((size_t)heads * d, sizeof(uint16_t));
                    float *s = tu_alloc(rows * lds, sizeof(float));
                    float *want = tu_alloc(rows * lds, sizeof(float));
                    tu_fill(&r, q, rows * d, -2, 2);
                    for (int i = 0; i < heads * d; i++) {
                        const float x = (float)tu_uniform(&r, -2, 2);
                        k[i] = dt == PA_DTYPE_F16 ? ref_f16_round(x) : ref_bf16_round(x);
                    }
                    memset(s, 0x7F, rows * lds * sizeof(float));
                    memcpy(want, s, rows * lds * sizeof(float));
                    for (int h = 0; h < heads; h++)
                        ops.dot16(q + (size_t)h * n * d, n, d, k + (size_t)h * d, (size_t)d, 1,
                                  0.125f, want + (size_t)h * n * lds, lds);
                    ops.dot_heads16(q, n, heads, d, k, k, k, d, 0.125f, s, lds);
                    for (size_t i = 0; i < rows * lds; i++)
                        if (bits_of(s[i]) != bits_of(want[i]))
                            fail_msg("%s d=%d n=%d heads=%d: element %zu %a, head by head %a",
                                     t == 0 ? "bf16" : "f16", d, n, heads, i, (double)s[i],
                                     (double)want[i]);
                    free(q);
                    free(k);
                    free(s);
                    free(want);
                }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_key_among_four),
        cmocka_unit_test(test_heads_in_one_call),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
