/* job.h - private to api/: the job every endpoint's request becomes, and the
 * endpoint record (struct srv_endpoint) that plugs an endpoint into it.
 * api/job.c runs the lifecycle (prepare, tasks, finish, free) through the
 * record's functions and knows no endpoint by name; each endpoint file
 * (attention.c, encode.c, ...) defines its record, and http/routes.c's table
 * names the record of each route.
 */
#ifndef SRV_API_JOB_H
#define SRV_API_JOB_H

#include "api/api.h"
#include "api/json.h"
#include "codec/tensor.h"
#include "common/reply.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One task's bookkeeping. Written only by the thread running the task (or
 * marking it timed out), read by srv_job_finish after every task is done. */
typedef struct api_task {
    bool failed;    /* err holds why */
    bool timed_out; /* never ran: its deadline passed */
    api_err err;
    /* A task's wait and its run [start_us, end_us) on the monotonic clock
     * (compute_us = cpu_us = end - start). Merged over an item's tasks:
     * compute_us is the wall time from the first start to the last end,
     * cpu_us the summed run times, queue_us the longest wait. */
    uint64_t queue_us, compute_us, cpu_us, start_us, end_us;
    size_t workspace; /* bytes srv_job_run_task reserves before running */
    double macs;      /* multiply-adds it computes; 0 when not estimated */
    /* Multiply-adds it may ask for, for the compute bound (api_job_check_cost)
     * when macs does not say (macs is also what schedules small jobs on the
     * HTTP thread); 0: macs. */
    double cost;
    const char *scheme_name; /* static: metrics label */
    /* A session step (#33): 1 + the index of the /v1/attention item that
     * names a session, on each of its tasks; 0 on any other task. */
    size_t step;
} api_task;

/* An endpoint: what it does at each step of a job, or (answer) the whole
 * answer of an endpoint that has no body and no compute. */
struct srv_endpoint {
    const char *name; /* "attention" */
    /* The answer renders each task's error and timing itself (a batch: the
     * answer is 200 when an item succeeds, render sets job->status when none
     * did); otherwise the single task's
     * failure or timeout is the whole answer and its timing is added. */
    bool batch;
    /* Parses and validates root (a JSON object) into *job with
     * api_job_new(this record, ...). ctx has the limits, the prefix "" and
     * the tensor source of the protocol that delivered the request. On
     * failure fills *reply and returns false, having freed everything. */
    bool (*prepare)(const cJSON *root, const api_ctx *ctx, srv_job **job, srv_reply *reply);
    /* Computes task i with ws (ws_size >= tasks[i].workspace bytes, NULL when
     * that is 0). Records failures in job->tasks[i]. */
    void (*run)(srv_job *job, size_t i, void *ws, size_t ws_size);
    /* Task i is past its deadline before it started (srv_job_task_keep):
     * true when it must run all the same. NULL: it never must. */
    bool (*keep)(srv_job *job, size_t i);
    /* Adds the answer of a single-task endpoint to root, or renders the
     * whole batch answer. False on allocation failure. */
    bool (*render)(srv_job *job, cJSON *root);
    /* Frees job->impl (called only when impl was set). */
    void (*destroy)(void *impl);
    /* GET endpoints: the answer, at once (prepare is NULL). */
    void (*answer)(const srv_limits *lim, srv_reply *reply);
    /* Or the answer of a route with path parameters or a query (GET and
     * DELETE /v1/sessions/{id}); args may be NULL. Set answer or this. */
    void (*answer_args)(const srv_limits *lim, const srv_endpoint_args *args, srv_reply *reply);
    /* Or the preparer of a route with path parameters (POST
     * /v1/sessions/{id}/append): args may be NULL. Set prepare or this. */
    bool (*prepare_args)(const cJSON *root, const api_ctx *ctx, const srv_endpoint_args *args,
                         srv_job **job, srv_reply *reply);
    /* An empty body reads as {} (a POST whose body is all optional). */
    bool body_optional;
};

struct srv_job {
    const srv_endpoint *ep;
    srv_encoding enc;
    size_t n_tasks;
    api_task *tasks;
    void *impl; /* the endpoint's own state, freed by ep->destroy */
    int status; /* the answer's HTTP status when render sets it; 0 is 200 */
    /* Another protocol's answer to the same job (v2/model.c): when view is
     * set, srv_job_finish calls it instead of rendering the /v1 answer, and
     * srv_job_free frees view_ctx with view_free. */
    void (*view)(srv_job *job, void *view_ctx, srv_reply *reply);
    void (*view_free)(void *view_ctx);
    void *view_ctx;
    /* The machine's ceilings (srv_limits.machine), or NULL; and the work
     * of the items rendered with a roofline, summed (api/roofline.c). */
    const srv_machine *machine;
    double roof_flops, roof_bytes;
    size_t roof_items;
    size_t roof_bf16_items; /* of them, compute_dtype bf16 */
    /* Each rendered item's scheme and fraction of peak, for /metrics
     * (srv_job_roofline_item); malloc'd, freed by srv_job_free. */
    struct api_roof_frac *roof_frac;
    size_t n_roof_frac;
};

/* Allocates a job of endpoint ep with n zeroed tasks; NULL on allocation
 * failure. */
srv_job *api_job_new(const srv_endpoint *ep, size_t n_tasks);

/* Records err as task i's failure. */
void api_task_fail(srv_job *job, size_t i, const api_err *err);

/* Adds {"queue_us":..,"compute_us":..,"cpu_us":..} as "timing" to obj. */
bool api_render_timing(cJSON *obj, const api_task *t);
/* Adds {"code","message","field"} as "error" to obj. */
bool api_render_error(cJSON *obj, const api_err *e);
/* The TIMEOUT error of a task that never ran: field "" for a whole request,
 * "inputs[i]" for a batch item. */
void api_timeout_err(api_err *e, const char *field);

#endif
