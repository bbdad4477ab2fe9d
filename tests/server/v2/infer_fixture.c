/* infer_fixture.c - see infer_fixture.h. */
#include "infer_fixture.h"

#include "api_harness.h" /* limits() */
#include "testutil.h"
#include "v2/v2.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

void make_inputs(inputs *in, uint64_t seed)
{
    tu_rng r;
    tu_rng_seed(&r, seed);
    tu_fill(&r, in->q, N, -1, 1);
    tu_fill(&r, in->k, N, -1, 1);
    tu_fill(&r, in->v, N, -1, 1);
}

void run_tasks(srv_job *job)
{
    srv_workspace ws = {NULL, 0};
    for (size_t i = 0; i < srv_job_task_count(job); i++)
        srv_job_run_task(job, i, &ws);
    srv_workspace_free(&ws);
}

/* One request that must fail: its status and error message (which contains
 * needle; a needle that starts with '^' must start the message). */
void expect_v2_error(const char *model, const char *body, size_t len, int64_t hlen, int status,
                     const char *needle)
{
    srv_limits lim = limits();
    srv_job *job = (srv_job *)&lim; /* must be reset to NULL */
    srv_reply reply;
    cJSON *ans;
    const cJSON *err;

    memset(&reply, 0, sizeof reply);
    assert_false(srv_v2_infer_prepare(model, body, len, hlen, &lim, &job, &reply));
    assert_null(job);
    assert_int_equal(reply.http_status, status);
    ans = cJSON_ParseWithLength(reply.body, reply.body_len);
    assert_non_null(ans);
    err = cJSON_GetObjectItem(ans, "error");
    assert_true(cJSON_IsString(err));
    assert_int_equal(cJSON_GetArraySize(ans), 1);
    if (needle[0] == '^' ? strncmp(err->valuestring, needle + 1, strlen(needle + 1)) != 0
                         : strstr(err->valuestring, needle) == NULL)
        fail_msg("error '%s' does not contain '%s'", err->valuestring, needle);
    cJSON_Delete(ans);
    srv_reply_free(&reply);
}

/* The output of an infer request (JSON answer) as floats into out[n]. */
void infer_output(const char *model, const char *body, size_t len, int64_t hlen, float *out,
                  size_t n)
{
    srv_limits lim = limits();
    srv_job *job = NULL;
    srv_reply reply;
    memset(&reply, 0, sizeof reply);
    if (!srv_v2_infer_prepare(model, body, len, hlen, &lim, &job, &reply))
        fail_msg("%.*s", (int)reply.body_len, reply.body);
    run_tasks(job);
    srv_job_finish(job, &reply);
    assert_int_equal(reply.http_status, 200);
    cJSON *root = cJSON_ParseWithLength(reply.body, reply.body_len);
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "outputs"), 0), "data");
    assert_int_equal(cJSON_GetArraySize(data), (int)n);
    for (size_t i = 0; i < n; i++)
        out[i] = (float)cJSON_GetArrayItem(data, (int)i)->valuedouble;
    cJSON_Delete(root);
    srv_reply_free(&reply);
    srv_job_free(job);
}
