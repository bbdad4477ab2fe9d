/* model.c - see v2/v2.h. The protocol's surface: errors, server metadata
 * and the answer to an infer request: the outputs it asks for
 * (v2_read_outputs) and the view of the /v1 attention job that v2/infer.c
 * prepares. The models are models.c's, their metadata and
 * statistics metadata.c's.
 *
 * Protocol references (quoted by name in comments below):
 *   [V2]  kserve/kserve docs/predict-api/v2/required_api.md, "HTTP/REST":
 *         health, server and model metadata, the inference request and
 *         response objects, $parameters, "Tensor Data", error objects.
 *   [BIN] triton-inference-server/server docs/protocol/extension_binary_data.md:
 *         "binary_data_size" on inputs and outputs, "binary_data" on requested
 *         outputs, "binary_data_output" on the request, the
 *         Inference-Header-Content-Length header, "Raw Binary Request".
 */
#include "v2/internal.h"

#include "codec/float32.h"
#include "codec/half.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char octet_type[] = "application/octet-stream";

/* ------------------------------------------------------------------------- */
/* Outputs                                                                   */
/* ------------------------------------------------------------------------- */

const v2_output v2_outputs[V2_OUTPUTS] = {
    {"output", API_RET_OUTPUT},     {"weights", API_RET_WEIGHTS}, {"logits", API_RET_LOGITS},
    {"q_rot", API_RET_Q_ROT},       {"k_rot", API_RET_K_ROT},     {"entropy", API_RET_ENTROPY},
    {"distance", API_RET_DISTANCE},
};

bool v2_input_floating(const v2_input *spec)
{
    return !spec->int32 && !spec->boolean && spec->role != V2_ROLE_SCHEME_ARRAY;
}

void v2_list_add(char *buf, size_t cap, const char *s)
{
    size_t used = strlen(buf);
    if (used + 1 < cap)
        snprintf(buf + used, cap - used, "%s%s", used ? ", " : "", s);
}

/* ------------------------------------------------------------------------- */
/* Errors                                                                    */
/* ------------------------------------------------------------------------- */

void srv_v2_reply_error(srv_reply *r)
{
    cJSON *root, *out;
    const cJSON *err, *msg;
    char *body = NULL;

    if (r == NULL || r->http_status < 400 || r->body == NULL)
        return;
    root = cJSON_ParseWithLength(r->body, r->body_len);
    err = cJSON_GetObjectItemCaseSensitive(root, "error");
    msg = cJSON_GetObjectItemCaseSensitive(err, "message");
    if (cJSON_IsObject(err) && cJSON_IsString(msg)) {
        /* [V2] "Inference Response JSON Error Object": {"error": <string>}. */
        out = cJSON_CreateObject();
        if (out != NULL && cJSON_AddStringToObject(out, "error", msg->valuestring) != NULL)
            body = cJSON_PrintUnformatted(out);
        cJSON_Delete(out);
    }
    cJSON_Delete(root);
    if (body == NULL)
        return; /* not a /v1 error, or no memory: the reply stays as it was */
    free(r->body);
    r->body = body;
    r->body_len = strlen(body);
    r->content_type = "application/json";
    r->len_header = NULL;
    r->len_value = 0;
}

void v2_fail_reply(srv_reply *reply, const api_err *e)
{
    api_reply_err(reply, e);
    srv_v2_reply_error(reply);
}

/* ------------------------------------------------------------------------- */
/* Server metadata                                                           */
/* ------------------------------------------------------------------------- */

void v2_reply_tree(srv_reply *reply, cJSON *root, bool ok)
{
    char *body = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    if (body == NULL) {
        srv_reply_error(reply, SRV_ERR_INTERNAL, NULL, "out of memory rendering the answer");
        srv_v2_reply_error(reply);
        return;
    }
    srv_reply_json(reply, 200, body, strlen(body));
}

void srv_v2_server_metadata(srv_reply *reply)
{
    /* [V2] "Server Metadata Response JSON Object"; [BIN]: a server with the
     * extension reports "binary_tensor_data"; [SEQ] "sequence", and
     * "sequence(string_id)" when sequence_id may be a string. */
    cJSON *root = cJSON_CreateObject(), *ext;
    bool ok = root != NULL && cJSON_AddStringToObject(root, "name", "posattn") &&
              cJSON_AddStringToObject(root, "version", PA_VERSION_STRING) &&
              (ext = cJSON_AddArrayToObject(root, "extensions")) != NULL &&
              cJSON_AddItemToArray(ext, cJSON_CreateString("binary_tensor_data")) &&
              cJSON_AddItemToArray(ext, cJSON_CreateString("statistics")) &&
              cJSON_AddItemToArray(ext, cJSON_CreateString("sequence")) &&
              cJSON_AddItemToArray(ext, cJSON_CreateString("sequence(string_id)"));
    v2_reply_tree(reply, root, ok);
}

static bool answer_oom(api_err *e)
{
    return api_fail(e, NULL, SRV_ERR_INTERNAL, "", "out of memory");
}

/* See internal.h. */
bool v2_read_outputs(cJSON *item, const char *model, const cJSON *outs, bool binary_all,
                     v2_answer *ans, const api_ctx *ctx, api_err *e)
{
    static const char *const fields[] = {"name", "parameters"};
    static const char *const pfields[] = {"binary_data"};
    const cJSON *o;
    cJSON *ret = cJSON_AddArrayToObject(item, "return");
    size_t i = 0;

    if (ret == NULL)
        return answer_oom(e);
    if (outs == NULL) {
        /* Not in the request: the output tensor only (weights and logits are
         * H x Lq x Lk, so they are asked for by name). */
        ans->n_out = 1;
        ans->bits[0] = API_RET_OUTPUT;
        ans->binary[0] = binary_all;
        return cJSON_AddItemToArray(ret, cJSON_CreateString("output")) || answer_oom(e);
    }
    if (!cJSON_IsArray(outs))
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "outputs",
                        "outputs must be an array of {name, parameters}, found %s",
                        api_json_type(outs));
    cJSON_ArrayForEach(o, outs)
    {
        char at[32], path[64];
        const char *name;
        const cJSON *v, *p;
        size_t k = 0;
        bool binary = binary_all;

        snprintf(at, sizeof at, "outputs[%zu]", i);
        if (!v2_read_named(o, at, "{name, parameters}", fields, 2, path, sizeof path, &name, ctx,
                           e))
            return false;
        while (k < V2_OUTPUTS && strcmp(v2_outputs[k].name, name) != 0)
            k++;
        if (k == V2_OUTPUTS)
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, path,
                            "%s='%.64s' is not an output of model %s (outputs: output, weights, "
                            "logits, q_rot, k_rot, entropy, distance)",
                            path, name, model);
        for (size_t j = 0; j < ans->n_out; j++)
            if (ans->bits[j] == v2_outputs[k].bit)
                return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, path,
                                "output '%s' is requested more than once", name);
        if ((p = cJSON_GetObjectItemCaseSensitive(o, "parameters")) != NULL) {
            snprintf(path, sizeof path, "%s.parameters", at);
            if (!cJSON_IsObject(p))
                return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, path,
                                "%s must be an object, found %s", path, api_json_type(p));
            if (!api_check_fields(p, pfields, 1, path, path, ctx, e))
                return false;
            snprintf(path, sizeof path, "%s.parameters.binary_data", at);
            if ((v = cJSON_GetObjectItemCaseSensitive(p, "binary_data")) != NULL &&
                !api_get_bool(v, path, ctx, &binary, e))
                return false;
        }
        ans->bits[ans->n_out] = v2_outputs[k].bit;
        ans->binary[ans->n_out++] = binary;
        if (!cJSON_AddItemToArray(ret, cJSON_CreateString(name)))
            return answer_oom(e);
        i++;
    }
    if (i == 0)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "outputs",
                        "outputs is empty: leave it out for the default (output)");
    return true;
}

void v2_answer_free(void *p)
{
    v2_answer *ans = p;
    if (ans == NULL)
        return;
    free(ans->id);
    free(ans);
}

/* ------------------------------------------------------------------------- */
/* The answer                                                                */
/* ------------------------------------------------------------------------- */

/* Moves the "data" array srv_tensor_render makes (the fast float formatter,
 * non-finite values as null) into obj. */
static bool add_json_data(cJSON *obj, const float *data, int ndim, const int64_t *shape,
                          srv_wire wire)
{
    cJSON *tmp = cJSON_CreateObject(), *d = NULL;
    if (tmp != NULL && srv_tensor_render_as(tmp, "t", data, ndim, shape, SRV_ENCODING_JSON, wire))
        d = cJSON_DetachItemFromObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(tmp, "t"),
                                                    "data");
    cJSON_Delete(tmp);
    if (d == NULL || !cJSON_AddItemToObject(obj, "data", d))
        return cJSON_Delete(d), false;
    return true;
}

void v2_view(srv_job *job, void *vctx, srv_reply *reply)
{
    const v2_answer *ans = vctx;
    api_att_result r;
    const float *data[V2_OUTPUTS];
    size_t bytes[V2_OUTPUTS], total = 0, hlen;
    cJSON *root = NULL, *outs, *params;
    char *json = NULL, *body;
    api_err e;
    bool ok;

    if (!api_attention_result(job, 0, &r)) {
        api_fail(&e, NULL, SRV_ERR_INTERNAL, "", "no attention result to render");
        v2_fail_reply(reply, &e);
        return;
    }
    if (r.err != NULL || r.timed_out) {
        if (r.err != NULL)
            e = *r.err;
        else
            api_fail(&e, NULL, SRV_ERR_TIMEOUT, "",
                     "the request deadline passed before the inference could run");
        v2_fail_reply(reply, &e);
        return;
    }

    /* [V2] "Inference Response JSON Object"; parameters carries the timing,
     * as /v1 does. */
    root = cJSON_CreateObject();
    ok = root != NULL && cJSON_AddStringToObject(root, "model_name", ans->model) &&
         cJSON_AddStringToObject(root, "model_version", SRV_V2_MODEL_VERSION) &&
         (ans->id == NULL || cJSON_AddStringToObject(root, "id", ans->id)) &&
         (params = cJSON_AddObjectToObject(root, "parameters")) != NULL &&
         cJSON_AddItemToObject(params, "queue_us", srv_json_int((int64_t)r.queue_us)) &&
         cJSON_AddItemToObject(params, "compute_us", srv_json_int((int64_t)r.compute_us)) &&
         cJSON_AddItemToObject(params, "cpu_us", srv_json_int((int64_t)r.cpu_us)) &&
         api_attention_roofline(job, 0, params) &&
         (outs = cJSON_AddArrayToObject(root, "outputs")) != NULL;
    for (size_t i = 0; ok && i < ans->n_out; i++) {
        const int64_t *shape;
        int ndim;
        size_t count = 1;
        cJSON *o = cJSON_CreateObject(), *shp = NULL;
        const char *name;

        if (o == NULL || !cJSON_AddItemToArray(outs, o)) {
            cJSON_Delete(o);
            ok = false;
            break;
        }

        {
            int k = 0; /* result k is bit 1 << k (api/protocol.h) */
            while (k + 1 < API_NRES && ans->bits[i] != 1u << k)
                k++;
            ndim = r.ndim[k];
            shape = r.shape[k];
            data[i] = r.res[k];
            name = api_result_names[k];
        }
        for (int d = 0; d < ndim; d++)
            count *= (size_t)shape[d];
        {
            size_t at;
            if (srv_wire_overflow(data[i], count, r.out_wire, &at)) {
                api_fail(&e, NULL, SRV_ERR_OUT_OF_RANGE, "",
                         "%s holds %.9g at element %zu, past the largest %s: ask for "
                         "output_dtype %s",
                         name, (double)data[i][at], at,
                         r.out_wire == SRV_WIRE_F16 ? "FP16" : "BF16",
                         r.out_wire == SRV_WIRE_F16 ? "bf16 or f32" : "f32");
                cJSON_Delete(root);
                v2_fail_reply(reply, &e);
                return;
            }
        }
        if (!ans->binary[i] && !srv_floats_finite(data[i], count)) {
            /* Masked logits are -inf, which JSON numbers cannot carry (and
             * the OpenAPI document's tensor_data has no null): the binary
             * extension can. */
            api_fail(&e, NULL, SRV_ERR_INVALID_ARGUMENT, "outputs",
                     "%s holds -inf (masked keys), which JSON cannot carry: ask for it as binary "
                     "data, {\"name\":\"%s\",\"parameters\":{\"binary_data\":true}}",
                     name, name);
            cJSON_Delete(root);
            v2_fail_reply(reply, &e);
            return;
        }
        bytes[i] = ans->binary[i] ? count * (r.out_wire == SRV_WIRE_F32 ? sizeof(float) : 2) : 0;
        total += bytes[i];
        ok = cJSON_AddStringToObject(o, "name", name) &&
             cJSON_AddStringToObject(o, "datatype",
                                     r.out_wire == SRV_WIRE_F16    ? "FP16"
                                     : r.out_wire == SRV_WIRE_BF16 ? "BF16"
                                                                   : "FP32") &&
             (shp = cJSON_AddArrayToObject(o, "shape")) != NULL;
        for (int d = 0; ok && d < ndim; d++)
            ok = cJSON_AddItemToArray(shp, srv_json_int(shape[d]));
        if (ok && ans->binary[i]) {
            /* [BIN]: "binary_data_size" on $response_output. */
            cJSON *p = cJSON_AddObjectToObject(o, "parameters");
            ok = p != NULL && cJSON_AddNumberToObject(p, "binary_data_size", (double)bytes[i]);
        } else if (ok) {
            ok = add_json_data(o, data[i], ndim, shape, r.out_wire);
        }
    }
    if (ok)
        json = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (json == NULL) {
        api_fail(&e, NULL, SRV_ERR_INTERNAL, "", "out of memory rendering the answer");
        v2_fail_reply(reply, &e);
        return;
    }
    hlen = strlen(json);
    if (total == 0) {
        srv_reply_json(reply, 200, json, hlen);
        return;
    }
    /* [BIN]: the JSON header, then each binary output in the order of the
     * outputs; Inference-Header-Content-Length gives the JSON's length. */
    body = malloc(hlen + total);
    if (body == NULL) {
        cJSON_free(json);
        api_fail(&e, NULL, SRV_ERR_INTERNAL, "", "out of memory rendering the answer");
        v2_fail_reply(reply, &e);
        return;
    }
    memcpy(body, json, hlen);
    cJSON_free(json);
    total = hlen;
    for (size_t i = 0; i < ans->n_out; i++) {
        if (bytes[i] == 0)
            continue;
        if (r.out_wire == SRV_WIRE_F32) {
            memcpy(body + total, data[i], bytes[i]);
            if (!srv_host_little_endian())
                srv_swap_bytes32(body + total, bytes[i] / 4);
        } else {
            /* [BIN] FP16 / BF16: two little-endian bytes each */
            unsigned char *b = (unsigned char *)body + total;
            for (size_t k = 0; k < bytes[i] / 2; k++) {
                uint16_t h = r.out_wire == SRV_WIRE_F16 ? srv_f32_to_f16(data[i][k])
                                                        : srv_f32_to_bf16(data[i][k]);
                b[2 * k] = (unsigned char)(h & 0xff);
                b[2 * k + 1] = (unsigned char)(h >> 8);
            }
        }
        total += bytes[i];
    }
    srv_reply_json(reply, 200, body, total);
    reply->content_type = octet_type;
    reply->len_header = V2_FRAMING_HEADER;
    reply->len_value = hlen;
}
