/* fuzz_request.c - libFuzzer driver for posattnd's request parser and
 * validator (server/api*.c, server/codec/tensor.c) and, for inputs that pass, the
 * compute and answer rendering behind them.
 *
 * Input: byte 0 picks the endpoint (mod 3: attention, encode, analyze), the
 * rest is the request body. With bit 7 of byte 0 set, the input is an Open
 * Inference Protocol infer request instead (v2/v2.h): byte 1 picks the model
 * (mod the scheme count), bytes 2-3 are Inference-Header-Content-Length
 * (little-endian; 0xffff: no header), the rest is the body. Limits are small so that every accepted
 * job is cheap to run: each task runs, then srv_job_finish renders the answer, which must be a
 * well-formed reply; srv_job_free releases everything (ASan checks).
 *
 *   clang -fsanitize=fuzzer,address,undefined ... (see the Makefile's fuzz target)
 *   ./fuzz_request -max_total_time=60 tests/fuzz/corpus
 */
#include "api/api.h"
#include "v2/v2.h"
#include "posattn.h"
#include "common/reply.h"

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
    /* The first byte picks the endpoint, in the order the seeds were written for. */
    static const srv_endpoint *const eps[] = {&srv_ep_attention, &srv_ep_encode, &srv_ep_analyze};
    const srv_endpoint *ep = eps[data[0] % 3];
    bool v2 = (data[0] & 0x80) != 0 && size >= 4;
    size_t skip = v2 ? 4 : 1;
    char model[64];
    int64_t header_len = -1;
    bool ok;
    if (v2) {
        snprintf(model, sizeof model, "attention-%s",
                 pa_scheme_type_name((pa_scheme_type)(data[1] % PA_SCHEME_COUNT)));
        if (data[2] != 0xff || data[3] != 0xff)
            header_len = (int64_t)(data[2] | (unsigned)data[3] << 8);
    }
    /* The HTTP layer hands the parser a NUL-terminated copy of the body. */
    body = malloc(size - skip + 1);
    if (body == NULL)
        return 0;
    memcpy(body, data + skip, size - skip);
    body[size - skip] = '\0';

    memset(&reply, 0, sizeof reply);
    ok = v2 ? srv_v2_infer_prepare(model, body, size - skip, header_len, &lim, &job, &reply)
            : srv_job_prepare(ep, body, size - skip, &lim, &job, &reply);
    if (!ok) {
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
        srv_job_set_timing(job, i, 1, 2, 4);
    }
    srv_job_finish(job, &reply);
    if (reply.http_status >= 500 || reply.body == NULL || reply.body_len == 0)
        abort();
    srv_reply_free(&reply);
    srv_job_free(job);
    free(body);
    return 0;
}
