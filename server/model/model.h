/* model.h - a model's attention, layer by layer, derived from its Hugging
 * Face config.json, and the models loaded at start-up (posattnd --model
 * NAME=PATH).
 *
 * model/derive.c is the one place that knows model types: a table with a
 * row per model_type naming the config keys it reads (heads, head dim,
 * rope base, scaling, windows, norms, sinks, ...), as Hugging Face's
 * modelling code reads them. From a config it derives (one layer's
 * attention in model/options.c), for every layer of
 * every stack, the /v1/attention item options the config decides
 * (scheme, scale, softcap, window, chunk_size, causal, q/k norms, ...),
 * each with the config key that decides it, and the tensors a caller must
 * still send (sinks, norm weights, T5's table, learned positions).
 *
 * The derived options are JSON exactly as a caller would write them by
 * hand: api/ merges them into an item and parses the result with the
 * ordinary item parser, so a model item and the hand-written item are one
 * computation, and GET /v1/models lists what is merged.
 *
 * Everything here is read-only once built and shared by every thread.
 */
#ifndef SRV_MODEL_H
#define SRV_MODEL_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
    SRV_MODEL_NAME_MAX = 64,
    SRV_MODEL_PATH_MAX = 1024,
    SRV_MAX_MODEL_SPECS = 64,
    SRV_MODEL_KEY_MAX = 96,   /* a config key path: "text_config.rope_scaling.factor" */
    SRV_MODEL_VALUE_MAX = 64, /* a config value as text, cut to fit */
    SRV_MODEL_MAX_LAYERS = 1024,
    SRV_MODEL_MAX_SOURCES = 16,
    SRV_MODEL_MAX_NEEDS = 4,
};

/* Why a config was refused: the config key (path) and a message naming it
 * and its value. */
typedef struct srv_model_err {
    char key[SRV_MODEL_KEY_MAX];
    char message[512];
} srv_model_err;

/* The config key that decides an option, and its value as the config
 * spells it ("query_pre_attn_scalar", "256"). */
typedef struct srv_model_source {
    char option[32]; /* the item option: "scale", "scheme", "window", ... */
    char key[SRV_MODEL_KEY_MAX];
    char value[SRV_MODEL_VALUE_MAX];
} srv_model_source;

/* A tensor the layer needs that no config holds. */
typedef struct srv_model_need {
    char field[32]; /* where it goes in an item: "sinks", "q_norm.weight", "scheme.table" */
    int ndim;
    int64_t shape[2];
    char what[96]; /* "attention sinks" */
    srv_model_source source;
} srv_model_need;

/* One layer's attention. */
typedef struct srv_model_layer {
    int32_t layer;
    const char *stack; /* "encoder" or "decoder" for encoder-decoder models, else NULL */
    const char *kind;  /* "full_attention", "sliding_attention", "chunked_attention" */
    int32_t num_heads, num_kv_heads, head_dim, d_model;
    srv_model_source heads, kv_heads, dim; /* the keys of the three counts */
    /* The options the config decides, as /v1 item members: "scheme",
     * "scale", "softcap", "window", "chunk_size", "q_norm", "k_norm",
     * "attn_temperature_tuning". Owned. */
    cJSON *options;
    /* Defaults an item may change without "override": "causal". Owned. */
    cJSON *defaults;
    srv_model_source sources[SRV_MODEL_MAX_SOURCES];
    size_t n_sources;
    srv_model_need needs[SRV_MODEL_MAX_NEEDS];
    size_t n_needs;
} srv_model_layer;

typedef struct srv_model {
    char name[SRV_MODEL_NAME_MAX];
    char model_type[48]; /* the config's (of text_config for the wrappers) */
    bool encoder_decoder;
    int32_t n_layers;    /* of the model, or its encoder */
    int32_t n_decoder;   /* encoder-decoder: the decoder's layers; else 0 */
    /* A vision-language model's vision tower (its vision_config), the stack
     * "vision" beside the text model's ("text", the default); else 0. */
    int32_t n_vision;
    srv_model_layer *layers; /* n_layers, then n_decoder, then n_vision */
    char note[256];      /* what the caller should know ("" when nothing) */
    /* A config with a vision_config whose tower is not derived: why, and the
     * config key that says so ("" when derived, or when there is none). */
    bool has_vision_config;
    char no_vision[256];
    char no_vision_key[SRV_MODEL_KEY_MAX];
} srv_model;

/* Derives every layer of config (a parsed config.json object). name may be
 * NULL (an inline config). On failure fills *e and returns false. */
bool srv_model_derive(const cJSON *config, const char *name, srv_model **out, srv_model_err *e);
void srv_model_free(srv_model *m);

/* The layer of stack ("encoder" or "decoder" of T5; "text" or "vision" of
 * a vision-language model; NULL = the model's only stack, the encoder or
 * the text model) or NULL when out of range or the model has no such
 * stack. */
const srv_model_layer *srv_model_layer_at(const srv_model *m, const char *stack, int32_t layer);
/* Every layer of every stack: n_layers + n_decoder + n_vision. */
int32_t srv_model_total_layers(const srv_model *m);
/* The option's source (its config key), or NULL. */
const srv_model_source *srv_model_source_of(const srv_model_layer *l, const char *option);

/* The model as GET /v1/models lists it: {"name","model_type","num_layers",
 * ("num_decoder_layers"), "layers":[run, ...]} where a run is a set of
 * consecutive identical layers (("num_vision_layers", "vision" (why a
 * vision_config is not derived) when the model has one):
 * {"first_layer","last_layer",("stack"),
 * "attention","num_heads","num_kv_heads","head_dim", the options and
 * defaults, "requires":[{"field","shape","what","config"}],
 * "config":{option: {"key","value"}}}. NULL on allocation failure. */
cJSON *srv_model_render(const srv_model *m);

/* The model types the table knows, for messages and docs. */
const char *const *srv_model_types(size_t *n);

/* ------------------------------------------------------------------------- */
/* The models loaded at start-up                                             */
/* ------------------------------------------------------------------------- */

/* One --model NAME=PATH. */
typedef struct srv_model_spec {
    char name[SRV_MODEL_NAME_MAX];
    char path[SRV_MODEL_PATH_MAX];
} srv_model_spec;

typedef struct srv_model_set srv_model_set;

/* Reads and derives every spec's config.json (n may be 0: *out NULL, true).
 * On any failure nothing is loaded, err[0..cap) names the model, the file,
 * the config key and the value, and false is returned. */
bool srv_model_set_load(const srv_model_spec *specs, size_t n, srv_model_set **out, char *err,
                        size_t cap);
void srv_model_set_free(srv_model_set *s);
size_t srv_model_set_count(const srv_model_set *s);
const srv_model *srv_model_set_at(const srv_model_set *s, size_t i);
/* The model called name, or NULL (also when s is NULL). */
const srv_model *srv_model_set_find(const srv_model_set *s, const char *name);

#endif
