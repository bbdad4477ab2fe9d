/* api_harness.h - the JSON API (server/api/) driven without HTTP, for
 * tests/server/api/test_api*.c and tests/server/v2/test_api_v2.c: a request
 * goes through srv_job_prepare, every task runs on this thread,
 * srv_job_finish renders, and the answer is parsed back with cJSON.
 * Builders for request JSON, checks of answers (results within 1e-6 +
 * 1e-6 |want|, error code, status and field), and a q/k/v fixture with the
 * core library's answer for it.
 *
 * Checks fail the running cmocka test. cJSON objects returned belong to the
 * caller (cJSON_Delete); builders that take a cJSON argument take it over.
 */
#ifndef API_HARNESS_H
#define API_HARNESS_H

#include "api/api.h"
#include "api/attention.h"
#include "codec/tensor.h"
#include "testutil.h"

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

/* Generous limits, one part per item. */
srv_limits limits(void);
/* The limits of the request readers' tests: max_elements per tensor,
 * 64 MB a request, 4 items, one part. */
srv_limits json_limits(size_t max_elements);
/* text parsed by cJSON; a text that does not parse fails the test. */
cJSON *json_of(const char *text);
/* n values uniform in [lo, hi] (malloc'd). */
float *rnd(tu_rng *r, size_t n, double lo, double hi);

/* {"shape":[ndim ints...], "data":[...]} */
cJSON *jtensor(const float *d, int ndim, ...);
/* {"shape":[...], "b64":"..."} */
cJSON *jtensor_b64(const float *d, int ndim, const int *shape);
cJSON *jints(const int32_t *v, int n);
/* {"inputs":[items...]} (takes the items over). */
cJSON *batch(cJSON *items[], int n);
/* A parsed scheme object. */
cJSON *scheme_of(const char *json);

/* One request through prepare, every task, finish: the answer and *status. */
cJSON *call(const srv_endpoint *ep, const char *body, const srv_limits *lim, int *status);
/* call with req printed, then deleted. */
cJSON *call_json(const srv_endpoint *ep, cJSON *req, const srv_limits *lim, int *status);

/* Checks the shape of result tensor obj.name. */
void shape_is(const cJSON *obj, const char *name, int ndim, ...);
/* Checks result tensor obj.name (data or b64) against want [n]. */
void result_is(const cJSON *obj, const char *name, const float *want, size_t n);
/* obj.a.b as a string, or NULL. */
const char *str_at(const cJSON *obj, const char *a, const char *b);
/* obj.name, which must be a number. */
double num(const cJSON *obj, const char *name);
/* outputs[i] of a batch answer. */
const cJSON *output_at(const cJSON *ans, int i);
void expect_ok(const cJSON *ans, int status);
void expect_error(const cJSON *ans, int status, int want_status, const char *code,
                  const char *field);
void expect_item_error(const cJSON *ans, int i, const char *code, const char *field);
/* An api_err (not a reply) has code and field, and its message holds each
 * of the words given (up to a NULL). */
void api_err_is(const api_err *e, srv_error code, const char *field, ...);
#define ERR_IS(e, code, field, ...)                                                                \
    api_err_is((e), (code), (field), __VA_ARGS__, (const char *)NULL)
/* Checks that status is the one a batch answer must have (batch_status.h). */
void expect_batch_status(const cJSON *ans, int status);

/* q [Lq, H, D], k [Lk, Hkv, D], v [Lk, Hkv, Dv] in [-1, 1] from a seed. */
typedef struct qkv {
    int Lq, Lk, H, Hkv, D, Dv;
    float *q, *k, *v;
} qkv;

void qkv_make(qkv *f, int Lq, int Lk, int H, int Hkv, int D, int Dv, uint64_t seed);
void qkv_free(qkv *f);
/* {"scheme":scheme,"q","k","v"} (takes scheme over). */
cJSON *qkv_item(const qkv *f, cJSON *scheme);
/* A pa_attention over the fixture's tensors (borrowed). */
void qkv_desc(const qkv *f, const pa_scheme *s, pa_attention *a);

/* Library results: out [Lq, H, Dv] (or n_out), weights, logits [H, Lq, Lk],
 * q_rot, k_rot. */
typedef struct lib_out {
    float *out, *weights, *logits, *q_rot, *k_rot;
    size_t n_out, n_scores, n_q, n_k;
} lib_out;

/* Runs a in this process with every output; free with lib_free. */
void lib_run(const pa_attention *a, size_t n_out, lib_out *o);
void lib_free(lib_out *o);

#endif
