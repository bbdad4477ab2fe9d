/* infer_fixture.h - what tests/server/v2/test_infer.c and
 * test_infer_parameters.c share: q, k, v of one small shape, an infer
 * request through srv_v2_infer_prepare with every task run on this thread,
 * its JSON answer's output, and the check of a refusal.
 */
#ifndef INFER_FIXTURE_H
#define INFER_FIXTURE_H

#include "api/api.h"

#include <stddef.h>
#include <stdint.h>

enum { L = 6, H = 2, D = 4, N = L * H * D };

/* One request's q, k and v, [L, H, D] each. */
typedef struct inputs {
    float q[N], k[N], v[N];
} inputs;

/* Fills in's q, k and v with uniform values in [-1, 1] from seed. */
void make_inputs(inputs *in, uint64_t seed);
/* Runs every task of job on this thread. */
void run_tasks(srv_job *job);
/* One request that must fail: its status and error message (which contains
 * needle; a needle that starts with '^' must start the message). */
void expect_v2_error(const char *model, const char *body, size_t len, int64_t hlen, int status,
                     const char *needle);
/* The output of an infer request (JSON answer) as floats into out[n]. */
void infer_output(const char *model, const char *body, size_t len, int64_t hlen, float *out,
                  size_t n);

#endif
