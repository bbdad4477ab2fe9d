/* options.c - one layer's attention, from its model's row (model/derive.c)
 * and config: the /v1/attention item options the config decides (scheme,
 * scale, softcap, window or chunk_size, q/k norms, differential, mla) and
 * the causal default, each with the config key that decides it, and the
 * tensors the layer needs. The rules the rows pick from, one function each.
 *
 * The semantics are Hugging Face's modelling code (transformers 4.5x and
 * 5.x), read per model:
 *   scale     head_dim^-0.5; Gemma 2/3 query_pre_attn_scalar^-0.5; Granite
 *             attention_multiplier; T5 1; GPT-2 1/sqrt(head_dim) (or 1
 *             without scale_attn_weights), / (layer + 1) with
 *             scale_attn_by_inverse_layer_idx; MPT attn_config.softmax_scale
 *   windows   layer_types when the config has it, else the model's rule:
 *             Mistral, Mixtral, Phi-3, Starcoder2 sliding_window on every
 *             layer; Qwen2 family with use_sliding_window from
 *             max_window_layers on; Gemma 2, gpt-oss on even layers; Gemma 3
 *             all but every sliding_window_pattern-th; Llama 4
 *             attention_chunk_size on its RoPE layers
 *   norms     Qwen3 RMSNorm of each head (rms_norm_eps), Gemma 3 the same
 *             with Gemma's 1 + weight, OLMo 2 over the whole projection,
 *             Llama 4 the weightless L2Norm on its RoPE layers
 *   position  RoPE (rope.c), ALiBi (BLOOM: Press slopes; MPT: its own order
 *             for head counts that are not powers of two; Falcon: Press
 *             slopes / sqrt(head_dim), since it scales the bias with the
 *             logits), learned (GPT-2, OPT offset 2, BERT absolute) on layer
 *             0, T5 buckets, BERT relative_key(_query) as Shaw's tables
 */
#include "model/internal.h"

#include "posattn_diff.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Press et al.'s slope of head h of H (BLOOM's build_alibi_tensor). */
static double press_slope(int32_t h, int32_t H)
{
    int32_t n = 1;
    while (n * 2 <= H)
        n *= 2;
    if (h < n)
        return pow(2.0, -8.0 * (h + 1) / n);
    return pow(2.0, -4.0 * (2 * (h - n) + 1) / n);
}

static bool alibi_scheme(const cfg_ctx *d, const common *c, cJSON *scheme, srv_model_source *src)
{
    const model_row *row = c->row;
    bool ok = cJSON_AddStringToObject(scheme, "type", "alibi") != NULL;
    cJSON *slopes = NULL;
    if (row->pos == POS_ALIBI) {
        cfg_source(src, NULL, "model_type", "\"bloom\"");
        return ok && cJSON_AddNumberToObject(scheme, "max_bias", 8) != NULL;
    }
    if (row->pos == POS_FALCON) { /* (q.k + alibi) / sqrt(D): the slopes scale too */
        cfg_find(d, "alibi", src);
        ok = ok && (slopes = cJSON_AddArrayToObject(scheme, "slopes")) != NULL;
        for (int32_t h = 0; ok && h < c->H; h++)
            ok =
                cJSON_AddItemToArray(slopes, cJSON_CreateNumber(press_slope(h, c->H) / sqrt(c->D)));
        return ok;
    }
    /* MPT: 2^-(max_bias (i+1) / H2) for H2 = 2^ceil(log2 H), reordered odd
     * then even when H is not a power of two. */
    cfg_ctx ac = *d;
    char prefix[SRV_MODEL_KEY_MAX];
    double max_bias;
    snprintf(prefix, sizeof prefix, "%sattn_config.", d->prefix);
    ac.cfg = cfg_member(d->cfg, "attn_config");
    ac.outer = NULL;
    ac.prefix = prefix;
    if (!cfg_num(&ac, "alibi_bias_max", false, 8, &max_bias, src))
        return false;
    int32_t H2 = 1;
    while (H2 < c->H)
        H2 *= 2;
    ok = ok && cJSON_AddNumberToObject(scheme, "max_bias", max_bias) != NULL;
    if (H2 != c->H) {
        ok = ok && (slopes = cJSON_AddArrayToObject(scheme, "slopes")) != NULL;
        for (int32_t i = 0; ok && i < c->H; i++) {
            int32_t j = i < H2 / 2 ? 2 * i + 1 : 2 * (i - H2 / 2);
            ok = cJSON_AddItemToArray(slopes,
                                      cJSON_CreateNumber(1.0 / pow(2.0, (j + 1) * max_bias / H2)));
        }
    }
    return ok;
}

static bool derive_scale(const cfg_ctx *d, const common *c, int32_t l, double *scale,
                         srv_model_source *src)
{
    double x;
    bool b;
    *scale = 1.0 / sqrt((double)c->D);
    *src = c->dim;
    switch (c->row->scale) {
    case SCALE_HEAD_DIM:
        return true;
    case SCALE_PRE_ATTN:
        if (!cfg_num(d, "query_pre_attn_scalar", false, 256, &x, src))
            return false;
        if (!(x > 0))
            return cfg_fail(d, "query_pre_attn_scalar",
                            "config \"%squery_pre_attn_scalar\": %.17g must be positive", d->prefix,
                            x);
        *scale = 1.0 / sqrt(x);
        return true;
    case SCALE_MULTIPLIER:
        return cfg_num(d, "attention_multiplier", false, 1.0, scale, src);
    case SCALE_ONE:
        *scale = 1.0;
        cfg_source(src, NULL, "model_type", "\"t5\" (T5 does not scale logits)");
        return true;
    case SCALE_GPT2:
        if (!cfg_bool(d, "scale_attn_weights", true, &b, src))
            return false;
        if (!b)
            *scale = 1.0;
        if (!cfg_bool(d, "scale_attn_by_inverse_layer_idx", false, &b, NULL))
            return false;
        if (b) {
            *scale /= (double)(l + 1);
            cfg_find(d, "scale_attn_by_inverse_layer_idx", src);
        }
        return true;
    case SCALE_MPT: {
        cfg_ctx ac = *d;
        char prefix[SRV_MODEL_KEY_MAX];
        snprintf(prefix, sizeof prefix, "%sattn_config.", d->prefix);
        ac.cfg = cfg_member(d->cfg, "attn_config");
        ac.outer = NULL;
        ac.prefix = prefix;
        if (cfg_find(&ac, "softmax_scale", NULL) != NULL)
            return cfg_num(&ac, "softmax_scale", true, 0, scale, src);
        return true;
    }
    }
    return true;
}

/* Adds a q or k norm object and its weight's need. */
static bool add_norm(srv_model_layer *L, const char *name, double eps, bool weight,
                     int64_t weight_len, bool gemma, const srv_model_source *src, const char *what)
{
    cJSON *o = cJSON_AddObjectToObject(L->options, name);
    if (o == NULL || cJSON_AddNumberToObject(o, "eps", eps) == NULL ||
        (gemma && cJSON_AddNumberToObject(o, "weight_offset", 1) == NULL))
        return false;
    model_add_source(L, name, src);
    if (weight) {
        char field[32];
        snprintf(field, sizeof field, "%s.weight", name);
        model_add_need(L, field, 1, weight_len, 0, what, src);
    }
    return true;
}

/* Learned absolute positions: layer 0 adds the table to x; the later
 * layers see positions only through their input. */
static bool learned_scheme(const cfg_ctx *d, const common *c, int32_t l, cJSON *scheme,
                           srv_model_layer *L)
{
    srv_model_source s;
    if (l > 0) {
        cfg_source(&s, NULL, "model_type", "(positions entered at the embedding)");
        model_add_source(L, "scheme", &s);
        return cJSON_AddStringToObject(scheme, "type", "none") != NULL;
    }
    int64_t P;
    const char *keys = c->row->positions != NULL ? c->row->positions : "max_position_embeddings";
    if (!cfg_int(d, keys, 1, 1 << 24, false, 512, &P, &s))
        return false;
    model_add_source(L, "scheme", &s);
    model_add_need(L, "scheme.table", 2, P + c->row->offset, c->d_model,
                   "learned position embeddings (added to x)", &s);
    return cJSON_AddStringToObject(scheme, "type", "learned") != NULL &&
           cJSON_AddNumberToObject(scheme, "offset", c->row->offset) != NULL;
}

/* A DeepSeek layer's item option mla {"rope_dim": qk_rope_head_dim} (the
 * expanded form; an item adds absorbed, w_uk, w_uv member by member), and
 * its rope's layout: the checkpoints pair neighbouring dims (V2's complex
 * product; V3's rope_interleave, default true, else rotate_half). */
static bool mla_option(const cfg_ctx *d, const common *c, srv_model_layer *L, cJSON *scheme)
{
    cJSON *m;
    bool inter = true;
    srv_model_source s;
    if (c->row->mla == 3 && !cfg_bool(d, "rope_interleave", true, &inter, &s))
        return false;
    if (!inter &&
        !cJSON_ReplaceItemInObjectCaseSensitive(scheme, "layout", cJSON_CreateString("neox")))
        return cfg_fail(d, "", "out of memory");
    if ((m = cJSON_AddObjectToObject(L->options, "mla")) == NULL ||
        cJSON_AddNumberToObject(m, "rope_dim", c->rope_dim) == NULL)
        return cfg_fail(d, "", "out of memory");
    model_add_source(L, "mla", &c->rope_dim_src);
    return true;
}

/* DiffLlama (modeling_diffllama.py, DiffLlamaAttention): the halves layout
 * (query head h against head h + H/2, v chunked in two halves of heads),
 * lambda_init = lambda_init_fn(layer_idx) of the 0-based layer index, and
 * the group norm nn.RMSNorm(2 head_dim, eps=rms_norm_eps,
 * elementwise_affine=False). lambda_q1..lambda_k2 are the layer's
 * parameters ([head_dim] each), which only the checkpoint holds;
 * lambda_std_dev only initialises them. */
static bool diff_option(const cfg_ctx *d, const common *c, int32_t l, srv_model_layer *L)
{
    static const char *const vecs[] = {"lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2"};
    srv_model_source es, is;
    double eps;
    cJSON *o;
    if (!cfg_num(d, "rms_norm_eps", false, 1e-5, &eps, &es))
        return false;
    if (!(eps > 0))
        return cfg_fail(d, "rms_norm_eps", "config \"%srms_norm_eps\": %.17g must be positive",
                        d->prefix, eps);
    if ((o = cJSON_AddObjectToObject(L->options, "differential")) == NULL ||
        cJSON_AddStringToObject(o, "pairs", "halves") == NULL ||
        cJSON_AddNumberToObject(o, "lambda_init", pa_diff_lambda_init(l)) == NULL ||
        cJSON_AddTrueToObject(o, "subln") == NULL ||
        cJSON_AddNumberToObject(o, "subln_eps", eps) == NULL)
        return cfg_fail(d, "", "out of memory");
    is = c->type;
    snprintf(is.value, sizeof is.value, "\"%s\", layer %d: 0.8 - 0.6 exp(-0.3 * %d)", c->row->type,
             (int)l, (int)l);
    model_add_source(L, "differential", &c->type);
    model_add_source(L, "differential.lambda_init", &is);
    model_add_source(L, "differential.subln_eps", &es);
    for (size_t i = 0; i < sizeof vecs / sizeof vecs[0]; i++) {
        char field[32], what[96];
        snprintf(field, sizeof field, "differential.%s", vecs[i]);
        snprintf(what, sizeof what, "differential attention's %s (the layer's self_attn.%s)",
                 vecs[i], vecs[i]);
        model_add_need(L, field, 1, c->D, 0, what, &c->type);
    }
    return true;
}

bool model_derive_layer(const cfg_ctx *d, const common *c, const char *stack, int32_t l,
                        srv_model_layer *L)
{
    const model_row *row = c->row;
    srv_model_source s;
    bool ok = true, rope_layer = row->pos == POS_ROPE;
    double x;

    L->layer = l;
    L->stack = stack;
    L->num_heads = c->H, L->num_kv_heads = c->Hkv, L->head_dim = c->D, L->d_model = c->d_model;
    L->heads = c->heads, L->kv_heads = c->kv, L->dim = c->dim;
    if ((L->options = cJSON_CreateObject()) == NULL || (L->defaults = cJSON_CreateObject()) == NULL)
        return cfg_fail(d, "", "out of memory");

    srv_model_source rope_src = {0};
    if (row->win == WIN_LLAMA4 && !model_llama4_rope(d, c, l, &rope_layer, &rope_src))
        return false;
    if (!model_layer_kind(d, c, l, rope_layer, &L->kind, &s))
        return false;

    /* The scheme */
    cJSON *scheme = cJSON_AddObjectToObject(L->options, "scheme");
    if (scheme == NULL)
        return cfg_fail(d, "", "out of memory");
    bool falcon_alibi = false;
    if (row->pos == POS_FALCON && !cfg_bool(d, "alibi", false, &falcon_alibi, NULL))
        return false;
    bool mpt_alibi = false;
    if (row->pos == POS_MPT) {
        const cJSON *ac = cfg_member(d->cfg, "attn_config");
        const cJSON *v = cfg_member(ac, "alibi");
        static const char *const refused[] = {"clip_qkv", "prefix_lm", "attn_uses_sequence_id"};
        mpt_alibi = v != NULL && cJSON_IsTrue(v);
        for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
            v = cfg_member(ac, refused[i]);
            if (v != NULL && !cJSON_IsFalse(v)) {
                char key[64], text[SRV_MODEL_VALUE_MAX];
                snprintf(key, sizeof key, "attn_config.%s", refused[i]);
                cfg_value_text(v, text, sizeof text);
                return cfg_fail(d, key,
                                "config \"%s%s\": %s changes MPT's attention in a way posattn "
                                "does not compute",
                                d->prefix, key, text);
            }
        }
        v = cfg_member(ac, "attn_type");
        if (v != NULL && !(cJSON_IsString(v) && strcmp(v->valuestring, "multihead_attention") == 0))
            return cfg_fail(d, "attn_config.attn_type",
                            "config \"%sattn_config.attn_type\" must be \"multihead_attention\" "
                            "(Hugging Face's MPT computes only that)",
                            d->prefix);
    }
    if ((row->pos == POS_ROPE && rope_layer) || (row->pos == POS_FALCON && !falcon_alibi)) {
        bool local =
            strcmp(row->type, "gemma3_text") == 0 && strcmp(L->kind, "sliding_attention") == 0;
        if (!model_rope_scheme(d, &row->rope, row->mla != 0 ? c->rope_dim : c->D, L->kind, local,
                               scheme, &s))
            return false;
        model_add_source(L, "scheme", &s);
        if (row->mla != 0 && !mla_option(d, c, L, scheme))
            return false;
    } else if (row->pos == POS_ALIBI || falcon_alibi || mpt_alibi) {
        if (!alibi_scheme(d, c, scheme, &s))
            return d->e->message[0] != '\0' ? false : cfg_fail(d, "", "out of memory");
        model_add_source(L, "scheme", &s);
    } else if (row->pos == POS_T5) {
        int64_t nb, md;
        srv_model_source nbs;
        if (!cfg_int(d, "relative_attention_num_buckets", 2, 1 << 16, false, 32, &nb, &nbs) ||
            !cfg_int(d, "relative_attention_max_distance", 1, 1 << 30, false, 128, &md, NULL))
            return false;
        bool enc = strcmp(stack, "encoder") == 0;
        ok = cJSON_AddStringToObject(scheme, "type", "t5") &&
             cJSON_AddNumberToObject(scheme, "num_buckets", (double)nb) &&
             cJSON_AddNumberToObject(scheme, "max_distance", (double)md) &&
             cJSON_AddBoolToObject(scheme, "bidirectional", enc);
        model_add_source(L, "scheme", &nbs);
        model_add_need(L, "scheme.table", 2, nb, c->H,
                       "a relative attention bias (block 0's table, shared by the stack)", &nbs);
    } else if (row->pos == POS_BERT) {
        const cJSON *pt = cfg_find(d, "position_embedding_type", &s);
        const char *t = pt != NULL && cJSON_IsString(pt) ? pt->valuestring : "absolute";
        int64_t P;
        srv_model_source ps;
        if (!cfg_int(d, "max_position_embeddings", 1, 1 << 24, false, 512, &P, &ps))
            return false;
        if (pt != NULL && !cJSON_IsString(pt))
            return cfg_fail(d, "position_embedding_type",
                            "config \"%sposition_embedding_type\" must be a string", d->prefix);
        if (strcmp(t, "absolute") == 0) {
            ok = learned_scheme(d, c, l, scheme, L);
        } else if (strcmp(t, "relative_key") == 0 || strcmp(t, "relative_key_query") == 0) {
            ok = cJSON_AddStringToObject(scheme, "type", "shaw") &&
                 cJSON_AddNumberToObject(scheme, "max_relative_position", (double)(P - 1)) &&
                 cJSON_AddStringToObject(scheme, "direction", "query_minus_key") &&
                 cJSON_AddBoolToObject(scheme, "key_term", strcmp(t, "relative_key_query") == 0);
            model_add_source(L, "scheme", &s);
            model_add_need(L, "scheme.rel_k", 2, 2 * P - 1, c->D,
                           "relative position embeddings (the layer's distance_embedding)", &s);
        } else {
            return cfg_fail(d, "position_embedding_type",
                            "config \"%sposition_embedding_type\": \"%.40s\" is not one of "
                            "absolute, relative_key, relative_key_query",
                            d->prefix, t);
        }
    } else if (row->pos == POS_LEARNED) {
        ok = learned_scheme(d, c, l, scheme, L);
    } else { /* NoPE: Llama 4's layers without RoPE, MPT without ALiBi */
        ok = cJSON_AddStringToObject(scheme, "type", "none") != NULL;
        if (rope_src.key[0] == '\0')
            cfg_source(&rope_src, NULL, "model_type", "(no position encoding)");
        model_add_source(L, "scheme", &rope_src);
    }
    if (!ok)
        return d->e->message[0] != '\0' ? false : cfg_fail(d, "", "out of memory");

    /* Scale and softcap. DeepSeek-V3's is the MLA call's default (HF's:
     * head_dim^-0.5 times yarn's mscale(factor, mscale_all_dim)^2); HF's
     * DeepSeek-V2 takes head_dim^-0.5 alone. */
    if (!derive_scale(d, c, l, &x, &s))
        return false;
    if (row->mla != 3 && cJSON_AddNumberToObject(L->options, "scale", x) == NULL)
        return cfg_fail(d, "", "out of memory");
    if (row->mla != 3)
        model_add_source(L, "scale", &s);
    if (row->softcap != NULL && cfg_find(d, row->softcap, &s) != NULL) {
        if (!cfg_num(d, row->softcap, true, 0, &x, NULL))
            return false;
        if (x > 0) {
            if (cJSON_AddNumberToObject(L->options, "softcap", x) == NULL)
                return cfg_fail(d, "", "out of memory");
            model_add_source(L, "softcap", &s);
        }
    }

    /* Window or chunk */
    if (strcmp(L->kind, "sliding_attention") == 0) {
        const cJSON *w = cfg_find(d, "sliding_window", &s);
        bool used = true;
        int64_t W;
        if (row->win == WIN_QWEN2 && !cfg_bool(d, "use_sliding_window", false, &used, NULL))
            return false;
        if (w != NULL && used) {
            if (!cfg_int(d, "sliding_window", 1, INT32_MAX, true, 0, &W, &s))
                return false;
            if (cJSON_AddNumberToObject(L->options, "window", (double)W) == NULL)
                return cfg_fail(d, "", "out of memory");
            model_add_source(L, "window", &s);
        }
    } else if (strcmp(L->kind, "chunked_attention") == 0 &&
               cfg_find(d, "attention_chunk_size", NULL) != NULL) {
        int64_t C;
        if (!cfg_int(d, "attention_chunk_size", 1, INT32_MAX, true, 0, &C, &s))
            return false;
        if (cJSON_AddNumberToObject(L->options, "chunk_size", (double)C) == NULL)
            return cfg_fail(d, "", "out of memory");
        model_add_source(L, "chunk_size", &s);
    }

    /* Norms */
    double eps;
    srv_model_source es;
    switch (row->norm) {
    case NORM_NONE:
        break;
    case NORM_COHERE: {
        bool qk;
        if (!cfg_bool(d, "use_qk_norm", false, &qk, NULL))
            return false;
        if (qk)
            return cfg_fail(d, "use_qk_norm",
                            "config \"%suse_qk_norm\": true is Cohere's LayerNorm of q and k, "
                            "which posattn does not compute (its norms are RMSNorm)",
                            d->prefix);
        break;
    }
    case NORM_HEAD:
    case NORM_GEMMA:
        if (!cfg_num(d, "rms_norm_eps", false, 1e-6, &eps, &es) ||
            !add_norm(L, "q_norm", eps, true, c->D, row->norm == NORM_GEMMA, &es,
                      "a q norm (RMSNorm over each head)") ||
            !add_norm(L, "k_norm", eps, true, c->D, row->norm == NORM_GEMMA, &es,
                      "a k norm (RMSNorm over each head)"))
            return cfg_fail(d, "rms_norm_eps", "out of memory");
        break;
    case NORM_PROJ:
        if (!cfg_num(d, "rms_norm_eps", false, 1e-6, &eps, &es) ||
            !add_norm(L, "q_norm", eps, true, (int64_t)c->H * c->D, false, &es,
                      "a q norm (RMSNorm over the whole projection)") ||
            !add_norm(L, "k_norm", eps, true, (int64_t)c->Hkv * c->D, false, &es,
                      "a k norm (RMSNorm over the whole projection)"))
            return cfg_fail(d, "rms_norm_eps", "out of memory");
        break;
    case NORM_LLAMA4: {
        bool qk, tune;
        if (!cfg_bool(d, "use_qk_norm", true, &qk, &s) ||
            !cfg_bool(d, "attn_temperature_tuning", true, &tune, &es))
            return false;
        if (qk && rope_layer) {
            if (!cfg_num(d, "rms_norm_eps", false, 1e-5, &eps, NULL) ||
                !add_norm(L, "q_norm", eps, false, 0, false, &s, "") ||
                !add_norm(L, "k_norm", eps, false, 0, false, &s, ""))
                return cfg_fail(d, "use_qk_norm", "out of memory");
        }
        if (tune && !rope_layer) {
            double fs, as;
            cJSON *t;
            if (!cfg_num(d, "floor_scale", false, 8192, &fs, NULL) ||
                !cfg_num(d, "attn_scale", false, 0.1, &as, NULL))
                return false;
            if ((t = cJSON_AddObjectToObject(L->options, "attn_temperature_tuning")) == NULL ||
                !cJSON_AddNumberToObject(t, "floor_scale", fs) ||
                !cJSON_AddNumberToObject(t, "attn_scale", as))
                return cfg_fail(d, "attn_temperature_tuning", "out of memory");
            model_add_source(L, "attn_temperature_tuning", &es);
        }
        break;
    }
    }

    if (row->sinks)
        model_add_need(L, "sinks", 1, c->H, 0, "attention sinks", &c->type);
    if (row->diff && !diff_option(d, c, l, L))
        return false;

    /* Causal: decoders; BERT when is_decoder; T5's decoder */
    bool causal = !row->encoder;
    if (row->encoder && !cfg_bool(d, "is_decoder", false, &causal, &s))
        return false;
    if (row->enc_dec) {
        causal = strcmp(stack, "decoder") == 0;
        cfg_source(&s, NULL, "is_encoder_decoder", causal ? "(decoder stack)" : "(encoder stack)");
    } else if (!row->encoder) {
        s = c->type;
    }
    if (cJSON_AddBoolToObject(L->defaults, "causal", causal) == NULL)
        return cfg_fail(d, "", "out of memory");
    model_add_source(L, "causal", &s);
    return true;
}
