/* layers.c - which kind each layer of a model is (full, sliding, chunked)
 * and, for Llama 4, whether it applies RoPE: layer_types when the config has
 * it, else the model's rule (model/derive.c's rows name it); and the
 * bookkeeping of a layer's sources and needs, shared by options.c and
 * vision.c.
 */
#include "model/internal.h"

#include <stdio.h>
#include <string.h>

/* layer_types, when the config has one: n_layers known names. */
bool model_read_layer_types(const cfg_ctx *d, common *c)
{
    static const char *const known[] = {"full_attention", "sliding_attention",
                                        "chunked_attention"};
    const cJSON *lt = cfg_find(d, "layer_types", &c->layer_types_src), *x;
    int i = 0;
    if (lt == NULL)
        return true;
    if (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != c->n_layers)
        return cfg_fail(d, "layer_types",
                        "config \"%slayer_types\" must be an array of %d layer types (one per "
                        "layer)",
                        d->prefix, (int)c->n_layers);
    cJSON_ArrayForEach(x, lt)
    {
        size_t k = 0;
        while (k < 3 && !(cJSON_IsString(x) && strcmp(x->valuestring, known[k]) == 0))
            k++;
        if (k == 3) {
            char key[40], text[SRV_MODEL_VALUE_MAX];
            snprintf(key, sizeof key, "layer_types[%d]", i);
            cfg_value_text(x, text, sizeof text);
            return cfg_fail(d, key,
                            "config \"%s%s\": %s is not a layer type posattn knows "
                            "(full_attention, sliding_attention, chunked_attention)",
                            d->prefix, key, text);
        }
        i++;
    }
    c->layer_types = lt;
    return true;
}

/* Whether layer l of a Llama 4 model applies RoPE: no_rope_layers[l] (1 =
 * RoPE), by default every no_rope_layer_interval-th layer (4) is NoPE. */
bool model_llama4_rope(const cfg_ctx *d, const common *c, int32_t l, bool *rope,
                        srv_model_source *src)
{
    const cJSON *nr = cfg_find(d, "no_rope_layers", src);
    if (nr != NULL && cJSON_IsArray(nr) && cJSON_GetArraySize(nr) > 0) {
        const cJSON *x = cJSON_GetArrayItem(nr, l);
        if (cJSON_GetArraySize(nr) != c->n_layers || !cJSON_IsNumber(x))
            return cfg_fail(d, "no_rope_layers",
                            "config \"%sno_rope_layers\" must hold %d numbers (1: the layer "
                            "uses RoPE)",
                            d->prefix, (int)c->n_layers);
        *rope = x->valuedouble != 0;
        return true;
    }
    int64_t every;
    if (!cfg_int(d, "no_rope_layer_interval", 1, 1 << 20, false, 4, &every, src))
        return false;
    *rope = (l + 1) % every != 0;
    return true;
}

/* The layer's kind: layer_types, or the model's rule. */
bool model_layer_kind(const cfg_ctx *d, const common *c, int32_t l, bool rope_layer,
                       const char **kind, srv_model_source *src)
{
    *kind = "full_attention";
    if (c->layer_types != NULL) { /* a static name: the config does not outlive the model */
        static const char *const kinds[] = {"full_attention", "sliding_attention",
                                            "chunked_attention"};
        const char *t = cJSON_GetArrayItem(c->layer_types, l)->valuestring;
        for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
            if (strcmp(kinds[k], t) == 0)
                *kind = kinds[k];
        *src = c->layer_types_src;
        return true;
    }
    switch (c->row->win) {
    case WIN_NONE:
        return true;
    case WIN_ALL:
        if (cfg_find(d, "sliding_window", src) != NULL)
            *kind = "sliding_attention";
        return true;
    case WIN_QWEN2: {
        bool use;
        int64_t from;
        if (!cfg_bool(d, "use_sliding_window", false, &use, src) ||
            !cfg_int(d, "max_window_layers", 0, 1 << 20, false, 28, &from, NULL))
            return false;
        if (use && cfg_find(d, "sliding_window", NULL) != NULL && l >= from)
            *kind = "sliding_attention";
        return true;
    }
    case WIN_ALTERNATE:
        cfg_source(src, NULL, "layer_types", "(absent: even layers slide)");
        if ((l + 1) % 2 != 0)
            *kind = "sliding_attention";
        return true;
    case WIN_PATTERN: {
        int64_t p;
        if (!cfg_int(d, "sliding_window_pattern|_sliding_window_pattern", 1, 1 << 20, false, 6, &p,
                     src))
            return false;
        if ((l + 1) % p != 0)
            *kind = "sliding_attention";
        return true;
    }
    case WIN_LLAMA4:
        if (rope_layer && cfg_find(d, "attention_chunk_size", src) != NULL)
            *kind = "chunked_attention";
        return true;
    }
    return true;
}

/* A layer's bookkeeping (internal.h). */
void model_add_source(srv_model_layer *L, const char *option, const srv_model_source *s)
{
    if (L->n_sources == SRV_MODEL_MAX_SOURCES)
        return;
    L->sources[L->n_sources] = *s;
    snprintf(L->sources[L->n_sources].option, sizeof L->sources[0].option, "%s", option);
    L->n_sources++;
}

void model_add_need(srv_model_layer *L, const char *field, int ndim, int64_t a, int64_t b,
                    const char *what, const srv_model_source *s)
{
    if (L->n_needs == SRV_MODEL_MAX_NEEDS)
        return;
    srv_model_need *n = &L->needs[L->n_needs++];
    snprintf(n->field, sizeof n->field, "%s", field);
    n->ndim = ndim;
    n->shape[0] = a;
    n->shape[1] = b;
    snprintf(n->what, sizeof n->what, "%s", what);
    n->source = *s;
}
