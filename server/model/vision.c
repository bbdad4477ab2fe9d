/* vision.c - the vision tower of a vision-language config (its
 * "vision_config"), derived as the model's stack "vision" (model.h):
 * Qwen2-VL's, as Hugging Face's modeling_qwen2_vl.py computes it.
 *   VisionAttention  head_dim = embed_dim // num_heads, scaling
 *                    head_dim^-0.5, is_causal False, as many key heads as
 *                    query heads (qkv = Linear(embed_dim, 3 embed_dim))
 *   rot_pos_emb      VisionRotaryEmbedding(head_dim // 2) (theta 10000, no
 *                    config key) of each patch's (row, col), the patches in
 *                    spatial_merge_size blocks, rotate_half: posattn's
 *                    rope2d axial, layout neox, merge_size
 *                    spatial_merge_size
 * Each block attends within one frame of one image (cu_seqlens): one item
 * per frame, or packed. Other towers are refused with the reason (see
 * refusals below); the text model's derivation (derive.c) ignores them.
 */
#include "model/internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Towers not derived, and why; an item asking for stack "vision" gets it. */
static const struct {
    const char *type, *key, *why;
} refusals[] = {
    {"qwen2_5_vl", "vision_config.fullatt_block_indexes",
     "Qwen2.5-VL's vision tower attends within windows of window_size pixels on every block "
     "but fullatt_block_indexes, after regrouping each image's patches by window "
     "(get_window_index), which no item option expresses: posattn does not derive it"},
    {"qwen3_vl", "vision_config.deepstack_visual_indexes",
     "Qwen3-VL's vision tower (learned position embeddings interpolated to the grid, "
     "deepstack) is not derived by posattn"},
};

bool model_vision_read(const cJSON *config, const char *outer, srv_model *m, vision_tower *v,
                       srv_model_err *e)
{
    const cJSON *vc = cfg_member(config, "vision_config");
    cfg_ctx d = {vc, NULL, "vision_config.", e};
    int64_t depth, heads, embed, merge;

    memset(v, 0, sizeof *v);
    if (vc == NULL)
        return true;
    m->has_vision_config = true;
    if (strcmp(outer, "qwen2_vl") != 0) {
        const char *key = "vision_config", *why = NULL;
        for (size_t i = 0; i < sizeof refusals / sizeof refusals[0]; i++)
            if (strcmp(refusals[i].type, outer) == 0)
                key = refusals[i].key, why = refusals[i].why;
        snprintf(m->no_vision_key, sizeof m->no_vision_key, "%s", key);
        if (why != NULL)
            snprintf(m->no_vision, sizeof m->no_vision, "%s", why);
        else
            snprintf(m->no_vision, sizeof m->no_vision,
                     "the vision tower of %.40s (vision_config) is not derived by posattn: only "
                     "qwen2_vl's is",
                     outer);
        return true;
    }
    if (!cJSON_IsObject(vc)) {
        cfg_ctx top = {config, NULL, "", e};
        return cfg_fail(&top, "vision_config", "config \"vision_config\" must be an object");
    }
    /* Qwen2VLVisionConfig's defaults. hidden_size is the merger's output
     * (the text model's width), not the tower's: embed_dim is. */
    if (!cfg_int(&d, "depth", 1, SRV_MODEL_MAX_LAYERS, false, 32, &depth, NULL) ||
        !cfg_int(&d, "num_heads", 1, 65536, false, 16, &heads, &v->heads) ||
        !cfg_int(&d, "embed_dim", 1, 1 << 24, false, 1280, &embed, &v->embed_src) ||
        !cfg_int(&d, "spatial_merge_size", 1, 64, false, 2, &merge, &v->merge_src))
        return false;
    if (embed % heads != 0)
        return cfg_fail(&d, "num_heads",
                        "config \"%s\": %s does not divide \"%s\": %s, so the vision tower's "
                        "head dim is not defined",
                        v->heads.key, v->heads.value, v->embed_src.key, v->embed_src.value);
    if ((embed / heads) % 4 != 0)
        return cfg_fail(&d, "embed_dim",
                        "config \"%s\": %s / %s heads gives head dim %lld, which 2-D RoPE "
                        "needs a multiple of 4 (a quarter of it per axis and half)",
                        v->embed_src.key, v->embed_src.value, v->heads.value,
                        (long long)(embed / heads));
    v->n_layers = (int32_t)depth;
    v->H = (int32_t)heads;
    v->embed = (int32_t)embed;
    v->D = (int32_t)(embed / heads);
    v->merge = (int32_t)merge;
    snprintf(v->dim.key, sizeof v->dim.key, "%.40s / %.40s", v->embed_src.key, v->heads.key);
    snprintf(v->dim.value, sizeof v->dim.value, "%d", (int)v->D);
    return true;
}

bool model_vision_layer(const vision_tower *v, int32_t l, srv_model_layer *L, srv_model_err *e)
{
    cJSON *scheme;
    srv_model_source s;

    L->layer = l;
    L->stack = "vision";
    L->kind = "full_attention";
    L->num_heads = v->H, L->num_kv_heads = v->H, L->head_dim = v->D, L->d_model = v->embed;
    L->heads = v->heads, L->kv_heads = v->heads, L->dim = v->dim;
    if ((L->options = cJSON_CreateObject()) == NULL ||
        (L->defaults = cJSON_CreateObject()) == NULL ||
        (scheme = cJSON_AddObjectToObject(L->options, "scheme")) == NULL ||
        cJSON_AddStringToObject(scheme, "type", "rope2d") == NULL ||
        cJSON_AddStringToObject(scheme, "variant", "axial") == NULL ||
        cJSON_AddNumberToObject(scheme, "base", 10000) == NULL ||
        cJSON_AddStringToObject(scheme, "layout", "neox") == NULL ||
        cJSON_AddNumberToObject(scheme, "merge_size", v->merge) == NULL ||
        cJSON_AddNumberToObject(L->options, "scale", 1.0 / sqrt((double)v->D)) == NULL ||
        cJSON_AddFalseToObject(L->defaults, "causal") == NULL) {
        snprintf(e->key, sizeof e->key, "vision_config");
        snprintf(e->message, sizeof e->message, "out of memory");
        return false;
    }
    model_add_source(L, "scheme", &v->merge_src);
    model_add_source(L, "scale", &v->dim);
    cfg_source(&s, NULL, "model_type", "\"qwen2_vl\" (the vision tower is bidirectional)");
    model_add_source(L, "causal", &s);
    return true;
}
