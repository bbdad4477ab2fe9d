/* test_tile.c - lib/tile.c: the packed K^T and the two tile products against
 * double-precision references, over every row and column tail of the
 * micro-kernels, with strided operands and a sentinel around each output.
 *
 * Tolerance: a float product of kdim terms of magnitude <= 1 is within
 * kdim * 2^-24 of the exact sum in the worst case; 4e-6 * (1 + sum|a*b|)
 * covers kdim up to 64 with margin and is tight enough that a wrong
 * element, a missed term or a stale accumulator fails.
 */
#include "testutil.h"
#include "tile.h" /* tests may reach inside lib/ */

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SENTINEL -777.0f

static void fill_sentinel(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = SENTINEL;
}

/* Shapes across the 16 x 16 blocks of the AVX-512 packing: one partial
 * block of dimensions, several with a partial last one, whole blocks. */
static void test_pack_kt(void **state)
{
    (void)state;
    static const int32_t shapes[][3] = {{37, 5, 9}, {37, 37, 40}, {64, 64, 64}, {19, 33, 33}};
    tu_rng rng;
    tu_rng_seed(&rng, 11);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int32_t n = shapes[s][0], d = shapes[s][1], ldk = shapes[s][2];
        const int32_t j0 = n / 2, jn = n / 4 + 1; /* a slice of keys */
        const size_t ld = pa__tile_kt_ld(n);
        float *k = tu_alloc((size_t)n * ldk, sizeof(float));
        float *kt = tu_alloc((size_t)d * ld, sizeof(float));
        assert_true(ld >= (size_t)n && ld % 16 == 0);
        tu_fill(&rng, k, (size_t)n * ldk, -1, 1);
        fill_sentinel(kt, (size_t)d * ld);
        pa__tile_pack_kt(n, d, k, ldk, kt, ld);
        for (int32_t c = 0; c < d; c++) {
            for (size_t j = 0; j < ld; j++) {
                if (j < (size_t)n)
                    assert_true(kt[c * ld + j] == k[j * ldk + (size_t)c]);
                else
                    assert_true(kt[c * ld + j] == SENTINEL); /* padding untouched */
            }
        }
        /* A slice packed at an offset lands in its own columns only. */
        fill_sentinel(kt, (size_t)d * ld);
        pa__tile_pack_kt(jn, d, k + (size_t)j0 * ldk, ldk, kt + j0, ld);
        for (int32_t c = 0; c < d; c++)
            for (size_t j = 0; j < ld; j++)
                assert_true(kt[c * ld + j] == (j >= (size_t)j0 && j < (size_t)(j0 + jn)
                                                   ? k[j * ldk + (size_t)c]
                                                   : SENTINEL));
        free(k);
        free(kt);
    }
}

/* S = alpha A Bt for m rows 1..19, n columns across the 16/32 tails. */
static void test_qk_against_reference(void **state)
{
    (void)state;
    tu_rng rng;
    tu_rng_seed(&rng, 12);
    const int32_t ms[] = {1, 2, 5, 7, 8, 9, 15, 16, 19};
    const int32_t ns[] = {1, 3, 15, 16, 17, 31, 32, 33, 47, 48, 49, 100};
    const int32_t kd[] = {1, 7, 64};
    const float alpha = 0.37f;
    for (size_t a = 0; a < sizeof ms / sizeof *ms; a++)
        for (size_t b = 0; b < sizeof ns / sizeof *ns; b++)
            for (size_t c = 0; c < sizeof kd / sizeof *kd; c++) {
                const int32_t m = ms[a], n = ns[b], kdim = kd[c];
                const int lda = kdim + 3, lds = n + 5, off = 3; /* window inside a wider K^T */
                const size_t ldb = pa__tile_kt_ld(n + off + 11);
                float *A = tu_alloc((size_t)m * lda, sizeof(float));
                float *Bt = tu_alloc((size_t)kdim * ldb, sizeof(float));
                float *S = tu_alloc((size_t)m * lds, sizeof(float));
                tu_fill(&rng, A, (size_t)m * lda, -1, 1);
                tu_fill(&rng, Bt, (size_t)kdim * ldb, -1, 1);
                fill_sentinel(S, (size_t)m * lds);
                pa__tile_qk(m, n, kdim, alpha, A, lda, Bt + off, ldb, S, lds);
                for (int32_t i = 0; i < m; i++) {
                    for (int32_t j = 0; j < n; j++) {
                        double acc = 0, mag = 0;
                        for (int32_t d = 0; d < kdim; d++) {
                            double t = (double)A[i * lda + d] * Bt[d * ldb + off + j];
                            acc += t;
                            mag += fabs(t);
                        }
                        assert_true(fabs(S[i * lds + j] - alpha * acc) <= 4e-6 * (1 + mag));
                    }
                    for (int j = n; j < lds; j++) /* beyond n: untouched */
                        assert_true(S[i * lds + j] == SENTINEL);
                }
                free(A);
                free(Bt);
                free(S);
            }
}

/* O += P V for m rows across the 6-row tails, n columns across the 16/64
 * tails, and a V row stride wider than n (a kv head inside [Lk, Hkv*Dv]). */
static void test_pv_against_reference(void **state)
{
    (void)state;
    tu_rng rng;
    tu_rng_seed(&rng, 13);
    const int32_t ms[] = {1, 4, 5, 6, 7, 12, 13, 64};
    const int32_t ns[] = {1, 8, 16, 17, 40, 48, 49, 64, 65, 128, 130};
    const int32_t kd[] = {1, 9, 256};
    for (size_t a = 0; a < sizeof ms / sizeof *ms; a++)
        for (size_t b = 0; b < sizeof ns / sizeof *ns; b++)
            for (size_t c = 0; c < sizeof kd / sizeof *kd; c++) {
                const int32_t m = ms[a], n = ns[b], kdim = kd[c];
                const int ldp = kdim + 1, ldv = 2 * n + 3, ldo = n + 2;
                float *P = tu_alloc((size_t)m * ldp, sizeof(float));
                float *V = tu_alloc((size_t)kdim * ldv, sizeof(float));
                float *O = tu_alloc((size_t)m * ldo, sizeof(float));
                tu_fill(&rng, P, (size_t)m * ldp, 0, 1);
                tu_fill(&rng, V, (size_t)kdim * ldv, -1, 1);
                fill_sentinel(O, (size_t)m * ldo);
                for (int32_t i = 0; i < m; i++) /* the running output it adds to */
                    tu_fill(&rng, O + (size_t)i * ldo, (size_t)n, -2, 2);
                float *O0 = tu_alloc((size_t)m * ldo, sizeof(float));
                memcpy(O0, O, (size_t)m * ldo * sizeof(float));
                pa__tile_pv(m, n, kdim, P, ldp, V, ldv, O, ldo);
                for (int32_t i = 0; i < m; i++) {
                    for (int32_t j = 0; j < n; j++) {
                        double acc = O0[i * ldo + j], mag = fabs(acc);
                        for (int32_t k = 0; k < kdim; k++) {
                            double t = (double)P[i * ldp + k] * V[k * ldv + j];
                            acc += t;
                            mag += fabs(t);
                        }
                        assert_true(fabs(O[i * ldo + j] - acc) <= 4e-6 * (1 + mag));
                    }
                    for (int j = n; j < ldo; j++)
                        assert_true(O[i * ldo + j] == SENTINEL);
                }
                free(P);
                free(V);
                free(O);
                free(O0);
            }
}

/* Empty products touch nothing. */
static void test_empty(void **state)
{
    (void)state;
    float s = SENTINEL, a = 1, b = 1;
    pa__tile_qk(0, 4, 1, 1, &a, 1, &b, 16, &s, 4);
    pa__tile_qk(4, 0, 1, 1, &a, 1, &b, 16, &s, 1);
    pa__tile_pv(1, 1, 0, &a, 1, &b, 1, &s, 1);
    assert_true(s == SENTINEL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pack_kt),
        cmocka_unit_test(test_qk_against_reference),
        cmocka_unit_test(test_pv_against_reference),
        cmocka_unit_test(test_empty),
    };
    print_message("tile kernels: %s\n", pa__tile_native() ? "AVX-512" : "OpenBLAS");
    return cmocka_run_group_tests(tests, NULL, NULL);
}
