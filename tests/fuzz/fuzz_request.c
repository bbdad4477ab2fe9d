/* fuzz_request.c - libFuzzer driver for posattnd's request parser and
 * validator (server/api*.c, server/tensor.c) and, for inputs that pass, the
 * compute and answer rendering behind them.
 *
 * Input: byte 0 picks the endpoint (mod 3: attention, encode, analyze), the
 * rest is the request body. Limits are small so that every accepted job is
 * cheap to run: each task runs, then srv_job_finish renders the answer, which
 * must be a well-formed reply; srv_job_free releases everything (ASan checks).
 *
 *   clang -fsanitize=fuzzer,address,undefined ... (see the Makefile's fuzz target)
 *   ./fuzz_request -max_total_time=60 tests/fuzz/corpus
 */
#include "api.h"
#include "reply.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static srv_workspace ws; /* reused across inputs, as a worker does */
    const srv_limits lim = {
        .max_batch_items = 8,
        .max_tensor_elements = 4096,
        .max_request_memory = 8u << 20,
        .parallel_parts = 2,
    };
    srv_job *job = NULL;
    srv_reply reply;
    char *body;

    if (size == 0)
        return 0;
    srv_endpoint ep = (srv_endpoint)(data[0] % SRV_EP_COUNT);
    /* The HTTP layer hands the parser a NUL-terminated copy of the body. */
    body = malloc(size);
    if (body == NULL)
        return 0;
    memcpy(body, data + 1, size - 1);
    body[size - 1] = '\0';

    memset(&reply, 0, sizeof reply);
    if (!srv_job_prepare(ep, body, size - 1, &lim, &job, &reply)) {
        /* A refusal is a 4xx JSON error, never a 5xx. */
        if (reply.http_status < 400 || reply.http_status >= 500 || reply.body == NULL ||
            reply.body_len == 0 || reply.body[0] != '{')
            abort();
        srv_reply_free(&reply);
        free(body);
        return 0;
    }
    size_t n = srv_job_task_count(job);
    for (size_t i = 0; i < n; i++) {
        (void)srv_job_task_scheme(job, i);
        /* Memory was bounded at prepare time: the workspace must fit too. */
        if (srv_job_task_workspace(job, i) > lim.max_request_memory)
            abort();
        srv_job_run_task(job, i, &ws);
        srv_job_set_timing(job, i, 1, 2);
    }
    srv_job_finish(job, &reply);
    if (reply.http_status >= 500 || reply.body == NULL || reply.body_len == 0)
        abort();
    srv_reply_free(&reply);
    srv_job_free(job);
    free(body);
    return 0;
}
