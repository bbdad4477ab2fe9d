/* attention_job.h - private to api/attention.c and api/attention_run.c:
 * POST /v1/attention's job, prepared by the first (items parsed, sized,
 * cut into tasks, given their result buffers) and run and rendered by the
 * second.
 */
#ifndef SRV_API_ATTENTION_JOB_H
#define SRV_API_ATTENTION_JOB_H

#include "api/job.h"
#include "api/protocol.h"
#include "api/request.h"

#include <cjson/cJSON.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* An item runs as nparts tasks [first, first + nparts) when it is big enough
 * to be worth spreading over the workers (pa_attention_run_part); each task
 * records its own failure and timing, merged when the item is rendered. */
typedef struct att_item {
    cJSON *id; /* duplicate of the request's id; NULL when absent */
    bool valid;
    api_err err; /* why it is not valid */
    const char *scheme_name;
    size_t workspace;
    double macs; /* of the whole item (all parts) */
    size_t first;
    int32_t nparts; /* per sequence: the item's tasks are B * nparts */
    api_item it;
    srv_wire out_wire;    /* output_dtype: F32, F16 or BF16 */
    float *res[API_NRES]; /* by result (api_result_names); allocated when prepared */
    /* Decode (at most 8 query rows): the parts split the keys
     * (pa_attention_run_keys) and leave partial states here, partials_size
     * bytes per sequence; the last part of a sequence to finish merges
     * them (pa_attention_merge). 0 when the parts split the query heads. */
    size_t partials_size;
    unsigned char *partials;
    atomic_int *parts_done; /* [B] */
} att_item;

typedef struct att_job {
    size_t n;
    att_item *items;
    size_t *task_item; /* [n_tasks]: the item of each task */
} att_job;

/* The item's tasks: nparts for each sequence (one for an invalid item). */
static inline size_t att_item_tasks(const att_item *a)
{
    return (size_t)a->nparts * (size_t)(a->it.B > 0 ? a->it.B : 1);
}

/* Element counts of the results of a valid item, every sequence. */
static inline size_t att_count_all(const api_item *it, unsigned which)
{
    return api_mul_sat(api_item_count(it, which), (size_t)it->B);
}

/* The endpoint's task (an item, or one part of one sequence of it), its
 * keep (srv_endpoint.keep) and its answer (api/attention_run.c). */
void api_attention_run(srv_job *job, size_t t, void *ws, size_t ws_size);
bool api_attention_keep(srv_job *job, size_t t);
bool api_attention_render(srv_job *job, cJSON *root);
/* Item a's outcome from its tasks (NULL, or the first failure) and their
 * merged timing into *merged. */
const api_err *api_attention_outcome(const srv_job *job, const att_item *a, api_task *merged);
/* Frees item a's results and decode partials, leaving them NULL. */
void api_attention_free_outputs(att_item *a);

#endif
