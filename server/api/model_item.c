/* model_item.c - an attention item that names a model: "model" (a name
 * loaded with --model, or a config object inline), "layer", "stack" (T5's
 * "encoder" or "decoder"; a vision-language model's "text" or "vision",
 * its vision tower) and "override". The layer's derived options
 * (model/model.h) are merged into the item, which the ordinary item parser
 * then reads: a model item and the item with the same options written out
 * are one computation.
 *
 * The merged item is a new object whose members are references to the
 * item's own nodes (no tensor is copied) and copies of the derived ones.
 * A derived option the item also gives is refused, naming the config key
 * that decides it, unless "override" is true; object options (the scheme,
 * q_norm, k_norm) merge member by member, so an item adds what a config
 * cannot hold ("scheme": {"table": ...}, "q_norm": {"weight": ...}).
 */
#include "api/request.h"

#include "api/json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const model_fields[] = {"model", "layer", "stack", "override"};

static bool is_model_field(const char *name)
{
    for (size_t i = 0; i < sizeof model_fields / sizeof model_fields[0]; i++)
        if (strcmp(model_fields[i], name) == 0)
            return true;
    return false;
}

static bool add_ref(cJSON *parent, const char *name, const cJSON *node)
{
    return cJSON_AddItemReferenceToObject(parent, name, (cJSON *)node);
}

static bool add_copy(cJSON *parent, const char *name, const cJSON *node)
{
    cJSON *c = cJSON_Duplicate(node, true);
    if (c == NULL || !cJSON_AddItemToObject(parent, name, c)) {
        cJSON_Delete(c);
        return false;
    }
    return true;
}

void api_model_use_free(api_model_use *u)
{
    if (u == NULL)
        return;
    cJSON_Delete(u->merged);
    srv_model_free(u->owned);
    memset(u, 0, sizeof *u);
}

/* "gpt_oss layer 3", "t5 decoder layer 1", "model \"g2\" (gemma2) layer 0". */
void api_model_label(const srv_model *m, const srv_model_layer *l, char *buf, size_t cap)
{
    if (m->name[0] != '\0')
        snprintf(buf, cap, "model \"%s\" (%s) %s%slayer %d", m->name, m->model_type,
                 l->stack != NULL ? l->stack : "", l->stack != NULL ? " " : "", (int)l->layer);
    else
        snprintf(buf, cap, "%s %s%slayer %d", m->model_type, l->stack != NULL ? l->stack : "",
                 l->stack != NULL ? " " : "", (int)l->layer);
}

/* The refusal of an option the config decides. */
static bool conflict(const api_model_use *u, const char *option, const char *field,
                     const cJSON *derived, const api_ctx *ctx, api_err *e)
{
    /* A member may have a key of its own ("differential.subln_eps"). */
    const srv_model_source *s = srv_model_source_of(u->layer, field);
    if (s == NULL)
        s = srv_model_source_of(u->layer, option);
    char *text = cJSON_PrintUnformatted(derived), who[160];
    api_model_label(u->model, u->layer, who, sizeof who);
    api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, field,
             "%s is decided by the model's config (\"%s\": %.60s gives %.200s for %s): leave it "
             "out, or send \"override\": true to replace it",
             field, s != NULL ? s->key : "model_type", s != NULL ? s->value : "",
             text != NULL ? text : "?", who);
    free(text);
    return false;
}

/* Merges the object option name: derived members, and the item's others. */
static bool merge_object(const api_model_use *u, const char *name, const cJSON *mine,
                         const cJSON *derived, cJSON *merged, const api_ctx *ctx, api_err *e)
{
    const cJSON *m;
    const cJSON *my_type = api_member(mine, "type"), *d_type = api_member(derived, "type");
    /* An overriding scheme of another type replaces the derived one whole. */
    if (u->override && my_type != NULL && d_type != NULL && !cJSON_Compare(my_type, d_type, true))
        return add_ref(merged, name, mine) || api_fail(e, ctx, SRV_ERR_INTERNAL, name, "out of memory");
    cJSON *sub = cJSON_AddObjectToObject(merged, name);
    if (sub == NULL)
        return api_fail(e, ctx, SRV_ERR_INTERNAL, name, "out of memory");
    cJSON_ArrayForEach(m, derived)
    {
        const cJSON *given = api_member(mine, m->string);
        if (given != NULL && !u->override) {
            char field[96];
            snprintf(field, sizeof field, "%s.%s", name, m->string);
            return conflict(u, name, field, m, ctx, e);
        }
        if (!(given != NULL ? add_ref(sub, m->string, given) : add_copy(sub, m->string, m)))
            return api_fail(e, ctx, SRV_ERR_INTERNAL, name, "out of memory");
    }
    cJSON_ArrayForEach(m, mine)
    if (api_member(derived, m->string) == NULL && !add_ref(sub, m->string, m))
        return api_fail(e, ctx, SRV_ERR_INTERNAL, name, "out of memory");
    return true;
}

bool api_model_find(const api_ctx *ctx, const char *name, bool inline_ok, const srv_model **m,
                    api_err *e)
{
    const struct srv_model_set *set = ctx->lim != NULL ? ctx->lim->models : NULL;
    char names[256];
    size_t at = 0;
    if ((*m = srv_model_set_find(set, name)) != NULL)
        return true;
    for (size_t i = 0; i < srv_model_set_count(set) && at < sizeof names; i++)
        at += (size_t)snprintf(names + at, sizeof names - at, "%s%s", i ? ", " : "",
                               srv_model_set_at(set, i)->name);
    return api_fail(e, ctx, SRV_ERR_UNKNOWN_MODEL, "model",
                    "model \"%.64s\" is not loaded (%s%s); load it with --model "
                    "NAME=config.json%s",
                    name, at ? "loaded: " : "none is loaded", at ? names : "",
                    inline_ok ? ", or send the config object as \"model\"" : "");
}

/* Resolves "model", "layer" and "stack" into u->model and u->layer. */
static bool resolve(const cJSON *obj, const api_ctx *ctx, api_model_use *u, api_err *e)
{
    const cJSON *mv = api_member(obj, "model"), *v;
    int32_t layer = 0;
    const char *stack = NULL;

    if (cJSON_IsString(mv)) {
        if (!api_model_find(ctx, mv->valuestring, true, &u->model, e))
            return false;
    } else if (cJSON_IsObject(mv)) {
        srv_model_err me;
        if (!srv_model_derive(mv, NULL, &u->owned, &me)) {
            char field[160];
            snprintf(field, sizeof field, "model%s%s", me.key[0] ? "." : "", me.key);
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, field, "%s", me.message);
        }
        u->model = u->owned;
    } else {
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "model",
                        "model must be a loaded model's name or a config object (a Hugging Face "
                        "config.json), found %s",
                        api_json_type(mv));
    }
    if ((v = api_member(obj, "override")) != NULL && !api_get_bool(v, "override", ctx, &u->override, e))
        return false;
    if ((v = api_member(obj, "stack")) != NULL) {
        const srv_model *m = u->model;
        const char *a = m->encoder_decoder ? "encoder" : "text",
                   *b = m->encoder_decoder ? "decoder" : "vision";
        if (!m->encoder_decoder && !m->has_vision_config)
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "stack",
                            "stack is for encoder-decoder models (T5); %s has one stack (the "
                            "stacks are T5's \"encoder\" and \"decoder\", and a vision-language "
                            "model's \"text\" and \"vision\")",
                            m->model_type);
        if (!cJSON_IsString(v) ||
            (strcmp(v->valuestring, a) != 0 && strcmp(v->valuestring, b) != 0))
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "stack",
                            "stack must be \"%s\" or \"%s\"", a, b);
        if (strcmp(v->valuestring, "vision") == 0 && m->n_vision == 0)
            return api_fail(e, ctx, SRV_ERR_UNSUPPORTED, "stack",
                            "stack \"vision\": %s (config \"%s\")", m->no_vision, m->no_vision_key);
        /* The text model is the model's first stack, as an absent stack. */
        stack = strcmp(v->valuestring, "text") == 0 ? NULL : v->valuestring;
    }
    if ((v = api_member(obj, "layer")) != NULL && !api_get_int(v, "layer", ctx, &layer, e))
        return false;
    if ((u->layer = srv_model_layer_at(u->model, stack, layer)) == NULL) {
        bool dec = stack != NULL && strcmp(stack, "decoder") == 0,
             vis = stack != NULL && strcmp(stack, "vision") == 0;
        int32_t n = dec ? u->model->n_decoder : vis ? u->model->n_vision : u->model->n_layers;
        return api_fail(e, ctx, SRV_ERR_OUT_OF_RANGE, "layer",
                        "layer=%d is outside the %s's %d layers (0 to %d)", (int)layer,
                        stack != NULL ? stack : "model", (int)n, (int)n - 1);
    }
    return true;
}

/* Whether the merged item has the tensor field ("sinks", "q_norm.weight"). */
static bool has_field(const cJSON *merged, const char *field)
{
    char top[32];
    const char *dot = strchr(field, '.');
    if (dot == NULL)
        return api_member(merged, field) != NULL;
    snprintf(top, sizeof top, "%.*s", (int)(dot - field), field);
    return api_member(api_member(merged, top), dot + 1) != NULL;
}

/* Whether name is one of skip[0..n) (the options a session leaves out). */
static bool skipped(const char *name, const char *const *skip, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(skip[i], name) == 0)
            return true;
    return false;
}

static bool merge_layer(const cJSON *obj, const api_ctx *ctx, const char *const *skip,
                        size_t n_skip, api_model_use *u, api_err *e);

bool api_model_merge(const cJSON *obj, const api_ctx *ctx, api_model_use *u, api_err *e)
{
    memset(u, 0, sizeof *u);
    if (api_member(obj, "model") == NULL) {
        for (size_t i = 1; i < sizeof model_fields / sizeof model_fields[0]; i++)
            if (api_member(obj, model_fields[i]) != NULL)
                return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, model_fields[i],
                                "%s applies to a model: send \"model\" (a loaded model's name or "
                                "a config object) with it",
                                model_fields[i]);
        return true;
    }
    if (!resolve(obj, ctx, u, e)) {
        api_model_use_free(u);
        return false;
    }
    return merge_layer(obj, ctx, NULL, 0, u, e);
}

bool api_model_merge_layer(const cJSON *obj, const api_ctx *ctx, const srv_model *model,
                           const srv_model_layer *layer, const char *const *skip, size_t n_skip,
                           api_model_use *u, api_err *e)
{
    const cJSON *v;
    memset(u, 0, sizeof *u);
    u->model = model;
    u->layer = layer;
    if ((v = api_member(obj, "override")) != NULL &&
        !api_get_bool(v, "override", ctx, &u->override, e))
        return false;
    return merge_layer(obj, ctx, skip, n_skip, u, e);
}

/* Merges u->layer's options (but skip's) into u->merged; on failure u is
 * freed. */
static bool merge_layer(const cJSON *obj, const api_ctx *ctx, const char *const *skip,
                        size_t n_skip, api_model_use *u, api_err *e)
{
    const cJSON *m;
    const srv_model_layer *L = u->layer;
    if ((u->merged = cJSON_CreateObject()) == NULL) {
        api_fail(e, ctx, SRV_ERR_INTERNAL, "model", "out of memory");
        goto fail;
    }
    cJSON_ArrayForEach(m, obj)
    {
        const cJSON *d;
        if (is_model_field(m->string))
            continue;
        if ((d = api_member(L->options, m->string)) == NULL || skipped(m->string, skip, n_skip)) {
            if (!add_ref(u->merged, m->string, m)) {
                api_fail(e, ctx, SRV_ERR_INTERNAL, "model", "out of memory");
                goto fail;
            }
            continue;
        }
        if (cJSON_IsObject(m) && cJSON_IsObject(d)) {
            if (!merge_object(u, m->string, m, d, u->merged, ctx, e))
                goto fail;
            continue;
        }
        if (!u->override) {
            conflict(u, m->string, m->string, d, ctx, e);
            goto fail;
        }
        if (!add_ref(u->merged, m->string, m)) {
            api_fail(e, ctx, SRV_ERR_INTERNAL, "model", "out of memory");
            goto fail;
        }
    }
    /* The derived options and defaults the item does not give. */
    const cJSON *const sets[] = {L->options, L->defaults};
    for (size_t k = 0; k < 2; k++)
        cJSON_ArrayForEach(m, sets[k])
        if (api_member(obj, m->string) == NULL && !skipped(m->string, skip, n_skip) &&
            !add_copy(u->merged, m->string, m)) {
            api_fail(e, ctx, SRV_ERR_INTERNAL, "model", "out of memory");
            goto fail;
        }
    /* Layer mode takes its counts from the config. */
    if (api_member(obj, "x") != NULL) {
        const char *names[] = {"num_heads", "num_kv_heads", "head_dim"};
        int32_t vals[] = {L->num_heads, L->num_kv_heads, L->head_dim};
        for (size_t i = 0; i < 3; i++)
            if (api_member(obj, names[i]) == NULL &&
                cJSON_AddNumberToObject(u->merged, names[i], vals[i]) == NULL) {
                api_fail(e, ctx, SRV_ERR_INTERNAL, "model", "out of memory");
                goto fail;
            }
    }
    /* The tensors no config holds. */
    for (size_t i = 0; i < L->n_needs; i++) {
        const srv_model_need *n = &L->needs[i];
        char who[160], shape[48], top[32];
        snprintf(top, sizeof top, "%.*s", (int)strcspn(n->field, "."), n->field);
        if (has_field(u->merged, n->field) || skipped(top, skip, n_skip))
            continue;
        api_model_label(u->model, u->layer, who, sizeof who);
        if (n->ndim == 1)
            snprintf(shape, sizeof shape, "[%lld]", (long long)n->shape[0]);
        else
            snprintf(shape, sizeof shape, "[%lld, %lld]", (long long)n->shape[0],
                     (long long)n->shape[1]);
        api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, n->field,
                 "%s has %s (config \"%s\": %s): give \"%s\" %s", who, n->what, n->source.key,
                 n->source.value, n->field, shape);
        goto fail;
    }
    return true;
fail:
    api_model_use_free(u);
    return false;
}

bool api_model_check_shapes(const api_model_use *u, const api_item *it, const api_ctx *ctx,
                            api_err *e)
{
    const srv_model_layer *L = u->layer;
    bool layer = it->att.x != NULL;
    int o = it->batched ? 1 : 0;
    char who[160];
    if (L == NULL)
        return true;
    api_model_label(u->model, u->layer, who, sizeof who);
    char got[48];
#define WHAT(name, dim, v)                                                                         \
    (layer ? snprintf(got, sizeof got, "%s=%d", name, (int)(v))                                    \
           : snprintf(got, sizeof got, "%s.shape[%d]=%d", dim == 1 ? "k" : "q", o + 1 + (dim == 2), \
                      (int)(v)))
    /* Differential attention's q has 2H heads (api_item_diff_shapes has
     * halved it->H to the output's): a config's heads count q's. */
    const int32_t q_heads = it->diff ? 2 * it->H : it->H;
    if (q_heads != L->num_heads) {
        WHAT("num_heads", 0, q_heads);
        return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, layer ? "num_heads" : "q.shape",
                        "%s does not match the %d heads of %s (config \"%s\": %s)", got,
                        (int)L->num_heads, who, L->heads.key, L->heads.value);
    }
    if (it->Hkv != L->num_kv_heads) {
        WHAT("num_kv_heads", 1, it->Hkv);
        return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, layer ? "num_kv_heads" : "k.shape",
                        "%s does not match the %d kv heads of %s (config \"%s\": %s)", got,
                        (int)L->num_kv_heads, who, L->kv_heads.key, L->kv_heads.value);
    }
    if (it->D != L->head_dim) {
        WHAT("head_dim", 2, it->D);
        return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, layer ? "head_dim" : "q.shape",
                        "%s does not match the head dim %d of %s (config \"%s\": %s)", got,
                        (int)L->head_dim, who, L->dim.key, L->dim.value);
    }
#undef WHAT
    if (layer && it->att.d_model != L->d_model)
        return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, "x.shape",
                        "x.shape[%d]=%d does not match the hidden size %d of %s", o + 1,
                        (int)it->att.d_model, (int)L->d_model, who);
    return true;
}
