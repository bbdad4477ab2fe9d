/* batch_fixture.h - what tests/server/api/test_batch.c and
 * test_batch_positions.c share: B sequences of q, k, v as one batched item
 * or as separate items, run through POST /v1/attention (tests/api_harness.c)
 * with b64 answers, and the bit-for-bit comparison of the two answers.
 */
#ifndef BATCH_FIXTURE_H
#define BATCH_FIXTURE_H

#include "api_harness.h"

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

enum { B = 3, L = 6, H = 4, HKV = 2, D = 8, DV = 6 };

/* Every result an item can return, in the order the tests compare them. */
enum { NRESULTS = 7 };
extern const char *const RESULTS[NRESULTS];

/* Result obj.name (b64 float32) into a fresh buffer; *n its floats. */
float *decode(const cJSON *obj, const char *name, size_t *n);
/* Dimension d of result obj.name's shape. */
int64_t dim(const cJSON *obj, const char *name, int d);

/* The B sequences' inputs, one buffer each way. */
typedef struct seqs {
    float *q, *k, *v; /* [B, L, H, D], [B, L, HKV, D], [B, L, HKV, DV] */
    int32_t qpos[B][L], kpos[B][L];
    int32_t key_length[B];
} seqs;

void seqs_make(seqs *s, uint64_t seed);
void seqs_free(seqs *s);

/* "return": every result. */
cJSON *ret_all(void);
/* {"inputs":[items], "output_encoding":"b64"} through the endpoint, with
 * parts per item (1: the sequences are the only split). */
cJSON *run_parts(cJSON **items, int n, int parts, int *status);
cJSON *run(cJSON **items, int n, int *status);
/* Sequence b of the batched answer equals item b of the separate one, bit
 * for bit, for every result; and the batched shapes lead with B. */
void same_as_items(const cJSON *batched, const cJSON *sep, int n_seq, const char *what);
/* One batched item with a single change; the error expected. */
void batch_error(const char *key, cJSON *value, const char *code, const char *field,
                 const char *message_part);

#endif
