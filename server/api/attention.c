/* attention.c - POST /v1/attention: a batch of attention items, each
 * parsed by api/item.c, whose tasks are the items (or parts of a large
 * one, spread over the workers). v2/ prepares its infer requests here too
 * (api/attention.h).
 */
#include "api/attention.h"

#include "api/job.h"
#include "api/json.h"
#include "api/request.h"
#include "api/roofline.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* Below this many multiply-adds an item is not split: the cost of another
 * task (rope tables, a second pass over k) would outweigh the gain. */
#define ATT_SPLIT_MIN_MACS (16.0 * 1024 * 1024)

static void free_outputs(att_item *a)
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

static void att_destroy(void *impl)
{
    att_job *aj = impl;
    if (aj == NULL)
        return;
    for (size_t i = 0; i < aj->n; i++) {
        cJSON_Delete(aj->items[i].id);
        api_item_free(&aj->items[i].it);
        free_outputs(&aj->items[i]);
    }
    free(aj->items);
    free(aj->task_item);
    free(aj);
}

/* The item's tasks: nparts for each sequence (one for an invalid item). */
static size_t item_tasks(const att_item *a)
{
    return (size_t)a->nparts * (size_t)(a->it.B > 0 ? a->it.B : 1);
}

/* Element counts of the results of a valid item, every sequence. */
static size_t count_all(const api_item *it, unsigned which)
{
    return api_mul_sat(api_item_count(it, which), (size_t)it->B);
}

/* Whether result r is computed: the output always, the others when asked. */
static bool computed(const api_item *it, int r)
{
    return r == 0 || (it->ret & (1u << r)) != 0;
}

/* Bytes of the computed results. */
static size_t result_bytes(const api_item *it)
{
    size_t n = 0;
    for (int r = 0; r < API_NRES; r++)
        if (computed(it, r))
            n = api_add_sat(n, count_all(it, 1u << r));
    return api_mul_sat(n, sizeof(float));
}

static bool check_results(const api_item *it, const api_ctx *ctx, api_err *e)
{
    /* In layer mode the projections can be larger than x and the weights. */
    for (int r = 0; r < API_NRES; r++) {
        int64_t shape[4];
        int n = api_item_result_shape(it, 1u << r, shape);
        if (computed(it, r) && !api_check_result_size(api_result_names[r], n, shape, ctx, e))
            return false;
    }
    return true;
}

/* The metrics label of an item that failed validation: its scheme type if
 * that much was readable. */
static const char *peek_scheme(const cJSON *item)
{
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(item, "scheme");
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(s, "type"));
    pa_scheme_type t;
    if (cJSON_IsObject(item) && name != NULL && pa_scheme_type_from_name(name, &t))
        return pa_scheme_type_name(t);
    return "none";
}

/* Parses item i; on failure records the error in the item. Returns the bytes
 * the item needs (0 when invalid), each of its parts' workspace included. */
static size_t prepare_item(att_item *a, size_t i, const cJSON *node, const api_ctx *top,
                           srv_wire out_wire)
{
    const srv_limits *lim = top->lim;
    /* differential (api/item_diff.c), mla with its tensors (api/item_mla.c)
     * and a session with its append (api/item_session.c): /v1/attention's
     * alone. */
    static const char *const extra[] = {"id",     "return", "output_dtype", "differential", "mla",
                                        "k_rope", "c_kv",   "session",      "append"};
    char prefix[32];
    api_ctx ctx;
    size_t ws, concurrent;
    double macs;

    memset(&ctx, 0, sizeof ctx);
    a->nparts = 1;
    api_item_prefix(prefix, i);
    ctx.lim = lim;
    ctx.prefix = prefix;
    ctx.source = top->source;
    ctx.lift = top->lift;
    if (!api_item_parse(node, &ctx, extra, sizeof extra / sizeof extra[0], &a->it, &a->err))
        goto fail;
    a->out_wire = out_wire;
    if (cJSON_GetObjectItemCaseSensitive(node, "output_dtype") != NULL &&
        !api_get_output_dtype(cJSON_GetObjectItemCaseSensitive(node, "output_dtype"), &ctx,
                              &a->out_wire, &a->err))
        goto fail;
    if (!api_item_parse_return(cJSON_GetObjectItemCaseSensitive(node, "return"), &ctx, &a->it,
                               &a->err) ||
        !check_results(&a->it, &ctx, &a->err))
        goto fail;
    ws = a->it.diff  ? pa_diff_workspace_size(&a->it.att, &a->it.dif)
         : a->it.mla ? pa_mla_workspace_size(&a->it.att, &a->it.mla_opt)
                     : pa_attention_workspace_size(&a->it.att);
    /* Shaw's key term sizes its table by the rows the positions reach: a
     * batch whose sequences have positions of their own takes the most
     * any of them needs (0, an overflow, wins). */
    if (ws != 0 && (a->it.q_pos_stride != 0 || a->it.k_pos_stride != 0)) {
        for (int32_t b = 1; b < a->it.B; b++) {
            pa_attention sb;
            size_t n;
            api_item_sequence(&a->it, b, &sb);
            n = pa_attention_workspace_size(&sb);
            ws = n == 0 ? 0 : n > ws ? n : ws;
            if (ws == 0)
                break;
        }
    }
    if (ws == 0) {
        api_fail(&a->err, &ctx, SRV_ERR_PAYLOAD_TOO_LARGE, "",
                 "the attention workspace for these sizes overflows the address space");
        goto fail;
    }
    macs = 2.0 * a->it.Lq * (double)a->it.Lk * a->it.D * a->it.H; /* one sequence */
    if (api_item_is_packed(&a->it))                               /* the diagonal blocks only */
        macs = 2.0 * (double)pa_attention_weights_len(&a->it.att) * a->it.D;
    if (a->it.att.x != NULL) /* the projections: x w_q, x w_k, x w_v (and w_o) */
        macs += (double)(a->it.Lq + 2 * a->it.Lk) * a->it.att.d_model * a->it.H * a->it.D +
                (double)a->it.Lq * a->it.H * a->it.Dv * a->it.att.d_out;
    if (a->it.att.scheme->type == PA_SCHEME_SHAW && a->it.att.scheme->shaw.key_term) {
        /* Shaw's key term: each kv head's keys against the table rows the
         * positions reach (about Lq + Lk - 1 of them when consecutive). */
        const double rows = 2.0 * a->it.att.scheme->shaw.max_relative_position + 1.0;
        const double reach = (double)a->it.Lq + a->it.Lk - 1.0;
        macs += (double)a->it.Hkv * a->it.Lk * a->it.D * (rows < reach ? rows : reach);
    }
    if (a->it.diff) /* two maps of H heads: q k^T of D and A V of 2D each */
        macs = 6.0 * a->it.Lq * (double)a->it.Lk * a->it.D * a->it.H;
    if (a->it.mla) { /* q k^T of D (absorbed: R + D_rope) and A V of Dv (R) per head */
        const double Dr = a->it.mla_opt.rope_dim, R = a->it.mla_opt.kv_lora_rank;
        const double rows = (double)a->it.Lq * a->it.H;
        macs = a->it.mla_opt.absorbed
                   ? rows * ((double)a->it.Lk * (2.0 * R + Dr) + (a->it.D - Dr) * R + a->it.Dv * R)
                   : rows * a->it.Lk * ((double)a->it.D + a->it.Dv);
    }
    a->macs = macs * a->it.B;
    /* Short query rows are spread out of the weights after the run, as
     * are a shorter session's keys, which one task does for all heads. */
    bool whole =
        (a->it.query_lengths != NULL &&
         (a->it.ret & (API_RET_WEIGHTS | API_RET_LOGITS | API_RET_ENTROPY | API_RET_DISTANCE))) ||
        (api_item_session_ragged(&a->it) &&
         (a->it.ret & (API_RET_WEIGHTS | API_RET_LOGITS | API_RET_K_ROT)));
    if (a->it.att.x == NULL && !whole && !a->it.diff && !a->it.mla &&
        lim->parallel_parts > a->it.B && macs >= ATT_SPLIT_MIN_MACS)
        a->nparts = lim->parallel_parts < a->it.H ? lim->parallel_parts : a->it.H;
    if (a->nparts > 1) {
        /* Decode: the parts share the keys when the library can split them so. */
        pa_attention s0;
        pa_attention_out shape = {.output = (float *)1};
        api_item_sequence(&a->it, 0, &s0);
        a->partials_size = pa_attention_partials_size(&s0, &shape, a->nparts);
    }
    /* Workspaces are the workers': at most one per part running at once. */
    concurrent = api_mul_sat((size_t)a->nparts, (size_t)a->it.B);
    if (lim->parallel_parts > 0 && concurrent > (size_t)lim->parallel_parts)
        concurrent = (size_t)lim->parallel_parts;
    a->valid = true;
    a->workspace = ws;
    a->scheme_name = pa_scheme_type_name(a->it.scheme.s.type);
    return api_add_sat(api_add_sat(api_add_sat(a->it.input_bytes, result_bytes(&a->it)),
                                   api_mul_sat(ws, concurrent)),
                       api_mul_sat(a->partials_size, (size_t)a->it.B));

fail:
    api_item_free(&a->it);
    a->scheme_name = peek_scheme(node);
    return 0;
}

/* Allocates a valid item's results before its tasks run, so that its parts
 * can write into them concurrently. Pages are touched by the workers. */
static bool alloc_outputs(att_item *a, const api_ctx *ctx)
{
    api_item *it = &a->it;
    bool ok = true;
    for (int r = 0; r < API_NRES; r++) {
        if (computed(it, r)) {
            a->res[r] = malloc(count_all(it, 1u << r) * sizeof(float));
            ok = ok && a->res[r] != NULL;
        }
    }
    if (a->partials_size > 0) {
        a->partials = malloc(api_mul_sat(a->partials_size, (size_t)it->B));
        a->parts_done = calloc((size_t)it->B, sizeof *a->parts_done);
        if (a->partials == NULL || a->parts_done == NULL) {
            free_outputs(a);
            api_fail(&a->err, ctx, SRV_ERR_INTERNAL, "", "out of memory allocating the results");
            return false;
        }
        for (int32_t b = 0; b < it->B; b++)
            atomic_init(&a->parts_done[b], 0);
    }
    if (!ok) {
        free_outputs(a);
        api_fail(&a->err, ctx, SRV_ERR_INTERNAL, "", "out of memory allocating the results");
        return false;
    }
    return true;
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

static void att_run(srv_job *job, size_t t, void *ws, size_t ws_size)
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

static bool att_keep(srv_job *job, size_t t)
{
    att_job *aj = job->impl;
    att_item *a = &aj->items[aj->task_item[t]];
    return a->valid && api_item_session_keep(&a->it);
}

/* The item's outcome from its tasks: the first failure, else a timeout;
 * timing is the longest wait, the wall time from the first part's start to
 * the last one's end, and the summed CPU time of the parts. */
static const api_err *item_outcome(const srv_job *job, const att_item *a, api_task *merged)
{
    const api_err *fail = NULL;
    memset(merged, 0, sizeof *merged);
    for (size_t t = a->first; t < a->first + item_tasks(a); t++) {
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
        if (res != NULL && srv_wire_overflow(res, count_all(it, 1u << r), a->out_wire, &at)) {
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
    const api_err *fail = item_outcome(job, a, &t);
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
    return api_render_timing(obj, &t) && api_roofline_render(obj, job, it, &t, item_tasks(a));
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
static bool att_render(srv_job *job, cJSON *root)
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
            free_outputs(&aj->items[i]);
    }
    if (all_failed > 0)
        job->status = all_failed;
    return cJSON_AddBoolToObject(root, "errors", errors) != NULL;
}

const srv_endpoint srv_ep_attention = {
    .name = "attention",
    .batch = true,
    .prepare = api_attention_prepare,
    .run = att_run,
    .keep = att_keep,
    .render = att_render,
    .destroy = att_destroy,
};

/* Item i of an attention job, or NULL when it is not one or i is past it. */
static const att_item *item_at(const srv_job *job, size_t i)
{
    if (job == NULL || job->ep != &srv_ep_attention || i >= ((const att_job *)job->impl)->n)
        return NULL;
    return &((const att_job *)job->impl)->items[i];
}

bool api_attention_result(const srv_job *job, size_t i, api_att_result *out)
{
    const att_item *a = item_at(job, i);
    api_task timing;
    if (a == NULL)
        return false;
    memset(out, 0, sizeof *out);
    if (!a->valid) {
        out->err = &a->err;
        return true;
    }
    memset(&timing, 0, sizeof timing);
    out->err = item_outcome(job, a, &timing);
    out->timed_out = timing.timed_out;
    out->queue_us = timing.queue_us;
    out->compute_us = timing.compute_us;
    out->cpu_us = timing.cpu_us;
    out->out_wire = a->out_wire;
    for (int r = 0; r < API_NRES; r++) {
        out->res[r] = a->res[r];
        out->ndim[r] = api_item_result_shape(&a->it, 1u << r, out->shape[r]);
    }
    return true;
}

bool api_attention_roofline(srv_job *job, size_t i, cJSON *params)
{
    const att_item *a = item_at(job, i);
    api_task t;
    if (a == NULL || !a->valid)
        return true;
    memset(&t, 0, sizeof t);
    if (item_outcome(job, a, &t) != NULL || t.timed_out)
        return true;
    return api_roofline_add(params, job, &a->it, &t, item_tasks(a));
}

const api_item *api_attention_item(const srv_job *job, size_t i)
{
    const att_item *a = item_at(job, i);
    return a != NULL && a->valid ? &a->it : NULL;
}

bool api_attention_session_own(srv_job *job, size_t i, bool created, bool end, api_err *e)
{
    att_item *a = (att_item *)item_at(job, i);
    return a == NULL || !a->valid || api_item_session_own(&a->it, created, end, e);
}

const api_err *api_attention_item_error(const srv_job *job, size_t i)
{
    const att_item *a = item_at(job, i);
    return a != NULL && !a->valid ? &a->err : NULL;
}

/* Item i names a session that an earlier item of the batch names too, and
 * one of them appends to it: item i is refused (its append would be checked
 * against the session before the other's). Returns whether it was. */
static bool refuse_same_session(att_job *aj, size_t i)
{
    att_item *a = &aj->items[i];
    if (!a->valid || !a->it.session)
        return false;
    for (size_t j = 0; j < i; j++) {
        const att_item *o = &aj->items[j];
        if (!o->valid || !o->it.session || (!o->it.sess_pending && !a->it.sess_pending))
            continue;
        for (int32_t b = 0; b < a->it.n_sess; b++) {
            const char *id = a->it.sess[b].id;
            char prefix[32];
            api_ctx ctx = {NULL, prefix, NULL, NULL};
            if (!api_item_session_names(&o->it, id))
                continue;
            api_item_prefix(prefix, i);
            api_fail(&a->err, &ctx, SRV_ERR_INVALID_ARGUMENT, "session",
                     "inputs[%zu] names session '%s' too, and one of the two appends to it: a "
                     "request may name a session it appends to once (send the next step after "
                     "this one answers)",
                     j, id);
            api_item_free(&a->it);
            a->valid = false;
            return true;
        }
    }
    return false;
}

bool api_attention_prepare(const cJSON *root, const api_ctx *top_ctx, srv_job **job_out,
                           srv_reply *reply)
{
    static const char *const top[] = {"inputs", "output_encoding", "output_dtype"};
    const srv_limits *lim = top_ctx->lim;
    api_ctx ctx = {lim, "", top_ctx->source, top_ctx->lift};
    api_err e;
    const cJSON *inputs, *node, *v;
    srv_encoding enc = SRV_ENCODING_JSON;
    srv_wire out_wire = SRV_WIRE_F32;
    srv_job *job = NULL;
    att_job *aj = NULL;
    size_t n = 0, i = 0, need = 0, n_tasks = 0;

    if (!api_check_fields(root, top, 3, "", "the request", &ctx, &e))
        goto fail;
    if ((v = cJSON_GetObjectItemCaseSensitive(root, "output_dtype")) != NULL &&
        !api_get_output_dtype(v, &ctx, &out_wire, &e))
        goto fail;
    if ((v = cJSON_GetObjectItemCaseSensitive(root, "output_encoding")) != NULL &&
        !api_get_encoding(v, &ctx, &enc, &e))
        goto fail;
    inputs = cJSON_GetObjectItemCaseSensitive(root, "inputs");
    if (inputs == NULL) {
        api_fail(&e, &ctx, SRV_ERR_INVALID_ARGUMENT, "inputs",
                 "inputs is required: an array of attention items");
        goto fail;
    }
    if (!cJSON_IsArray(inputs)) {
        api_fail(&e, &ctx, SRV_ERR_INVALID_ARGUMENT, "inputs",
                 "inputs must be an array of attention items, found %s", api_json_type(inputs));
        goto fail;
    }
    cJSON_ArrayForEach(node, inputs)
    {
        n++;
    }
    if (n == 0) {
        api_fail(&e, &ctx, SRV_ERR_INVALID_ARGUMENT, "inputs",
                 "inputs is empty: send at least one attention item");
        goto fail;
    }
    if (n > lim->max_batch_items) {
        api_fail(&e, &ctx, SRV_ERR_PAYLOAD_TOO_LARGE, "inputs",
                 "inputs has %zu items; the limit is %zu per request " SRV_LIMIT_BATCH, n,
                 lim->max_batch_items);
        goto fail;
    }

    aj = calloc(1, sizeof *aj);
    if (aj != NULL && (aj->items = calloc(n, sizeof *aj->items)) == NULL) {
        free(aj);
        aj = NULL;
    }
    if (aj == NULL) {
        api_fail(&e, NULL, SRV_ERR_INTERNAL, "", "out of memory");
        goto fail;
    }
    aj->n = n;

    cJSON_ArrayForEach(node, inputs)
    {
        const cJSON *id =
            cJSON_IsObject(node) ? cJSON_GetObjectItemCaseSensitive(node, "id") : NULL;
        if (id != NULL && (aj->items[i].id = cJSON_Duplicate(id, true)) == NULL) {
            api_fail(&e, NULL, SRV_ERR_INTERNAL, "", "out of memory");
            goto fail;
        }
        {
            const size_t item_need = prepare_item(&aj->items[i], i, node, &ctx, out_wire);
            if (!refuse_same_session(aj, i))
                need = api_add_sat(need, item_need);
        }
        if (aj->items[i].valid) /* and the answer's text of its results */
            need = api_add_sat(need, api_rendered_bytes(result_bytes(&aj->items[i].it), enc));
        /* Stop parsing as soon as the request is known to be too big. */
        if (!api_check_memory(need, lim, &e))
            goto fail;
        n_tasks += item_tasks(&aj->items[i]);
        i++;
    }

    job = api_job_new(&srv_ep_attention, n_tasks);
    if (job == NULL || (aj->task_item = calloc(n_tasks, sizeof *aj->task_item)) == NULL) {
        api_fail(&e, NULL, SRV_ERR_INTERNAL, "", "out of memory");
        goto fail;
    }
    job->enc = enc;
    job->impl = aj;
    job->machine = lim->machine;
    for (size_t k = 0, t = 0; k < n; k++) {
        att_item *a = &aj->items[k];
        char prefix[32];
        api_ctx ictx = {lim, prefix, NULL, NULL};
        api_item_prefix(prefix, k);
        if (a->valid && !alloc_outputs(a, &ictx))
            a->valid = false;
        a->first = t;
        for (size_t p = 0; p < item_tasks(a); p++, t++) {
            aj->task_item[t] = k;
            job->tasks[t].scheme_name = a->scheme_name;
            job->tasks[t].step = a->valid && a->it.session ? k + 1 : 0;
            job->tasks[t].workspace = a->valid ? a->workspace : 0;
            job->tasks[t].macs = a->valid ? a->macs / (double)item_tasks(a) : 0;
            if (!a->valid)
                api_task_fail(job, t, &a->err);
        }
    }
    *job_out = job;
    return true;

fail:
    if (job == NULL || job->impl == NULL)
        att_destroy(aj); /* not yet owned by the job */
    srv_job_free(job);
    api_reply_err(reply, &e);
    return false;
}
