/* api_request.c - request objects into core descriptors: a scheme object
 * into a pa_scheme (with the tables it borrows), an attention item into a
 * pa_attention. Sizes come from the tensors' shapes; every disagreement is
 * reported with the field and the values before the core library is called,
 * and then pa_attention_check validates the rest.
 */
#include "api_internal.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------- */
/* Scheme parameters                                                         */
/* ------------------------------------------------------------------------- */

#define OFF(m) offsetof(pa_scheme, m)
#define SC(x) (1u << PA_ROPE_SCALING_##x)
#define SC_FACTOR (SC(LINEAR) | SC(NTK) | SC(DYNAMIC) | SC(YARN) | SC(LLAMA3) | SC(LONGROPE))
#define SC_ORIG (SC(DYNAMIC) | SC(YARN) | SC(LLAMA3) | SC(LONGROPE))

/* The one list of scheme parameters: the parser reads it and GET
 * /v1/schemes renders it, so the two cannot disagree. Defaults are read from
 * pa_scheme_init at the offset. */
static const api_param params[] = {
    {PA_SCHEME_SINUSOIDAL, "base", API_PARAM_NUMBER, OFF(sinusoidal.base), 0, NULL, "optional",
     "frequency base: PE[p, 2i] = sin(p / base^(2i/d))"},
    {PA_SCHEME_SINUSOIDAL, "layout", API_PARAM_ENUM, OFF(sinusoidal.layout), 0, NULL, "optional",
     "'interleaved' (Vaswani et al.: sin on even dims, cos on odd) or 'concat' "
     "(tensor2tensor / fairseq: [sin | cos])"},
    {PA_SCHEME_LEARNED, "table", API_PARAM_TENSOR, 0, 0, "[rows, d_model]", "required",
     "learned position embeddings; row (position + offset) is added to x"},
    {PA_SCHEME_LEARNED, "offset", API_PARAM_INT, OFF(learned.offset), 0, NULL, "optional",
     "added to each position to find its row (OPT uses 2); a row outside the table is an "
     "error"},
    {PA_SCHEME_SHAW, "max_relative_position", API_PARAM_INT, OFF(shaw.max_relative_position), 0,
     NULL, "optional", "K >= 0: kpos - qpos is clipped to [-K, K]; the tables have 2K+1 rows"},
    {PA_SCHEME_SHAW, "rel_k", API_PARAM_TENSOR, 0, 0, "[2K+1, D]", "required for attention",
     "relative key embeddings: logits += scale * q_i . rel_k[clip(kpos - qpos, -K, K) + K]"},
    {PA_SCHEME_SHAW, "rel_v", API_PARAM_TENSOR, 0, 0, "[2K+1, Dv]", "optional",
     "relative value embeddings: output += sum_j a_ij rel_v[index]"},
    {PA_SCHEME_T5, "num_buckets", API_PARAM_INT, OFF(t5.num_buckets), 0, NULL, "optional",
     "buckets of relative position (even and >= 4 when bidirectional)"},
    {PA_SCHEME_T5, "max_distance", API_PARAM_INT, OFF(t5.max_distance), 0, NULL, "optional",
     "distance beyond which relative positions share the last bucket"},
    {PA_SCHEME_T5, "bidirectional", API_PARAM_BOOL, OFF(t5.bidirectional), 0, NULL, "optional",
     "true for encoder buckets (both directions), false for causal decoder buckets"},
    {PA_SCHEME_T5, "table", API_PARAM_TENSOR, 0, 0, "[num_buckets, H]", "required for attention",
     "logit bias per bucket and head (T5 does not scale logits)"},
    {PA_SCHEME_ROPE, "base", API_PARAM_NUMBER, OFF(rope.base), 0, NULL, "optional",
     "frequency base: inv_freq[i] = base^(-2i/r)"},
    {PA_SCHEME_ROPE, "rotary_dim", API_PARAM_INT, OFF(rope.rotary_dim), 0, NULL, "optional",
     "r, the dims rotated (even, <= head_dim; 0 = head_dim); the others pass through"},
    {PA_SCHEME_ROPE, "layout", API_PARAM_ENUM, OFF(rope.layout), 0, NULL, "optional",
     "'neox' (pairs i, i + r/2; HF rotate_half) or 'gptj' (pairs 2i, 2i+1)"},
    {PA_SCHEME_ROPE, "scaling", API_PARAM_ENUM, OFF(rope.scaling), 0, NULL, "optional",
     "context extension: none, linear, ntk, dynamic, yarn, llama3, longrope (HF semantics)"},
    {PA_SCHEME_ROPE, "factor", API_PARAM_NUMBER, OFF(rope.factor), SC_FACTOR, NULL,
     "required for linear, ntk, dynamic, yarn",
     "scaling factor (0 = the scaling's default: llama3 8, longrope 1)"},
    {PA_SCHEME_ROPE, "original_max_position", API_PARAM_INT, OFF(rope.original_max_position),
     SC_ORIG, NULL, "required for dynamic, yarn, longrope",
     "context length the model was trained on (0 = the default: llama3 8192)"},
    {PA_SCHEME_ROPE, "attention_factor", API_PARAM_NUMBER, OFF(rope.attention_factor), 0, NULL,
     "optional", "multiplies cos and sin (0 = the scaling's default; 1 for most)"},
    {PA_SCHEME_ROPE, "beta_fast", API_PARAM_NUMBER, OFF(rope.beta_fast), SC(YARN), NULL, "optional",
     "yarn: rotations at which the ramp starts keeping original frequencies"},
    {PA_SCHEME_ROPE, "beta_slow", API_PARAM_NUMBER, OFF(rope.beta_slow), SC(YARN), NULL, "optional",
     "yarn: rotations below which frequencies are fully interpolated"},
    {PA_SCHEME_ROPE, "truncate", API_PARAM_BOOL, OFF(rope.truncate), SC(YARN), NULL, "optional",
     "yarn: floor/ceil the ramp bounds, as HF does by default"},
    {PA_SCHEME_ROPE, "mscale", API_PARAM_NUMBER, OFF(rope.mscale), SC(YARN), NULL, "optional",
     "yarn: with mscale_all_dim, attention factor mscale(f, mscale)/mscale(f, mscale_all_dim) "
     "(0 = unset)"},
    {PA_SCHEME_ROPE, "mscale_all_dim", API_PARAM_NUMBER, OFF(rope.mscale_all_dim), SC(YARN), NULL,
     "optional", "yarn: see mscale (0 = unset)"},
    {PA_SCHEME_ROPE, "low_freq_factor", API_PARAM_NUMBER, OFF(rope.low_freq_factor), SC(LLAMA3),
     NULL, "optional",
     "llama3: wavelengths above original_max_position/low_freq_factor are divided by factor"},
    {PA_SCHEME_ROPE, "high_freq_factor", API_PARAM_NUMBER, OFF(rope.high_freq_factor), SC(LLAMA3),
     NULL, "optional", "llama3: wavelengths below original_max_position/high_freq_factor are kept"},
    {PA_SCHEME_ROPE, "short_factor", API_PARAM_NUMBER_ARRAY, 0, SC(LONGROPE), "[rotary_dim/2]",
     "required for longrope",
     "longrope: per-frequency factors used while max position + 1 <= original_max_position"},
    {PA_SCHEME_ROPE, "long_factor", API_PARAM_NUMBER_ARRAY, 0, SC(LONGROPE), "[rotary_dim/2]",
     "required for longrope", "longrope: per-frequency factors used beyond it"},
    {PA_SCHEME_ALIBI, "max_bias", API_PARAM_NUMBER, OFF(alibi.max_bias), 0, NULL, "optional",
     "slopes m_h = 2^(-max_bias (h+1) / n), n = 2^floor(log2 H) (Press et al. for any H)"},
    {PA_SCHEME_ALIBI, "symmetric", API_PARAM_BOOL, OFF(alibi.symmetric), 0, NULL, "optional",
     "bias -m_h |qpos - kpos| instead of -m_h (qpos - kpos)"},
    {PA_SCHEME_ALIBI, "slopes", API_PARAM_NUMBER_ARRAY, 0, 0, "[H]", "optional",
     "explicit slopes, replacing the computed ones"},
};

#undef OFF
#undef SC
#undef SC_FACTOR
#undef SC_ORIG

const api_param *api_params(size_t *n)
{
    *n = sizeof params / sizeof params[0];
    return params;
}

const char *api_param_kind_name(api_param_kind k)
{
    switch (k) {
    case API_PARAM_NUMBER:
        return "number";
    case API_PARAM_INT:
        return "integer";
    case API_PARAM_BOOL:
        return "boolean";
    case API_PARAM_ENUM:
        return "string";
    case API_PARAM_TENSOR:
        return "tensor";
    case API_PARAM_NUMBER_ARRAY:
        return "number[]";
    }
    return "unknown";
}

static const api_param *find_param(pa_scheme_type type, const char *name)
{
    for (size_t i = 0; i < sizeof params / sizeof params[0]; i++)
        if (params[i].type == type && strcmp(params[i].name, name) == 0)
            return &params[i];
    return NULL;
}

/* Names of the scalings in mask, for messages. */
static void scaling_list(unsigned mask, char *buf, size_t cap)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int s = 0; s < PA_ROPE_SCALING_COUNT; s++) {
        if (mask & (1u << s)) {
            int w = snprintf(buf + used, cap - used, "%s%s", used ? ", " : "",
                             pa_rope_scaling_name((pa_rope_scaling)s));
            if (w < 0 || (size_t)w >= cap - used)
                break;
            used += (size_t)w;
        }
    }
}

static bool parse_enum(const api_param *p, const cJSON *v, const char *rel, const api_ctx *ctx,
                       pa_scheme *s, api_err *e)
{
    const char *name;
    bool ok;
    if (!api_get_string(v, rel, ctx, &name, e))
        return false;
    if (p->type == PA_SCHEME_SINUSOIDAL) {
        ok = pa_sinusoidal_layout_from_name(name, &s->sinusoidal.layout);
        if (!ok)
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, rel,
                            "%s='%.32s' is not 'interleaved' or 'concat'", rel, name);
    } else if (strcmp(p->name, "layout") == 0) {
        ok = pa_rope_layout_from_name(name, &s->rope.layout);
        if (!ok)
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, rel,
                            "%s='%.32s' is not 'neox' or 'gptj'", rel, name);
    } else {
        ok = pa_rope_scaling_from_name(name, &s->rope.scaling);
        if (!ok) {
            char list[128];
            scaling_list((1u << PA_ROPE_SCALING_COUNT) - 1, list, sizeof list);
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, rel,
                            "%s='%.32s' is not a rope scaling (%s)", rel, name, list);
        }
    }
    return true;
}

/* Request memory of a tensor: a borrowed (loaded) tensor costs none. */
static size_t tensor_bytes(const srv_tensor *t)
{
    return t->borrowed ? 0 : api_mul_sat(t->count, sizeof(float));
}

static bool parse_tensor_param(const api_param *p, const cJSON *v, const char *rel,
                               const api_ctx *ctx, api_scheme *out, api_err *e)
{
    srv_tensor *t = p->type == PA_SCHEME_SHAW
                        ? (strcmp(p->name, "rel_k") == 0 ? &out->rel_k : &out->rel_v)
                        : &out->table;
    if (!api_get_tensor(v, rel, ctx, 2, t, e))
        return false;
    out->bytes = api_add_sat(out->bytes, tensor_bytes(t));
    switch (p->type) {
    case PA_SCHEME_LEARNED:
        out->s.learned.table = t->data;
        out->s.learned.rows = (int32_t)t->shape[0];
        out->s.learned.cols = (int32_t)t->shape[1];
        break;
    case PA_SCHEME_T5:
        out->s.t5.table = t->data;
        out->s.t5.table_rows = (int32_t)t->shape[0];
        out->s.t5.table_cols = (int32_t)t->shape[1];
        break;
    default:
        if (t == &out->rel_k) {
            out->s.shaw.rel_k = t->data;
            out->s.shaw.rel_k_rows = (int32_t)t->shape[0];
            out->s.shaw.rel_k_cols = (int32_t)t->shape[1];
        } else {
            out->s.shaw.rel_v = t->data;
            out->s.shaw.rel_v_rows = (int32_t)t->shape[0];
            out->s.shaw.rel_v_cols = (int32_t)t->shape[1];
        }
        break;
    }
    return true;
}

static bool parse_array_param(const api_param *p, const cJSON *v, const char *rel,
                              const api_ctx *ctx, api_scheme *out, api_err *e)
{
    float *a = NULL;
    int32_t n = 0;
    if (!api_get_float_array(v, rel, ctx, &a, &n, e))
        return false;
    out->bytes = api_add_sat(out->bytes, (size_t)n * sizeof(float));
    if (p->type == PA_SCHEME_ALIBI) {
        out->slopes = a;
        out->s.alibi.slopes = a;
        out->s.alibi.num_slopes = n;
    } else if (strcmp(p->name, "short_factor") == 0) {
        out->short_factor = a;
        out->s.rope.short_factor = a;
        out->s.rope.short_factor_len = n;
    } else {
        out->long_factor = a;
        out->s.rope.long_factor = a;
        out->s.rope.long_factor_len = n;
    }
    return true;
}

static bool parse_param(const api_param *p, const cJSON *v, const api_ctx *ctx, api_scheme *out,
                        api_err *e)
{
    char rel[API_FIELD_MAX];
    char *at = (char *)&out->s + p->offset;
    snprintf(rel, sizeof rel, "scheme.%s", p->name);
    switch (p->kind) {
    case API_PARAM_NUMBER:
        return api_get_number(v, rel, ctx, (double *)(void *)at, e);
    case API_PARAM_INT:
        return api_get_int(v, rel, ctx, (int32_t *)(void *)at, e);
    case API_PARAM_BOOL:
        return api_get_bool(v, rel, ctx, (bool *)(void *)at, e);
    case API_PARAM_ENUM:
        return parse_enum(p, v, rel, ctx, &out->s, e);
    case API_PARAM_TENSOR:
        return parse_tensor_param(p, v, rel, ctx, out, e);
    case API_PARAM_NUMBER_ARRAY:
        return parse_array_param(p, v, rel, ctx, out, e);
    }
    return api_fail(e, ctx, SRV_ERR_INTERNAL, rel, "unhandled parameter kind");
}

static void tensor_release(srv_tensor *t)
{
    if (t->data != NULL)
        srv_tensor_free(t);
    memset(t, 0, sizeof *t);
}

void api_scheme_free(api_scheme *s)
{
    if (s == NULL)
        return;
    tensor_release(&s->table);
    tensor_release(&s->rel_k);
    tensor_release(&s->rel_v);
    free(s->short_factor);
    free(s->long_factor);
    free(s->slopes);
    memset(s, 0, sizeof *s);
}

bool api_scheme_parse(const cJSON *node, const api_ctx *ctx, api_scheme *out, api_err *e)
{
    const char *known[32];
    size_t n_known = 0;
    const char *type_name;
    pa_scheme_type type;
    const cJSON *m;
    char what[64];

    memset(out, 0, sizeof *out);
    if (node == NULL)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "scheme",
                        "scheme is required: an object with a 'type' (none, sinusoidal, "
                        "learned, shaw, t5, rope, alibi) and its parameters");
    if (!cJSON_IsObject(node))
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "scheme",
                        "scheme must be an object with a 'type', found %s", api_json_type(node));
    m = cJSON_GetObjectItemCaseSensitive(node, "type");
    if (m == NULL)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "scheme.type",
                        "scheme.type is required (none, sinusoidal, learned, shaw, t5, rope, "
                        "alibi)");
    if (!api_get_string(m, "scheme.type", ctx, &type_name, e))
        return false;
    if (!pa_scheme_type_from_name(type_name, &type))
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "scheme.type",
                        "scheme.type='%.32s' is not a scheme (none, sinusoidal, learned, shaw, "
                        "t5, rope, alibi)",
                        type_name);
    pa_scheme_init(&out->s, type);

    known[n_known++] = "type";
    for (size_t i = 0; i < sizeof params / sizeof params[0]; i++)
        if (params[i].type == type && n_known < sizeof known / sizeof known[0])
            known[n_known++] = params[i].name;
    snprintf(what, sizeof what, "scheme '%s'", pa_scheme_type_name(type));
    if (!api_check_fields(node, known, n_known, "scheme", what, ctx, e))
        return false;

    cJSON_ArrayForEach(m, node)
    {
        const api_param *p;
        if (strcmp(m->string, "type") == 0)
            continue;
        p = find_param(type, m->string);
        if (p == NULL || !parse_param(p, m, ctx, out, e)) {
            if (p == NULL)
                api_fail(e, ctx, SRV_ERR_INTERNAL, "scheme", "parameter table mismatch");
            api_scheme_free(out);
            return false;
        }
    }

    /* A rope parameter that the chosen scaling does not read would be
     * silently ignored: reject it, which also catches a forgotten scaling. */
    if (type == PA_SCHEME_ROPE) {
        cJSON_ArrayForEach(m, node)
        {
            const api_param *p = find_param(type, m->string);
            if (p != NULL && p->scalings != 0 &&
                !(p->scalings & (1u << (unsigned)out->s.rope.scaling))) {
                char rel[API_FIELD_MAX], list[128];
                snprintf(rel, sizeof rel, "scheme.%s", p->name);
                scaling_list(p->scalings, list, sizeof list);
                api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, rel,
                         "%s applies to rope scaling %s only, but scheme.scaling is '%s'", rel,
                         list, pa_rope_scaling_name(out->s.rope.scaling));
                api_scheme_free(out);
                return false;
            }
        }
    }
    return true;
}

/* ------------------------------------------------------------------------- */
/* Attention items                                                           */
/* ------------------------------------------------------------------------- */

static const char *const attention_fields[] = {
    "scheme",       "q",           "k",      "v",      "x",
    "w_q",          "w_k",         "w_v",    "w_o",    "num_heads",
    "num_kv_heads", "head_dim",    "causal", "window", "key_length",
    "q_positions",  "k_positions", "scale",
};

void api_item_free(api_item *it)
{
    if (it == NULL)
        return;
    api_scheme_free(&it->scheme);
    tensor_release(&it->q);
    tensor_release(&it->k);
    tensor_release(&it->v);
    tensor_release(&it->x);
    tensor_release(&it->w_q);
    tensor_release(&it->w_k);
    tensor_release(&it->w_v);
    tensor_release(&it->w_o);
    free(it->q_positions);
    free(it->k_positions);
    memset(it, 0, sizeof *it);
}

static const cJSON *member(const cJSON *obj, const char *name)
{
    return cJSON_GetObjectItemCaseSensitive(obj, name);
}

/* An optional int member; *present tells whether it was there. */
static bool opt_int(const cJSON *obj, const char *name, const api_ctx *ctx, int32_t *out,
                    bool *present, api_err *e)
{
    const cJSON *v = member(obj, name);
    *present = v != NULL;
    return v == NULL || api_get_int(v, name, ctx, out, e);
}

/* A count that must be positive (num_heads, num_kv_heads, head_dim). */
static bool opt_count(const cJSON *obj, const char *name, const api_ctx *ctx, int32_t *out,
                      bool *present, api_err *e)
{
    if (!opt_int(obj, name, ctx, out, present, e))
        return false;
    if (*present && *out < 1)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, name, "%s=%d must be at least 1", name,
                        (int)*out);
    return true;
}

/* An explicit count that must agree with a shape in q/k/v mode. */
static bool agree(const cJSON *obj, const char *name, int32_t from_shape, const char *shape_name,
                  const api_ctx *ctx, api_err *e)
{
    int32_t given;
    bool present;
    if (!opt_count(obj, name, ctx, &given, &present, e))
        return false;
    if (present && given != from_shape)
        return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, name, "%s=%d does not match %s=%d", name,
                        (int)given, shape_name, (int)from_shape);
    return true;
}

static bool parse_qkv(const cJSON *obj, const api_ctx *ctx, api_item *it, api_err *e)
{
    static const char *const layer_only[] = {"w_q", "w_k", "w_v", "w_o"};
    for (size_t i = 0; i < sizeof layer_only / sizeof layer_only[0]; i++)
        if (member(obj, layer_only[i]) != NULL)
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, layer_only[i],
                            "%s is a layer-mode input: send x with w_q, w_k, w_v, or q, k and v "
                            "without weights",
                            layer_only[i]);
    if (member(obj, "q") == NULL)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "q",
                        "q is required (or x with w_q, w_k, w_v for layer mode)");
    if (member(obj, "k") == NULL)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "k", "k is required with q");
    if (member(obj, "v") == NULL)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "v", "v is required with q");
    if (!api_get_tensor(member(obj, "q"), "q", ctx, 3, &it->q, e) ||
        !api_get_tensor(member(obj, "k"), "k", ctx, 3, &it->k, e) ||
        !api_get_tensor(member(obj, "v"), "v", ctx, 3, &it->v, e))
        return false;

    it->Lq = (int32_t)it->q.shape[0];
    it->H = (int32_t)it->q.shape[1];
    it->D = (int32_t)it->q.shape[2];
    it->Lk = (int32_t)it->k.shape[0];
    it->Hkv = (int32_t)it->k.shape[1];
    if (it->k.shape[2] != it->D)
        return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, "k.shape",
                        "k.shape[2]=%lld does not equal q.shape[2]=%d (head_dim)",
                        (long long)it->k.shape[2], (int)it->D);
    if (it->H % it->Hkv != 0)
        return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, "k.shape",
                        "k.shape[1]=%d does not divide num_heads=%d", (int)it->Hkv, (int)it->H);
    if (it->v.shape[0] != it->Lk)
        return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, "v.shape",
                        "v.shape[0]=%lld does not equal k.shape[0]=%d (keys)",
                        (long long)it->v.shape[0], (int)it->Lk);
    if (it->v.shape[1] != it->Hkv)
        return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, "v.shape",
                        "v.shape[1]=%lld does not equal k.shape[1]=%d (num_kv_heads)",
                        (long long)it->v.shape[1], (int)it->Hkv);
    it->Dv = (int32_t)it->v.shape[2];
    if (!agree(obj, "num_heads", it->H, "q.shape[1]", ctx, e) ||
        !agree(obj, "num_kv_heads", it->Hkv, "k.shape[1]", ctx, e) ||
        !agree(obj, "head_dim", it->D, "q.shape[2]", ctx, e))
        return false;

    it->att.num_heads = it->H;
    it->att.num_kv_heads = it->Hkv;
    it->att.head_dim = it->D;
    it->att.v_head_dim = it->Dv;
    it->att.q_len = it->Lq;
    it->att.k_len = it->Lk;
    it->att.q = it->q.data;
    it->att.k = it->k.data;
    it->att.v = it->v.data;
    it->out_ndim = 3;
    it->out_shape[0] = it->Lq;
    it->out_shape[1] = it->H;
    it->out_shape[2] = it->Dv;
    return true;
}

/* w.shape[0] must be d_model and w.shape[1] cols. */
static bool weight_shape(const srv_tensor *w, const char *name, int32_t d_model, int64_t cols,
                         const char *cols_text, const api_ctx *ctx, api_err *e)
{
    char rel[32];
    snprintf(rel, sizeof rel, "%s.shape", name);
    if (w->shape[0] != d_model)
        return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, rel,
                        "%s.shape[0]=%lld does not equal x.shape[1]=%d (d_model)", name,
                        (long long)w->shape[0], (int)d_model);
    if (cols >= 0 && w->shape[1] != cols)
        return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, rel,
                        "%s.shape[1]=%lld does not equal %s=%lld", name, (long long)w->shape[1],
                        cols_text, (long long)cols);
    return true;
}

static bool parse_layer(const cJSON *obj, const api_ctx *ctx, api_item *it, api_err *e)
{
    static const char *const qkv_only[] = {"q", "k", "v"};
    int32_t H, Hkv, D, d_model;
    bool has_hkv, has_d, has_h;
    char text[64];

    for (size_t i = 0; i < sizeof qkv_only / sizeof qkv_only[0]; i++)
        if (member(obj, qkv_only[i]) != NULL)
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, qkv_only[i],
                            "send either q, k and v, or x with w_q, w_k and w_v, not both");
    static const char *const needed[] = {"w_q", "w_k", "w_v"};
    for (size_t i = 0; i < sizeof needed / sizeof needed[0]; i++)
        if (member(obj, needed[i]) == NULL)
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, needed[i], "layer mode (x) needs %s",
                            needed[i]);
    if (!opt_count(obj, "num_heads", ctx, &H, &has_h, e))
        return false;
    if (!has_h)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "num_heads",
                        "layer mode (x) needs num_heads");
    if (!opt_count(obj, "num_kv_heads", ctx, &Hkv, &has_hkv, e) ||
        !opt_count(obj, "head_dim", ctx, &D, &has_d, e))
        return false;
    if (!has_hkv)
        Hkv = H;
    if (H % Hkv != 0)
        return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, "num_kv_heads",
                        "num_kv_heads=%d does not divide num_heads=%d", (int)Hkv, (int)H);

    if (!api_get_tensor(member(obj, "x"), "x", ctx, 2, &it->x, e) ||
        !api_get_tensor(member(obj, "w_q"), "w_q", ctx, 2, &it->w_q, e) ||
        !api_get_tensor(member(obj, "w_k"), "w_k", ctx, 2, &it->w_k, e) ||
        !api_get_tensor(member(obj, "w_v"), "w_v", ctx, 2, &it->w_v, e))
        return false;
    if (member(obj, "w_o") != NULL &&
        !api_get_tensor(member(obj, "w_o"), "w_o", ctx, 2, &it->w_o, e))
        return false;
    d_model = (int32_t)it->x.shape[1];

    if (!has_d) {
        if (it->w_q.shape[1] % H != 0)
            return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, "w_q.shape",
                            "w_q.shape[1]=%lld is not a multiple of num_heads=%d; set head_dim "
                            "or fix w_q",
                            (long long)it->w_q.shape[1], (int)H);
        D = (int32_t)(it->w_q.shape[1] / H);
    }
    snprintf(text, sizeof text, "num_heads*head_dim=%d*%d", (int)H, (int)D);
    if (!weight_shape(&it->w_q, "w_q", d_model, (int64_t)H * D, text, ctx, e))
        return false;
    snprintf(text, sizeof text, "num_kv_heads*head_dim=%d*%d", (int)Hkv, (int)D);
    if (!weight_shape(&it->w_k, "w_k", d_model, (int64_t)Hkv * D, text, ctx, e) ||
        !weight_shape(&it->w_v, "w_v", d_model, -1, NULL, ctx, e))
        return false;
    if (it->w_v.shape[1] % Hkv != 0)
        return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, "w_v.shape",
                        "w_v.shape[1]=%lld is not a multiple of num_kv_heads=%d",
                        (long long)it->w_v.shape[1], (int)Hkv);
    it->H = H;
    it->Hkv = Hkv;
    it->D = D;
    it->Dv = (int32_t)(it->w_v.shape[1] / Hkv);
    it->Lq = it->Lk = (int32_t)it->x.shape[0];
    if (it->w_o.data != NULL && it->w_o.shape[0] != (int64_t)H * it->Dv)
        return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, "w_o.shape",
                        "w_o.shape[0]=%lld does not equal num_heads*v_head_dim=%d*%d",
                        (long long)it->w_o.shape[0], (int)H, (int)it->Dv);

    it->att.num_heads = H;
    it->att.num_kv_heads = Hkv;
    it->att.head_dim = D;
    it->att.v_head_dim = it->Dv;
    it->att.x = it->x.data;
    it->att.seq_len = it->Lq;
    it->att.d_model = d_model;
    it->att.w_q = it->w_q.data;
    it->att.w_k = it->w_k.data;
    it->att.w_v = it->w_v.data;
    if (it->w_o.data != NULL) {
        it->att.w_o = it->w_o.data;
        it->att.d_out = (int32_t)it->w_o.shape[1];
        it->out_ndim = 2;
        it->out_shape[0] = it->Lq;
        it->out_shape[1] = it->att.d_out;
    } else {
        it->out_ndim = 3;
        it->out_shape[0] = it->Lq;
        it->out_shape[1] = H;
        it->out_shape[2] = it->Dv;
    }
    return true;
}

static bool parse_positions(const cJSON *obj, const char *name, int32_t want, const char *what,
                            const api_ctx *ctx, int32_t **out, api_err *e)
{
    const cJSON *v = member(obj, name);
    int32_t n = 0;
    if (v == NULL)
        return true;
    if (!api_get_int_array(v, name, ctx, out, &n, e))
        return false;
    if (n != want)
        return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, name, "%s has %d values but %s=%d", name,
                        (int)n, what, (int)want);
    return true;
}

static bool parse_masks(const cJSON *obj, const api_ctx *ctx, api_item *it, api_err *e)
{
    const cJSON *v;
    bool present;
    int32_t iv;

    if ((v = member(obj, "causal")) != NULL && !api_get_bool(v, "causal", ctx, &it->att.causal, e))
        return false;
    if (!opt_int(obj, "window", ctx, &iv, &present, e))
        return false;
    if (present)
        it->att.window = iv;
    if (!opt_int(obj, "key_length", ctx, &iv, &present, e))
        return false;
    if (present)
        it->att.key_length = iv;
    if ((v = member(obj, "scale")) != NULL) {
        double d;
        if (!api_get_number(v, "scale", ctx, &d, e))
            return false;
        it->att.scale_set = true;
        it->att.scale = (float)d;
    }
    bool layer = it->att.x != NULL;
    if (!parse_positions(obj, "q_positions", it->Lq, layer ? "x.shape[0]" : "q.shape[0]", ctx,
                         &it->q_positions, e) ||
        !parse_positions(obj, "k_positions", it->Lk, layer ? "x.shape[0]" : "k.shape[0]", ctx,
                         &it->k_positions, e))
        return false;
    it->att.q_positions = it->q_positions;
    it->att.k_positions = it->k_positions;
    return true;
}

bool api_item_parse(const cJSON *obj, const api_ctx *ctx, const char *const *extra, size_t n_extra,
                    api_item *out, api_err *e)
{
    const char *known[64];
    size_t n_known = 0;
    pa_error pe;

    memset(out, 0, sizeof *out);
    if (!cJSON_IsObject(obj))
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "",
                        "an attention item must be an object, found %s", api_json_type(obj));
    for (size_t i = 0; i < sizeof attention_fields / sizeof attention_fields[0]; i++)
        known[n_known++] = attention_fields[i];
    for (size_t i = 0; i < n_extra && n_known < sizeof known / sizeof known[0]; i++)
        known[n_known++] = extra[i];
    if (!api_check_fields(obj, known, n_known, "", "an attention item", ctx, e))
        return false;

    if (!api_scheme_parse(member(obj, "scheme"), ctx, &out->scheme, e))
        goto fail;
    pa_attention_init(&out->att, &out->scheme.s);
    if (member(obj, "x") != NULL) {
        if (!parse_layer(obj, ctx, out, e))
            goto fail;
    } else if (!parse_qkv(obj, ctx, out, e)) {
        goto fail;
    }
    if (!parse_masks(obj, ctx, out, e))
        goto fail;

    if (pa_attention_check(&out->att, &pe) != PA_STATUS_OK) {
        api_fail_pa(e, ctx, &pe);
        goto fail;
    }

    out->ret = API_RET_OUTPUT;
    out->input_bytes = out->scheme.bytes;
    {
        const srv_tensor *ts[] = {&out->q,   &out->k,   &out->v,   &out->x,
                                  &out->w_q, &out->w_k, &out->w_v, &out->w_o};
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
            out->input_bytes = api_add_sat(out->input_bytes, tensor_bytes(ts[i]));
    }
    if (out->q_positions != NULL)
        out->input_bytes = api_add_sat(out->input_bytes, (size_t)out->Lq * sizeof(int32_t));
    if (out->k_positions != NULL)
        out->input_bytes = api_add_sat(out->input_bytes, (size_t)out->Lk * sizeof(int32_t));
    return true;

fail:
    api_item_free(out);
    return false;
}

bool api_item_parse_return(const cJSON *v, const api_ctx *ctx, api_item *out, api_err *e)
{
    static const struct {
        const char *name;
        unsigned bit;
    } names[] = {{"output", API_RET_OUTPUT},
                 {"weights", API_RET_WEIGHTS},
                 {"logits", API_RET_LOGITS},
                 {"q_rot", API_RET_Q_ROT},
                 {"k_rot", API_RET_K_ROT}};
    const cJSON *it;
    int i = 0;

    if (v == NULL) {
        out->ret = API_RET_OUTPUT;
        return true;
    }
    if (!cJSON_IsArray(v))
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "return",
                        "return must be an array of names (output, weights, logits, q_rot, "
                        "k_rot), found %s",
                        api_json_type(v));
    out->ret = 0;
    cJSON_ArrayForEach(it, v)
    {
        char rel[32];
        size_t k = 0;
        snprintf(rel, sizeof rel, "return[%d]", i++);
        if (!cJSON_IsString(it))
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, rel, "%s must be a string, found %s",
                            rel, api_json_type(it));
        while (k < sizeof names / sizeof names[0] && strcmp(names[k].name, it->valuestring) != 0)
            k++;
        if (k == sizeof names / sizeof names[0])
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, rel,
                            "%s='%.32s' is not one of output, weights, logits, q_rot, k_rot", rel,
                            it->valuestring);
        out->ret |= names[k].bit;
    }
    return true;
}

bool api_check_learned_rows(const pa_learned *l, const int32_t *pos, int32_t n, const char *field,
                            const api_ctx *ctx, api_err *e)
{
    for (int32_t i = 0; i < n; i++) {
        int64_t row = (int64_t)pos[i] + l->offset;
        if (row < 0 || row >= l->rows) {
            char f[64];
            snprintf(f, sizeof f, "%s[%d]", field, (int)i);
            return api_fail(e, ctx, SRV_ERR_OUT_OF_RANGE, f,
                            "position %d + offset %d = row %lld is outside the learned table of "
                            "%d rows",
                            (int)pos[i], (int)l->offset, (long long)row, (int)l->rows);
        }
    }
    return true;
}

int32_t api_max_position(const int32_t *pos, int32_t n)
{
    int32_t m = 0;
    if (pos == NULL)
        return n > 0 ? n - 1 : 0;
    for (int32_t i = 0; i < n; i++)
        if (i == 0 || pos[i] > m)
            m = pos[i];
    return m;
}
