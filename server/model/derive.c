/* derive.c - the model types: one row per Hugging Face model_type naming
 * the config keys its attention reads, what every layer of a model shares
 * (its counts), and the model derived from a row and a config (model.h),
 * each layer by model/options.c. Adding a model type is a row here (and its
 * tests); the rules the rows pick from are in options.c, one function each.
 *
 * The counts are Hugging Face's modelling code's (transformers 4.5x and
 * 5.x), read per model: head_dim = config head_dim, else hidden / heads;
 * kv heads default to heads (Falcon: num_kv_heads with
 * new_decoder_architecture, 1 with multi_query).
 */
#include "model/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STD                                                                                        \
    .heads = "num_attention_heads", .kv_heads = "num_key_value_heads", .hidden = "hidden_size",    \
    .layers = "num_hidden_layers", .head_dim = "head_dim"
#define GPT_KEYS                                                                                   \
    .heads = "n_head|num_attention_heads", .hidden = "n_embd|hidden_size",                         \
    .layers = "n_layer|num_hidden_layers"
#define ROPE(layout_, mrope_)                                                                      \
    .pos = POS_ROPE,                                                                               \
    .rope = {layout_, "rope_theta", 10000.0, "partial_rotary_factor", 0, 1.0, mrope_}

static const model_row rows[] = {
    {.type = "llama", STD, ROPE("neox", 0)},
    {.type = "mistral", STD, ROPE("neox", 0), .win = WIN_ALL},
    {.type = "mixtral", STD, ROPE("neox", 0), .win = WIN_ALL},
    {.type = "qwen2", STD, ROPE("neox", 0), .win = WIN_QWEN2},
    {.type = "qwen2_moe", STD, ROPE("neox", 0), .win = WIN_QWEN2},
    {.type = "qwen3", STD, ROPE("neox", 0), .win = WIN_QWEN2, .norm = NORM_HEAD},
    {.type = "qwen3_moe", STD, ROPE("neox", 0), .win = WIN_QWEN2, .norm = NORM_HEAD},
    {.type = "qwen2_vl", STD, ROPE("neox", 1), .win = WIN_QWEN2},
    {.type = "qwen2_5_vl", STD, ROPE("neox", 1), .win = WIN_QWEN2},
    {.type = "qwen3_vl", STD, ROPE("neox", 2), .norm = NORM_HEAD},
    {.type = "gemma", STD, ROPE("neox", 0)},
    {.type = "gemma2",
     STD,
     ROPE("neox", 0),
     .scale = SCALE_PRE_ATTN,
     .softcap = "attn_logit_softcapping",
     .win = WIN_ALTERNATE},
    {.type = "gemma3_text",
     STD,
     ROPE("neox", 0),
     .scale = SCALE_PRE_ATTN,
     .softcap = "attn_logit_softcapping",
     .win = WIN_PATTERN,
     .norm = NORM_GEMMA},
    {.type = "gpt_oss", STD, ROPE("neox", 0), .win = WIN_ALTERNATE, .sinks = true},
    {.type = "llama4_text", STD, ROPE("gptj", 0), .win = WIN_LLAMA4, .norm = NORM_LLAMA4},
    {.type = "phi3", STD, ROPE("neox", 0), .win = WIN_ALL},
    {.type = "gpt2",
     GPT_KEYS,
     .pos = POS_LEARNED,
     .scale = SCALE_GPT2,
     .positions = "n_positions|max_position_embeddings"},
    {.type = "gptj",
     GPT_KEYS,
     .pos = POS_ROPE,
     .rope = {"gptj", NULL, 10000.0, "rotary_dim", 2, 0, 0}},
    {.type = "gpt_neox",
     .heads = "num_attention_heads",
     .hidden = "hidden_size",
     .layers = "num_hidden_layers",
     .pos = POS_ROPE,
     .rope = {"neox", "rotary_emb_base|rope_theta", 10000.0, "rotary_pct|partial_rotary_factor", 0,
              0.25, 0}},
    {.type = "opt",
     .heads = "num_attention_heads",
     .hidden = "hidden_size",
     .layers = "num_hidden_layers",
     .pos = POS_LEARNED,
     .offset = 2,
     .positions = "max_position_embeddings"},
    {.type = "bloom",
     .heads = "n_head|num_attention_heads",
     .hidden = "hidden_size|n_embed",
     .layers = "n_layer|num_hidden_layers",
     .pos = POS_ALIBI},
    {.type = "mpt",
     .heads = "n_heads",
     .hidden = "d_model",
     .layers = "n_layers",
     .pos = POS_MPT,
     .scale = SCALE_MPT},
    {.type = "falcon",
     .heads = "num_attention_heads|n_head",
     .hidden = "hidden_size",
     .layers = "num_hidden_layers|n_layer",
     .pos = POS_FALCON,
     .rope = {"neox", "rope_theta", 10000.0, NULL, 0, 1.0, 0}},
    {.type = "t5",
     .heads = "num_heads",
     .hidden = "d_model",
     .layers = "num_layers",
     .head_dim = "d_kv",
     .pos = POS_T5,
     .scale = SCALE_ONE,
     .enc_dec = true},
    {.type = "bert",
     .heads = "num_attention_heads",
     .hidden = "hidden_size",
     .layers = "num_hidden_layers",
     .pos = POS_BERT,
     .encoder = true,
     .positions = "max_position_embeddings"},
    {.type = "olmo2", STD, ROPE("neox", 0), .norm = NORM_PROJ},
    {.type = "cohere", STD, ROPE("gptj", 0), .norm = NORM_COHERE},
    {.type = "starcoder2", STD, ROPE("neox", 0), .win = WIN_ALL},
    {.type = "granite", STD, ROPE("neox", 0), .scale = SCALE_MULTIPLIER},
    /* DeepSeek's MLA (mla_dims below, mla_option in options.c): kv heads are the heads */
    {.type = "deepseek_v2",
     .heads = "num_attention_heads",
     .hidden = "hidden_size",
     .layers = "num_hidden_layers",
     ROPE("gptj", 0),
     .mla = 2},
    {.type = "deepseek_v3",
     .heads = "num_attention_heads",
     .hidden = "hidden_size",
     .layers = "num_hidden_layers",
     ROPE("gptj", 0),
     .mla = 3},
    {.type = "diffllama", STD, ROPE("neox", 0), .diff = true},
};

/* Multimodal or composite configs whose attention is their text_config's:
 * the outer model_type, and the row of its text model. */
static const struct {
    const char *outer, *inner;
} wrappers[] = {
    {"gemma3", "gemma3_text"},    {"llama4", "llama4_text"}, {"qwen2_vl", "qwen2_vl"},
    {"qwen2_5_vl", "qwen2_5_vl"}, {"qwen3_vl", "qwen3_vl"},
};
/* Names a text_config may carry for a row's model. */
static const struct {
    const char *alias, *type;
} aliases[] = {
    {"qwen2_vl_text", "qwen2_vl"},
    {"qwen2_5_vl_text", "qwen2_5_vl"},
    {"qwen3_vl_text", "qwen3_vl"},
};

#undef STD
#undef GPT_KEYS
#undef ROPE

const char *const *srv_model_types(size_t *n)
{
    static const char *names[sizeof rows / sizeof rows[0]];
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        names[i] = rows[i].type;
    *n = sizeof rows / sizeof rows[0];
    return names;
}

static const model_row *find_row(const char *type)
{
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (strcmp(aliases[i].alias, type) == 0)
            type = aliases[i].type;
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        if (strcmp(rows[i].type, type) == 0)
            return &rows[i];
    return NULL;
}

/* ------------------------------------------------------------------------- */
/* What every layer shares                                                   */
/* ------------------------------------------------------------------------- */

/* DeepSeek's multi-head latent attention (Hugging Face DeepseekV2Attention,
 * DeepseekV3Attention): q's heads are qk_nope_head_dim + qk_rope_head_dim
 * wide (the config's head_dim, which HF sets to qk_rope_head_dim, is the
 * rope's width), k is k_nope [L, H, qk_nope_head_dim] with one k_rope
 * [L, qk_rope_head_dim] for every head, and v is v_head_dim wide (its
 * shape says so). kv_b_proj gives every head its own k_nope and v, so the
 * kv heads are the heads whatever num_key_value_heads says. */
static bool mla_dims(const cfg_ctx *d, common *c, int64_t *D)
{
    int64_t dn, dr;
    srv_model_source ns;
    if (!cfg_int(d, "qk_nope_head_dim", 1, 65536, false, 128, &dn, &ns) ||
        !cfg_int(d, "qk_rope_head_dim", 2, 65536, false, 64, &dr, &c->rope_dim_src))
        return false;
    if (dr % 2 != 0)
        return cfg_fail(d, "qk_rope_head_dim",
                        "config \"%sqk_rope_head_dim\": %lld must be even (RoPE rotates pairs)",
                        d->prefix, (long long)dr);
    if (c->rope_dim_src.key[0] == '\0')
        cfg_source(&c->rope_dim_src, NULL, "qk_rope_head_dim", "64 (the default)");
    *D = dn + dr;
    c->rope_dim = (int32_t)dr;
    snprintf(c->dim.key, sizeof c->dim.key, "%sqk_nope_head_dim + qk_rope_head_dim", d->prefix);
    snprintf(c->dim.value, sizeof c->dim.value, "%lld + %lld", (long long)dn, (long long)dr);
    return true;
}

static bool counts(const cfg_ctx *d, common *c)
{
    const model_row *row = c->row;
    int64_t H, Hkv, D, hidden, L;
    srv_model_source hs;
    if (!cfg_int(d, row->heads, 1, 65536, true, 0, &H, &c->heads) ||
        !cfg_int(d, row->hidden, 1, 1 << 24, true, 0, &hidden, &hs) ||
        !cfg_int(d, row->layers, 1, SRV_MODEL_MAX_LAYERS, true, 0, &L, NULL))
        return false;
    D = 0;
    if (row->head_dim != NULL && !cfg_int(d, row->head_dim, 1, 65536, false, 0, &D, &c->dim))
        return false;
    if (row->mla != 0 && !mla_dims(d, c, &D))
        return false;
    if (D == 0) {
        if (hidden % H != 0)
            return cfg_fail(d, hs.key + strlen(d->prefix),
                            "config \"%s\": %s is not a multiple of \"%s\": %s, so the head "
                            "dim is not defined",
                            hs.key, hs.value, c->heads.key, c->heads.value);
        D = hidden / H;
        snprintf(c->dim.key, sizeof c->dim.key, "%.40s / %.40s", hs.key, c->heads.key);
        snprintf(c->dim.value, sizeof c->dim.value, "%lld", (long long)D);
    }
    if (row->pos == POS_FALCON) {
        bool nda, mq;
        if (!cfg_bool(d, "new_decoder_architecture", false, &nda, NULL) ||
            !cfg_bool(d, "multi_query", true, &mq, &c->kv))
            return false;
        if (nda) {
            if (!cfg_int(d, "num_kv_heads", 1, H, false, H, &Hkv, &c->kv))
                return false;
        } else {
            Hkv = mq ? 1 : H;
        }
    } else if (row->kv_heads != NULL) {
        if (!cfg_int(d, row->kv_heads, 1, H, false, H, &Hkv, &c->kv))
            return false;
    } else {
        Hkv = H;
        c->kv = c->heads;
    }
    /* DiffLlama splits q's heads in two halves (torch.chunk(..., 2, dim=1)). */
    if (row->diff && H % 2 != 0)
        return cfg_fail(d, c->heads.key + strlen(d->prefix),
                        "config \"%s\": %s must be even: DiffLlama pairs query head h with "
                        "head h + %s/2",
                        c->heads.key, c->heads.value, c->heads.key);
    if (H % Hkv != 0)
        return cfg_fail(d, c->kv.key + strlen(d->prefix),
                        "config \"%s\": %s does not divide \"%s\": %s", c->kv.key, c->kv.value,
                        c->heads.key, c->heads.value);
    c->H = (int32_t)H, c->Hkv = (int32_t)Hkv, c->D = (int32_t)D;
    c->d_model = (int32_t)hidden, c->n_layers = (int32_t)L;
    if (row->enc_dec) {
        int64_t Ld;
        if (!cfg_int(d, "num_decoder_layers", 1, SRV_MODEL_MAX_LAYERS, false, L, &Ld, NULL))
            return false;
        c->n_decoder = (int32_t)Ld;
    }
    return true;
}

/* ------------------------------------------------------------------------- */
/* A model                                                                   */
/* ------------------------------------------------------------------------- */

void srv_model_free(srv_model *m)
{
    if (m == NULL)
        return;
    for (int32_t i = 0; m->layers != NULL && i < srv_model_total_layers(m); i++) {
        cJSON_Delete(m->layers[i].options);
        cJSON_Delete(m->layers[i].defaults);
    }
    free(m->layers);
    free(m);
}

bool srv_model_derive(const cJSON *config, const char *name, srv_model **out, srv_model_err *e)
{
    cfg_ctx d = {config, NULL, "", e};
    common c;
    const cJSON *mt;
    srv_model *m = NULL;

    memset(e, 0, sizeof *e);
    memset(&c, 0, sizeof c);
    if (!cJSON_IsObject(config))
        return cfg_fail(&d, "", "a model config must be a JSON object (a config.json)");
    mt = cfg_member(config, "model_type");
    if (!cJSON_IsString(mt))
        return cfg_fail(&d, "model_type",
                        "config key \"model_type\" is required (a string such as \"llama\")");
    const char *type = mt->valuestring;
    for (size_t i = 0; i < sizeof wrappers / sizeof wrappers[0]; i++)
        if (strcmp(wrappers[i].outer, type) == 0 &&
            cJSON_IsObject(cfg_member(config, "text_config"))) {
            const cJSON *inner = cfg_member(cfg_member(config, "text_config"), "model_type");
            d.outer = config;
            d.cfg = cfg_member(config, "text_config");
            d.prefix = "text_config.";
            type = cJSON_IsString(inner) ? inner->valuestring : wrappers[i].inner;
            break;
        }
    if ((c.row = find_row(type)) == NULL) {
        char list[512];
        size_t at = 0, n;
        const char *const *names = srv_model_types(&n);
        for (size_t i = 0; i < n && at < sizeof list; i++)
            at += (size_t)snprintf(list + at, sizeof list - at, "%s%s", i ? ", " : "", names[i]);
        return cfg_fail(&d, "model_type",
                        "config \"%smodel_type\": \"%.40s\" is not a model type posattn knows "
                        "(%s)",
                        d.prefix, type, list);
    }
    cfg_source(&c.type, NULL,
               d.cfg != config && cfg_member(d.cfg, "model_type") != NULL ? "text_config.model_type"
                                                                          : "model_type",
               "");
    snprintf(c.type.value, sizeof c.type.value, "\"%.40s\"", type);
    if (!counts(&d, &c) || !model_read_layer_types(&d, &c))
        return false;

    vision_tower vt;
    if ((m = calloc(1, sizeof *m)) == NULL)
        return cfg_fail(&d, "", "out of memory");
    if (!model_vision_read(config, mt->valuestring, m, &vt, e)) {
        free(m);
        return false;
    }
    if ((m->layers = calloc((size_t)(c.n_layers + c.n_decoder + vt.n_layers), sizeof *m->layers)) ==
        NULL) {
        free(m);
        return cfg_fail(&d, "", "out of memory");
    }
    snprintf(m->name, sizeof m->name, "%s", name != NULL ? name : "");
    snprintf(m->model_type, sizeof m->model_type, "%s", c.row->type);
    m->encoder_decoder = c.row->enc_dec;
    m->n_layers = c.n_layers;
    m->n_decoder = c.n_decoder;
    if (c.row->pos == POS_LEARNED || (c.row->pos == POS_BERT && m->layers != NULL))
        snprintf(m->note, sizeof m->note,
                 "positions enter at the embedding: layer 0's scheme adds the learned table to "
                 "x (the token embeddings) before the projections, without the model's layer "
                 "norm; later layers take position from their input");
    for (int32_t i = 0; i < c.n_layers + c.n_decoder; i++) {
        bool dec = i >= c.n_layers;
        const char *stack = c.row->enc_dec ? (dec ? "decoder" : "encoder") : NULL;
        if (!model_derive_layer(&d, &c, stack != NULL ? stack : "", dec ? i - c.n_layers : i,
                                &m->layers[i])) {
            srv_model_free(m);
            return false;
        }
        m->layers[i].stack = stack;
    }
    /* The vision tower's layers, after the text model's. */
    for (int32_t i = 0; i < vt.n_layers; i++) {
        m->n_vision = i + 1; /* so that srv_model_free frees this layer too */
        if (!model_vision_layer(&vt, i, &m->layers[c.n_layers + c.n_decoder + i], e)) {
            srv_model_free(m);
            return false;
        }
    }
    if (c.row->pos == POS_BERT && m->layers[0].n_needs > 0 &&
        strcmp(m->layers[0].needs[0].field, "scheme.rel_k") == 0)
        m->note[0] = '\0';
    *out = m;
    return true;
}

int32_t srv_model_total_layers(const srv_model *m)
{
    return m->n_layers + m->n_decoder + m->n_vision;
}

const srv_model_layer *srv_model_layer_at(const srv_model *m, const char *stack, int32_t layer)
{
    bool dec = stack != NULL && strcmp(stack, "decoder") == 0;
    bool vis = stack != NULL && strcmp(stack, "vision") == 0;
    if (m == NULL || layer < 0 || (dec && !m->encoder_decoder))
        return NULL;
    if (vis)
        return layer < m->n_vision ? &m->layers[m->n_layers + m->n_decoder + layer] : NULL;
    if (layer >= (dec ? m->n_decoder : m->n_layers))
        return NULL;
    return &m->layers[(dec ? m->n_layers : 0) + layer];
}

const srv_model_source *srv_model_source_of(const srv_model_layer *l, const char *option)
{
    for (size_t i = 0; i < l->n_sources; i++)
        if (strcmp(l->sources[i].option, option) == 0)
            return &l->sources[i];
    return NULL;
}
