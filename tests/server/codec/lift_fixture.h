/* lift_fixture.h - what tests/server/codec/test_json_lift.c and
 * test_json_numbers.c share: a body's member "t" read as a tensor with and
 * without the lift (codec/json_lift.h), the check that both give the same
 * floats or the same error, and a seeded generator.
 */
#ifndef LIFT_FIXTURE_H
#define LIFT_FIXTURE_H

#include "codec/tensor.h"
#include "common/reply.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Text put after an array so that its numbers have the parser's fast-path
 * slack after them. */
#define PAD "................................................"

typedef struct outcome {
    bool ok;
    srv_tensor t;
    srv_reply err;
} outcome;

/* Parses body's member "t" as a tensor, with or without the lift. Returns
 * how many arrays were lifted. */
size_t parse_t(const char *body, bool use_lift, outcome *o);
void outcome_free(outcome *o);
/* Both ways agree (else the test fails); returns the number of arrays
 * lifted. */
size_t check_same(const char *body);
/* The next of splitmix64's numbers from the state x. */
uint64_t splitmix(uint64_t *x);

#endif
