/* extrapolation.c - POST /v1/analyze, analysis "extrapolation": how the
 * shape of attention changes past the training length.
 *
 * For a scheme, a train_length and a list of lengths, each length L runs
 * the attention of positions 0 .. L-1 (self-attention, causal unless asked
 * otherwise) with the kernels' row statistics (pa_attention_out: entropy,
 * distance and the share of weight on keys more than train_length away),
 * never a weights matrix, and reports them per head: averaged over all
 * rows, and over the query rows of each band [b * band, (b + 1) * band)
 * (band defaults to train_length: the trained context, then each further
 * stretch of the same size).
 *
 * Inputs: the caller's (an attention item's q, k, v, or layer mode's x and
 * weights, evaluated on their first L rows), or "inputs": "gaussian" with
 * num_heads, head_dim (num_kv_heads) and a seed: standard normal values
 * from Box-Muller over splitmix64 (api_gaussian below; README gives the
 * recipe), drawn for q, k, v in that order, row-major; for the absolute
 * schemes (sinusoidal, learned) x [L, H*D] and w_q, w_k, w_v [H*D, H*D]
 * scaled by 1/sqrt(H*D) instead, the layer mode those schemes need.
 */
#include "api/extrapolation.h"

#include "api/job.h"
#include "api/json.h"
#include "api/request.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { EX_ENTROPY, EX_DISTANCE, EX_FAR, EX_STATS };
static const char *const ex_names[EX_STATS] = {"entropy", "distance", "far_share"};

typedef struct ex_job {
    cJSON *id;
    api_item it;     /* the caller's tensors; unused with gaussian inputs */
    api_scheme sch;  /* gaussian inputs: the scheme */
    pa_attention at; /* the descriptor at the longest length */
    bool layer;
    float *gauss[4]; /* gaussian inputs: q, k, v or x, w_q, w_k, w_v */
    int32_t train_length, band, *lengths, n_lengths, Lmax, H;
    /* results: per length, per band (then the whole length), per head */
    double *mean; /* [n_lengths][max_bands + 1][EX_STATS][H] */
    int32_t max_bands;
} ex_job;

static void ex_destroy(void *impl)
{
    ex_job *x = impl;
    if (x == NULL)
        return;
    cJSON_Delete(x->id);
    api_item_free(&x->it);
    api_scheme_free(&x->sch);
    for (int i = 0; i < 4; i++)
        free(x->gauss[i]);
    free(x->lengths);
    free(x->mean);
    free(x);
}

/* splitmix64 (Steele, Lea and Flood 2014): the state moves by the golden
 * gamma, the output is the mixed state. */
static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* n standard normal floats times scale: pairs by Box-Muller from two
 * uniforms u = (top 53 bits + 1) / 2^53 in (0, 1]: sqrt(-2 ln u1) cos(2 pi
 * u2), then the same radius times sin(2 pi u2). */
static void api_gaussian(uint64_t *state, float *out, size_t n, double scale)
{
    const double two_pi = 6.28318530717958647692;
    for (size_t i = 0; i < n; i += 2) {
        double u1 = ((double)(splitmix64(state) >> 11) + 1.0) / 9007199254740992.0;
        double u2 = ((double)(splitmix64(state) >> 11) + 1.0) / 9007199254740992.0;
        double r = sqrt(-2.0 * log(u1));
        out[i] = (float)(scale * r * cos(two_pi * u2));
        if (i + 1 < n)
            out[i + 1] = (float)(scale * r * sin(two_pi * u2));
    }
}

static const cJSON *member(const cJSON *obj, const char *name)
{
    return cJSON_GetObjectItemCaseSensitive(obj, name);
}

/* The descriptor at length L: every input's first L rows. */
static void at_length(const ex_job *x, int32_t L, pa_attention *a)
{
    *a = x->at;
    if (x->layer)
        a->seq_len = L;
    else
        a->q_len = a->k_len = L;
}

static bool prepare_gaussian(const cJSON *root, const api_ctx *ctx, ex_job *x, int32_t Lmax,
                             size_t *bytes, api_err *e)
{
    const cJSON *v;
    int32_t H = 0, Hkv = 0, D = 0, seed = 0;
    bool causal = true;
    uint64_t state;
    pa_error pe;
    size_t n[4];
    if (!api_scheme_parse(member(root, "scheme"), ctx, &x->sch, e))
        return false;
    if ((v = member(root, "num_heads")) == NULL || !api_get_int(v, "num_heads", ctx, &H, e))
        return v == NULL ? api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "num_heads",
                                    "num_heads is required with gaussian inputs")
                         : false;
    if ((v = member(root, "head_dim")) == NULL || !api_get_int(v, "head_dim", ctx, &D, e))
        return v == NULL ? api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "head_dim",
                                    "head_dim is required with gaussian inputs")
                         : false;
    if ((v = member(root, "num_kv_heads")) != NULL && !api_get_int(v, "num_kv_heads", ctx, &Hkv, e))
        return false;
    if ((v = member(root, "seed")) != NULL && !api_get_int(v, "seed", ctx, &seed, e))
        return false;
    if ((v = member(root, "causal")) != NULL && !api_get_bool(v, "causal", ctx, &causal, e))
        return false;
    if (H < 1 || D < 1 || Hkv < 0 || (Hkv > 0 && H % Hkv != 0))
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT,
                        H < 1   ? "num_heads"
                        : D < 1 ? "head_dim"
                                : "num_kv_heads",
                        "num_heads=%d, num_kv_heads=%d, head_dim=%d: need num_heads >= 1, "
                        "head_dim >= 1 and num_kv_heads dividing num_heads",
                        (int)H, (int)Hkv, (int)D);
    if (Hkv == 0)
        Hkv = H;
    x->layer = x->sch.s.type == PA_SCHEME_SINUSOIDAL || x->sch.s.type == PA_SCHEME_LEARNED;
    pa_attention_init(&x->at, &x->sch.s);
    x->at.num_heads = H;
    x->at.num_kv_heads = Hkv;
    x->at.head_dim = D;
    x->at.causal = causal;
    if (x->layer) {
        const size_t dm = (size_t)H * D;
        n[0] = (size_t)Lmax * dm;
        n[1] = dm * dm;
        n[2] = n[3] = dm * (size_t)Hkv * D;
    } else {
        n[0] = (size_t)Lmax * H * D;
        n[1] = n[2] = (size_t)Lmax * Hkv * D;
        n[3] = 0;
    }
    *bytes = 0;
    for (int i = 0; i < 4; i++) {
        if (n[i] > ctx->lim->max_tensor_elements)
            return api_fail(e, ctx, SRV_ERR_PAYLOAD_TOO_LARGE, "lengths",
                            "the gaussian inputs at length %d need %zu values in one tensor, "
                            "above the limit of %zu " SRV_LIMIT_TENSOR,
                            (int)Lmax, n[i], ctx->lim->max_tensor_elements);
        *bytes = api_add_sat(*bytes, api_mul_sat(n[i], sizeof(float)));
    }
    if (*bytes > ctx->lim->max_request_memory)
        return api_check_memory(*bytes, ctx->lim, e);
    state = (uint64_t)(uint32_t)seed;
    for (int i = 0; i < 4; i++) {
        if (n[i] == 0)
            continue;
        if ((x->gauss[i] = malloc(n[i] * sizeof(float))) == NULL)
            return api_fail(e, ctx, SRV_ERR_INTERNAL, "", "out of memory");
        api_gaussian(&state, x->gauss[i], n[i],
                     x->layer && i > 0 ? 1.0 / sqrt((double)H * D) : 1.0);
    }
    if (x->layer) {
        x->at.x = x->gauss[0];
        x->at.seq_len = Lmax;
        x->at.d_model = H * D;
        x->at.w_q = x->gauss[1];
        x->at.w_k = x->gauss[2];
        x->at.w_v = x->gauss[3];
    } else {
        x->at.q = x->gauss[0];
        x->at.k = x->gauss[1];
        x->at.v = x->gauss[2];
        x->at.q_len = x->at.k_len = Lmax;
    }
    if (pa_attention_check(&x->at, &pe) != PA_STATUS_OK)
        return api_fail_pa(e, ctx, &pe);
    return true;
}

/* The caller's tensors: one sequence of self-attention, no per-cell mask,
 * bias or padding (those have no first-L-rows form). */
static bool prepare_tensors(const cJSON *root, const api_ctx *ctx, ex_job *x, int32_t Lmax,
                            size_t *bytes, api_err *e)
{
    static const char *const extra[] = {"analysis", "id",   "train_length",
                                        "lengths",  "band", "inputs"};
    const pa_attention *a;
    if (!api_item_parse(root, ctx, extra, sizeof extra / sizeof extra[0], &x->it, e))
        return false;
    a = &x->it.att;
    if (x->it.batched || a->mask != NULL || a->bias != NULL || a->key_length >= 0 ||
        x->it.query_lengths != NULL || api_item_is_packed(&x->it))
        return api_fail(e, ctx, SRV_ERR_UNSUPPORTED,
                        x->it.batched                ? "q.shape"
                        : a->mask != NULL            ? "mask"
                        : a->bias != NULL            ? "bias"
                        : a->key_length >= 0         ? "key_length"
                        : api_item_is_packed(&x->it) ? "cu_seqlens"
                                                     : "query_length",
                        "the extrapolation analysis runs one sequence on its first L rows: a "
                        "batch, mask, bias, key_length, query_length or cu_seqlens has no such "
                        "prefix");
    if (x->it.Lq != x->it.Lk)
        return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, "k",
                        "the extrapolation analysis is self-attention: q has %d rows, k %d",
                        (int)x->it.Lq, (int)x->it.Lk);
    if (Lmax > x->it.Lq)
        return api_fail(e, ctx, SRV_ERR_OUT_OF_RANGE, "lengths",
                        "the longest length %d is past the %d rows of the inputs", (int)Lmax,
                        (int)x->it.Lq);
    x->at = *a;
    x->layer = a->x != NULL;
    *bytes = x->it.input_bytes;
    return true;
}

static bool ex_prepare(const cJSON *root, const api_ctx *top, srv_job **job_out, srv_reply *reply)
{
    static const char *const gauss_fields[] = {"analysis", "id",           "scheme", "train_length",
                                               "lengths",  "band",         "inputs", "num_heads",
                                               "head_dim", "num_kv_heads", "seed",   "causal"};
    api_ctx ctx = {top->lim, "", top->source, top->lift};
    api_err e;
    srv_job *job = NULL;
    ex_job *x = calloc(1, sizeof *x);
    const cJSON *v, *inputs = member(root, "inputs");
    const bool gaussian = cJSON_IsString(inputs);
    int32_t Lmax = 0;
    size_t bytes = 0, ws = 0, per_len;

    if (x == NULL) {
        api_fail(&e, NULL, SRV_ERR_INTERNAL, "", "out of memory");
        goto fail;
    }
    if ((v = member(root, "train_length")) == NULL) {
        api_fail(&e, &ctx, SRV_ERR_INVALID_ARGUMENT, "train_length",
                 "train_length is required: the context the model was trained at");
        goto fail;
    }
    if (!api_get_int(v, "train_length", &ctx, &x->train_length, &e))
        goto fail;
    if (x->train_length < 1) {
        api_fail(&e, &ctx, SRV_ERR_INVALID_ARGUMENT, "train_length",
                 "train_length=%d must be at least 1", (int)x->train_length);
        goto fail;
    }
    x->band = x->train_length;
    if ((v = member(root, "band")) != NULL && !api_get_int(v, "band", &ctx, &x->band, &e))
        goto fail;
    if (x->band < 1) {
        api_fail(&e, &ctx, SRV_ERR_INVALID_ARGUMENT, "band", "band=%d must be at least 1",
                 (int)x->band);
        goto fail;
    }
    if ((v = member(root, "lengths")) == NULL) {
        api_fail(&e, &ctx, SRV_ERR_INVALID_ARGUMENT, "lengths",
                 "lengths is required: the context lengths to evaluate, e.g. [4096, 16384]");
        goto fail;
    }
    if (!api_get_int_array(v, "lengths", &ctx, &x->lengths, &x->n_lengths, &e))
        goto fail;
    if (x->n_lengths < 1 || x->n_lengths > 64) {
        api_fail(&e, &ctx, SRV_ERR_INVALID_ARGUMENT, "lengths",
                 "lengths holds %d values: 1 to 64 are allowed", (int)x->n_lengths);
        goto fail;
    }
    for (int32_t i = 0; i < x->n_lengths; i++) {
        if (x->lengths[i] < 1) {
            char f[32];
            snprintf(f, sizeof f, "lengths[%d]", (int)i);
            api_fail(&e, &ctx, SRV_ERR_INVALID_ARGUMENT, f, "%s=%d must be at least 1", f,
                     (int)x->lengths[i]);
            goto fail;
        }
        if (x->lengths[i] > Lmax)
            Lmax = x->lengths[i];
    }
    /* One task per length: the pool interleaves them with other requests,
     * and a deadline drops those not started (runtime/pool.h). */
    if ((job = api_job_new(&srv_ep_extrapolation, (size_t)x->n_lengths)) == NULL) {
        api_fail(&e, NULL, SRV_ERR_INTERNAL, "", "out of memory");
        goto fail;
    }
    job->impl = x; /* the job's now: srv_job_free frees it */
    for (int32_t i = 0; i < x->n_lengths; i++)
        job->tasks[i].scheme_name = "analysis";
    if (gaussian) {
        if (strcmp(inputs->valuestring, "gaussian") != 0) {
            api_fail(&e, &ctx, SRV_ERR_INVALID_ARGUMENT, "inputs",
                     "inputs='%.32s': the one generator is \"gaussian\" (or leave inputs out "
                     "and send q, k, v or x and weights)",
                     inputs->valuestring);
            goto fail;
        }
        if (!api_check_fields(root, gauss_fields, sizeof gauss_fields / sizeof gauss_fields[0], "",
                              "an extrapolation analysis with gaussian inputs", &ctx, &e) ||
            !prepare_gaussian(root, &ctx, x, Lmax, &bytes, &e))
            goto fail;
    } else if (inputs != NULL) {
        api_fail(&e, &ctx, SRV_ERR_INVALID_ARGUMENT, "inputs",
                 "inputs must be the string \"gaussian\" (or leave it out and send tensors)");
        goto fail;
    } else if (!prepare_tensors(root, &ctx, x, Lmax, &bytes, &e)) {
        goto fail;
    }
    if ((v = member(root, "id")) != NULL && (x->id = cJSON_Duplicate(v, true)) == NULL) {
        api_fail(&e, NULL, SRV_ERR_INTERNAL, "", "out of memory");
        goto fail;
    }
    x->H = x->at.num_heads;
    x->Lmax = Lmax;
    {
        pa_attention a;
        at_length(x, Lmax, &a);
        ws = pa_attention_workspace_size(&a);
    }
    if (ws == 0) {
        api_fail(&e, &ctx, SRV_ERR_PAYLOAD_TOO_LARGE, "lengths",
                 "the attention workspace at length %d overflows the address space", (int)Lmax);
        goto fail;
    }
    x->max_bands = (Lmax + x->band - 1) / x->band;
    per_len = api_mul_sat(api_mul_sat((size_t)x->max_bands + 1, EX_STATS), (size_t)x->H);
    /* A run's output is [L, H*Dv] (or d_out), its statistics 3 x [H, L],
     * and as many runs as there are workers go at once. */
    {
        const int32_t Dv = x->at.v_head_dim ? x->at.v_head_dim : x->at.head_dim;
        size_t out = api_mul_sat((size_t)Lmax, (size_t)(x->at.w_o ? x->at.d_out : x->H * Dv));
        size_t run = api_add_sat(api_mul_sat(out, sizeof(float)), ws);
        size_t concurrent = (size_t)x->n_lengths;
        size_t need;
        if (ctx.lim->parallel_parts > 0 && concurrent > (size_t)ctx.lim->parallel_parts)
            concurrent = (size_t)ctx.lim->parallel_parts;
        run = api_add_sat(
            run, api_mul_sat(api_mul_sat((size_t)Lmax, (size_t)x->H), EX_STATS * sizeof(float)));
        need = api_add_sat(bytes, api_mul_sat(run, concurrent));
        need = api_add_sat(need, api_mul_sat(api_mul_sat(per_len, (size_t)x->n_lengths), 32));
        need = api_add_sat(need, x->sch.bytes);
        if (!api_check_memory(need, ctx.lim, &e))
            goto fail;
    }
    /* Each length's cost, for the compute bound: attention's products (the
     * causal mask's savings not counted) and layer mode's projections. */
    for (int32_t i = 0; i < x->n_lengths; i++) {
        pa_attention a;
        const double L = x->lengths[i];
        const double D = x->at.head_dim, Dv = x->at.v_head_dim ? x->at.v_head_dim : D;
        const double Hkv = x->at.num_kv_heads ? x->at.num_kv_heads : x->H; /* 0: H */
        double macs = L * L * (D + Dv) * x->H;
        if (x->layer)
            macs += L * x->at.d_model * (x->H * D + Hkv * (D + Dv)) +
                    (x->at.w_o ? L * (double)x->H * Dv * x->at.d_out : 0.0);
        at_length(x, x->lengths[i], &a);
        job->tasks[i].cost = macs;
        job->tasks[i].workspace = pa_attention_workspace_size(&a);
    }
    x->mean = calloc((size_t)x->n_lengths * per_len, sizeof(double));
    if (x->mean == NULL) {
        api_fail(&e, NULL, SRV_ERR_INTERNAL, "", "out of memory");
        goto fail;
    }
    *job_out = job;
    return true;

fail:
    if (job == NULL)
        ex_destroy(x);
    srv_job_free(job);
    api_reply_err(reply, &e);
    return false;
}

/* Length i: run with the statistics, then the means of each band and of
 * all rows, in double, into its own slice of x->mean. */
static void ex_run(srv_job *job, size_t i, void *ws, size_t ws_size)
{
    ex_job *x = job->impl;
    const int32_t H = x->H, per_band = EX_STATS * H, L = x->lengths[i];
    const size_t per_len = ((size_t)x->max_bands + 1) * (size_t)per_band;
    double *m = x->mean + i * per_len;
    float *out, *stats[EX_STATS];
    size_t out_per_row;
    pa_attention a;
    pa_attention_out o = {0};
    api_err e;
    pa_error pe;

    out_per_row = x->at.w_o ? (size_t)x->at.d_out
                            : (size_t)H * (x->at.v_head_dim ? x->at.v_head_dim : x->at.head_dim);
    out = malloc((size_t)L * out_per_row * sizeof(float));
    for (int s = 0; s < EX_STATS; s++)
        stats[s] = malloc((size_t)H * L * sizeof(float));
    if (out == NULL || stats[0] == NULL || stats[1] == NULL || stats[2] == NULL) {
        api_fail(&e, NULL, SRV_ERR_INTERNAL, "", "out of memory running the analysis");
        api_task_fail(job, i, &e);
        goto done;
    }
    at_length(x, L, &a);
    o.output = out;
    o.entropy = stats[EX_ENTROPY];
    o.distance = stats[EX_DISTANCE];
    o.far_share = stats[EX_FAR];
    o.far_distance = x->train_length;
    if (pa_attention_run(&a, &o, ws, ws_size, &pe) != PA_STATUS_OK) {
        char f[32];
        api_ctx ctx = {NULL, f, NULL, NULL};
        snprintf(f, sizeof f, "lengths[%d]", (int)i);
        api_fail_pa(&e, &ctx, &pe);
        api_task_fail(job, i, &e);
        goto done;
    }
    for (int s = 0; s < EX_STATS; s++)
        for (int32_t h = 0; h < H; h++) {
            const float *row = stats[s] + (size_t)h * L;
            double all = 0.0;
            for (int32_t b = 0; b * x->band < L; b++) {
                const int32_t r0 = b * x->band, r1 = r0 + x->band < L ? r0 + x->band : L;
                double sum = 0.0;
                for (int32_t r = r0; r < r1; r++)
                    sum += row[r];
                all += sum;
                m[(size_t)b * per_band + (size_t)s * H + h] = sum / (r1 - r0);
            }
            m[(size_t)x->max_bands * per_band + (size_t)s * H + h] = all / L;
        }
done:
    free(out);
    for (int s = 0; s < EX_STATS; s++)
        free(stats[s]);
}

static cJSON *doubles(const double *v, int32_t n)
{
    cJSON *arr = cJSON_CreateArray();
    for (int32_t i = 0; arr != NULL && i < n; i++) {
        cJSON *num = cJSON_CreateNumber(v[i]);
        if (num == NULL || !cJSON_AddItemToArray(arr, num)) {
            cJSON_Delete(num);
            cJSON_Delete(arr);
            return NULL;
        }
    }
    return arr;
}

/* Adds the three statistics of one band (or of all rows) to obj. */
static bool add_stats(cJSON *obj, const double *m, int32_t H)
{
    for (int s = 0; s < EX_STATS; s++) {
        cJSON *arr = doubles(m + (size_t)s * H, H);
        if (arr == NULL || !cJSON_AddItemToObject(obj, ex_names[s], arr)) {
            cJSON_Delete(arr);
            return false;
        }
    }
    return true;
}

static bool ex_render(srv_job *job, cJSON *root)
{
    ex_job *x = job->impl;
    const int32_t H = x->H, per_band = EX_STATS * H;
    const size_t per_len = ((size_t)x->max_bands + 1) * (size_t)per_band;
    cJSON *lens;
    const char *scheme = pa_scheme_type_name(x->at.scheme->type);
    if (!cJSON_AddStringToObject(root, "analysis", "extrapolation") ||
        !cJSON_AddStringToObject(root, "scheme", scheme) ||
        !cJSON_AddNumberToObject(root, "train_length", x->train_length) ||
        !cJSON_AddNumberToObject(root, "band", x->band) ||
        !cJSON_AddNumberToObject(root, "num_heads", H) ||
        !cJSON_AddBoolToObject(root, "causal", x->at.causal))
        return false;
    if (x->id != NULL) {
        cJSON *id = api_id_node(x->id);
        if (id == NULL || !cJSON_AddItemToObject(root, "id", id)) {
            cJSON_Delete(id);
            return false;
        }
    }
    if ((lens = cJSON_AddArrayToObject(root, "lengths")) == NULL)
        return false;
    for (int32_t k = 0; k < x->n_lengths; k++) {
        const int32_t L = x->lengths[k];
        const double *m = x->mean + (size_t)k * per_len;
        cJSON *o = cJSON_CreateObject(), *bands;
        if (o == NULL || !cJSON_AddItemToArray(lens, o)) {
            cJSON_Delete(o);
            return false;
        }
        if (!cJSON_AddNumberToObject(o, "length", L) ||
            !add_stats(o, m + (size_t)x->max_bands * per_band, H) ||
            (bands = cJSON_AddArrayToObject(o, "bands")) == NULL)
            return false;
        for (int32_t b = 0; b * x->band < L; b++) {
            cJSON *bo = cJSON_CreateObject();
            const int32_t r0 = b * x->band, r1 = r0 + x->band < L ? r0 + x->band : L;
            if (bo == NULL || !cJSON_AddItemToArray(bands, bo)) {
                cJSON_Delete(bo);
                return false;
            }
            if (!cJSON_AddNumberToObject(bo, "from", r0) ||
                !cJSON_AddNumberToObject(bo, "to", r1) ||
                !add_stats(bo, m + (size_t)b * per_band, H))
                return false;
        }
    }
    return true;
}

bool api_extrapolation_prepare(const cJSON *root, const api_ctx *ctx, srv_job **job,
                               srv_reply *reply)
{
    return ex_prepare(root, ctx, job, reply);
}

const srv_endpoint srv_ep_extrapolation = {
    .name = "analyze",
    .prepare = ex_prepare,
    .run = ex_run,
    .render = ex_render,
    .destroy = ex_destroy,
};
