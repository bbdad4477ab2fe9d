/* model.c - posattn-load --model: the target's GET /v1/models, the named
 * model's runs of identical layers expanded into layers, and the ones that
 * --layer/--layers and --stack choose. It reads only what the public API
 * lists: each run's shape, its derived window or chunk and what it requires.
 */
#include "load.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

static int int_of(const cJSON *o, const char *key, int dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? (int)v->valuedouble : dflt;
}

static const char *str_of(const cJSON *o, const char *key, const char *dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : dflt;
}

static int in_ranges(const load_config *c, int layer)
{
    if (c->n_layer_ranges == 0)
        return 1;
    for (int i = 0; i < c->n_layer_ranges; i++)
        if (layer >= c->layer_lo[i] && layer <= c->layer_hi[i])
            return 1;
    return 0;
}

/* "sliding_attention" -> "sliding": the label's word for the layer. */
static void kind_of(const char *attention, char *out, size_t len)
{
    const char *suffix = strstr(attention, "_attention");
    int n = suffix ? (int)(suffix - attention) : (int)strlen(attention);
    snprintf(out, len, "%.*s", n, attention);
}

/* One run's description, shared by every layer in it; 0 or 2 with a message. */
static int read_run(const load_model *m, const cJSON *run, load_layer *ly)
{
    const cJSON *scheme = cJSON_GetObjectItemCaseSensitive(run, "scheme");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(run, "requires"), *e;
    char kind[32];

    memset(ly, 0, sizeof *ly);
    snprintf(ly->stack, sizeof ly->stack, "%s", str_of(run, "stack", ""));
    snprintf(ly->attention, sizeof ly->attention, "%s", str_of(run, "attention", "full_attention"));
    snprintf(ly->scheme, sizeof ly->scheme, "%s", str_of(scheme, "type", "none"));
    ly->window = int_of(run, "window", 0);
    ly->chunk = int_of(run, "chunk_size", 0);
    ly->heads = int_of(run, "num_heads", 0);
    ly->kv_heads = int_of(run, "num_kv_heads", 0);
    ly->head_dim = int_of(run, "head_dim", 0);
    ly->causal = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(run, "causal"));
    if (ly->heads <= 0 || ly->kv_heads <= 0 || ly->head_dim <= 0) {
        fprintf(stderr,
                "posattn-load: model '%s': a run of GET /v1/models lacks num_heads, "
                "num_kv_heads or head_dim\n",
                m->name);
        return 2;
    }
    /* Absolute positions are added to x before the projections: layer mode. */
    ly->layer_mode = !strcmp(ly->scheme, "learned") || !strcmp(ly->scheme, "sinusoidal");
    ly->d_model = ly->heads * ly->head_dim;
    cJSON_ArrayForEach(e, req)
    {
        const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape"), *d;
        const char *field = str_of(e, "field", NULL);
        load_require *q = &ly->req[ly->n_req];
        if (field == NULL || !cJSON_IsArray(shape)) {
            fprintf(stderr, "posattn-load: model '%s': a requirement without field or shape\n",
                    m->name);
            return 2;
        }
        if (ly->n_req == LOAD_MAX_REQUIRES || strlen(field) >= sizeof q->field ||
            cJSON_GetArraySize(shape) < 1 || cJSON_GetArraySize(shape) > LOAD_MAX_RANK) {
            fprintf(stderr,
                    "posattn-load: model '%s' requires \"%s\" (one of %d requirements, rank %d): "
                    "more than posattn-load builds (%d requirements of rank 1 to %d)\n",
                    m->name, field, cJSON_GetArraySize(req), cJSON_GetArraySize(shape),
                    LOAD_MAX_REQUIRES, LOAD_MAX_RANK);
            return 2;
        }
        snprintf(q->field, sizeof q->field, "%s", field);
        cJSON_ArrayForEach(d, shape)
        {
            if (!cJSON_IsNumber(d) || d->valuedouble < 1 || d->valuedouble > (1 << 24)) {
                fprintf(stderr, "posattn-load: model '%s': \"%s\" has a shape of bad sizes\n",
                        m->name, field);
                return 2;
            }
            q->shape[q->rank++] = (int)d->valuedouble;
        }
        /* Learned positions are a table [rows, d_model]: x is that wide. */
        if (ly->layer_mode && !strcmp(field, "scheme.table") && q->rank == 2)
            ly->d_model = q->shape[1];
        ly->n_req++;
    }
    kind_of(ly->attention, kind, sizeof kind);
    if (ly->window > 0)
        snprintf(ly->kind, sizeof ly->kind, "%.24s %d", kind, ly->window);
    else if (ly->chunk > 0)
        snprintf(ly->kind, sizeof ly->kind, "%.24s %d", kind, ly->chunk);
    else
        snprintf(ly->kind, sizeof ly->kind, "%s", kind);
    return 0;
}

/* The names the target has loaded, for the message when ours is not one. */
static void list_names(const cJSON *models, char *out, size_t len)
{
    const cJSON *m;
    size_t used = 0;
    out[0] = '\0';
    cJSON_ArrayForEach(m, models)
    {
        const char *name = str_of(m, "name", "?");
        int n = snprintf(out + used, len - used, "%s%s", used ? ", " : "", name);
        if (n < 0 || (size_t)n >= len - used)
            break;
        used += (size_t)n;
    }
}

int load_model_fetch(const load_config *c, load_model *out)
{
    long code = 0;
    char *body = load_http_get(c, "/v1/models", 1, &code);
    cJSON *root = NULL;
    const cJSON *models, *model = NULL, *runs, *run, *it;
    load_model m;
    int rc = 2, max_layer = -1, has_stack = 0;

    memset(&m, 0, sizeof m);
    if (body == NULL) {
        fprintf(stderr, "posattn-load: GET %s/v1/models: no answer\n", c->url);
        return 1;
    }
    root = cJSON_Parse(body);
    models = cJSON_GetObjectItemCaseSensitive(root, "models");
    if (code != 200 || !cJSON_IsArray(models)) {
        char msg[160];
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(root, "error");
        snprintf(msg, sizeof msg, "%s", str_of(e, "message", "not a list of models"));
        fprintf(stderr, "posattn-load: GET %s/v1/models: HTTP %ld: %s\n", c->url, code, msg);
        rc = 1;
        goto out;
    }
    cJSON_ArrayForEach(it, models)
    {
        if (!strcmp(str_of(it, "name", ""), c->model_name)) {
            model = it;
            break;
        }
    }
    if (model == NULL) {
        char names[512];
        list_names(models, names, sizeof names);
        fprintf(stderr,
                "posattn-load: --model '%s': %s has no model of that name (loaded: %s); "
                "start posattnd with --model %s=config.json\n",
                c->model_name, c->url, names[0] ? names : "none", c->model_name);
        goto out;
    }
    snprintf(m.name, sizeof m.name, "%s", c->model_name);
    snprintf(m.model_type, sizeof m.model_type, "%s", str_of(model, "model_type", "?"));
    m.num_layers = int_of(model, "num_layers", 0);
    runs = cJSON_GetObjectItemCaseSensitive(model, "layers");

    /* A vision tower's items need each image's patch grid, which the
     * payloads here do not make: its layers are left out. */
    if (c->stack && strcmp(c->stack, "vision") == 0) {
        fprintf(stderr,
                "posattn-load: --stack vision: a vision tower's items need a patch grid, which "
                "posattn-load does not send yet; load its text model (the default)\n");
        goto out;
    }
    /* Two passes over the runs: how many layers are chosen, then each. */
    int n = 0;
    cJSON_ArrayForEach(run, runs)
    {
        const char *stack = str_of(run, "stack", "");
        int lo = int_of(run, "first_layer", 0), hi = int_of(run, "last_layer", -1);
        if (strcmp(stack, "vision") == 0)
            continue;
        has_stack |= stack[0] != '\0';
        if (c->stack && strcmp(stack, c->stack) != 0)
            continue;
        max_layer = hi > max_layer ? hi : max_layer;
        for (int l = lo; l <= hi; l++)
            n += in_ranges(c, l);
    }
    if (c->stack && !has_stack) {
        fprintf(stderr, "posattn-load: --stack %s: model '%s' (%s) has one stack of layers\n",
                c->stack, m.name, m.model_type);
        goto out;
    }
    for (int i = 0; i < c->n_layer_ranges; i++)
        if (c->layer_hi[i] > max_layer) {
            char which[64];
            if (c->layer_lo[i] == c->layer_hi[i])
                snprintf(which, sizeof which, "layer %d", c->layer_lo[i]);
            else
                snprintf(which, sizeof which, "layers %d-%d", c->layer_lo[i], c->layer_hi[i]);
            fprintf(stderr, "posattn-load: %s: model '%s' (%s) has layers 0 to %d%s%s\n", which,
                    m.name, m.model_type, max_layer, c->stack ? " in its " : "",
                    c->stack ? c->stack : "");
            goto out;
        }
    if (n == 0) {
        fprintf(stderr, "posattn-load: model '%s' (%s): no layer chosen\n", m.name, m.model_type);
        goto out;
    }
    m.layers = calloc((size_t)n, sizeof *m.layers);
    if (m.layers == NULL) {
        rc = 1;
        goto out;
    }
    cJSON_ArrayForEach(run, runs)
    {
        load_layer proto;
        int lo = int_of(run, "first_layer", 0), hi = int_of(run, "last_layer", -1);
        if (strcmp(str_of(run, "stack", ""), "vision") == 0)
            continue;
        if (c->stack && strcmp(str_of(run, "stack", ""), c->stack) != 0)
            continue;
        if (read_run(&m, run, &proto) != 0)
            goto out;
        for (int l = lo; l <= hi; l++) {
            load_layer *ly;
            if (!in_ranges(c, l))
                continue;
            ly = &m.layers[m.n_layers++];
            *ly = proto;
            ly->layer = l;
            snprintf(ly->label, sizeof ly->label, "%s %d %s", ly->stack[0] ? ly->stack : "layer", l,
                     ly->kind);
        }
    }
    *out = m;
    m.layers = NULL;
    rc = 0;
out:
    free(m.layers);
    cJSON_Delete(root);
    free(body);
    return rc;
}

void load_model_free(load_model *m)
{
    if (m == NULL)
        return;
    free(m->layers);
    m->layers = NULL;
    m->n_layers = 0;
}
