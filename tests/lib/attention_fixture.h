/* attention_fixture.h - random attention cases and their check against the
 * double-precision reference (tests/ref_attention.c), shared by
 * tests/lib/test_attention.c, test_attention_mask.c, test_attention_options.c
 * and test_attention_decode.c.
 *
 * Tolerance: float32 kernels against double, inputs in [-1, 1]:
 * |got - want| <= ATOL + RTOL |want| for outputs, weights and logits.
 */
#ifndef PA_TEST_ATTENTION_FIXTURE_H
#define PA_TEST_ATTENTION_FIXTURE_H

#include "posattn.h"
#include "testutil.h"

#include <stdbool.h>
#include <stdint.h>

#define ATOL 2e-5
#define RTOL 1e-4

/* Owns the inputs of one test case. */
typedef struct fixture {
    pa_scheme scheme;
    pa_attention a;
    float *q, *k, *v, *x, *wq, *wk, *wv, *wo;
    float *table, *rel_k, *rel_v;
    int32_t *qpos, *kpos;
} fixture;

void fixture_free(fixture *f);
/* n uniform values in [lo, hi) (tu_alloc'd). */
float *rand_tensor(tu_rng *r, size_t n, double lo, double hi);
/* q/k/v mode with random inputs in [-1, 1]. */
void setup_qkv(fixture *f, pa_scheme_type type, int Lq, int Lk, int H, int Hkv, int D, int Dv,
               uint64_t seed);
/* Layer mode with random x and weights scaled to keep logits O(1). */
void setup_layer(fixture *f, pa_scheme_type type, int L, int dm, int H, int Hkv, int D, int Dv,
                 int dout, uint64_t seed);

/* WANT_STATS: entropy and distance, |got - want| <= ATOL + RTOL |want| too
 * (entropy in nats, distance in positions). */
enum { WANT_WEIGHTS = 1, WANT_LOGITS = 2, WANT_ROT = 4, WANT_STATS = 8, WANT_ALL = 15 };
/* Runs the library and the reference on *a and compares the outputs want
 * asks for (the output always). */
void check_against_reference(const pa_attention *a, int want);
/* Fills the scheme tables the fixture's type needs (t5, shaw). */
void add_tables(fixture *f, int H, int D, int Dv, uint64_t seed);

/* The schemes of q/k/v mode (the absolute ones need layer mode). */
extern const pa_scheme_type qkv_schemes[5];
/* Runs a and returns its weights [H, Lq, Lk] (tu_alloc'd) and, in *out,
 * its output (tu_alloc'd). */
float *run_weights(const pa_attention *a, float **out);
/* A random 0/1 mask [planes, Lq, Lk] with about `keep` of the entries 1. */
uint8_t *rand_mask(tu_rng *r, size_t n, double keep);

/* The logit bias of a scheme as pa_attention_run applies it: the logits
 * [H, Lq, Lk] (tu_alloc'd; the caller frees them) of a call with zero q and k of head_dim D, scale
 * 1, at the given positions (NULL for the defaults); -inf where causal hides
 * a key. */
float *bias_probe(const pa_scheme *s, int32_t H, int32_t D, const int32_t *qpos, int32_t Lq,
                  const int32_t *kpos, int32_t Lk, bool causal);

#endif
