/* internal.h - private to model/: reading a config's keys (model/config.c)
 * for the derivation table (model/derive.c), a layer's options
 * (model/options.c) and RoPE (model/rope.c).
 */
#ifndef SRV_MODEL_INTERNAL_H
#define SRV_MODEL_INTERNAL_H

#include "model/model.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#if defined(__GNUC__)
#define MODEL_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define MODEL_PRINTF(f, a)
#endif

/* A config being read: the attention's own object (a wrapper's
 * text_config, or the config itself), the wrapper (or NULL), the prefix of
 * key paths in messages ("text_config." or ""), and where errors go. */
typedef struct cfg_ctx {
    const cJSON *cfg;
    const cJSON *outer;
    const char *prefix;
    srv_model_err *e;
} cfg_ctx;

/* Fills d->e (key = prefix + key) and returns false. */
bool cfg_fail(const cfg_ctx *d, const char *key, const char *fmt, ...) MODEL_PRINTF(3, 4);

/* The member named by keys ('|' between spellings, first present wins:
 * "num_attention_heads|n_head"), in the config and then in the wrapper; a
 * JSON null counts as absent. src (may be NULL) gets the key path and the
 * value as text (option left alone). NULL when absent. */
const cJSON *cfg_find(const cfg_ctx *d, const char *keys, srv_model_source *src);
/* The member name of obj, null counting as absent. */
const cJSON *cfg_member(const cJSON *obj, const char *name);

/* Typed reads: absent gives *out = dflt (with present false, when asked)
 * unless required; a value of the wrong type or out of range is an error
 * naming the key and the value. */
bool cfg_int(const cfg_ctx *d, const char *keys, int64_t lo, int64_t hi, bool required,
             int64_t dflt, int64_t *out, srv_model_source *src);
bool cfg_num(const cfg_ctx *d, const char *keys, bool required, double dflt, double *out,
             srv_model_source *src);
bool cfg_bool(const cfg_ctx *d, const char *keys, bool dflt, bool *out, srv_model_source *src);

/* The value of node as text, cut to fit (for messages and sources). */
void cfg_value_text(const cJSON *node, char *buf, size_t cap);
/* Sets a source's fields. */
void cfg_source(srv_model_source *s, const char *option, const char *key, const char *value);

/* The layer's RoPE scheme object (model/rope.c): rope parameters from
 * "rope_parameters" (Hugging Face 5, flat or per layer type) or
 * "rope_scaling" (4.x), base from base_keys (or the parameters' rope_theta)
 * with base_default, the rotary dims from rot_keys (partial_rotary_factor,
 * rotary_pct, rotary_dim), every scaling's parameters as Hugging Face's
 * rope initialisers read them. local: Gemma 3's sliding layers (base
 * rope_local_base_freq, no scaling). mrope: 0 none, 1 sections required, 2
 * sections optional with Qwen3-VL's default and interleaving. */
typedef struct rope_rule {
    const char *layout;
    const char *base_keys;
    double base_default;
    const char *rot_keys; /* NULL: the whole head */
    int rot_kind;         /* 0 factor, 1 pct, 2 dims */
    double rot_default;   /* factor or pct when absent */
    int mrope;
} rope_rule;
bool model_rope_scheme(const cfg_ctx *d, const rope_rule *r, int32_t head_dim,
                       const char *layer_type, bool local, cJSON *scheme, srv_model_source *src);

/* The derivation table's row (model/derive.c) and what every layer of a
 * model shares. */
typedef enum { POS_ROPE, POS_ALIBI, POS_LEARNED, POS_T5, POS_BERT, POS_FALCON, POS_MPT } pos_kind;
typedef enum { WIN_NONE, WIN_ALL, WIN_QWEN2, WIN_ALTERNATE, WIN_PATTERN, WIN_LLAMA4 } win_kind;
typedef enum { NORM_NONE, NORM_HEAD, NORM_GEMMA, NORM_PROJ, NORM_LLAMA4, NORM_COHERE } norm_kind;
typedef enum {
    SCALE_HEAD_DIM,
    SCALE_PRE_ATTN,
    SCALE_MULTIPLIER,
    SCALE_ONE,
    SCALE_GPT2,
    SCALE_MPT
} scale_kind;

typedef struct model_row {
    const char *type;
    /* Config keys ('|' between spellings): heads, kv heads (NULL: none),
     * hidden size, layers, head dim (NULL: hidden / heads). */
    const char *heads, *kv_heads, *hidden, *layers, *head_dim;
    pos_kind pos;
    rope_rule rope; /* POS_ROPE and Falcon without alibi */
    scale_kind scale;
    const char *softcap; /* config key, or NULL */
    win_kind win;
    norm_kind norm;
    bool sinks;
    bool diff;             /* DiffLlama: differential attention, heads h and h + H/2 */
    bool encoder;          /* bidirectional (BERT; causal only with is_decoder) */
    bool enc_dec;          /* T5: an encoder and a decoder stack */
    int32_t offset;        /* learned positions: OPT's 2 */
    const char *positions; /* learned positions: the table's rows key */
    int mla;               /* DeepSeek's MLA: 2 (V2) or 3 (V3); 0 for the others */
} model_row;

typedef struct common {
    const model_row *row;
    int32_t H, Hkv, D, d_model, n_layers, n_decoder;
    srv_model_source heads, kv, dim, type;
    const cJSON *layer_types;
    srv_model_source layer_types_src;
    int32_t rope_dim; /* MLA: qk_rope_head_dim (D is qk_nope_head_dim + it) */
    srv_model_source rope_dim_src;
} common;

/* layer_types, when the config has one: n_layers known names, into c. */
bool model_read_layer_types(const cfg_ctx *d, common *c);
/* Whether layer l of a Llama 4 model applies RoPE (no_rope_layers, or every
 * no_rope_layer_interval-th layer NoPE). */
bool model_llama4_rope(const cfg_ctx *d, const common *c, int32_t l, bool *rope,
                       srv_model_source *src);
/* The layer's kind: a static "full_attention", "sliding_attention" or
 * "chunked_attention", and the key that decides it. */
bool model_layer_kind(const cfg_ctx *d, const common *c, int32_t l, bool rope_layer,
                      const char **kind, srv_model_source *src);

/* Layer l of stack ("encoder" or "decoder" of T5, else "") into L
 * (model/options.c): its counts and kind, the item options and the causal
 * default the row and config decide, each option's source, and the tensors
 * it needs. L's options and defaults are created here; the caller frees
 * them (srv_model_free), also when this fails. false (d->e filled) when a
 * key is wrong or memory runs out. */
bool model_derive_layer(const cfg_ctx *d, const common *c, const char *stack, int32_t l,
                        srv_model_layer *L);

/* A layer's bookkeeping (model/layers.c): an option's config key, a tensor
 * the layer needs (dropped beyond the arrays' room). */
void model_add_source(srv_model_layer *L, const char *option, const srv_model_source *s);
void model_add_need(srv_model_layer *L, const char *field, int ndim, int64_t a, int64_t b,
                    const char *what, const srv_model_source *s);

/* A vision tower (model/vision.c), read from the config's vision_config. */
typedef struct vision_tower {
    int32_t n_layers, H, D, embed, merge;
    srv_model_source heads, dim, embed_src, merge_src;
} vision_tower;
/* Reads config's vision_config for the model type outer (the config's own
 * model_type). Sets m->has_vision_config; v->n_layers 0 when there is no
 * tower to derive (m->no_vision then says why, when the config has one).
 * false (e filled) when a key the tower reads is wrong. */
bool model_vision_read(const cJSON *config, const char *outer, srv_model *m, vision_tower *v,
                       srv_model_err *e);
/* Layer l of the tower into L (its stack "vision"). */
bool model_vision_layer(const vision_tower *v, int32_t l, srv_model_layer *L, srv_model_err *e);

#endif
