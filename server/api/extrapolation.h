/* extrapolation.h - the "extrapolation" analysis of POST /v1/analyze
 * (api/extrapolation.c): analyze.c hands such a request to
 * api_extrapolation_prepare, whose job runs on the record below.
 */
#ifndef SRV_API_EXTRAPOLATION_H
#define SRV_API_EXTRAPOLATION_H

#include "api/api.h"
#include "api/json.h"

#include <cjson/cJSON.h>
#include <stdbool.h>

extern const srv_endpoint srv_ep_extrapolation;

/* As an endpoint's prepare (api/job.h). */
bool api_extrapolation_prepare(const cJSON *root, const api_ctx *ctx, srv_job **job,
                               srv_reply *reply);

#endif
