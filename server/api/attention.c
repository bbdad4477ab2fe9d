/* attention.c - POST /v1/attention: a batch of attention items into a job,
 * each parsed by api/item.c, sized, and cut into tasks (the item, or parts
 * of a large one spread over the workers), and the job as protocols see it;
 * api/attention_run.c runs the tasks and renders the answer. v2/ prepares
 * its infer requests here too (api/attention.h).
 */
#include "api/attention.h"
#include "api/attention_job.h"

#include "api/job.h"
#include "api/json.h"
#include "api/request.h"
#include "api/roofline.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Below this many multiply-adds an item is not split: the cost of another
 * task (rope tables, a second pass over k) would outweigh the gain. */
#define ATT_SPLIT_MIN_MACS (16.0 * 1024 * 1024)

static void att_destroy(void *impl)
{
    att_job *aj = impl;
    if (aj == NULL)
        return;
    for (size_t i = 0; i < aj->n; i++) {
        cJSON_Delete(aj->items[i].id);
        api_item_free(&aj->items[i].it);
        api_attention_free_outputs(&aj->items[i]);
    }
    free(aj->items);
    free(aj->task_item);
    free(aj);
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
            n = api_add_sat(n, att_count_all(it, 1u << r));
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
            a->res[r] = malloc(att_count_all(it, 1u << r) * sizeof(float));
            ok = ok && a->res[r] != NULL;
        }
    }
    if (a->partials_size > 0) {
        a->partials = malloc(api_mul_sat(a->partials_size, (size_t)it->B));
        a->parts_done = calloc((size_t)it->B, sizeof *a->parts_done);
        if (a->partials == NULL || a->parts_done == NULL) {
            api_attention_free_outputs(a);
            api_fail(&a->err, ctx, SRV_ERR_INTERNAL, "", "out of memory allocating the results");
            return false;
        }
        for (int32_t b = 0; b < it->B; b++)
            atomic_init(&a->parts_done[b], 0);
    }
    if (!ok) {
        api_attention_free_outputs(a);
        api_fail(&a->err, ctx, SRV_ERR_INTERNAL, "", "out of memory allocating the results");
        return false;
    }
    return true;
}

const srv_endpoint srv_ep_attention = {
    .name = "attention",
    .batch = true,
    .prepare = api_attention_prepare,
    .run = api_attention_run,
    .keep = api_attention_keep,
    .render = api_attention_render,
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
    out->err = api_attention_outcome(job, a, &timing);
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
    if (api_attention_outcome(job, a, &t) != NULL || t.timed_out)
        return true;
    return api_roofline_add(params, job, &a->it, &t, att_item_tasks(a));
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
        n_tasks += att_item_tasks(&aj->items[i]);
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
        for (size_t p = 0; p < att_item_tasks(a); p++, t++) {
            aj->task_item[t] = k;
            job->tasks[t].scheme_name = a->scheme_name;
            job->tasks[t].step = a->valid && a->it.session ? k + 1 : 0;
            job->tasks[t].workspace = a->valid ? a->workspace : 0;
            job->tasks[t].macs = a->valid ? a->macs / (double)att_item_tasks(a) : 0;
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
