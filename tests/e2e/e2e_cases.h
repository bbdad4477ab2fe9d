/* e2e_cases.h - attention cases for the end-to-end tests: random inputs, the
 * request JSON the test sends (flat, nested or b64 tensors), the answer of
 * pa_attention_run in this process, and the checks of the server's answer
 * against it. Shared by tests/e2e/test_e2e_*.c; HTTP is in tests/e2e/e2e_http.h.
 *
 * Tolerance: JSON floats round-trip (requests %.9g, answers shortest text),
 * the server and the library run the same kernels:
 * |got - want| <= E2E_ATOL + E2E_RTOL |want|.
 */
#ifndef E2E_CASES_H
#define E2E_CASES_H

#include "e2e_http.h"
#include "testutil.h"

#include <stdbool.h>
#include <stdint.h>

#define E2E_ATOL 1e-5
#define E2E_RTOL 1e-4

typedef enum enc { ENC_FLAT, ENC_NESTED, ENC_B64 } enc;

/* A row-major tensor of up to 3 dimensions; data is malloc'd. */
typedef struct tensor {
    int ndim;
    int64_t shape[3];
    size_t n;
    float *data;
} tensor;

/* Values uniform in [-1, 1]; d2 unused when ndim is 2. */
tensor tensor_rand(tu_rng *r, int ndim, int64_t d0, int64_t d1, int64_t d2);

/* One attention item: its inputs, scheme and the library's answers. */
typedef struct acase {
    char id[32];
    pa_scheme scheme;
    char scheme_json[256]; /* scalar scheme members after "type", e.g. ,"scaling":"yarn" */
    int Lq, Lk, H, Hkv, D, Dv;
    bool causal;
    bool want_weights;
    int ref_rows; /* 0: out holds every query row; else only the last ref_rows */
    tensor q, k, v, table, rel_k, rel_v;
    /* The library's answers. */
    float *out;     /* [Lq, H, Dv] */
    float *weights; /* [H, Lq, Lk] */
} acase;

/* q [Lq, H, D], k [Lk, Hkv, D], v [Lk, Hkv, Dv] from seed; free with acase_free. */
void acase_init(acase *c, const char *id, pa_scheme_type type, int Lq, int Lk, int H, int Hkv,
                int D, int Dv, uint64_t seed);
void acase_free(acase *c);
/* Fills c->out (and c->weights) from the library in this process. */
void acase_reference(acase *c);

/* {"analysis":"<kind>", <the item's members>} for /v1/analyze. */
void sb_analysis(sbuf *b, const char *kind, const acase *c, enc e);
/* {"inputs":[items...],"output_encoding":...} for /v1/attention. */
void sb_request(sbuf *b, acase *cs, int n, enc in, bool b64_out);

/* An answer tensor {"shape","data"|"b64"} against want [product(shape)]. */
void check_tensor(const cJSON *t, const char *what, int ndim, const int64_t *shape,
                  const float *want);
/* outputs[i] of a batch answer against case c. */
void check_output(const cJSON *o, const acase *c);
/* POSTs the cases as one batch and checks every output; *r is the answer. */
void run_batch(const server *s, acase *cs, int n, enc in, bool b64_out, resp *r);
/* outputs[i] of a 200 batch answer is an error with code, field starting with field. */
void check_item_error(const resp *r, int i, const char *code, const char *field);

#endif
