/* infer.c - see v2/v2.h. A thin translation: an infer request
 * becomes the /v1 attention item it stands for, which the /v1 parser
 * validates and the /v1 attention job computes; v2/model.c reads the
 * outputs asked for and renders the answer (the job's view). The item is
 * a handful of nodes (the item, its scheme, norms and return list) whose
 * members are references to the request's own nodes: no value of the
 * request is copied into a node of its own. Binary segments (tensors,
 * integer and number arrays) reach the /v1 readers through a tensor source
 * (v2/segments.c), which reads their bytes in place or widens them once.
 *
 * Protocol references (quoted by name in comments below):
 *   [V2]  kserve/kserve docs/predict-api/v2/required_api.md, "HTTP/REST":
 *         health, server and model metadata, the inference request and
 *         response objects, $parameters, "Tensor Data", error objects.
 *   [BIN] triton-inference-server/server docs/protocol/extension_binary_data.md:
 *         "binary_data_size" on inputs and outputs, "binary_data" on requested
 *         outputs, "binary_data_output" on the request, the
 *         Inference-Header-Content-Length header, "Raw Binary Request".
 *   [SEQ] triton-inference-server/server docs/protocol/extension_sequence.md:
 *         a request with "sequence_id" is a step of a sequence, a session
 *         (v2/sequence.c makes the item that names it).
 */
#include "v2/internal.h"

#include "codec/json_lift.h"
#include "codec/tensor.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Attention options, read from the request's "parameters" as /v1 reads them
 * from an item: a member of the item, or (parent set) the member `member` of
 * the item's object `parent`, which the first of its parameters makes. */
static const struct {
    const char *name;
    api_param_kind kind;
    const char *parent, *member;
} options[] = {
    {"causal", API_PARAM_BOOL, NULL, NULL},
    {"window", API_PARAM_INT, NULL, NULL},
    {"key_length", API_PARAM_INT, NULL, NULL},
    {"scale", API_PARAM_NUMBER, NULL, NULL},
    {"num_heads", API_PARAM_INT, NULL, NULL},
    {"num_kv_heads", API_PARAM_INT, NULL, NULL},
    {"head_dim", API_PARAM_INT, NULL, NULL},
    {"softcap", API_PARAM_NUMBER, NULL, NULL},
    {"chunk_size", API_PARAM_INT, NULL, NULL},
    {"q_norm_eps", API_PARAM_NUMBER, "q_norm", "eps"},
    {"k_norm_eps", API_PARAM_NUMBER, "k_norm", "eps"},
    {"output_dtype", API_PARAM_ENUM, NULL, NULL},
    {"k_prerotated", API_PARAM_BOOL, NULL, NULL},
    {"compute_dtype", API_PARAM_ENUM, NULL, NULL},
    {"q_norm_weight_offset", API_PARAM_NUMBER, "q_norm", "weight_offset"},
    {"k_norm_weight_offset", API_PARAM_NUMBER, "k_norm", "weight_offset"},
    {"attn_temperature_tuning_floor_scale", API_PARAM_NUMBER, "attn_temperature_tuning",
     "floor_scale"},
    {"attn_temperature_tuning_attn_scale", API_PARAM_NUMBER, "attn_temperature_tuning",
     "attn_scale"},
    {"logn_scaling_train_length", API_PARAM_INT, "logn_scaling", "train_length"},
    /* differential attention's scalars (its vectors are /v1's alone) */
    {"differential_pairs", API_PARAM_ENUM, "differential", "pairs"},
    {"differential_lambda", API_PARAM_NUMBER, "differential", "lambda"},
    {"differential_lambda_init", API_PARAM_NUMBER, "differential", "lambda_init"},
    {"differential_depth", API_PARAM_INT, "differential", "depth"},
    {"differential_subln", API_PARAM_BOOL, "differential", "subln"},
    {"differential_subln_eps", API_PARAM_NUMBER, "differential", "subln_eps"},
    /* MLA's (its tensors are inputs: k_rope, c_kv, w_uk, w_uv) */
    {"mla_rope_dim", API_PARAM_INT, "mla", "rope_dim"},
    {"mla_absorbed", API_PARAM_BOOL, "mla", "absorbed"},
};

/* ------------------------------------------------------------------------- */
/* The request, translated                                                   */
/* ------------------------------------------------------------------------- */

typedef struct v2_req {
    v2_model m;
    unsigned schemes; /* the schemes of its scheme inputs and parameters */
    const char *model;
    const api_ctx *ctx;
    /* The /v1 item being built and its scheme object (a --model model's is
     * made when an input or parameter needs it: the config gives the rest). */
    cJSON *item, *scheme;
    const char *bin; /* the binary part of the body */
    size_t bin_len, bin_used;
    bool has_header; /* Inference-Header-Content-Length was given */
    v2_input specs[V2_MAX_INPUTS];
    size_t n_specs;
    bool seen[V2_MAX_INPUTS];
    v2_seq seq; /* [SEQ] its sequence_* parameters */
} v2_req;

static bool add_ref(cJSON *parent, const char *name, const cJSON *node)
{
    /* A reference shares node's children and strings, so the request's tensor
     * data is not copied; deleting the reference leaves them alone. */
    return cJSON_AddItemReferenceToObject(parent, name, (cJSON *)node);
}

/* The item's object `key` (made when first needed): q_norm or k_norm, the
 * parent of the input q_norm_weight (as "weight") and the parameters
 * q_norm_eps ("eps") and q_norm_weight_offset ("weight_offset"); or
 * attn_temperature_tuning, logn_scaling, differential, mla (the parent of
 * the inputs w_uk, w_uv). NULL on allocation failure. */
static cJSON *item_object(cJSON *item, const char *key)
{
    cJSON *o = cJSON_GetObjectItemCaseSensitive(item, key);
    return o != NULL ? o : cJSON_AddObjectToObject(item, key);
}

/* The item's scheme object, made when first needed; NULL on allocation
 * failure. */
static cJSON *scheme_object(v2_req *rq)
{
    if (rq->scheme == NULL)
        rq->scheme = cJSON_AddObjectToObject(rq->item, "scheme");
    return rq->scheme;
}

/* The parameters a --model model adds, as the item's members. */
static const struct {
    const char *name;
    api_param_kind kind;
} model_options[] = {
    {"layer", API_PARAM_INT},
    {"stack", API_PARAM_ENUM},
    {"override", API_PARAM_BOOL},
};

static bool oom(api_err *e)
{
    return api_fail(e, NULL, SRV_ERR_INTERNAL, "", "out of memory");
}

static bool check_scalar(const cJSON *v, api_param_kind kind, const char *path, const api_ctx *ctx,
                         api_err *e)
{
    int32_t i;
    double d;
    bool b;
    const char *s;
    switch (kind) {
    case API_PARAM_INT:
        return api_get_int(v, path, ctx, &i, e);
    case API_PARAM_NUMBER:
        return api_get_number(v, path, ctx, &d, e);
    case API_PARAM_BOOL:
        return api_get_bool(v, path, ctx, &b, e);
    default:
        return api_get_string(v, path, ctx, &s, e);
    }
}

/* [V2] $parameters of the request: attention options go to the item, scheme
 * parameters to its scheme, binary_data_output ([BIN]) to *binary_out. */
static bool read_parameters(v2_req *rq, const cJSON *params, bool *binary_out, api_err *e)
{
    const cJSON *m;
    if (params == NULL)
        return true;
    if (!cJSON_IsObject(params))
        return api_fail(e, rq->ctx, SRV_ERR_INVALID_ARGUMENT, "parameters",
                        "parameters must be an object, found %s", api_json_type(params));
    cJSON_ArrayForEach(m, params)
    {
        char path[API_FIELD_MAX];
        const api_param *p;
        size_t k = 0;
        snprintf(path, sizeof path, "parameters.%.64s", m->string);
        if (cJSON_GetObjectItemCaseSensitive(params, m->string) != m)
            return api_fail(e, rq->ctx, SRV_ERR_INVALID_ARGUMENT, path, "%s appears more than once",
                            path);
        if (strcmp(m->string, "binary_data_output") == 0) {
            if (!api_get_bool(m, path, rq->ctx, binary_out, e))
                return false;
            continue;
        }
        if (rq->m.config == NULL && strncmp(m->string, "sequence_", 9) == 0) {
            int r = v2_seq_parameter(&rq->seq, m, path, rq->ctx, e);
            if (r < 0)
                return false;
            if (r > 0)
                continue;
        }
        for (k = 0; rq->m.config != NULL && k < sizeof model_options / sizeof model_options[0]; k++)
            if (strcmp(model_options[k].name, m->string) == 0)
                break;
        if (rq->m.config != NULL && k < sizeof model_options / sizeof model_options[0]) {
            if (!check_scalar(m, model_options[k].kind, path, rq->ctx, e))
                return false;
            if (!add_ref(rq->item, m->string, m))
                return api_fail(e, NULL, SRV_ERR_INTERNAL, "", "out of memory");
            continue;
        }
        k = 0;
        while (k < sizeof options / sizeof options[0] && strcmp(options[k].name, m->string) != 0)
            k++;
        if (k < sizeof options / sizeof options[0]) {
            const bool nested = options[k].parent != NULL;
            cJSON *parent = nested ? item_object(rq->item, options[k].parent) : rq->item;
            if (!check_scalar(m, options[k].kind, path, rq->ctx, e))
                return false;
            if (parent == NULL || !add_ref(parent, nested ? options[k].member : m->string, m))
                return api_fail(e, NULL, SRV_ERR_INTERNAL, "", "out of memory");
            continue;
        }
        p = v2_scheme_scalar(rq->schemes, m->string);
        if (p == NULL) {
            char list[API_MESSAGE_MAX - 96] = "binary_data_output";
            size_t np;
            const api_param *all = api_params(&np);
            for (size_t i = 0;
                 rq->m.config != NULL && i < sizeof model_options / sizeof model_options[0]; i++)
                v2_list_add(list, sizeof list, model_options[i].name);
            for (size_t i = 0; i < sizeof options / sizeof options[0]; i++)
                v2_list_add(list, sizeof list, options[i].name);
            for (size_t i = 0; i < np; i++)
                if (v2_scheme_scalar(rq->schemes, all[i].name) == &all[i])
                    v2_list_add(list, sizeof list, all[i].name);
            if (rq->m.config == NULL)
                v2_seq_list(list, sizeof list);
            return api_fail(e, rq->ctx, SRV_ERR_UNKNOWN_FIELD, path,
                            "%s is not a parameter of model %s (known: %s)", path, rq->model, list);
        }
        if (!check_scalar(m, p->kind, path, rq->ctx, e))
            return false;
        if (scheme_object(rq) == NULL || !add_ref(rq->scheme, m->string, m))
            return api_fail(e, NULL, SRV_ERR_INTERNAL, "", "out of memory");
    }
    return true;
}

/* [V2] $request_input -> a member of the /v1 item (or of its scheme). */
/* The layout of a sequence of spec when a /v1 batch would add a leading
 * dim to it (q, k, v, x), else NULL. */
static const char *batch_layout(const v2_input *spec)
{
    static const char *const layouts[][2] = {
        {"q", "[Lq, H, D]"}, {"k", "[Lk, Hkv, D]"}, {"v", "[Lk, Hkv, Dv]"}, {"x", "[L, d_model]"}};
    if (spec->role != V2_ROLE_TENSOR)
        return NULL;
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++)
        if (strcmp(spec->name, layouts[i][0]) == 0)
            return layouts[i][1];
    return NULL;
}

static bool read_input(v2_req *rq, const cJSON *in, size_t i, api_err *e)
{
    static const char *const fields[] = {"name", "shape", "datatype", "parameters", "data"};
    static const char *const pfields[] = {"binary_data_size"};
    const api_ctx *ctx = rq->ctx;
    char at[32], path[API_FIELD_MAX], names[256] = "", shp[160] = "";
    const char *name = NULL, *datatype = NULL, *want;
    const cJSON *data, *params, *v, *size_node = NULL;
    const v2_input *spec = NULL;
    int64_t shape[SRV_MAX_DIMS];
    int ndim = 0;
    size_t count = 0, k, bytes = 0;
    const char *seg = NULL;
    srv_wire wire = SRV_WIRE_F32;
    cJSON *node = NULL, *parent;

    snprintf(at, sizeof at, "inputs[%zu]", i);
    if (!v2_read_named(in, at, "{name, shape, datatype, data}", fields, 5, path, sizeof path, &name,
                       ctx, e))
        return false;
    for (k = 0; k < rq->n_specs && spec == NULL; k++)
        if (strcmp(rq->specs[k].name, name) == 0)
            spec = &rq->specs[k];
    if (spec == NULL) {
        for (k = 0; k < rq->n_specs; k++)
            v2_list_add(names, sizeof names, rq->specs[k].name);
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, path,
                        "%s='%.64s' is not an input of model %s (inputs: %s)", path, name,
                        rq->model, names);
    }
    k = (size_t)(spec - rq->specs);
    if (rq->seen[k])
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, path,
                        "input '%s' appears more than once (again at %s)", name, at);
    rq->seen[k] = true;

    /* Tensors travel as FP32, FP16, BF16 or FP64 and are computed in
     * float32; positions are INT32 or INT64 (held to int32), a mask BOOL,
     * the scheme's number arrays FP32. */
    bool floating = v2_input_floating(spec);
    want = spec->int32 ? "INT32" : spec->boolean ? "BOOL" : "FP32";
    snprintf(path, sizeof path, "%s.datatype", name);
    if ((v = cJSON_GetObjectItemCaseSensitive(in, "datatype")) == NULL)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, path, "%s is required (%s)", path, want);
    if (!api_get_string(v, path, ctx, &datatype, e))
        return false;
    bool int64 = spec->int32 && strcmp(datatype, "INT64") == 0;
    if (floating ? !srv_wire_from_name(datatype, &wire) || strcmp(datatype, "f32") == 0 ||
                       strcmp(datatype, "f16") == 0 || strcmp(datatype, "bf16") == 0 ||
                       strcmp(datatype, "f64") == 0
                 : strcmp(datatype, want) != 0 && !int64)
        return api_fail(e, ctx, SRV_ERR_UNSUPPORTED, path,
                        "%s='%.32s' is not supported: input %s of model %s is %s", path, datatype,
                        name, rq->model,
                        floating      ? "FP32, FP16, BF16 or FP64"
                        : spec->int32 ? "INT32 or INT64"
                                      : want);
    if (!v2_read_shape(cJSON_GetObjectItemCaseSensitive(in, "shape"), name, ctx, &ndim, shape,
                       &count, e))
        return false;
    snprintf(path, sizeof path, "%s.shape", name);
    if (spec->role == V2_ROLE_POSITIONS && ndim == 2) {
        /* M-RoPE rows [3, L] (rope with mrope_section) */
        if (shape[0] != 3)
            return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, path,
                            "%s=[%lld, %lld]: 2-D positions are M-RoPE's [3, L]", path,
                            (long long)shape[0], (long long)shape[1]);
    } else if (spec->ndim == 0 ? ndim < 2 || ndim > 3 : ndim != spec->ndim) {
        const char *layout = batch_layout(spec);
        /* One more dim than q, k, v or x have is /v1's batch, which an
         * infer request (one sequence, as a sequence step is) is not. */
        if (layout != NULL && ndim == spec->ndim + 1)
            return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, path,
                            "%s has %d dimensions, expected %d (%s): KServe v2 takes one "
                            "sequence per request; send a batch to /v1/attention",
                            path, ndim, spec->ndim, layout);
        return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, path,
                        spec->ndim == 0 ? "%s has %d dimensions, expected 2 or 3"
                                        : "%s has %d dimensions, expected %d",
                        path, ndim, spec->ndim);
    }
    for (int d = 0; d < ndim; d++)
        snprintf(shp + strlen(shp), sizeof shp - strlen(shp), "%s%lld", d ? "," : "[",
                 (long long)shape[d]);
    snprintf(shp + strlen(shp), sizeof shp - strlen(shp), "]");

    params = cJSON_GetObjectItemCaseSensitive(in, "parameters");
    if (params != NULL) {
        snprintf(path, sizeof path, "%s.parameters", name);
        if (!cJSON_IsObject(params))
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, path,
                            "%s must be an object, found %s", path, api_json_type(params));
        if (!api_check_fields(params, pfields, 1, path, path, ctx, e))
            return false;
        size_node = cJSON_GetObjectItemCaseSensitive(params, "binary_data_size");
    }
    data = cJSON_GetObjectItemCaseSensitive(in, "data");
    if (data != NULL && size_node != NULL)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, name,
                        "input %s has both data and parameters.binary_data_size: send one", name);
    if (data == NULL && size_node == NULL)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, name,
                        "input %s needs data, or parameters.binary_data_size with the bytes after "
                        "the JSON header",
                        name);
    if (size_node != NULL) {
        /* [BIN]: "binary_data_size" is the byte size of the tensor's data,
         * which follows the JSON header in the order of the inputs. */
        double sz = cJSON_IsNumber(size_node) ? size_node->valuedouble : -1;
        snprintf(path, sizeof path, "%s.parameters.binary_data_size", name);
        bytes = count * (spec->boolean ? 1 : int64 ? 8 : srv_wire_size(wire));
        if (!cJSON_IsNumber(size_node) || sz != floor(sz) || sz < 0)
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, path,
                            "%s must be a non-negative integer, found %s", path,
                            api_json_type(size_node));
        if (sz != (double)bytes)
            return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, path,
                            "%s=%.17g, but shape %s of %s needs %zu bytes", path, sz, shp, want,
                            bytes);
        if (!rq->has_header)
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, path,
                            "%s is set, but the request has no Inference-Header-Content-Length "
                            "header to say where the JSON ends",
                            path);
        if (bytes > rq->bin_len - rq->bin_used)
            return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, path,
                            "%s=%zu reaches past the end of the body: %zu bytes of binary data "
                            "follow the JSON header, %zu of them used by earlier inputs",
                            path, bytes, rq->bin_len, rq->bin_used);
        seg = rq->bin + rq->bin_used;
        rq->bin_used += bytes;
    }

    switch (spec->role) {
    case V2_ROLE_TENSOR:
    case V2_ROLE_SCHEME_TENSOR:
    case V2_ROLE_NORM_WEIGHT:
    case V2_ROLE_MLA_TENSOR:
    case V2_ROLE_DIFF_VECTOR:
        node = cJSON_CreateObject();
        if (node == NULL || !add_ref(node, "shape", cJSON_GetObjectItemCaseSensitive(in, "shape")))
            return cJSON_Delete(node), oom(e);
        /* JSON numbers are rounded to the wire type by the /v1 parser; the
         * segment source widens binary data by it. */
        if (wire != SRV_WIRE_F32 && !cJSON_AddStringToObject(node, "dtype",
                                                             wire == SRV_WIRE_F16    ? "f16"
                                                             : wire == SRV_WIRE_BF16 ? "bf16"
                                                                                     : "f64"))
            return cJSON_Delete(node), oom(e);
        if (data != NULL) {
            if (!add_ref(node, "data", data))
                return cJSON_Delete(node), oom(e);
        } else {
            cJSON *s = cJSON_CreateStringReference(seg);
            if (s == NULL)
                return cJSON_Delete(node), oom(e);
            s->valuedouble = (double)bytes;
            cJSON_AddItemToObject(node, V2_SEGMENT_KEY, s);
        }
        break;
    default: {
        /* Arrays of numbers. JSON data: a 1-D array /v1 takes as it is (by
         * reference), M-RoPE rows [3, L] as /v1's integer tensor {shape,
         * data} (flat or as rows). Binary data: the segment, with the shape
         * and the integers' width, which /v1's readers take from the
         * segment source. No value is copied into a node of its own. */
        size_t n = 0;
        if (data != NULL && ndim == 1) {
            const cJSON *x;
            /* A plain array /v1 reads as nodes: one the body's read lifted
             * (codec/json_lift.h) comes back from its own text. */
            bool failed;
            cJSON *own = srv_lift_reparse(ctx->lift, data, &failed);
            if (failed)
                return oom(e);
            if (own != NULL)
                data = own;
            snprintf(path, sizeof path, "%s.data", name);
            if (!cJSON_IsArray(data)) /* never one lifted */
                return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, path,
                                "%s must be an array, found %s", path, api_json_type(data));
            cJSON_ArrayForEach(x, data)
            {
                n++;
            }
            if (n != count) {
                cJSON_Delete(own);
                return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, path,
                                "%s has %zu values, but shape %s needs %zu", path, n, shp, count);
            }
            node = own != NULL ? own : cJSON_CreateArrayReference(data->child);
            if (node == NULL)
                return oom(e);
            break;
        }
        node = cJSON_CreateObject();
        if (node == NULL || !add_ref(node, "shape", cJSON_GetObjectItemCaseSensitive(in, "shape")))
            return cJSON_Delete(node), oom(e);
        if (data != NULL) {
            if (!add_ref(node, "data", data))
                return cJSON_Delete(node), oom(e);
        } else {
            cJSON *s = cJSON_CreateStringReference(seg);
            if (s == NULL ||
                (spec->int32 && !cJSON_AddStringToObject(node, "dtype", int64 ? "i64" : "i32")))
                return cJSON_Delete(s), cJSON_Delete(node), oom(e);
            s->valuedouble = (double)bytes;
            cJSON_AddItemToObject(node, V2_SEGMENT_KEY, s);
        }
        break;
    }
    }
    parent = spec->role == V2_ROLE_SCHEME_TENSOR || spec->role == V2_ROLE_SCHEME_ARRAY
                 ? scheme_object(rq)
             : spec->role == V2_ROLE_NORM_WEIGHT
                 ? item_object(rq->item, spec->name[0] == 'q' ? "q_norm" : "k_norm")
             : spec->role == V2_ROLE_MLA_TENSOR  ? item_object(rq->item, "mla")
             : spec->role == V2_ROLE_DIFF_VECTOR ? item_object(rq->item, "differential")
                                                 : rq->item;
    if (parent == NULL ||
        !cJSON_AddItemToObject(parent, spec->role == V2_ROLE_NORM_WEIGHT ? "weight" : spec->name,
                               node))
        return cJSON_Delete(node), oom(e);
    return true;
}

/* /v1 names scheme parameters "scheme.<name>"; here they are
 * "parameters.<name>", or the input "<name>" for tensors and arrays (of a
 * scheme in schemes, a bit per pa_scheme_type). For a --model model (config)
 * a message about a layer's norm weights names the inputs q_norm_weight and
 * k_norm_weight, and one about layer, stack, override or an option the
 * config decides names the parameter. */
static void rename_fields(api_err *e, unsigned schemes, bool config)
{
    static const char key[] = "scheme.";
    static const struct {
        const char *from, *to;
        bool config; /* only for a --model model's */
    } words[] = {{"q_norm.weight", "q_norm_weight", true},
                 {"k_norm.weight", "k_norm_weight", true},
                 {"differential.lambda_", "lambda_", true},
                 {"\"override\": true", "parameters.override true", true}};
    char out[API_MESSAGE_MAX];
    size_t o = 0, np;
    const api_param *params = api_params(&np);
    const char *s = e->message;
    const char *field = strncmp(e->field, "inputs[0].", 10) == 0 ? e->field + 10 : e->field;
    size_t flen = strlen(field);

    /* A message that opens with a parameter's name: "layer=9 is outside",
     * "scale is decided by the model's config". */
    if (config && flen > 0 && strncmp(s, field, flen) == 0 && (s[flen] == '=' || s[flen] == ' ')) {
        bool param = false;
        for (size_t i = 0; i < sizeof model_options / sizeof model_options[0]; i++)
            param = param || strcmp(model_options[i].name, field) == 0;
        for (size_t i = 0; i < sizeof options / sizeof options[0]; i++)
            param = param || strcmp(options[i].name, field) == 0;
        if (param)
            o = (size_t)snprintf(out, sizeof out, "parameters.");
    }
    while (*s != '\0' && o + 1 < sizeof out) {
        const char *repl = NULL;
        size_t skip = 0;
        if (strncmp(s, key, sizeof key - 1) == 0) {
            const char *name = s + sizeof key - 1;
            size_t len = strspn(name, "abcdefghijklmnopqrstuvwxyz_");
            for (size_t i = 0; i < np && repl == NULL; i++)
                if ((schemes >> params[i].type & 1u) && strlen(params[i].name) == len &&
                    strncmp(params[i].name, name, len) == 0)
                    repl = params[i].kind == API_PARAM_TENSOR ||
                                   params[i].kind == API_PARAM_NUMBER_ARRAY ||
                                   params[i].kind == API_PARAM_INT_ARRAY
                               ? ""
                               : "parameters.";
            skip = sizeof key - 1;
        }
        for (size_t i = 0; repl == NULL && i < sizeof words / sizeof words[0]; i++)
            if ((config || !words[i].config) &&
                strncmp(s, words[i].from, strlen(words[i].from)) == 0 &&
                s[strlen(words[i].from)] != '_') { /* not q_norm.weight_offset */
                repl = words[i].to;
                skip = strlen(words[i].from);
            }
        if (repl != NULL) {
            size_t n = strlen(repl);
            if (o + n + 1 >= sizeof out)
                break;
            memcpy(out + o, repl, n);
            o += n;
            s += skip;
        } else {
            out[o++] = *s++;
        }
    }
    out[o] = '\0';
    snprintf(e->message, sizeof e->message, "%s", out);
}

/* Everything but the job: parses root into rq's /v1 item and *ans. */
static bool translate(v2_req *rq, const cJSON *root, v2_answer *ans, api_err *e)
{
    static const char *const fields[] = {"id", "model_name", "parameters", "inputs", "outputs"};
    const api_ctx *ctx = rq->ctx;
    const cJSON *v, *in;
    bool binary_all = false;
    size_t i = 0;

    if (!api_check_fields(root, fields, 5, "", "an inference request", ctx, e))
        return false;
    if ((v = cJSON_GetObjectItemCaseSensitive(root, "id")) != NULL) {
        const char *id;
        if (!api_get_string(v, "id", ctx, &id, e))
            return false;
        if ((ans->id = strdup(id)) == NULL)
            return oom(e);
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(root, "model_name")) != NULL) {
        const char *name;
        if (!api_get_string(v, "model_name", ctx, &name, e))
            return false;
        if (strcmp(name, rq->model) != 0)
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "model_name",
                            "model_name='%.64s' is not the model of the URL (%s)", name, rq->model);
    }
    if (!read_parameters(rq, cJSON_GetObjectItemCaseSensitive(root, "parameters"), &binary_all, e))
        return false;
    v = cJSON_GetObjectItemCaseSensitive(root, "inputs");
    if (!cJSON_IsArray(v))
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "inputs",
                        "inputs must be an array of input tensors (q, k, v, ...), found %s",
                        api_json_type(v));
    cJSON_ArrayForEach(in, v)
    {
        if (!read_input(rq, in, i++, e))
            return false;
    }
    if (rq->bin_used != rq->bin_len)
        return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, "",
                        "%zu bytes follow the %s JSON header, but the inputs' binary_data_size "
                        "add up to %zu",
                        rq->bin_len, rq->has_header ? "Inference-Header-Content-Length" : "",
                        rq->bin_used);
    return v2_read_outputs(rq->item, rq->model, cJSON_GetObjectItemCaseSensitive(root, "outputs"),
                           binary_all, ans, rq->ctx, e);
}

bool srv_v2_infer_prepare(const char *model, const char *body, size_t len, int64_t header_len,
                          const srv_limits *lim, srv_job **job_out, srv_reply *reply)
{
    api_ctx ctx = {lim, "", &v2_segments, NULL};
    api_body b = {0};
    api_err e;
    v2_req rq;
    v2_answer *ans = NULL;
    cJSON *root = NULL, *v1 = NULL, *list, *seq_scheme = NULL;
    srv_job *job = NULL;
    bool created = false;
    size_t hlen;
    const api_err *ie;

    *job_out = NULL;
    memset(&rq, 0, sizeof rq);
    if (!v2_model_find(lim->models, model, &rq.m)) {
        v2_unknown_model_reply(lim->models, model, reply);
        return false;
    }
    rq.schemes = v2_model_schemes(&rq.m);
    rq.model = rq.m.name;
    rq.ctx = &ctx;
    if (header_len == 0) {
        /* [BIN] "Raw Binary Request": for models with a single input. */
        api_fail(&e, NULL, SRV_ERR_INVALID_ARGUMENT, "",
                 "Inference-Header-Content-Length: 0 (a raw binary request) is for models with "
                 "one input; model %s takes q, k and v (or x and weights): send the JSON header",
                 model);
        goto fail;
    }
    if (header_len > 0 && (uint64_t)header_len > len) {
        api_fail(&e, NULL, SRV_ERR_INVALID_ARGUMENT, "",
                 "Inference-Header-Content-Length=%lld is past the end of the %zu-byte body",
                 (long long)header_len, len);
        goto fail;
    }
    hlen = header_len < 0 ? len : (size_t)header_len;
    rq.has_header = header_len >= 0;
    rq.bin = body + hlen;
    rq.bin_len = len - hlen;
    /* The JSON header, its "data" arrays lifted to floats as /v1's are:
     * the translation below passes the markers on to /v1's parser, which
     * takes the floats (ctx.lift), but for the 1-D inputs it reads as
     * nodes. */
    if (!api_body_read(body, hlen, lim, true, &b, &e))
        goto fail;
    root = b.root;
    ctx.lift = b.lifted ? &b.lift : NULL;

    /* The /v1 request being built: {"inputs":[{"scheme":{"type":...}, ...}]}. */
    ans = calloc(1, sizeof *ans);
    v1 = cJSON_CreateObject();
    list = v1 != NULL ? cJSON_AddArrayToObject(v1, "inputs") : NULL;
    rq.item = list != NULL ? cJSON_CreateObject() : NULL;
    if (rq.item != NULL && !cJSON_AddItemToArray(list, rq.item)) {
        cJSON_Delete(rq.item);
        rq.item = NULL;
    }
    if (ans == NULL || rq.item == NULL) {
        oom(&e);
        goto fail;
    }
    snprintf(ans->model, sizeof ans->model, "%s", rq.m.name);
    /* A scheme's model: {"scheme": {"type": ...}}; a --model model:
     * {"model": NAME}, whose config gives the scheme and the options. */
    if (rq.m.config != NULL
            ? !cJSON_AddStringToObject(rq.item, "model", rq.m.config->name)
            : scheme_object(&rq) == NULL ||
                  !cJSON_AddStringToObject(rq.scheme, "type", pa_scheme_type_name(rq.m.type))) {
        oom(&e);
        goto fail;
    }
    rq.n_specs = v2_model_inputs(&rq.m, rq.specs);
    if (!translate(&rq, root, ans, &e) ||
        !v2_seq_item(&rq.seq, &rq.m, rq.schemes, rq.item, &seq_scheme, &created, &ctx, &e))
        goto fail;

    /* The /v1 path from here: the same parser, limits and job. */
    if (!api_attention_prepare(v1, &ctx, &job, reply)) {
        srv_v2_reply_error(reply);
        goto done;
    }
    if ((ie = api_attention_item_error(job, 0)) != NULL) {
        e = *ie;
        goto fail;
    }
    if (!api_job_check_cost(job, lim, &e))
        goto fail;
    /* [SEQ] The step's append lands when it runs: a start whose step never
     * runs (the queue full, its deadline passed) leaves no sequence, and
     * sequence_end deletes the session once the step appended (its view
     * keeps what the step reads, so the answer is the step's). */
    if (!api_attention_session_own(job, 0, created, rq.seq.end, &e))
        goto fail;
    created = false;
    api_job_set_view(job, v2_view, v2_answer_free, ans);
    ans = NULL;
    *job_out = job;
    job = NULL;
    cJSON_Delete(v1);
    cJSON_Delete(seq_scheme);
    api_body_free(&b);
    return true;

fail:
    rename_fields(&e, rq.schemes, rq.m.config != NULL);
    v2_fail_reply(reply, &e);
done:
    /* A start that is refused leaves no sequence behind. */
    if (created) {
        api_err ignored;
        srv_job_free(job);
        job = NULL;
        api_session_delete(lim, rq.seq.id, &ignored);
    }
    cJSON_Delete(seq_scheme);
    srv_job_free(job);
    v2_answer_free(ans);
    cJSON_Delete(v1);
    api_body_free(&b);
    return false;
}
