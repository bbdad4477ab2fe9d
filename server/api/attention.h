/* attention.h - private to api/: POST /v1/attention (api/attention.c,
 * api/attention_run.c) as api/'s other endpoints and its tests see it.
 * Protocols use the attention job through api/protocol.h
 * (api_attention_prepare, api_attention_result, a job's view).
 */
#ifndef SRV_API_ATTENTION_H
#define SRV_API_ATTENTION_H

#include "api/job.h"
#include "api/json.h"
#include "api/protocol.h"
#include "api/request.h"
#include "common/reply.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

/* The parsed item i of a prepared attention job (NULL when i is out of
 * range, the job is not an attention job, or the item is invalid): what
 * tests look at to see where an item's tensors live (borrowed from a
 * request's bytes, or copied). Valid until srv_job_free. */
const api_item *api_attention_item(const srv_job *job, size_t i);

#endif
