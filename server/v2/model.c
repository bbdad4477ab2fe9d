/* model.c - see v2/v2.h. The protocol's surface: the models, server and
 * model metadata, errors and the answer to an infer request (the view of the
 * /v1 attention job that v2/infer.c prepares).
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
/* Models, their inputs, parameters and outputs                              */
/* ------------------------------------------------------------------------- */

bool v2_model_type(const char *name, pa_scheme_type *t)
{
    size_t n = strlen(V2_MODEL_PREFIX);
    return name != NULL && strncmp(name, V2_MODEL_PREFIX, n) == 0 &&
           pa_scheme_type_from_name(name + n, t) && strcmp(pa_scheme_type_name(*t), name + n) == 0;
}

bool srv_v2_model_known(const char *name)
{
    pa_scheme_type t;
    return v2_model_type(name, &t);
}

const char *srv_v2_model_scheme(const char *name)
{
    pa_scheme_type t;
    return v2_model_type(name, &t) ? pa_scheme_type_name(t) : NULL;
}

bool srv_v2_model_version_known(const char *name, const char *version)
{
    return srv_v2_model_known(name) &&
           (version == NULL || version[0] == '\0' || strcmp(version, SRV_V2_MODEL_VERSION) == 0);
}

static const v2_input item_inputs[] = {
    {"q", V2_ROLE_TENSOR, 3, false, false},
    {"k", V2_ROLE_TENSOR, 3, false, false},
    {"v", V2_ROLE_TENSOR, 3, false, false},
    {"x", V2_ROLE_TENSOR, 2, false, false},
    {"w_q", V2_ROLE_TENSOR, 2, false, false},
    {"w_k", V2_ROLE_TENSOR, 2, false, false},
    {"w_v", V2_ROLE_TENSOR, 2, false, false},
    {"w_o", V2_ROLE_TENSOR, 2, false, false},
    {"q_positions", V2_ROLE_POSITIONS, 1, true, false},
    {"k_positions", V2_ROLE_POSITIONS, 1, true, false},
    {"sinks", V2_ROLE_TENSOR, 1, false, false},
    {"mask", V2_ROLE_TENSOR, 0, false, true},
    {"bias", V2_ROLE_TENSOR, 0, false, false},
    {"q_norm_weight", V2_ROLE_NORM_WEIGHT, 1, false, false},
    {"k_norm_weight", V2_ROLE_NORM_WEIGHT, 1, false, false},
    {"b_q", V2_ROLE_TENSOR, 1, false, false},
    {"b_k", V2_ROLE_TENSOR, 1, false, false},
    {"b_v", V2_ROLE_TENSOR, 1, false, false},
    {"b_o", V2_ROLE_TENSOR, 1, false, false},
};

/* The inputs of model type t: the item's, then its scheme's tensors. */
size_t v2_model_inputs(pa_scheme_type t, v2_input *out)
{
    size_t n = 0, np;
    const api_param *p = api_params(&np);
    for (size_t i = 0; i < sizeof item_inputs / sizeof item_inputs[0]; i++)
        out[n++] = item_inputs[i];
    for (size_t i = 0; i < np && n < V2_MAX_INPUTS; i++) {
        if (p[i].type != t)
            continue;
        if (p[i].kind == API_PARAM_TENSOR)
            out[n++] = (v2_input){p[i].name, V2_ROLE_SCHEME_TENSOR, 2, false, false};
        else if (p[i].kind == API_PARAM_INT_ARRAY)
            out[n++] = (v2_input){p[i].name, V2_ROLE_SCHEME_ARRAY, 1, true, false};
        else if (p[i].kind == API_PARAM_NUMBER_ARRAY)
            out[n++] = (v2_input){p[i].name, V2_ROLE_SCHEME_ARRAY, 1, false, false};
    }
    return n;
}

const v2_output v2_outputs[V2_OUTPUTS] = {
    {"output", API_RET_OUTPUT},     {"weights", API_RET_WEIGHTS}, {"logits", API_RET_LOGITS},
    {"q_rot", API_RET_Q_ROT},       {"k_rot", API_RET_K_ROT},     {"entropy", API_RET_ENTROPY},
    {"distance", API_RET_DISTANCE},
};

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

void srv_v2_unknown_model(const char *name, const char *version, char *buf, size_t cap)
{
    char list[128] = "";
    if (srv_v2_model_known(name)) {
        snprintf(buf, cap, "model '%s' has no version '%.16s%s': its one version is %s", name,
                 version != NULL ? version : "",
                 version != NULL && strlen(version) > 16 ? "..." : "", SRV_V2_MODEL_VERSION);
        return;
    }
    for (int t = 0; t < PA_SCHEME_COUNT; t++)
        v2_list_add(list, sizeof list, pa_scheme_type_name((pa_scheme_type)t));
    snprintf(buf, cap, "unknown model '%.32s%s'; the models are %s<scheme>, scheme %s",
             name != NULL ? name : "", name != NULL && strlen(name) > 32 ? "..." : "",
             V2_MODEL_PREFIX, list);
}

void v2_unknown_model_reply(const char *name, srv_reply *reply)
{
    char msg[256];
    api_err e;
    srv_v2_unknown_model(name, NULL, msg, sizeof msg);
    api_fail(&e, NULL, SRV_ERR_NOT_FOUND, "", "%s", msg);
    v2_fail_reply(reply, &e);
}

/* ------------------------------------------------------------------------- */
/* Metadata                                                                  */
/* ------------------------------------------------------------------------- */

static void reply_tree(srv_reply *reply, cJSON *root, bool ok)
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
     * extension reports "binary_tensor_data". */
    cJSON *root = cJSON_CreateObject(), *ext;
    bool ok = root != NULL && cJSON_AddStringToObject(root, "name", "posattn") &&
              cJSON_AddStringToObject(root, "version", PA_VERSION_STRING) &&
              (ext = cJSON_AddArrayToObject(root, "extensions")) != NULL &&
              cJSON_AddItemToArray(ext, cJSON_CreateString("binary_tensor_data")) &&
              cJSON_AddItemToArray(ext, cJSON_CreateString("statistics"));
    reply_tree(reply, root, ok);
}

/* {"count": n, "ns": ns}: Triton's $duration_stat. */
static bool add_duration(cJSON *obj, const char *name, uint64_t n, uint64_t ns)
{
    cJSON *d = cJSON_AddObjectToObject(obj, name);
    return d != NULL && cJSON_AddItemToObject(d, "count", srv_json_int((int64_t)n)) &&
           cJSON_AddItemToObject(d, "ns", srv_json_int((int64_t)ns));
}

/* One $model_stat (extension_statistics.md, "Statistics Response JSON
 * Object"). posattn runs each request as it comes (no dynamic batching),
 * so execution_count is inference_count and batch_stats is empty; there
 * is no response cache, so cache_hit and cache_miss are zero. */
static bool add_model_stat(cJSON *arr, pa_scheme_type t, const srv_model_counts *c)
{
    static const char *const phases[SRV_PHASE_COUNT] = {"queue", "compute_input", "compute_infer",
                                                        "compute_output"};
    char name[64];
    cJSON *s = cJSON_CreateObject(), *inf;
    bool ok;
    if (s == NULL || !cJSON_AddItemToArray(arr, s))
        return cJSON_Delete(s), false;
    snprintf(name, sizeof name, "%s%s", V2_MODEL_PREFIX, pa_scheme_type_name(t));
    ok = cJSON_AddStringToObject(s, "name", name) &&
         cJSON_AddStringToObject(s, "version", SRV_V2_MODEL_VERSION) &&
         cJSON_AddItemToObject(s, "last_inference", srv_json_int((int64_t)c->last_ms)) &&
         cJSON_AddItemToObject(s, "inference_count", srv_json_int((int64_t)c->success)) &&
         cJSON_AddItemToObject(s, "execution_count", srv_json_int((int64_t)c->success)) &&
         (inf = cJSON_AddObjectToObject(s, "inference_stats")) != NULL &&
         add_duration(inf, "success", c->success, c->success_ns) &&
         add_duration(inf, "fail", c->fail, c->fail_ns);
    for (int p = 0; ok && p < SRV_PHASE_COUNT; p++)
        ok = add_duration(inf, phases[p], c->success, c->phase_ns[p]);
    return ok && add_duration(inf, "cache_hit", 0, 0) && add_duration(inf, "cache_miss", 0, 0) &&
           cJSON_AddArrayToObject(s, "batch_stats") != NULL;
}

void srv_v2_model_stats(const char *name, const srv_model_counts counts[PA_SCHEME_COUNT],
                        srv_reply *reply)
{
    pa_scheme_type one;
    cJSON *root, *arr;
    bool ok;
    if (name != NULL && !v2_model_type(name, &one)) {
        v2_unknown_model_reply(name, reply);
        return;
    }
    root = cJSON_CreateObject();
    ok = root != NULL && (arr = cJSON_AddArrayToObject(root, "model_stats")) != NULL;
    for (int t = 0; ok && t < PA_SCHEME_COUNT; t++)
        if (name == NULL || (pa_scheme_type)t == one)
            ok = add_model_stat(arr, (pa_scheme_type)t, &counts[t]);
    reply_tree(reply, root, ok);
}

/* Adds {"name","datatype","shape":[-1,...]} to arr ([V2] $metadata_tensor;
 * -1 is a variable-size dimension). */
static bool add_meta_tensor(cJSON *arr, const char *name, const char *datatype, int ndim)
{
    cJSON *t = cJSON_CreateObject(), *shape;
    if (t == NULL || !cJSON_AddItemToArray(arr, t))
        return cJSON_Delete(t), false;
    if (!cJSON_AddStringToObject(t, "name", name) ||
        !cJSON_AddStringToObject(t, "datatype", datatype) ||
        (shape = cJSON_AddArrayToObject(t, "shape")) == NULL)
        return false;
    for (int d = 0; d < ndim; d++) {
        cJSON *n = cJSON_CreateNumber(-1);
        if (n == NULL || !cJSON_AddItemToArray(shape, n))
            return cJSON_Delete(n), false;
    }
    return true;
}

void srv_v2_model_metadata(const char *name, srv_reply *reply)
{
    pa_scheme_type t;
    v2_input specs[V2_MAX_INPUTS];
    size_t n;
    cJSON *root, *in, *out, *vers, *props;
    bool ok;

    if (!v2_model_type(name, &t)) {
        v2_unknown_model_reply(name, reply);
        return;
    }
    n = v2_model_inputs(t, specs);
    root = cJSON_CreateObject();
    ok = root != NULL && cJSON_AddStringToObject(root, "name", name) &&
         (vers = cJSON_AddArrayToObject(root, "versions")) != NULL &&
         cJSON_AddItemToArray(vers, cJSON_CreateString(SRV_V2_MODEL_VERSION)) &&
         cJSON_AddStringToObject(root, "platform", "posattn") &&
         (in = cJSON_AddArrayToObject(root, "inputs")) != NULL &&
         (out = cJSON_AddArrayToObject(root, "outputs")) != NULL;
    for (size_t i = 0; ok && i < n; i++)
        ok = add_meta_tensor(in, specs[i].name,
                             specs[i].int32     ? "INT32"
                             : specs[i].boolean ? "BOOL"
                                                : "FP32",
                             specs[i].ndim ? specs[i].ndim : 3);
    /* The model's output: [Lq, H, Dv] ([Lq, d_out] in layer mode with w_o),
     * what an infer request without "outputs" returns ([V2]: "all outputs
     * produced by the model"). weights, logits (H x Lq x Lk each), q_rot
     * and k_rot are diagnostics a request names in "outputs"; "properties"
     * (a string map in the OpenAPI document's metadata_model_response)
     * lists them. */
    ok = ok && add_meta_tensor(out, v2_outputs[0].name, "FP32", 3) &&
         (props = cJSON_AddObjectToObject(root, "properties")) != NULL;
    if (ok) {
        char list[96] = "";
        for (size_t i = 1; i < V2_OUTPUTS; i++)
            v2_list_add(list, sizeof list, v2_outputs[i].name);
        ok = cJSON_AddStringToObject(props, "diagnostic_outputs", list) != NULL;
    }
    reply_tree(reply, root, ok);
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
