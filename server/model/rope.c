/* rope.c - a layer's RoPE from a config, as Hugging Face's rope
 * initialisers (modeling_rope_utils.py) read it: the parameters dict under
 * "rope_parameters" (transformers 5: flat, or one per layer type) or
 * "rope_scaling" (4.x), "rope_type" or the older "type", and for each
 * scaling the keys it reads, with its defaults and overrides:
 *   yarn      factor; with original_max_position_embeddings in the dict,
 *             factor = max_position_embeddings / it (HF's DeepSeek-V3 note),
 *             else original = max_position_embeddings; beta_fast `or` 32,
 *             beta_slow `or` 1; truncate (default true); attention_factor,
 *             mscale, mscale_all_dim
 *   longrope  short_factor, long_factor; with a top-level
 *             original_max_position_embeddings, factor = max_position / it
 *   llama3    factor, low_freq_factor, high_freq_factor, original_max_...
 *   dynamic   factor; original = the dict's original_max_position_embeddings
 *             or max_position_embeddings
 *   linear    factor
 *   proportional  (Gemma 4's global layers) factor (default 1),
 *             partial_rotary_factor (default 1): here it is the share of
 *             frequency pairs that rotate, not a cut of the rotary dims
 *             (those stay the whole head)
 *   dynamic with "alpha": ntk_alpha, as vLLM's get_rope picks
 *             DynamicNTKAlphaRotaryEmbedding (Hunyuan) when the dict has alpha
 *   default, mrope: none (mrope_section chooses angle rows)
 * Any other rope_type, or a key of the dict this does not read, is refused.
 */
#include "model/internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *const layer_kinds[] = {"full_attention", "sliding_attention",
                                          "chunked_attention"};

/* Keys a rope parameters dict may hold; anything else is refused. */
static const char *const known_keys[] = {
    "rope_type",       "type",           "rope_theta",     "partial_rotary_factor",
    "factor",          "original_max_position_embeddings", "attention_factor",
    "beta_fast",       "beta_slow",      "truncate",       "mscale",
    "mscale_all_dim",  "low_freq_factor", "high_freq_factor", "short_factor",
    "long_factor",     "mrope_section",  "mrope_interleaved", "alpha",
};

/* A number of the dict rp at path (for messages). */
static bool rp_num(const cfg_ctx *d, const cJSON *rp, const char *path, const char *name,
                   bool required, double dflt, double *out)
{
    const cJSON *v = cfg_member(rp, name);
    char key[SRV_MODEL_KEY_MAX], text[SRV_MODEL_VALUE_MAX];
    snprintf(key, sizeof key, "%.50s.%.40s", path, name);
    if (v == NULL) {
        if (required)
            return cfg_fail(d, key, "config key \"%s%s\" is required by this rope_type", d->prefix,
                            key);
        *out = dflt;
        return true;
    }
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) {
        cfg_value_text(v, text, sizeof text);
        return cfg_fail(d, key, "config \"%s%s\": %s must be a number", d->prefix, key, text);
    }
    *out = v->valuedouble;
    return true;
}

/* A number array of n entries at rp[name], added to scheme as name. */
static bool rp_array(const cfg_ctx *d, const cJSON *rp, const char *path, const char *name,
                     int n, bool ints, cJSON *scheme, const char *as)
{
    const cJSON *v = cfg_member(rp, name), *x;
    char key[SRV_MODEL_KEY_MAX];
    int i = 0;
    snprintf(key, sizeof key, "%.50s.%.40s", path, name);
    if (!cJSON_IsArray(v))
        return cfg_fail(d, key, "config key \"%s%s\" must be an array of %d numbers", d->prefix,
                        key, n);
    if (cJSON_GetArraySize(v) != n)
        return cfg_fail(d, key, "config \"%s%s\" has %d values; this layer needs %d%s", d->prefix,
                        key, cJSON_GetArraySize(v), n,
                        ints ? "" : " (rotary_dim / 2)");
    cJSON *arr = cJSON_AddArrayToObject(scheme, as);
    if (arr == NULL)
        return cfg_fail(d, key, "out of memory");
    cJSON_ArrayForEach(x, v)
    {
        if (!cJSON_IsNumber(x) || !isfinite(x->valuedouble) ||
            (ints && (x->valuedouble != floor(x->valuedouble) || x->valuedouble < 0)))
            return cfg_fail(d, key, "config \"%s%s[%d]\" must be a %s", d->prefix, key, i,
                            ints ? "non-negative integer" : "number");
        if (!cJSON_AddItemToArray(arr, cJSON_CreateNumber(x->valuedouble)))
            return cfg_fail(d, key, "out of memory");
        i++;
    }
    return true;
}

static bool add_num(cJSON *o, const char *name, double v)
{
    return cJSON_AddNumberToObject(o, name, v) != NULL;
}

bool model_rope_scheme(const cfg_ctx *d, const rope_rule *r, int32_t head_dim,
                       const char *layer_type, bool local, cJSON *scheme, srv_model_source *src)
{
    srv_model_source s;
    const cJSON *rp = cfg_find(d, "rope_parameters|rope_scaling", &s), *m;
    char path[SRV_MODEL_KEY_MAX], text[SRV_MODEL_VALUE_MAX];
    double base, x;
    const char *type = "default";

    /* The key paths are relative to d->prefix, as cfg_fail adds it. */
    snprintf(path, sizeof path, "%s", s.key + strlen(d->prefix));
    if (rp != NULL && !cJSON_IsObject(rp))
        return cfg_fail(d, path, "config \"%s\": %s must be an object", s.key, s.value);
    for (size_t i = 0; rp != NULL && i < sizeof layer_kinds / sizeof layer_kinds[0]; i++)
        if (cJSON_IsObject(cfg_member(rp, layer_kinds[i]))) { /* one dict per layer type */
            const cJSON *per = cfg_member(rp, layer_type);
            size_t n = strlen(path);
            snprintf(path + n, sizeof path - n, ".%s", layer_type);
            if (!cJSON_IsObject(per))
                return cfg_fail(d, path,
                                "config \"%s%s\" is missing: the rope parameters are given per "
                                "layer type and this layer is %s",
                                d->prefix, path, layer_type);
            rp = per;
            break;
        }
    if (local && rp != NULL && cfg_member(rp, "rope_theta") == NULL)
        rp = NULL; /* Gemma 3 (4.x): sliding layers use rope_local_base_freq, unscaled */

    /* Base */
    if (local && rp == NULL) {
        if (!cfg_num(d, "rope_local_base_freq", false, 10000.0, &base, src))
            return false;
    } else if ((m = cfg_member(rp, "rope_theta")) != NULL) {
        if (!rp_num(d, rp, path, "rope_theta", true, 0, &base))
            return false;
        snprintf(src->key, sizeof src->key, "%.32s%.50s.rope_theta", d->prefix, path);
        cfg_value_text(m, src->value, sizeof src->value);
    } else if (r->base_keys != NULL) {
        if (!cfg_num(d, r->base_keys, false, r->base_default, &base, src))
            return false;
    } else {
        base = r->base_default;
        cfg_source(src, NULL, "model_type", "(the model's fixed base)");
    }
    if (!(base > 1))
        return cfg_fail(d, src->key + strlen(d->prefix), "config \"%s\": %s must be above 1",
                        src->key, src->value);

    /* Rotary dims. proportional reads partial_rotary_factor as its share of
     * rotating pairs over the whole head (HF's denominator is head_dim). */
    int64_t rot = head_dim;
    const cJSON *tn = cfg_member(rp, "rope_type") != NULL ? cfg_member(rp, "rope_type")
                                                          : cfg_member(rp, "type");
    bool proportional = cJSON_IsString(tn) && strcmp(tn->valuestring, "proportional") == 0;
    if (proportional) {
        /* the whole head */
    } else if ((m = cfg_member(rp, "partial_rotary_factor")) != NULL) {
        if (!rp_num(d, rp, path, "partial_rotary_factor", true, 1, &x))
            return false;
        rot = (int64_t)(head_dim * x);
    } else if (r->rot_keys != NULL && r->rot_kind == 2) {
        if (!cfg_int(d, r->rot_keys, 2, head_dim, false, head_dim, &rot, NULL))
            return false;
    } else if (r->rot_keys != NULL) {
        if (!cfg_num(d, r->rot_keys, false, r->rot_default, &x, NULL))
            return false;
        if (!(x > 0 && x <= 1))
            return cfg_fail(d, r->rot_keys, "config \"%s%.*s\": %.17g must be in (0, 1]",
                            d->prefix, (int)strcspn(r->rot_keys, "|"), r->rot_keys, x);
        rot = (int64_t)(head_dim * x);
    }
    if (rot < 2 || rot % 2 != 0 || rot > head_dim)
        return cfg_fail(d, r->rot_keys != NULL ? r->rot_keys : "head_dim",
                        "the rotary dims come to %lld of head_dim %d: they must be even, from 2 "
                        "to head_dim",
                        (long long)rot, (int)head_dim);

    if (!cJSON_AddStringToObject(scheme, "type", "rope") || !add_num(scheme, "base", base) ||
        !add_num(scheme, "rotary_dim", (double)rot) ||
        !cJSON_AddStringToObject(scheme, "layout", r->layout))
        return cfg_fail(d, path, "out of memory");

    /* The dict's keys and type */
    if (rp != NULL) {
        const cJSON *k;
        cJSON_ArrayForEach(k, rp)
        {
            size_t i = 0;
            while (i < sizeof known_keys / sizeof known_keys[0] &&
                   strcmp(known_keys[i], k->string) != 0)
                i++;
            if (i == sizeof known_keys / sizeof known_keys[0]) {
                char key[SRV_MODEL_KEY_MAX];
                snprintf(key, sizeof key, "%.50s.%.40s", path, k->string);
                cfg_value_text(k, text, sizeof text);
                return cfg_fail(d, key,
                                "config \"%s%s\": %s is a rope parameter posattn does not know, "
                                "so it cannot say what the model computes",
                                d->prefix, key, text);
            }
        }
        m = cfg_member(rp, "rope_type") != NULL ? cfg_member(rp, "rope_type")
                                                : cfg_member(rp, "type");
        if (m != NULL && !cJSON_IsString(m))
            return cfg_fail(d, path, "config \"%s%s.rope_type\" must be a string", d->prefix,
                            path);
        if (m != NULL)
            type = m->valuestring;
        snprintf(src->key, sizeof src->key, "%s%s", d->prefix, path);
        cfg_value_text(rp, src->value, sizeof src->value);
    }

    double factor = 0, orig = 0, maxpos = 0;
    bool has_orig = cfg_member(rp, "original_max_position_embeddings") != NULL;
    if (strcmp(type, "default") == 0 || strcmp(type, "mrope") == 0) {
        /* no scaling */
    } else if (strcmp(type, "linear") == 0) {
        if (!rp_num(d, rp, path, "factor", true, 0, &factor))
            return false;
        if (!cJSON_AddStringToObject(scheme, "scaling", "linear") ||
            !add_num(scheme, "factor", factor))
            return cfg_fail(d, path, "out of memory");
    } else if (strcmp(type, "dynamic") == 0 && cfg_member(rp, "alpha") != NULL) {
        double alpha;
        if (!rp_num(d, rp, path, "alpha", true, 0, &alpha))
            return false;
        if (!(alpha > 0))
            return cfg_fail(d, path, "config \"%s%s.alpha\": %.17g must be positive", d->prefix,
                            path, alpha);
        if (!cJSON_AddStringToObject(scheme, "scaling", "ntk_alpha") ||
            !add_num(scheme, "alpha", alpha))
            return cfg_fail(d, path, "out of memory");
    } else if (strcmp(type, "proportional") == 0) {
        double prf;
        if (!rp_num(d, rp, path, "factor", false, 1, &factor) ||
            !rp_num(d, rp, path, "partial_rotary_factor", false, 1, &prf))
            return false;
        if (!(prf > 0 && prf <= 1))
            return cfg_fail(d, path,
                            "config \"%s%s.partial_rotary_factor\": %.17g must be in (0, 1]",
                            d->prefix, path, prf);
        if (!cJSON_AddStringToObject(scheme, "scaling", "proportional") ||
            !add_num(scheme, "factor", factor) || !add_num(scheme, "partial_rotary_factor", prf))
            return cfg_fail(d, path, "out of memory");
    } else if (strcmp(type, "dynamic") == 0) {
        if (!rp_num(d, rp, path, "factor", true, 0, &factor) ||
            (has_orig && !rp_num(d, rp, path, "original_max_position_embeddings", true, 0, &orig)) ||
            (!has_orig && !cfg_num(d, "max_position_embeddings", true, 0, &orig, NULL)))
            return false;
        if (!cJSON_AddStringToObject(scheme, "scaling", "dynamic") ||
            !add_num(scheme, "factor", factor) || !add_num(scheme, "original_max_position", orig))
            return cfg_fail(d, path, "out of memory");
    } else if (strcmp(type, "yarn") == 0) {
        double af, ms, msa, bf, bs;
        bool trunc = true;
        if (!rp_num(d, rp, path, "factor", true, 0, &factor) ||
            !rp_num(d, rp, path, "attention_factor", false, 0, &af) ||
            !rp_num(d, rp, path, "mscale", false, 0, &ms) ||
            !rp_num(d, rp, path, "mscale_all_dim", false, 0, &msa) ||
            !rp_num(d, rp, path, "beta_fast", false, 0, &bf) ||
            !rp_num(d, rp, path, "beta_slow", false, 0, &bs) ||
            !cfg_num(d, "max_position_embeddings", true, 0, &maxpos, NULL))
            return false;
        if (has_orig) {
            if (!rp_num(d, rp, path, "original_max_position_embeddings", true, 0, &orig))
                return false;
            factor = maxpos / orig; /* as Hugging Face: the ratio replaces factor */
        } else {
            orig = maxpos;
        }
        if ((m = cfg_member(rp, "truncate")) != NULL) {
            if (!cJSON_IsBool(m))
                return cfg_fail(d, path, "config \"%s%s.truncate\" must be true or false",
                                d->prefix, path);
            trunc = cJSON_IsTrue(m);
        }
        if (!cJSON_AddStringToObject(scheme, "scaling", "yarn") ||
            !add_num(scheme, "factor", factor) || !add_num(scheme, "original_max_position", orig) ||
            !add_num(scheme, "beta_fast", bf != 0 ? bf : 32) ||
            !add_num(scheme, "beta_slow", bs != 0 ? bs : 1) ||
            !cJSON_AddBoolToObject(scheme, "truncate", trunc) ||
            (af != 0 && !add_num(scheme, "attention_factor", af)) ||
            (ms != 0 && !add_num(scheme, "mscale", ms)) ||
            (msa != 0 && !add_num(scheme, "mscale_all_dim", msa)))
            return cfg_fail(d, path, "out of memory");
    } else if (strcmp(type, "llama3") == 0) {
        double lo, hi;
        if (!rp_num(d, rp, path, "factor", true, 0, &factor) ||
            !rp_num(d, rp, path, "low_freq_factor", true, 0, &lo) ||
            !rp_num(d, rp, path, "high_freq_factor", true, 0, &hi) ||
            !rp_num(d, rp, path, "original_max_position_embeddings", true, 0, &orig))
            return false;
        if (!cJSON_AddStringToObject(scheme, "scaling", "llama3") ||
            !add_num(scheme, "factor", factor) || !add_num(scheme, "low_freq_factor", lo) ||
            !add_num(scheme, "high_freq_factor", hi) ||
            !add_num(scheme, "original_max_position", orig))
            return cfg_fail(d, path, "out of memory");
    } else if (strcmp(type, "longrope") == 0) {
        double af;
        if (!rp_num(d, rp, path, "factor", false, 1, &factor) ||
            !rp_num(d, rp, path, "attention_factor", false, 0, &af) ||
            !cfg_num(d, "max_position_embeddings", true, 0, &maxpos, NULL))
            return false;
        if (cfg_find(d, "original_max_position_embeddings", NULL) != NULL || has_orig) {
            if (has_orig ? !rp_num(d, rp, path, "original_max_position_embeddings", true, 0, &orig)
                         : !cfg_num(d, "original_max_position_embeddings", true, 0, &orig, NULL))
                return false;
            factor = maxpos / orig;
        } else {
            orig = maxpos;
        }
        if (!cJSON_AddStringToObject(scheme, "scaling", "longrope") ||
            !add_num(scheme, "factor", factor) || !add_num(scheme, "original_max_position", orig) ||
            (af != 0 && !add_num(scheme, "attention_factor", af)) ||
            !rp_array(d, rp, path, "short_factor", (int)(rot / 2), false, scheme, "short_factor") ||
            !rp_array(d, rp, path, "long_factor", (int)(rot / 2), false, scheme, "long_factor"))
            return false;
    } else {
        return cfg_fail(d, path,
                        "config \"%s%s\" has rope_type \"%.40s\", which posattn does not know "
                        "(default, linear, dynamic, yarn, llama3, longrope, proportional, mrope)",
                        d->prefix, path, type);
    }
    if (orig != 0 && (orig < 1 || orig > 2147483647.0 || orig != floor(orig)))
        return cfg_fail(d, path,
                        "config \"%s%s\": the original context length %.17g must be a positive "
                        "integer",
                        d->prefix, path, orig);
    if (factor != 0 && !(factor > 0))
        return cfg_fail(d, path, "config \"%s%s.factor\": %.17g must be positive", d->prefix, path,
                        factor);

    /* Multimodal sections */
    if (r->mrope != 0) {
        const cJSON *sec = cfg_member(rp, "mrope_section");
        bool inter = r->mrope == 2;
        if (sec == NULL && r->mrope == 1)
            return cfg_fail(d, path,
                            "config \"%s%s.mrope_section\" is required: Qwen2-VL's text model "
                            "splits the frequencies into temporal, height and width sections",
                            d->prefix, path);
        if (sec != NULL) {
            if (!rp_array(d, rp, path, "mrope_section", 3, true, scheme, "mrope_section"))
                return false;
        } else {
            cJSON *arr = cJSON_AddArrayToObject(scheme, "mrope_section");
            static const int dflt[3] = {24, 20, 20}; /* Qwen3-VL's default */
            for (int i = 0; arr != NULL && i < 3; i++)
                cJSON_AddItemToArray(arr, cJSON_CreateNumber(dflt[i]));
        }
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(scheme, "mrope_section");
        int sum = 0;
        for (int i = 0; i < 3; i++)
            sum += (int)cJSON_GetArrayItem(a, i)->valuedouble;
        if (2 * sum != rot)
            return cfg_fail(d, path,
                            "config \"%s%s.mrope_section\" sums to %d but the layer rotates %lld "
                            "dims (%lld frequencies)",
                            d->prefix, path, sum, (long long)rot, (long long)rot / 2);
        if ((m = cfg_member(rp, "mrope_interleaved")) != NULL && cJSON_IsBool(m))
            inter = inter || cJSON_IsTrue(m);
        if (inter && !cJSON_AddBoolToObject(scheme, "mrope_interleaved", true))
            return cfg_fail(d, path, "out of memory");
    }
    return true;
}
