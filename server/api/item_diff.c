/* item_diff.c - an attention item's "differential" option: differential
 * attention (include/posattn_diff.h) in /v1/attention. Its object, the
 * shapes of both peers' layouts (q [Lq, 2H, D], k [Lk, Hk, D], v
 * [Lk, Hk/2, 2D] with pairs interleaved or [Lk, Hk, D] with halves) and
 * the results it gives; called by api_item_parse (item.c).
 */
#include "api/request.h"

#include "api/json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const diff_fields[] = {
    "pairs",       "lambda", "lambda_q1", "lambda_k1",    "lambda_q2", "lambda_k2",
    "lambda_init", "depth",  "subln",     "subln_weight", "subln_eps",
};

/* The vectors, in the order of api_item's diff_array and diff_tensor. */
static const char *const vec_names[5] = {"lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2",
                                         "subln_weight"};

/* Vector i: a number array or a 1-D tensor; its length is checked against
 * head_dim once the shapes are known (api_item_diff_shapes). */
static bool parse_vec(const cJSON *v, int i, const api_ctx *ctx, api_item *it, api_err *e)
{
    char path[48];
    snprintf(path, sizeof path, "differential.%s", vec_names[i]);
    if (cJSON_IsArray(v))
        return api_get_float_array(v, path, ctx, &it->diff_array[i], &it->diff_len[i], e);
    if (!api_get_tensor(v, path, ctx, 1, &it->diff_tensor[i], e))
        return false;
    it->diff_len[i] = (int32_t)it->diff_tensor[i].shape[0];
    return true;
}

static const float *vec_data(const api_item *it, int i)
{
    return it->diff_array[i] != NULL ? it->diff_array[i] : it->diff_tensor[i].data;
}

bool api_item_parse_diff(const cJSON *obj, const api_ctx *ctx, api_item *it, api_err *e)
{
    const cJSON *d = api_member(obj, "differential"), *m;
    pa_differential *dif = &it->dif;
    bool has_vec[4], any_vec = false;

    if (d == NULL)
        return true;
    if (!cJSON_IsObject(d))
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "differential",
                        "differential must be an object {\"pairs\": \"interleaved\" or "
                        "\"halves\", \"lambda\": number (or lambda_q1, lambda_k1, lambda_q2, "
                        "lambda_k2), \"lambda_init\": number (or \"depth\"), \"subln\", "
                        "\"subln_weight\", \"subln_eps\"}, found %s",
                        api_json_type(d));
    if (!api_check_fields(d, diff_fields, sizeof diff_fields / sizeof diff_fields[0],
                          "differential", "differential", ctx, e))
        return false;
    /* The library refuses layer mode too, but parse_layer would speak first. */
    if (api_member(obj, "x") != NULL)
        return api_fail(e, ctx, SRV_ERR_UNSUPPORTED, "x",
                        "differential attention takes q, k, v (layer mode is not supported)");
    pa_diff_init(dif);
    it->diff = true;
    if ((m = api_member(d, "pairs")) != NULL) {
        if (!cJSON_IsString(m))
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "differential.pairs",
                            "differential.pairs must be \"interleaved\" or \"halves\", found %s",
                            api_json_type(m));
        if (strcmp(m->valuestring, "halves") == 0)
            dif->pairs = PA_DIFF_PAIRS_HALVES;
        else if (strcmp(m->valuestring, "interleaved") != 0)
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "differential.pairs",
                            "differential.pairs='%.32s' is not interleaved (microsoft/unilm: "
                            "heads 2h, 2h+1) or halves (Hugging Face DiffLlama: heads h, h+H)",
                            m->valuestring);
    }

    for (int i = 0; i < 4; i++) {
        has_vec[i] = (m = api_member(d, vec_names[i])) != NULL;
        any_vec = any_vec || has_vec[i];
        if (has_vec[i] && !parse_vec(m, i, ctx, it, e))
            return false;
    }
    if ((m = api_member(d, "lambda")) != NULL) {
        if (any_vec)
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "differential.lambda",
                            "differential.lambda and lambda_q1, lambda_k1, lambda_q2, lambda_k2 "
                            "both given: send lambda, or the four vectors to compute it from");
        if (!api_get_number(m, "differential.lambda", ctx, &dif->lambda, e))
            return false;
    } else if (!any_vec) {
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "differential.lambda",
                        "differential needs lambda (a number), or lambda_q1, lambda_k1, "
                        "lambda_q2 and lambda_k2 ([head_dim] each) to compute it from");
    }
    for (int i = 0; i < 4 && any_vec; i++) {
        char path[48];
        snprintf(path, sizeof path, "differential.%s", vec_names[i]);
        if (!has_vec[i])
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, path,
                            "%s is missing: lambda_q1, lambda_k1, lambda_q2 and lambda_k2 go "
                            "together (or send lambda)",
                            path);
    }

    if ((m = api_member(d, "lambda_init")) != NULL) {
        if (api_member(d, "depth") != NULL)
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "differential.depth",
                            "differential.lambda_init and depth both given: depth computes "
                            "lambda_init = 0.8 - 0.6 exp(-0.3 depth); send one");
        if (!api_get_number(m, "differential.lambda_init", ctx, &dif->lambda_init, e))
            return false;
    } else if ((m = api_member(d, "depth")) != NULL) {
        int32_t depth;
        if (!api_get_int(m, "differential.depth", ctx, &depth, e))
            return false;
        if (depth < 0)
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "differential.depth",
                            "differential.depth=%d must be 0 or more (the layer's index)",
                            (int)depth);
        dif->lambda_init = pa_diff_lambda_init(depth);
    }
    if ((m = api_member(d, "subln")) != NULL &&
        !api_get_bool(m, "differential.subln", ctx, &dif->subln, e))
        return false;
    if ((m = api_member(d, "subln_eps")) != NULL &&
        !api_get_number(m, "differential.subln_eps", ctx, &dif->subln_eps, e))
        return false;
    if ((m = api_member(d, "subln_weight")) != NULL) {
        if (!dif->subln)
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "differential.subln_weight",
                            "differential.subln_weight scales the subln's output, but subln is "
                            "false");
        if (!parse_vec(m, 4, ctx, it, e))
            return false;
    }
    return true;
}

bool api_item_diff_shapes(const cJSON *obj, const api_ctx *ctx, api_item *it, api_err *e)
{
    const bool inter = it->dif.pairs == PA_DIFF_PAIRS_INTERLEAVED;
    const int32_t H2 = it->H, Hk = it->Hkv, D = it->D;
    const int32_t Hv = inter ? Hk / 2 : Hk, Dv = inter ? 2 * D : D;
    const char *layout = inter ? "interleaved" : "halves";
    const float **vecs[5] = {&it->dif.lambda_q1, &it->dif.lambda_k1, &it->dif.lambda_q2,
                             &it->dif.lambda_k2, &it->dif.subln_weight};

    if (!it->diff)
        return true;
    if (it->batched)
        return api_fail(e, ctx, SRV_ERR_UNSUPPORTED, "q.shape",
                        "differential attention takes one sequence: a batch (4-D q, B=%d) is "
                        "not supported; send the sequences as separate items",
                        (int)it->B);
    if (api_member(obj, "query_length") != NULL)
        return api_fail(e, ctx, SRV_ERR_UNSUPPORTED, "query_length",
                        "query_length is not supported with differential attention: send the "
                        "real query rows only");
    if (H2 % 2 != 0)
        return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, "q.shape",
                        "differential attention pairs q's heads: q.shape[1]=%d must be even (2H, "
                        "H output heads)",
                        (int)H2);
    if (inter && Hk % 2 != 0)
        return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, "k.shape",
                        "with differential.pairs interleaved k has 2 heads per v head: "
                        "k.shape[1]=%d must be even",
                        (int)Hk);
    if (it->v.shape[1] != Hv || it->v.shape[2] != Dv)
        return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, "v.shape",
                        "v.shape=[%lld, %lld, %lld] must be %s=[%d, %d, %d] with "
                        "differential.pairs %s",
                        (long long)it->v.shape[0], (long long)it->v.shape[1],
                        (long long)it->v.shape[2],
                        inter ? "[Lk, k's heads / 2, 2 head_dim]" : "[Lk, k's heads, head_dim]",
                        (int)it->Lk, (int)Hv, (int)Dv, layout);
    for (int i = 0; i < 5; i++) {
        const int32_t want = i < 4 ? D : 2 * D;
        if (vec_data(it, i) == NULL)
            continue;
        char path[48];
        snprintf(path, sizeof path, "differential.%s", vec_names[i]);
        if (it->diff_len[i] != want)
            return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, path,
                            "%s has %d values but must have %d (%s)", path, (int)it->diff_len[i],
                            (int)want,
                            i < 4 ? "head_dim, q.shape[2]" : "2 head_dim, the output's width");
        *vecs[i] = vec_data(it, i);
        it->input_bytes = api_add_sat(it->input_bytes, (size_t)want * sizeof(float));
    }
    it->H = H2 / 2;
    it->Dv = 2 * D;
    it->att.v_head_dim = Dv;
    it->out_ndim = 3;
    it->out_shape[0] = it->Lq;
    it->out_shape[1] = it->H;
    it->out_shape[2] = 2 * D;
    return true;
}

void api_item_diff_free(api_item *it)
{
    for (int i = 0; i < 5; i++) {
        free(it->diff_array[i]);
        it->diff_array[i] = NULL;
        api_tensor_release(&it->diff_tensor[i]);
    }
}
