/* metadata.c - see v2/v2.h. What GET says of a model: its statistics
 * (Triton's statistics extension, from the counters) and its metadata,
 * GET /v2/models/{name}: inputs and outputs ([V2] "Model Metadata
 * Response JSON Object"). A scheme's model
 * lists every input with variable dims; a --model model lists the dims its
 * config fixes (heads, kv heads, head dim, hidden size, the shapes of the
 * tensors its layers need), the request parameters it adds (layer, stack)
 * with their defaults, and in "properties" which inputs its layers
 * require and which options its config decides. Both say in "properties"
 * which datatypes an input takes besides the one listed.
 *
 *   [V2] kserve/kserve docs/predict-api/v2/required_api.md, "HTTP/REST".
 *   triton-inference-server/server docs/protocol/extension_statistics.md.
 */
#include "v2/internal.h"

#include <stdio.h>
#include <string.h>

/* Adds {"name","datatype","shape"} to arr ([V2] $metadata_tensor): ndim
 * dims, each shape[d], or -1 (a variable-size dimension) where that is 0
 * or shape is NULL. */
static bool add_meta_tensor(cJSON *arr, const char *name, const char *datatype, int ndim,
                            const int64_t *shape)
{
    cJSON *t = cJSON_CreateObject(), *dims;
    if (t == NULL || !cJSON_AddItemToArray(arr, t))
        return cJSON_Delete(t), false;
    if (!cJSON_AddStringToObject(t, "name", name) ||
        !cJSON_AddStringToObject(t, "datatype", datatype) ||
        (dims = cJSON_AddArrayToObject(t, "shape")) == NULL)
        return false;
    for (int d = 0; d < ndim; d++) {
        cJSON *n = srv_json_int(shape != NULL && d < 3 && shape[d] > 0 ? shape[d] : -1);
        if (n == NULL || !cJSON_AddItemToArray(dims, n))
            return cJSON_Delete(n), false;
    }
    return true;
}

static bool add_string(cJSON *obj, const char *name, const char *value)
{
    return cJSON_AddStringToObject(obj, name, value) != NULL;
}

/* properties.input_datatypes: a metadata tensor has one datatype, the one
 * listed; this says which others an infer request may send instead. */
static bool add_datatypes(cJSON *props, const v2_input *specs, size_t n)
{
    char text[512] = "FP32 inputs also take FP16, BF16 and FP64 (converted to float32)",
         only[256] = "";
    bool ints = false;
    for (size_t i = 0; i < n; i++) {
        ints = ints || specs[i].int32;
        if (!specs[i].int32 && !specs[i].boolean && !v2_input_floating(&specs[i]))
            v2_list_add(only, sizeof only, specs[i].name);
    }
    if (only[0] != '\0')
        snprintf(text + strlen(text), sizeof text - strlen(text), ", but for %s (FP32 only)", only);
    if (ints)
        snprintf(text + strlen(text), sizeof text - strlen(text),
                 "; INT32 inputs also take INT64 (each value within int32)");
    return add_string(props, "input_datatypes", text);
}

/* ------------------------------------------------------------------------- */
/* What a --model model's layers require                                     */
/* ------------------------------------------------------------------------- */

/* Appends the layers of stack [first, first + n) that need field, as runs
 * ("0-2, 5"), to buf; returns how many need it. */
static int32_t needing(const srv_model *c, int32_t first, int32_t n, const char *field, char *buf,
                       size_t cap)
{
    int32_t count = 0, run = -1;
    for (int32_t i = 0; i <= n; i++) {
        bool needs = false;
        if (i < n)
            for (size_t j = 0; j < c->layers[first + i].n_needs; j++)
                needs = needs || strcmp(c->layers[first + i].needs[j].field, field) == 0;
        if (needs) {
            count++;
            if (run < 0)
                run = i;
            continue;
        }
        if (run >= 0) {
            size_t used = strlen(buf);
            if (used + 1 < cap)
                snprintf(buf + used, cap - used, run == i - 1 ? "%s%d" : "%s%d-%d",
                         used ? ", " : "", (int)run, (int)(i - 1));
            run = -1;
        }
    }
    return count;
}

/* The first need of field among the layers. */
static const srv_model_need *need_of(const srv_model *c, const char *field)
{
    for (int32_t i = 0; i < srv_model_total_layers(c); i++)
        for (size_t j = 0; j < c->layers[i].n_needs; j++)
            if (strcmp(c->layers[i].needs[j].field, field) == 0)
                return &c->layers[i].needs[j];
    return NULL;
}

/* properties.<input> for each needed tensor, and properties.required_inputs. */
static bool add_requirements(const srv_model *c, cJSON *props)
{
    char required[256] = "q, k and v (or x, w_q, w_k and w_v)";
    const char *done[SRV_MODEL_MAX_NEEDS * 4];
    size_t n_done = 0;
    for (int32_t i = 0; i < srv_model_total_layers(c); i++)
        for (size_t j = 0; j < c->layers[i].n_needs; j++) {
            const char *field = c->layers[i].needs[j].field;
            const srv_model_need *nd = need_of(c, field);
            const char *input = v2_need_input(field);
            char enc[160] = "", dec[160] = "", shape[48], text[1024];
            int32_t k, all = srv_model_total_layers(c), got;
            for (k = 0; k < (int32_t)n_done && strcmp(done[k], field) != 0; k++)
                ;
            if (k < (int32_t)n_done || n_done == sizeof done / sizeof done[0])
                continue;
            done[n_done++] = field;
            got = needing(c, 0, c->n_layers, field, enc, sizeof enc);
            got += needing(c, c->n_layers, c->n_decoder, field, dec, sizeof dec);
            if (nd->ndim == 1)
                snprintf(shape, sizeof shape, "[%lld]", (long long)nd->shape[0]);
            else
                snprintf(shape, sizeof shape, "[%lld, %lld]", (long long)nd->shape[0],
                         (long long)nd->shape[1]);
            if (got == all) {
                snprintf(text, sizeof text, "%s %s, required by every layer (config \"%s\": %s)",
                         nd->what, shape, nd->source.key, nd->source.value);
                v2_list_add(required, sizeof required, input);
            } else if (c->encoder_decoder) {
                snprintf(text, sizeof text, "%s %s, required by %s%s%s%s%s (config \"%s\": %s)",
                         nd->what, shape, enc[0] ? "encoder layers " : "", enc,
                         enc[0] && dec[0] ? " and " : "", dec[0] ? "decoder layers " : "", dec,
                         nd->source.key, nd->source.value);
            } else {
                snprintf(text, sizeof text, "%s %s, required by layer%s %s (config \"%s\": %s)",
                         nd->what, shape, got > 1 ? "s" : "", enc, nd->source.key,
                         nd->source.value);
            }
            if (!add_string(props, input, text))
                return false;
        }
    return add_string(props, "required_inputs", required);
}

/* properties.decided_by_config: the options any layer's config decides. */
static bool add_decided(const srv_model *c, cJSON *props)
{
    const char *seen[32];
    size_t n = 0;
    char list[256] = "", text[512];
    for (int32_t i = 0; i < srv_model_total_layers(c); i++) {
        const cJSON *o;
        cJSON_ArrayForEach(o, c->layers[i].options)
        {
            size_t k = 0;
            while (k < n && strcmp(seen[k], o->string) != 0)
                k++;
            if (k == n && n < sizeof seen / sizeof seen[0]) {
                seen[n++] = o->string;
                v2_list_add(list, sizeof list, o->string);
            }
        }
    }
    snprintf(text, sizeof text,
             "%s: the config decides them per layer (GET /v1/models); a parameter or input "
             "that sets one (scale, the scheme's base, ...) is refused unless "
             "parameters.override is true",
             list);
    return add_string(props, "decided_by_config", text);
}

/* The metadata of a --model model. */
static void config_metadata(const v2_model *m, srv_reply *reply)
{
    const srv_model *c = m->config;
    v2_input specs[V2_MAX_INPUTS];
    size_t n = v2_model_inputs(m, specs);
    cJSON *root = cJSON_CreateObject(), *vers, *in = NULL, *out = NULL, *params, *props = NULL;
    char text[320], diag[96] = "";
    int64_t out_shape[3] = {0, 0, 0};
    bool ok;

    bool diff = srv_model_total_layers(c) > 0;
    for (int32_t i = 0; i < srv_model_total_layers(c); i++)
        diff =
            diff && cJSON_GetObjectItemCaseSensitive(c->layers[i].options, "differential") != NULL;
    for (size_t i = 0; i < n; i++)
        if (strcmp(specs[i].name, "q") == 0) {
            out_shape[1] = specs[i].shape[1]; /* output [Lq, H, Dv] */
            if (diff) { /* differential (DiffLlama): q's 2H heads give H of 2 head_dim */
                out_shape[1] = specs[i].shape[1] / 2;
                out_shape[2] = 2 * specs[i].shape[2];
            }
        }
    for (size_t i = 1; i < V2_OUTPUTS; i++)
        v2_list_add(diag, sizeof diag, v2_outputs[i].name);
    ok = root != NULL && cJSON_AddStringToObject(root, "name", m->name) &&
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
                             specs[i].meta_ndim ? specs[i].meta_ndim
                             : specs[i].ndim    ? specs[i].ndim
                                                : 3,
                             specs[i].shape);
    /* The parameters an infer request may add, with their defaults ([V2]
     * $parameters: scalars). */
    ok = ok && add_meta_tensor(out, v2_outputs[0].name, "FP32", 3, out_shape) &&
         (params = cJSON_AddObjectToObject(root, "parameters")) != NULL &&
         cJSON_AddItemToObject(params, "layer", srv_json_int(0)) &&
         (!c->encoder_decoder || add_string(params, "stack", "encoder")) &&
         (props = cJSON_AddObjectToObject(root, "properties")) != NULL &&
         add_string(props, "diagnostic_outputs", diag) && add_datatypes(props, specs, n) &&
         add_string(props, "model_type", c->model_type);
    if (ok) {
        snprintf(text, sizeof text, "%d", (int)c->n_layers);
        ok = add_string(props, "num_layers", text);
    }
    if (ok && c->encoder_decoder) {
        snprintf(text, sizeof text, "%d", (int)c->n_decoder);
        ok = add_string(props, "num_decoder_layers", text);
        snprintf(text, sizeof text, "parameters.stack: encoder (the default) or decoder");
        ok = ok && add_string(props, "stack", text);
    }
    if (ok && (c->n_vision > 0 || c->no_vision[0] != '\0')) {
        if (c->n_vision > 0) {
            snprintf(text, sizeof text,
                     "parameters.stack: text (the default) or vision, the vision tower's %d "
                     "layers (0 to %d; send the frame's patch grid as the input grid)",
                     (int)c->n_vision, (int)c->n_vision - 1);
        } else {
            snprintf(text, sizeof text, "parameters.stack: text only; vision is refused: %.240s",
                     c->no_vision);
        }
        ok = add_string(props, "stack", text);
    }
    if (ok) {
        if (c->encoder_decoder)
            snprintf(text, sizeof text,
                     "parameters.layer: an integer, the layer of parameters.stack (0 to %d in the "
                     "encoder, 0 to %d in the decoder; default 0) whose attention the config "
                     "decides",
                     (int)c->n_layers - 1, (int)c->n_decoder - 1);
        else
            snprintf(text, sizeof text,
                     "parameters.layer: an integer from 0 to %d (default 0), the layer whose "
                     "attention the config decides",
                     (int)c->n_layers - 1);
        ok = add_string(props, "layer", text) && add_requirements(c, props) &&
             add_decided(c, props) && (c->note[0] == '\0' || add_string(props, "note", c->note));
    }
    v2_reply_tree(reply, root, ok);
}

/* ------------------------------------------------------------------------- */
/* GET /v2/models/{name}                                                     */
/* ------------------------------------------------------------------------- */

void srv_v2_model_metadata(const srv_model_set *models, const char *name, srv_reply *reply)
{
    v2_model m;
    v2_input specs[V2_MAX_INPUTS];
    size_t n;
    cJSON *root, *in = NULL, *out = NULL, *vers, *props;
    bool ok;

    if (!v2_model_find(models, name, &m)) {
        v2_unknown_model_reply(models, name, reply);
        return;
    }
    if (m.config != NULL) {
        config_metadata(&m, reply);
        return;
    }
    n = v2_model_inputs(&m, specs);
    root = cJSON_CreateObject();
    ok = root != NULL && cJSON_AddStringToObject(root, "name", m.name) &&
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
                             specs[i].meta_ndim ? specs[i].meta_ndim
                             : specs[i].ndim    ? specs[i].ndim
                                                : 3,
                             NULL);
    /* The model's output: [Lq, H, Dv] ([Lq, d_out] in layer mode with w_o),
     * what an infer request without "outputs" returns ([V2]: "all outputs
     * produced by the model"). weights, logits (H x Lq x Lk each), q_rot
     * and k_rot are diagnostics a request names in "outputs"; "properties"
     * (a string map in the OpenAPI document's metadata_model_response)
     * lists them. */
    ok = ok && add_meta_tensor(out, v2_outputs[0].name, "FP32", 3, NULL) &&
         (props = cJSON_AddObjectToObject(root, "properties")) != NULL;
    if (ok) {
        char list[96] = "";
        for (size_t i = 1; i < V2_OUTPUTS; i++)
            v2_list_add(list, sizeof list, v2_outputs[i].name);
        ok = cJSON_AddStringToObject(props, "diagnostic_outputs", list) != NULL &&
             add_datatypes(props, specs, n);
    }
    v2_reply_tree(reply, root, ok);
}

/* ------------------------------------------------------------------------- */
/* Statistics                                                                */
/* ------------------------------------------------------------------------- */

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
static bool add_model_stat(cJSON *arr, const char *name, const srv_model_counts *c)
{
    static const char *const phases[SRV_PHASE_COUNT] = {"queue", "compute_input", "compute_infer",
                                                        "compute_output"};
    cJSON *s = cJSON_CreateObject(), *inf = NULL;
    bool ok;
    if (s == NULL || !cJSON_AddItemToArray(arr, s))
        return cJSON_Delete(s), false;
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

void srv_v2_model_stats(const srv_model_set *models, const char *name,
                        void (*counts)(void *arg, const char *key, srv_model_counts *out),
                        void *arg, srv_reply *reply)
{
    v2_model one;
    cJSON *root, *arr;
    bool ok;
    if (name != NULL && !v2_model_find(models, name, &one)) {
        v2_unknown_model_reply(models, name, reply);
        return;
    }
    root = cJSON_CreateObject();
    ok = root != NULL && (arr = cJSON_AddArrayToObject(root, "model_stats")) != NULL;
    /* Every model in order (the schemes', then those of --model), or one. */
    for (size_t i = 0; ok && i < (name != NULL ? 1 : v2_model_count(models)); i++) {
        v2_model m;
        srv_model_counts c;
        char key[SRV_MODEL_NAME_MAX + 16];
        if (name != NULL)
            m = one;
        else
            v2_model_at(models, i, &m);
        memset(&c, 0, sizeof c);
        if (counts != NULL)
            counts(arg, v2_model_key(&m, key, sizeof key), &c);
        ok = add_model_stat(arr, m.name, &c);
    }
    v2_reply_tree(reply, root, ok);
}
