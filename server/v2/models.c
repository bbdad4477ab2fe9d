/* models.c - see v2/v2.h. The protocol's models: one per scheme
 * ("attention-<scheme>", its options sent as parameters) and one per model
 * loaded with --model (its config decides the options; a request names the
 * layer). Finding and listing them, their inputs, the keys of their
 * counters, the 404 for an unknown name and the start-up check of the
 * --model names.
 */
#include "v2/internal.h"

#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------------- */
/* Finding and listing                                                       */
/* ------------------------------------------------------------------------- */

/* True when name is "attention-<scheme>"; *t is the scheme. */
static bool scheme_model(const char *name, pa_scheme_type *t)
{
    size_t n = strlen(V2_MODEL_PREFIX);
    return name != NULL && strncmp(name, V2_MODEL_PREFIX, n) == 0 &&
           pa_scheme_type_from_name(name + n, t) && strcmp(pa_scheme_type_name(*t), name + n) == 0;
}

bool v2_model_find(const srv_model_set *set, const char *name, v2_model *m)
{
    const srv_model *c;
    memset(m, 0, sizeof *m);
    if (scheme_model(name, &m->type)) {
        snprintf(m->name, sizeof m->name, "%s%s", V2_MODEL_PREFIX, pa_scheme_type_name(m->type));
        return true;
    }
    if (name == NULL || (c = srv_model_set_find(set, name)) == NULL)
        return false;
    m->config = c;
    snprintf(m->name, sizeof m->name, "%s", c->name);
    return true;
}

size_t v2_model_count(const srv_model_set *set)
{
    return (size_t)PA_SCHEME_COUNT + srv_model_set_count(set);
}

void v2_model_at(const srv_model_set *set, size_t i, v2_model *m)
{
    memset(m, 0, sizeof *m);
    if (i < (size_t)PA_SCHEME_COUNT) {
        m->type = (pa_scheme_type)i;
        snprintf(m->name, sizeof m->name, "%s%s", V2_MODEL_PREFIX, pa_scheme_type_name(m->type));
        return;
    }
    m->config = srv_model_set_at(set, i - (size_t)PA_SCHEME_COUNT);
    snprintf(m->name, sizeof m->name, "%s", m->config->name);
}

const char *v2_model_key(const v2_model *m, char *buf, size_t cap)
{
    if (m->config == NULL)
        return pa_scheme_type_name(m->type);
    snprintf(buf, cap, "%s%s", SRV_MODEL_KEY_PREFIX, m->config->name);
    return buf;
}

unsigned v2_model_schemes(const v2_model *m)
{
    const srv_model *c = m->config;
    unsigned bits = 0;
    if (c == NULL)
        return 1u << m->type;
    for (int32_t i = 0; i < srv_model_total_layers(c); i++) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(c->layers[i].options, "scheme"), "type");
        pa_scheme_type t;
        if (cJSON_IsString(type) && pa_scheme_type_from_name(type->valuestring, &t))
            bits |= 1u << t;
    }
    return bits;
}

const api_param *v2_scheme_scalar(unsigned schemes, const char *name)
{
    size_t np;
    const api_param *p = api_params(&np);
    for (size_t i = 0; i < np; i++)
        if ((schemes >> p[i].type & 1u) && p[i].kind != API_PARAM_TENSOR &&
            p[i].kind != API_PARAM_NUMBER_ARRAY && p[i].kind != API_PARAM_INT_ARRAY &&
            strcmp(p[i].name, name) == 0)
            return &p[i];
    return NULL;
}

bool srv_v2_model_known(const srv_model_set *models, const char *name)
{
    v2_model m;
    return v2_model_find(models, name, &m);
}

const char *srv_v2_model_key(const srv_model_set *models, const char *name, char *buf, size_t cap)
{
    v2_model m;
    return v2_model_find(models, name, &m) ? v2_model_key(&m, buf, cap) : NULL;
}

bool srv_v2_model_version_known(const srv_model_set *models, const char *name, const char *version)
{
    return srv_v2_model_known(models, name) &&
           (version == NULL || version[0] == '\0' || strcmp(version, SRV_V2_MODEL_VERSION) == 0);
}

bool srv_v2_check_models(const srv_model_set *models, char *err, size_t cap)
{
    /* Names a route would take from a model, or a client tidy away. */
    static const char *const taken[] = {"stats", ".", ".."};
    for (size_t i = 0; i < srv_model_set_count(models); i++) {
        const char *name = srv_model_set_at(models, i)->name;
        pa_scheme_type t;
        if (scheme_model(name, &t)) {
            snprintf(err, cap,
                     "--model %s: the name is the /v2 model of the scheme %s (KServe v2 serves "
                     "each --model under its name beside attention-<scheme>): choose another name",
                     name, pa_scheme_type_name(t));
            return false;
        }
        for (size_t k = 0; k < sizeof taken / sizeof taken[0]; k++)
            if (strcmp(name, taken[k]) == 0) {
                snprintf(err, cap,
                         "--model %s: /v2/models/%s is not a model's path (KServe v2 serves "
                         "each --model under its name): choose another name",
                         name, name);
                return false;
            }
    }
    return true;
}

/* ------------------------------------------------------------------------- */
/* Inputs                                                                    */
/* ------------------------------------------------------------------------- */

static const v2_input item_inputs[] = {
    {"q", V2_ROLE_TENSOR, 3, false, false, {0}, 0},
    {"k", V2_ROLE_TENSOR, 3, false, false, {0}, 0},
    {"v", V2_ROLE_TENSOR, 3, false, false, {0}, 0},
    {"x", V2_ROLE_TENSOR, 2, false, false, {0}, 0},
    {"w_q", V2_ROLE_TENSOR, 2, false, false, {0}, 0},
    {"w_k", V2_ROLE_TENSOR, 2, false, false, {0}, 0},
    {"w_v", V2_ROLE_TENSOR, 2, false, false, {0}, 0},
    {"w_o", V2_ROLE_TENSOR, 2, false, false, {0}, 0},
    {"q_positions", V2_ROLE_POSITIONS, 1, true, false, {0}, 0},
    {"k_positions", V2_ROLE_POSITIONS, 1, true, false, {0}, 0},
    {"cu_seqlens", V2_ROLE_POSITIONS, 1, true, false, {0}, 0},
    {"cu_seqlens_k", V2_ROLE_POSITIONS, 1, true, false, {0}, 0},
    {"sinks", V2_ROLE_TENSOR, 1, false, false, {0}, 0},
    {"mask", V2_ROLE_TENSOR, 0, false, true, {0}, 0},
    {"bias", V2_ROLE_TENSOR, 0, false, false, {0}, 0},
    {"q_norm_weight", V2_ROLE_NORM_WEIGHT, 1, false, false, {0}, 0},
    {"k_norm_weight", V2_ROLE_NORM_WEIGHT, 1, false, false, {0}, 0},
    {"b_q", V2_ROLE_TENSOR, 1, false, false, {0}, 0},
    {"b_k", V2_ROLE_TENSOR, 1, false, false, {0}, 0},
    {"b_v", V2_ROLE_TENSOR, 1, false, false, {0}, 0},
    {"b_o", V2_ROLE_TENSOR, 1, false, false, {0}, 0},
};

/* MLA's (api/item_mla.c), on the models of its schemes (rope, none):
 * k_rope [Lk, D_rope] (or [Lk, 1, D_rope]), the absorbed form's c_kv
 * [Lk, R] and the item's mla.w_uk [H, D_nope, R], mla.w_uv [H, Dv, R]. */
static const v2_input mla_inputs[] = {
    {"k_rope", V2_ROLE_TENSOR, 0, false, false, {0}, 2},
    {"c_kv", V2_ROLE_TENSOR, 2, false, false, {0}, 0},
    {"w_uk", V2_ROLE_MLA_TENSOR, 3, false, false, {0}, 0},
    {"w_uv", V2_ROLE_MLA_TENSOR, 3, false, false, {0}, 0},
};

static v2_input *input_named(v2_input *in, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(in[i].name, name) == 0)
            return &in[i];
    return NULL;
}

const char *v2_need_input(const char *field)
{
    if (strncmp(field, "scheme.", 7) == 0)
        return field + 7;
    if (strcmp(field, "q_norm.weight") == 0)
        return "q_norm_weight";
    if (strcmp(field, "k_norm.weight") == 0)
        return "k_norm_weight";
    if (strncmp(field, "differential.", 13) == 0)
        return field + 13;
    return field;
}

/* Sets *dim to a for the first layer (seen false), and to 0 (variable)
 * when a later layer disagrees. */
static void agree(int64_t *dim, int64_t a, bool seen)
{
    if (!seen)
        *dim = a;
    else if (*dim != a)
        *dim = 0;
}

/* The dims the config fixes, over every layer of every stack: the counts
 * where all layers agree, the needed tensors' shapes, M-RoPE's rows. */
static void config_dims(const srv_model *c, v2_input *in, size_t n)
{
    int64_t H = 0, Hkv = 0, D = 0, dm = 0;
    v2_input *q = input_named(in, n, "q"), *k = input_named(in, n, "k");
    /* Position rows: M-RoPE's 3, rope2d's 2 (a vision tower's), else 1-D. */
    int64_t rows = 0;
    bool rowed = true;
    for (int32_t i = 0; i < srv_model_total_layers(c); i++) {
        const srv_model_layer *l = &c->layers[i];
        const cJSON *sc = cJSON_GetObjectItemCaseSensitive(l->options, "scheme");
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(sc, "type");
        int64_t r = cJSON_GetObjectItemCaseSensitive(sc, "mrope_section") != NULL      ? 3
                    : cJSON_IsString(type) && strcmp(type->valuestring, "rope2d") == 0 ? 2
                                                                                       : 0;
        agree(&H, l->num_heads, i > 0);
        agree(&Hkv, l->num_kv_heads, i > 0);
        agree(&D, l->head_dim, i > 0);
        agree(&dm, l->d_model, i > 0);
        agree(&rows, r, i > 0);
        rowed = rowed && r != 0;
    }
    bool seen[V2_MAX_INPUTS] = {false};
    for (int32_t i = 0; i < srv_model_total_layers(c); i++) {
        const srv_model_layer *l = &c->layers[i];
        for (size_t j = 0; j < l->n_needs; j++) {
            const srv_model_need *nd = &l->needs[j];
            v2_input *t = input_named(in, n, v2_need_input(nd->field));
            if (t == NULL || t->ndim != nd->ndim)
                continue;
            for (int d = 0; d < nd->ndim && d < (int)(sizeof nd->shape / sizeof nd->shape[0]); d++)
                agree(&t->shape[d], nd->shape[d], seen[t - in]);
            seen[t - in] = true;
        }
    }
    q->shape[1] = H;
    q->shape[2] = D;
    k->shape[1] = Hkv;
    k->shape[2] = D;
    /* MLA (DeepSeek): k is k_nope, D - rope_dim wide, beside k_rope. */
    const cJSON *mla = cJSON_GetObjectItemCaseSensitive(c->layers[0].options, "mla");
    v2_input *kr = input_named(in, n, "k_rope");
    if (mla != NULL && kr != NULL) {
        int64_t Dr =
            (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(mla, "rope_dim"));
        k->shape[2] = D > Dr ? D - Dr : 0;
        kr->shape[1] = Dr;
    }
    input_named(in, n, "v")->shape[1] = Hkv;
    input_named(in, n, "sinks")->shape[0] = H;
    input_named(in, n, "x")->shape[1] = dm;
    input_named(in, n, "w_q")->shape[0] = dm;
    input_named(in, n, "w_q")->shape[1] = H && D ? H * D : 0;
    input_named(in, n, "w_k")->shape[0] = dm;
    input_named(in, n, "w_k")->shape[1] = Hkv && D ? Hkv * D : 0;
    input_named(in, n, "w_v")->shape[0] = dm;
    input_named(in, n, "b_q")->shape[0] = H && D ? H * D : 0;
    input_named(in, n, "b_k")->shape[0] = Hkv && D ? Hkv * D : 0;
    if (rowed) { /* M-RoPE positions are rows [3, L], rope2d's [2, L] (0: both) */
        input_named(in, n, "q_positions")->meta_ndim = 2;
        input_named(in, n, "q_positions")->shape[0] = rows;
        input_named(in, n, "k_positions")->meta_ndim = 2;
        input_named(in, n, "k_positions")->shape[0] = rows;
    }
}

size_t v2_model_inputs(const v2_model *m, v2_input *out)
{
    size_t n = 0, np;
    const api_param *p = api_params(&np);
    unsigned schemes = v2_model_schemes(m);
    for (size_t i = 0; i < sizeof item_inputs / sizeof item_inputs[0]; i++)
        out[n++] = item_inputs[i];
    if (schemes & (1u << PA_SCHEME_ROPE | 1u << PA_SCHEME_NONE))
        for (size_t i = 0; i < sizeof mla_inputs / sizeof mla_inputs[0]; i++)
            out[n++] = mla_inputs[i];
    for (size_t i = 0; i < np && n < V2_MAX_INPUTS; i++) {
        if (!(schemes >> p[i].type & 1u) || input_named(out, n, p[i].name) != NULL)
            continue;
        if (p[i].kind == API_PARAM_TENSOR && p[i].type == PA_SCHEME_COPE)
            /* pos_emb: [npos_max, D] (shown) or [H, npos_max, D] */
            out[n++] = (v2_input){p[i].name, V2_ROLE_SCHEME_TENSOR, 0, false, false, {0}, 2};
        else if (p[i].kind == API_PARAM_TENSOR)
            out[n++] = (v2_input){p[i].name, V2_ROLE_SCHEME_TENSOR, 2, false, false, {0}, 0};
        else if (p[i].kind == API_PARAM_INT_ARRAY)
            out[n++] = (v2_input){p[i].name, V2_ROLE_SCHEME_ARRAY, 1, true, false, {0}, 0};
        else if (p[i].kind == API_PARAM_NUMBER_ARRAY)
            out[n++] = (v2_input){p[i].name, V2_ROLE_SCHEME_ARRAY, 1, false, false, {0}, 0};
    }
    /* differential's vectors, for a config whose layers need them */
    for (int32_t i = 0; m->config != NULL && i < srv_model_total_layers(m->config); i++)
        for (size_t j = 0; j < m->config->layers[i].n_needs; j++) {
            const char *f = m->config->layers[i].needs[j].field;
            if (strncmp(f, "differential.", 13) == 0 && n < V2_MAX_INPUTS &&
                input_named(out, n, v2_need_input(f)) == NULL)
                out[n++] =
                    (v2_input){v2_need_input(f), V2_ROLE_DIFF_VECTOR, 1, false, false, {0}, 0};
        }
    if (m->config != NULL)
        config_dims(m->config, out, n);
    return n;
}

/* ------------------------------------------------------------------------- */
/* Unknown models                                                            */
/* ------------------------------------------------------------------------- */

void srv_v2_unknown_model(const srv_model_set *models, const char *name, const char *version,
                          char *buf, size_t cap)
{
    char list[128] = "", loaded[96] = "";
    size_t nm = srv_model_set_count(models);
    if (srv_v2_model_known(models, name)) {
        snprintf(buf, cap, "model '%s' has no version '%.16s%s': its one version is %s", name,
                 version != NULL ? version : "",
                 version != NULL && strlen(version) > 16 ? "..." : "", SRV_V2_MODEL_VERSION);
        return;
    }
    for (int t = 0; t < PA_SCHEME_COUNT; t++)
        v2_list_add(list, sizeof list, pa_scheme_type_name((pa_scheme_type)t));
    for (size_t i = 0; i < nm; i++) {
        const char *m = srv_model_set_at(models, i)->name;
        size_t used = strlen(loaded);
        if (used + strlen(m) + 8 >= sizeof loaded) { /* room for ", ..." */
            v2_list_add(loaded, sizeof loaded, "...");
            break;
        }
        v2_list_add(loaded, sizeof loaded, m);
    }
    snprintf(buf, cap, "unknown model '%.32s%s'; the models are %s<scheme>, scheme %s%s%s",
             name != NULL ? name : "", name != NULL && strlen(name) > 32 ? "..." : "",
             V2_MODEL_PREFIX, list, nm ? ", and those of --model: " : "", loaded);
}

void v2_unknown_model_reply(const srv_model_set *set, const char *name, srv_reply *reply)
{
    char msg[320];
    api_err e;
    srv_v2_unknown_model(set, name, NULL, msg, sizeof msg);
    api_fail(&e, NULL, SRV_ERR_NOT_FOUND, "", "%s", msg);
    v2_fail_reply(reply, &e);
}
