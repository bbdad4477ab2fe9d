/* attention_run.c - POST /v1/attention's tasks and answer (api/attention.c
 * prepares the job; api/attention_job.h): each task runs an item, or its share
 * of the heads or of the keys (decode), through the core library; the
 * answer renders each item's results or error, with its timing.
 */
#include "api/attention_job.h"

#include "api/job.h"
#include "api/json.h"
#include "api/request.h"
#include "api/roofline.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void api_attention_free_outputs(att_item *a)
{
    for (int r = 0; r < API_NRES; r++) {
        free(a->res[r]);
        a->res[r] = NULL;
    }
    free(a->partials);
    free(a->parts_done);
    a->partials = NULL;
    a->parts_done = NULL;
}

/* Sequence b ran on its first ql query rows (query_length): its weights
 * and logits [H, ql, Lk] move to their rows of [H, Lq, Lk], and the rows
 * past ql become those of a fully masked row (output, weights and q_rot 0,
 * logits -inf). Part 0 does the rows every part shares. */
static void pad_query_rows(const api_item *it, int32_t ql, int32_t part, pa_attention_out *out)
{
    size_t Lq = (size_t)it->Lq, Lk = (size_t)it->Lk, H = (size_t)it->H, q = (size_t)ql;
    if (part != 0)
        return;
    /* Row statistics [H, q] to [H, Lq], rows past q as a fully masked row's (0). */
    for (int r = 0; r < 2; r++) {
        float *s = r == 0 ? out->entropy : out->distance;
        if (s == NULL)
            continue;
        for (size_t h = H; h-- > 0;) {
            memmove(s + h * Lq, s + h * q, q * sizeof(float));
            memset(s + h * Lq + q, 0, (Lq - q) * sizeof(float));
        }
    }
    memset(out->output + q * H * (size_t)it->Dv, 0, (Lq - q) * H * (size_t)it->Dv * sizeof(float));
    if (out->q_rot != NULL)
        memset(out->q_rot + q * H * (size_t)it->D, 0, (Lq - q) * H * (size_t)it->D * sizeof(float));
    for (int r = 0; r < 2; r++) {
        float *m = r == 0 ? out->weights : out->logits;
        if (m == NULL)
            continue;
        for (size_t h = H; h-- > 0;) {
            float *row = m + h * Lq * Lk;
            memmove(row, m + h * q * Lk,
                    q * Lk * sizeof(float)); /* descending h: no overlap lost */
            for (size_t i = q * Lk; i < Lq * Lk; i++)
                row[i] = r == 0 ? 0.0f : -INFINITY;
        }
    }
}

/* Sequence b ran over its session's kl keys (a list of sessions of other
 * lengths): its weights and logits [H, Lq, kl] move to their place in
 * [H, Lq, Lk], and k_rot's rows [kl, Hkv, D] are followed by zeros; the
 * columns past kl are a padded key's (weight 0, logit -inf), as
 * key_length gives them. Part 0 does it (such items run in one part). */
static void pad_key_columns(const api_item *it, int32_t kl, int32_t part, pa_attention_out *out)
{
    const size_t Lk = (size_t)it->Lk, k = (size_t)kl, rows = (size_t)it->H * (size_t)it->Lq;
    if (part != 0)
        return;
    for (int r = 0; r < 2; r++) {
        float *m = r == 0 ? out->weights : out->logits;
        if (m == NULL)
            continue;
        for (size_t i = rows; i-- > 0;) { /* descending: no row overwritten unread */
            memmove(m + i * Lk, m + i * k, k * sizeof(float));
            for (size_t j = k; j < Lk; j++)
                m[i * Lk + j] = r == 0 ? 0.0f : -INFINITY;
        }
    }
    if (out->k_rot != NULL) {
        const size_t row = (size_t)it->Hkv * (size_t)it->D;
        memset(out->k_rot + k * row, 0, (Lk - k) * row * sizeof(float));
    }
}

/* Part `part` of sequence b: a share of the query heads, or of the keys
 * (decode), whose last part to finish merges the shares' states. */
static pa_status run_share(att_item *a, const pa_attention *att, const pa_attention_out *out,
                           int32_t b, int32_t part, void *ws, size_t ws_size, pa_error *pe)
{
    unsigned char *partials;
    pa_status st;
    if (a->partials_size == 0)
        return pa_attention_run_part(att, out, part, a->nparts, ws, ws_size, pe);
    partials = a->partials + (size_t)b * a->partials_size;
    st = pa_attention_run_keys(att, out, part, a->nparts, partials, ws, ws_size, pe);
    /* acq_rel: the last part sees every other part's states. */
    if (st == PA_STATUS_OK &&
        atomic_fetch_add_explicit(&a->parts_done[b], 1, memory_order_acq_rel) + 1 == a->nparts)
        st = pa_attention_merge(att, out, a->nparts, partials, pe);
    return st;
}

void api_attention_run(srv_job *job, size_t t, void *ws, size_t ws_size)
{
    att_job *aj = job->impl;
    att_item *a = &aj->items[aj->task_item[t]];
    pa_attention_out out;
    pa_error pe;
    api_err e;
    char prefix[32];
    api_ctx ctx = {NULL, prefix, NULL, NULL};

    pa_attention att;
    const api_item *it = &a->it;
    void *own_ws = NULL;
    int32_t b = (int32_t)((t - a->first) / (size_t)a->nparts);
    int32_t part = (int32_t)((t - a->first) % (size_t)a->nparts);
    size_t sb = (size_t)b;

    if (!a->valid)
        return;
    {
        /* "inputs[<item>]" without snprintf's cost on every task. */
        char digits[24];
        size_t n = 0, i = aj->task_item[t], at = 7;
        do {
            digits[n++] = (char)('0' + i % 10);
            i /= 10;
        } while (i != 0);
        memcpy(prefix, "inputs[", 7);
        while (n > 0)
            prefix[at++] = digits[--n];
        memcpy(prefix + at, "]", 2);
    }
    /* A session's append lands as the item's first task starts. */
    switch (api_item_session_start(&a->it, &ctx, &e)) {
    case API_SESS_RUN:
        break;
    case API_SESS_FAILS:
        api_task_fail(job, t, &e);
        return;
    case API_SESS_SKIP:
        return;
    case API_SESS_ABANDONED:
        srv_job_set_timed_out(job, t);
        return;
    }
    api_item_sequence(it, b, &att);
    /* The session's keys may reach positions its checks could not see (a
     * Shaw table's rows): the workspace the call now needs. */
    if (it->session && !it->mla && !it->diff) {
        const size_t need = pa_attention_workspace_size(&att);
        if (need > ws_size) {
            own_ws = malloc(need);
            if (own_ws == NULL) {
                api_fail(&e, &ctx, SRV_ERR_INTERNAL, "",
                         "could not allocate %zu bytes of workspace", need);
                api_task_fail(job, t, &e);
                return;
            }
            ws = own_ws;
            ws_size = need;
        }
    }
    {
        float *res[API_NRES];
        for (int r = 0; r < API_NRES; r++)
            res[r] = a->res[r] != NULL ? a->res[r] + sb * api_item_count(it, 1u << r) : NULL;
        out = (pa_attention_out){.output = res[0],
                                 .weights = res[1],
                                 .logits = res[2],
                                 .q_rot = res[3],
                                 .k_rot = res[4],
                                 .entropy = res[5],
                                 .distance = res[6]};
    }
    if ((it->diff  ? pa_diff_run(&att, &it->dif, out.output, out.weights, ws, ws_size, &pe)
         : it->mla ? pa_mla_run(&att, &it->mla_opt, &out, ws, ws_size, &pe)
                   : run_share(a, &att, &out, b, part, ws, ws_size, &pe)) == PA_STATUS_OK) {
        if (it->query_lengths != NULL && att.q_len < it->Lq)
            pad_query_rows(it, att.q_len, part, &out);
        if (it->session && att.k_len < it->Lk)
            pad_key_columns(it, att.k_len, part, &out);
    } else {
        api_fail_pa(&e, &ctx, &pe);
        if (it->batched)
            api_err_in_sequence(&e, b);
        api_task_fail(job, t, &e);
    }
    free(own_ws);
}

bool api_attention_keep(srv_job *job, size_t t)
{
    att_job *aj = job->impl;
    att_item *a = &aj->items[aj->task_item[t]];
    return a->valid && api_item_session_keep(&a->it);
}

/* The item's outcome from its tasks: the first failure, else a timeout;
 * timing is the longest wait, the wall time from the first part's start to
 * the last one's end, and the summed CPU time of the parts. */
const api_err *api_attention_outcome(const srv_job *job, const att_item *a, api_task *merged)
{
    const api_err *fail = NULL;
    memset(merged, 0, sizeof *merged);
    for (size_t t = a->first; t < a->first + att_item_tasks(a); t++) {
        const api_task *k = &job->tasks[t];
        if (k->failed && fail == NULL)
            fail = &k->err;
        merged->timed_out = merged->timed_out || k->timed_out;
        merged->queue_us = k->queue_us > merged->queue_us ? k->queue_us : merged->queue_us;
        merged->cpu_us += k->cpu_us;
        if (k->end_us != 0) { /* it ran */
            if (merged->end_us == 0 || k->start_us < merged->start_us)
                merged->start_us = k->start_us;
            if (k->end_us > merged->end_us)
                merged->end_us = k->end_us;
        }
    }
    merged->compute_us = merged->end_us - merged->start_us;
    merged->failed = fail != NULL;
    return fail;
}

/* Whether a result the item returns holds a finite value its output dtype
 * cannot (f16 past 65504): then *e is the item's OUT_OF_RANGE error. */
static bool overflows(const att_item *a, size_t i, api_err *e)
{
    const api_item *it = &a->it;
    for (int r = 0; r < API_NRES; r++) {
        size_t at;
        const float *res = (it->ret & (1u << r)) ? a->res[r] : NULL;
        if (res != NULL && srv_wire_overflow(res, att_count_all(it, 1u << r), a->out_wire, &at)) {
            char prefix[32];
            api_ctx ctx = {NULL, prefix, NULL, NULL};
            api_item_prefix(prefix, i);
            api_fail(e, &ctx, SRV_ERR_OUT_OF_RANGE, "output_dtype",
                     "%s holds %.9g at element %zu, past the largest %s (%s): ask for "
                     "output_dtype %s",
                     api_result_names[r], (double)res[at], at,
                     a->out_wire == SRV_WIRE_F16 ? "f16" : "bf16",
                     a->out_wire == SRV_WIRE_F16 ? "65504" : "3.3895e38",
                     a->out_wire == SRV_WIRE_F16 ? "bf16 or f32" : "f32");
            return true;
        }
    }
    return false;
}

/* Renders item i into obj; *status is the HTTP status of its error, 0 when
 * it succeeded. */
static bool render_item(srv_job *job, size_t i, cJSON *obj, int *status)
{
    att_job *aj = job->impl;
    att_item *a = &aj->items[i];
    const api_item *it = &a->it;
    api_task t;
    const api_err *fail = api_attention_outcome(job, a, &t);
    cJSON *id = a->id != NULL ? api_id_node(a->id) : cJSON_CreateNull();

    if (id == NULL || !cJSON_AddItemToObject(obj, "id", id)) {
        cJSON_Delete(id);
        return false;
    }
    if (fail != NULL) {
        *status = srv_error_http_status(fail->code);
        return api_render_error(obj, fail);
    }
    if (t.timed_out) {
        api_err e;
        char field[32];
        snprintf(field, sizeof field, "inputs[%zu]", i);
        api_timeout_err(&e, field);
        *status = srv_error_http_status(e.code);
        return api_render_error(obj, &e);
    }
    {
        api_err e;
        if (overflows(a, i, &e)) {
            *status = srv_error_http_status(e.code);
            return api_render_error(obj, &e);
        }
    }
    *status = 0;
    {
        for (int r = 0; r < API_NRES; r++) {
            int64_t shape[4];
            int nd = api_item_result_shape(it, 1u << r, shape);
            if (!(it->ret & (1u << r)))
                continue;
            if (api_item_is_packed(it) && api_item_packed_result(1u << r)) {
                if (!api_item_render_packed(obj, api_result_names[r], it, 1u << r, a->res[r],
                                            job->enc, a->out_wire))
                    return false;
            } else if (!srv_tensor_render_as(obj, api_result_names[r], a->res[r], nd, shape,
                                             job->enc, a->out_wire)) {
                return false;
            }
        }
    }
    return api_render_timing(obj, &t) && api_roofline_render(obj, job, it, &t, att_item_tasks(a));
}

/* Whether the text of result r is yet to be written from its values: a
 * packed item's lists hold each sequence's tensor from within them. */
static bool result_deferred(const att_item *a, int r)
{
    if (a->res[r] == NULL)
        return false;
    if (srv_defer_uses(a->res[r]))
        return true;
    if (!a->valid || !api_item_is_packed(&a->it) || !api_item_packed_result(1u << r))
        return false;
    for (int32_t s = 1; s < api_item_packed_count(&a->it); s++) {
        int64_t shape[3];
        size_t at;
        api_item_packed_shape(&a->it, 1u << r, s, shape, &at);
        if (srv_defer_uses(a->res[r] + at))
            return true;
    }
    return false;
}

/* The answer's status: 200 when any item succeeded (a partial failure says
 * errors: true in the body); when every item failed, their status, or 400
 * when they differ, so that a client that only looks at the status (curl -f,
 * raise_for_status, fetch().ok) sees the failure. */
bool api_attention_render(srv_job *job, cJSON *root)
{
    att_job *aj = job->impl;
    bool errors = false;
    int all_failed = -1; /* -1 none seen, 0 one succeeded, else the status */
    cJSON *outputs = cJSON_AddArrayToObject(root, "outputs");

    if (outputs == NULL)
        return false;
    for (size_t i = 0; i < aj->n; i++) {
        cJSON *obj = cJSON_CreateObject();
        if (obj == NULL || !cJSON_AddItemToArray(outputs, obj)) {
            cJSON_Delete(obj);
            return false;
        }
        int st;
        if (!render_item(job, i, obj, &st))
            return false;
        errors = errors || st != 0;
        if (st == 0)
            all_failed = 0;
        else if (all_failed == -1)
            all_failed = st;
        else if (all_failed != 0 && all_failed != st)
            all_failed = 400;
        /* The rendered copy is all that is needed from here on, unless the
         * text of one of them is yet to be written (srv_defer). */
        bool deferred = false;
        for (int r = 0; r < API_NRES; r++)
            deferred = deferred || result_deferred(&aj->items[i], r);
        if (!deferred)
            api_attention_free_outputs(&aj->items[i]);
    }
    if (all_failed > 0)
        job->status = all_failed;
    return cJSON_AddBoolToObject(root, "errors", errors) != NULL;
}
