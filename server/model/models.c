/* models.c - a derived model as GET /v1/models lists it (runs of identical
 * layers), and the models loaded at start-up from --model NAME=PATH.
 */
#include "model/model.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------- */
/* Rendering                                                                 */
/* ------------------------------------------------------------------------- */

static bool add_dup_members(cJSON *dst, const cJSON *src)
{
    const cJSON *m;
    cJSON_ArrayForEach(m, src)
    {
        cJSON *c = cJSON_Duplicate(m, true);
        if (c == NULL || !cJSON_AddItemToObject(dst, m->string, c)) {
            cJSON_Delete(c);
            return false;
        }
    }
    return true;
}

/* A layer without its index: what makes two layers identical. */
static cJSON *render_layer(const srv_model_layer *l)
{
    cJSON *o = cJSON_CreateObject(), *req = NULL, *cfg = NULL;
    bool ok = o != NULL;
    if (ok && l->stack != NULL)
        ok = cJSON_AddStringToObject(o, "stack", l->stack) != NULL;
    ok = ok && cJSON_AddStringToObject(o, "attention", l->kind) &&
         cJSON_AddNumberToObject(o, "num_heads", l->num_heads) &&
         cJSON_AddNumberToObject(o, "num_kv_heads", l->num_kv_heads) &&
         cJSON_AddNumberToObject(o, "head_dim", l->head_dim) &&
         add_dup_members(o, l->options) && add_dup_members(o, l->defaults) &&
         (req = cJSON_AddArrayToObject(o, "requires")) != NULL;
    for (size_t i = 0; ok && i < l->n_needs; i++) {
        const srv_model_need *n = &l->needs[i];
        cJSON *r = cJSON_CreateObject(), *shape = NULL;
        ok = r != NULL && cJSON_AddItemToArray(req, r) && cJSON_AddStringToObject(r, "field", n->field) &&
             (shape = cJSON_AddArrayToObject(r, "shape")) != NULL;
        for (int d = 0; ok && d < n->ndim; d++)
            ok = cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)n->shape[d]));
        ok = ok && cJSON_AddStringToObject(r, "what", n->what) &&
             cJSON_AddStringToObject(r, "config", n->source.key);
    }
    ok = ok && (cfg = cJSON_AddObjectToObject(o, "config")) != NULL;
    const srv_model_source *counts[] = {&l->heads, &l->kv_heads, &l->dim};
    const char *count_names[] = {"num_heads", "num_kv_heads", "head_dim"};
    for (size_t i = 0; ok && i < 3; i++) {
        cJSON *s = cJSON_AddObjectToObject(cfg, count_names[i]);
        ok = s != NULL && cJSON_AddStringToObject(s, "key", counts[i]->key) &&
             cJSON_AddStringToObject(s, "value", counts[i]->value);
    }
    for (size_t i = 0; ok && i < l->n_sources; i++) {
        cJSON *s = cJSON_AddObjectToObject(cfg, l->sources[i].option);
        ok = s != NULL && cJSON_AddStringToObject(s, "key", l->sources[i].key) &&
             cJSON_AddStringToObject(s, "value", l->sources[i].value);
    }
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

cJSON *srv_model_render(const srv_model *m)
{
    cJSON *o = cJSON_CreateObject(), *runs = NULL, *prev = NULL;
    int32_t total = srv_model_total_layers(m);
    bool ok = o != NULL && cJSON_AddStringToObject(o, "name", m->name) &&
              cJSON_AddStringToObject(o, "model_type", m->model_type) &&
              cJSON_AddNumberToObject(o, "num_layers", m->n_layers);
    if (ok && m->encoder_decoder)
        ok = cJSON_AddNumberToObject(o, "num_decoder_layers", m->n_decoder) != NULL;
    if (ok && m->n_vision > 0)
        ok = cJSON_AddNumberToObject(o, "num_vision_layers", m->n_vision) != NULL;
    if (ok && m->no_vision[0] != '\0')
        ok = cJSON_AddStringToObject(o, "vision", m->no_vision) != NULL;
    if (ok && m->note[0] != '\0')
        ok = cJSON_AddStringToObject(o, "note", m->note) != NULL;
    ok = ok && (runs = cJSON_AddArrayToObject(o, "layers")) != NULL;
    for (int32_t i = 0; ok && i < total; i++) {
        const srv_model_layer *l = &m->layers[i];
        cJSON *r = render_layer(l);
        ok = r != NULL;
        if (ok && prev != NULL && cJSON_Compare(prev, r, true)) {
            /* one more layer of the same run */
            cJSON *run = cJSON_GetArrayItem(runs, cJSON_GetArraySize(runs) - 1);
            cJSON_SetNumberValue(cJSON_GetObjectItemCaseSensitive(run, "last_layer"), l->layer);
            cJSON_Delete(r);
            continue;
        }
        cJSON *run = ok ? cJSON_CreateObject() : NULL;
        ok = run != NULL && cJSON_AddItemToArray(runs, run) &&
             cJSON_AddNumberToObject(run, "first_layer", l->layer) &&
             cJSON_AddNumberToObject(run, "last_layer", l->layer) && add_dup_members(run, r);
        cJSON_Delete(prev);
        prev = r;
    }
    cJSON_Delete(prev);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* ------------------------------------------------------------------------- */
/* The models of --model                                                     */
/* ------------------------------------------------------------------------- */

struct srv_model_set {
    srv_model **models;
    size_t n;
};

void srv_model_set_free(srv_model_set *s)
{
    if (s == NULL)
        return;
    for (size_t i = 0; i < s->n; i++)
        srv_model_free(s->models[i]);
    free(s->models);
    free(s);
}

size_t srv_model_set_count(const srv_model_set *s)
{
    return s != NULL ? s->n : 0;
}

const srv_model *srv_model_set_at(const srv_model_set *s, size_t i)
{
    return s != NULL && i < s->n ? s->models[i] : NULL;
}

const srv_model *srv_model_set_find(const srv_model_set *s, const char *name)
{
    for (size_t i = 0; s != NULL && i < s->n; i++)
        if (strcmp(s->models[i]->name, name) == 0)
            return s->models[i];
    return NULL;
}

/* The whole file, NUL-terminated; NULL with err set. Configs are small:
 * more than 16 MiB is refused. */
static char *read_file(const char *path, char *err, size_t cap)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t len = 0, got;
    if (f == NULL) {
        snprintf(err, cap, "cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    for (;;) {
        char *nb = realloc(buf, len + 65536 + 1);
        if (nb == NULL) {
            snprintf(err, cap, "out of memory reading %s", path);
            goto fail;
        }
        buf = nb;
        got = fread(buf + len, 1, 65536, f);
        len += got;
        if (got < 65536)
            break;
        if (len > (16u << 20)) {
            snprintf(err, cap, "%s is larger than 16 MiB: not a config.json", path);
            goto fail;
        }
    }
    if (ferror(f)) {
        snprintf(err, cap, "cannot read %s: %s", path, strerror(errno));
        goto fail;
    }
    fclose(f);
    buf[len] = '\0';
    return buf;
fail:
    fclose(f);
    free(buf);
    return NULL;
}

bool srv_model_set_load(const srv_model_spec *specs, size_t n, srv_model_set **out, char *err,
                        size_t cap)
{
    srv_model_set *s = NULL;
    *out = NULL;
    if (n == 0)
        return true;
    if ((s = calloc(1, sizeof *s)) == NULL || (s->models = calloc(n, sizeof *s->models)) == NULL) {
        free(s);
        snprintf(err, cap, "out of memory loading the models");
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        char msg[256];
        srv_model_err e;
        char *text;
        cJSON *cfg;
        for (size_t j = 0; j < i; j++)
            if (strcmp(specs[j].name, specs[i].name) == 0) {
                snprintf(err, cap, "--model %s is given twice", specs[i].name);
                goto fail;
            }
        if ((text = read_file(specs[i].path, msg, sizeof msg)) == NULL) {
            snprintf(err, cap, "--model %s=%s: %s", specs[i].name, specs[i].path, msg);
            goto fail;
        }
        cfg = cJSON_Parse(text);
        free(text);
        if (cfg == NULL) {
            snprintf(err, cap, "--model %s=%s: the file is not valid JSON", specs[i].name,
                     specs[i].path);
            goto fail;
        }
        bool ok = srv_model_derive(cfg, specs[i].name, &s->models[i], &e);
        cJSON_Delete(cfg);
        if (!ok) {
            snprintf(err, cap, "--model %s=%s: %s", specs[i].name, specs[i].path, e.message);
            goto fail;
        }
        s->n = i + 1;
    }
    *out = s;
    return true;
fail:
    srv_model_set_free(s);
    return false;
}
