/* internal.h - private to model/: reading a config's keys (model/config.c)
 * for the derivation table (model/derive.c) and RoPE (model/rope.c).
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

#endif
