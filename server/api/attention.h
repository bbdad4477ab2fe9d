/* attention.h - POST /v1/attention (api/attention.c) as other protocols use
 * it: v2/ translates an infer request into a one-item attention request,
 * prepares it here with its own tensor source, and renders the results of
 * the finished job in its own form (the job's view, api/job.h).
 */
#ifndef SRV_API_ATTENTION_H
#define SRV_API_ATTENTION_H

#include "api/job.h"
#include "api/json.h"
#include "api/request.h"
#include "common/reply.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

/* The endpoint's preparer (srv_ep_attention.prepare): root is a /v1
 * attention request; ctx->source, when set, supplies tensor nodes that are
 * not JSON. */
bool api_attention_prepare(const cJSON *root, const api_ctx *ctx, srv_job **job, srv_reply *reply);

/* Item i of an attention job once every task is done: err (NULL when it
 * ran), timed_out, the merged timing, the parsed item and its results
 * (NULL when not requested). Pointers stay valid until srv_job_free, unless
 * the /v1 answer is rendered (it frees the results). False when i is out of
 * range or the job is not an attention job. */
typedef struct api_att_result {
    const api_err *err;
    bool timed_out;
    api_task timing;
    const api_item *it;
    srv_wire out_wire;          /* the item's output_dtype */
    const float *res[API_NRES]; /* by result (api_result_names); NULL when not computed */
} api_att_result;
bool api_attention_result(const srv_job *job, size_t i, api_att_result *out);
/* Why item i of a prepared attention job is invalid; NULL when it is valid. */
const api_err *api_attention_item_error(const srv_job *job, size_t i);

#endif
