/* test_derive.c - server/model/: every model type's fixture config
 * (tests/fixtures/models/NAME.json, the real attention keys with small
 * dims) derives, layer by layer, exactly the options written by hand from
 * Hugging Face's modelling code in tests/fixtures/models_expected.json; and
 * every config posattn cannot read is refused naming the key and value.
 */
#include "testutil.h"

#include "model/model.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *buf;
    long n;
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static cJSON *load_json(const char *path)
{
    char *text = slurp(path);
    cJSON *j = cJSON_Parse(text);
    free(text);
    assert_non_null(j);
    return j;
}

static srv_model *derive_file(const char *name)
{
    char path[256];
    srv_model *m = NULL;
    srv_model_err e;
    snprintf(path, sizeof path, "tests/fixtures/models/%s.json", name);
    cJSON *cfg = load_json(path);
    if (!srv_model_derive(cfg, name, &m, &e))
        fail_msg("%s: %s (key %s)", name, e.message, e.key);
    cJSON_Delete(cfg);
    return m;
}

/* The run's attention options: its members but the bookkeeping ones. */
static bool is_bookkeeping(const char *k)
{
    static const char *const keys[] = {"first_layer", "last_layer", "stack", "attention",
                                       "num_heads",   "num_kv_heads", "head_dim", "requires",
                                       "config",      "causal"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (strcmp(keys[i], k) == 0)
            return true;
    return false;
}

static void check_run(const char *model, const cJSON *got, const cJSON *want)
{
    const char *ints[] = {"first_layer", "last_layer", "num_heads", "num_kv_heads", "head_dim"};
    const cJSON *m;
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        if (cJSON_GetObjectItem(got, ints[i])->valuedouble !=
            cJSON_GetObjectItem(want, ints[i])->valuedouble)
            fail_msg("%s: %s is %g, want %g", model, ints[i],
                     cJSON_GetObjectItem(got, ints[i])->valuedouble,
                     cJSON_GetObjectItem(want, ints[i])->valuedouble);
    assert_string_equal(cJSON_GetObjectItem(got, "attention")->valuestring,
                        cJSON_GetObjectItem(want, "attention")->valuestring);
    assert_true(cJSON_Compare(cJSON_GetObjectItem(got, "causal"),
                              cJSON_GetObjectItem(want, "causal"), true));
    const cJSON *ws = cJSON_GetObjectItem(want, "stack"), *gs = cJSON_GetObjectItem(got, "stack");
    assert_int_equal(ws != NULL, gs != NULL);
    if (ws != NULL)
        assert_string_equal(ws->valuestring, gs->valuestring);

    /* Options: the same members with the same values. */
    cJSON *opts = cJSON_CreateObject();
    cJSON_ArrayForEach(m, got)
    if (!is_bookkeeping(m->string))
        cJSON_AddItemToObject(opts, m->string, cJSON_Duplicate(m, true));
    if (!cJSON_Compare(opts, cJSON_GetObjectItem(want, "options"), true)) {
        char *a = cJSON_PrintUnformatted(opts),
             *b = cJSON_PrintUnformatted(cJSON_GetObjectItem(want, "options"));
        fail_msg("%s layers %g..: derived\n  %s\nwant\n  %s", model,
                 cJSON_GetObjectItem(want, "first_layer")->valuedouble, a, b);
    }
    cJSON_Delete(opts);

    /* Requirements: field -> shape. */
    const cJSON *req = cJSON_GetObjectItem(got, "requires"),
                *wreq = cJSON_GetObjectItem(want, "requires");
    assert_int_equal(cJSON_GetArraySize(req), cJSON_GetArraySize(wreq));
    cJSON_ArrayForEach(m, req)
    {
        const char *field = cJSON_GetObjectItem(m, "field")->valuestring;
        const cJSON *shape = cJSON_GetObjectItem(wreq, field);
        if (shape == NULL)
            fail_msg("%s: requires %s, which the expectation does not", model, field);
        assert_true(cJSON_Compare(cJSON_GetObjectItem(m, "shape"), shape, true));
        assert_true(strlen(cJSON_GetObjectItem(m, "config")->valuestring) > 0);
    }
}

static void test_every_model_type_derives_as_written(void **state)
{
    (void)state;
    cJSON *want = load_json("tests/fixtures/models_expected.json"), *model;
    size_t n_types, covered = 0;
    const char *const *types = srv_model_types(&n_types);
    bool seen[64] = {false};
    assert_true(n_types <= 64);

    cJSON_ArrayForEach(model, want)
    {
        srv_model *m = derive_file(model->string);
        cJSON *r = srv_model_render(m), *runs = cJSON_GetObjectItem(r, "layers"), *run;
        int i = 0;
        if (cJSON_GetArraySize(runs) != cJSON_GetArraySize(model)) {
            char *t = cJSON_PrintUnformatted(runs);
            fail_msg("%s: %d runs derived, %d expected: %s", model->string,
                     cJSON_GetArraySize(runs), cJSON_GetArraySize(model), t);
        }
        cJSON_ArrayForEach(run, runs)
        check_run(model->string, run, cJSON_GetArrayItem(model, i++));
        for (size_t t = 0; t < n_types; t++)
            if (strcmp(types[t], m->model_type) == 0 && !seen[t]) {
                seen[t] = true;
                covered++;
            }
        cJSON_Delete(r);
        srv_model_free(m);
    }
    /* Every row of the table has a fixture. */
    for (size_t t = 0; t < n_types; t++)
        if (!seen[t])
            fail_msg("model type %s has no fixture in tests/fixtures/models", types[t]);
    assert_int_equal(covered, n_types);
    cJSON_Delete(want);
}

/* Each option names the config key that decides it. */
static void test_sources_name_the_config_keys(void **state)
{
    (void)state;
    static const struct {
        const char *model;
        int layer;
        const char *option, *key, *value;
    } cases[] = {
        {"gemma2", 0, "scale", "query_pre_attn_scalar", "256"},
        {"gemma2", 0, "softcap", "attn_logit_softcapping", "50"},
        {"gemma2", 0, "window", "sliding_window", "4096"},
        {"gemma3", 5, "scale", "text_config.query_pre_attn_scalar", "256"},
        {"gemma3", 0, "scheme", "text_config.rope_local_base_freq", "10000"},
        {"gemma3", 5, "scheme", "text_config.rope_scaling", NULL},
        {"granite", 0, "scale", "attention_multiplier", "0.015625"},
        {"qwen2", 3, "window", "sliding_window", "4096"},
        {"llama4", 0, "chunk_size", "text_config.attention_chunk_size", "8192"},
        {"mpt", 0, "scheme", "attn_config.alibi_bias_max", "8"},
        {"t5", 0, "scheme", "relative_attention_num_buckets", "32"},
        {"gpt_neox", 0, "scheme", "rotary_emb_base", "10000"},
        {"diffllama", 0, "scheme", "rope_theta", "10000"},
        {"diffllama", 1, "differential.subln_eps", "rms_norm_eps", NULL},
        {"diffllama", 2, "differential.lambda_init", "model_type",
         "\"diffllama\", layer 2: 0.8 - 0.6 exp(-0.3 * 2)"},
        {"qwen2_vl/vision", 1, "scheme", "vision_config.spatial_merge_size", "2"},
        {"qwen2_vl/vision", 0, "scale", "vision_config.embed_dim / vision_config.num_heads", "16"},
        {"qwen2_vl/vision", 0, "causal", "model_type", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "%.*s", (int)strcspn(cases[i].model, "/"), cases[i].model);
        srv_model *m = derive_file(name);
        /* "qwen2_vl/vision": the stack after the slash */
        const char *slash = strchr(cases[i].model, '/');
        const srv_model_layer *l = srv_model_layer_at(m, slash ? slash + 1 : NULL, cases[i].layer);
        const srv_model_source *s;
        assert_non_null(l);
        s = srv_model_source_of(l, cases[i].option);
        if (s == NULL)
            fail_msg("%s layer %d: no source for %s", cases[i].model, cases[i].layer,
                     cases[i].option);
        assert_string_equal(s->key, cases[i].key);
        if (cases[i].value != NULL)
            assert_string_equal(s->value, cases[i].value);
        srv_model_free(m);
    }
}

static void test_layers_and_stacks(void **state)
{
    (void)state;
    srv_model *m = derive_file("t5");
    assert_true(m->encoder_decoder);
    assert_non_null(srv_model_layer_at(m, NULL, 1));
    assert_non_null(srv_model_layer_at(m, "decoder", 1));
    assert_null(srv_model_layer_at(m, "decoder", 2));
    assert_null(srv_model_layer_at(m, NULL, -1));
    assert_string_equal(srv_model_layer_at(m, "decoder", 0)->stack, "decoder");
    srv_model_free(m);
    m = derive_file("qwen2_vl");
    assert_true(m->has_vision_config);
    assert_int_equal(m->n_vision, 2);
    assert_int_equal(srv_model_total_layers(m), 4);
    assert_string_equal(srv_model_layer_at(m, "vision", 1)->stack, "vision");
    assert_int_equal(srv_model_layer_at(m, "vision", 1)->head_dim, 16);
    assert_null(srv_model_layer_at(m, "vision", 2));
    assert_null(srv_model_layer_at(m, NULL, 0)->stack);
    srv_model_free(m);
    m = derive_file("qwen2_5_vl");
    assert_true(m->has_vision_config);
    assert_int_equal(m->n_vision, 0);
    assert_null(srv_model_layer_at(m, "vision", 0));
    assert_string_equal(m->no_vision_key, "vision_config.fullatt_block_indexes");
    srv_model_free(m);
    m = derive_file("llama");
    assert_false(m->has_vision_config);
    assert_null(srv_model_layer_at(m, "vision", 0));
    assert_null(srv_model_layer_at(m, "decoder", 0)); /* one stack */
    assert_null(srv_model_layer_at(m, NULL, 2));
    srv_model_free(m);
    srv_model_free(NULL);
}

/* ------------------------------------------------------------------------- */
/* Refusals                                                                  */
/* ------------------------------------------------------------------------- */

static void test_refusals_name_the_key(void **state)
{
    (void)state;
    static const struct {
        const char *config, *key, *text;
    } cases[] = {
        {"[1]", "", "JSON object"},
        {"{}", "model_type", "required"},
        {"{\"model_type\":\"resnet\"}", "model_type", "\"resnet\" is not a model type"},
        {"{\"model_type\":\"llama\",\"hidden_size\":64,\"num_hidden_layers\":2}",
         "num_attention_heads", "required"},
        {"{\"model_type\":\"llama\",\"hidden_size\":65,\"num_attention_heads\":4,"
         "\"num_hidden_layers\":2}",
         "hidden_size", "not a multiple"},
        {"{\"model_type\":\"llama\",\"hidden_size\":64,\"num_attention_heads\":4,"
         "\"num_key_value_heads\":3,\"num_hidden_layers\":2}",
         "num_key_value_heads", "does not divide"},
        {"{\"model_type\":\"llama\",\"hidden_size\":64,\"num_attention_heads\":4.5,"
         "\"num_hidden_layers\":2}",
         "num_attention_heads", "4.5 must be an integer"},
        {"{\"model_type\":\"llama\",\"hidden_size\":64,\"num_attention_heads\":4,"
         "\"num_hidden_layers\":2,\"rope_scaling\":{\"rope_type\":\"su\",\"factor\":2}}",
         "rope_scaling", "\"su\", which posattn does not know"},
        {"{\"model_type\":\"llama\",\"hidden_size\":64,\"num_attention_heads\":4,"
         "\"num_hidden_layers\":2,\"rope_scaling\":{\"type\":\"linear\",\"factr\":2}}",
         "rope_scaling.factr", "does not know"},
        {"{\"model_type\":\"llama\",\"hidden_size\":64,\"num_attention_heads\":4,"
         "\"num_hidden_layers\":2,\"rope_scaling\":{\"type\":\"linear\"}}",
         "rope_scaling.factor", "required"},
        {"{\"model_type\":\"llama\",\"hidden_size\":64,\"num_attention_heads\":4,"
         "\"num_hidden_layers\":2,\"rope_parameters\":{\"rope_type\":\"proportional\","
         "\"partial_rotary_factor\":1.5}}",
         "rope_parameters", "partial_rotary_factor\": 1.5 must be in (0, 1]"},
        {"{\"model_type\":\"llama\",\"hidden_size\":64,\"num_attention_heads\":4,"
         "\"num_hidden_layers\":2,\"rope_scaling\":{\"type\":\"dynamic\",\"alpha\":-3}}",
         "rope_scaling", "alpha\": -3 must be positive"},
        {"{\"model_type\":\"llama\",\"hidden_size\":64,\"num_attention_heads\":4,"
         "\"num_hidden_layers\":2,\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8,"
         "\"low_freq_factor\":1,\"high_freq_factor\":4}}",
         "rope_scaling.original_max_position_embeddings", "required"},
        {"{\"model_type\":\"gpt_oss\",\"hidden_size\":64,\"num_attention_heads\":4,"
         "\"num_hidden_layers\":2,\"layer_types\":[\"sliding_attention\",\"local\"]}",
         "layer_types[1]", "\"local\" is not a layer type"},
        {"{\"model_type\":\"gpt_oss\",\"hidden_size\":64,\"num_attention_heads\":4,"
         "\"num_hidden_layers\":2,\"layer_types\":[\"sliding_attention\"]}",
         "layer_types", "one per layer"},
        {"{\"model_type\":\"qwen2_vl\",\"hidden_size\":256,\"num_attention_heads\":2,"
         "\"num_hidden_layers\":2,\"rope_scaling\":{\"type\":\"mrope\"}}",
         "rope_scaling", "mrope_section\" is required"},
        {"{\"model_type\":\"qwen2_vl\",\"hidden_size\":256,\"num_attention_heads\":2,"
         "\"num_hidden_layers\":2,\"rope_scaling\":{\"type\":\"mrope\",\"mrope_section\":[16,"
         "24,20]}}",
         "rope_scaling", "sums to 60"},
        {"{\"model_type\":\"cohere\",\"hidden_size\":64,\"num_attention_heads\":4,"
         "\"num_hidden_layers\":2,\"use_qk_norm\":true}",
         "use_qk_norm", "LayerNorm"},
        {"{\"model_type\":\"mpt\",\"d_model\":64,\"n_heads\":4,\"n_layers\":2,"
         "\"attn_config\":{\"alibi\":true,\"clip_qkv\":6}}",
         "attn_config.clip_qkv", "6 changes MPT"},
        {"{\"model_type\":\"bert\",\"hidden_size\":64,\"num_attention_heads\":4,"
         "\"num_hidden_layers\":2,\"position_embedding_type\":\"rotary\"}",
         "position_embedding_type", "\"rotary\" is not one of"},
        {"{\"model_type\":\"gemma3\",\"text_config\":{\"model_type\":\"gemma3_text\","
         "\"hidden_size\":64,\"num_attention_heads\":4,\"head_dim\":16,\"num_hidden_layers\":6,"
         "\"rope_scaling\":{\"rope_type\":\"bogus\"}}}",
         "text_config.rope_scaling", "\"bogus\""},
        {"{\"model_type\":\"llama\",\"hidden_size\":64,\"num_attention_heads\":4,"
         "\"num_hidden_layers\":100000}",
         "num_hidden_layers", "from 1 to 1024"},
        {"{\"model_type\":\"diffllama\",\"hidden_size\":48,\"num_attention_heads\":3,"
         "\"num_hidden_layers\":2}",
         "num_attention_heads", "3 must be even"},
        {"{\"model_type\":\"qwen2_vl\",\"hidden_size\":256,\"num_attention_heads\":2,"
         "\"num_hidden_layers\":2,\"rope_scaling\":{\"type\":\"mrope\",\"mrope_section\":[16,"
         "24,24]},\"vision_config\":{\"depth\":2,\"embed_dim\":64,\"num_heads\":3}}",
         "vision_config.num_heads", "3 does not divide \"vision_config.embed_dim\": 64"},
        {"{\"model_type\":\"qwen2_vl\",\"hidden_size\":256,\"num_attention_heads\":2,"
         "\"num_hidden_layers\":2,\"rope_scaling\":{\"type\":\"mrope\",\"mrope_section\":[16,"
         "24,24]},\"vision_config\":{\"depth\":2,\"embed_dim\":40,\"num_heads\":4}}",
         "vision_config.embed_dim", "head dim 10, which 2-D RoPE needs a multiple of 4"},
        {"{\"model_type\":\"qwen2_vl\",\"hidden_size\":256,\"num_attention_heads\":2,"
         "\"num_hidden_layers\":2,\"rope_scaling\":{\"type\":\"mrope\",\"mrope_section\":[16,"
         "24,24]},\"vision_config\":{\"spatial_merge_size\":0}}",
         "vision_config.spatial_merge_size", "from 1 to 64"},
        {"{\"model_type\":\"qwen2_vl\",\"hidden_size\":256,\"num_attention_heads\":2,"
         "\"num_hidden_layers\":2,\"rope_scaling\":{\"type\":\"mrope\",\"mrope_section\":[16,"
         "24,24]},\"vision_config\":[1]}",
         "vision_config", "must be an object"},
        {"{\"model_type\":\"gptj\",\"n_embd\":64,\"n_head\":4,\"n_layer\":2,\"rotary_dim\":7}",
         "rotary_dim", "even"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cJSON *cfg = cJSON_Parse(cases[i].config);
        srv_model *m = NULL;
        srv_model_err e;
        assert_non_null(cfg);
        if (srv_model_derive(cfg, NULL, &m, &e))
            fail_msg("case %zu was accepted: %s", i, cases[i].config);
        if (strcmp(e.key, cases[i].key) != 0 || strstr(e.message, cases[i].text) == NULL)
            fail_msg("case %zu: key '%s' message '%s'; want key '%s' and '%s'", i, e.key,
                     e.message, cases[i].key, cases[i].text);
        assert_null(m);
        cJSON_Delete(cfg);
    }
}

/* transformers 5 spells the dict rope_parameters, per layer type for
 * Gemma 3; the same model as the 4.x fixture. */
static void test_rope_parameters_of_transformers_5(void **state)
{
    (void)state;
    const char *v5 = "{\"model_type\":\"gemma3_text\",\"hidden_size\":64,"
                     "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"head_dim\":16,"
                     "\"num_hidden_layers\":6,\"query_pre_attn_scalar\":256,"
                     "\"sliding_window\":1024,\"rms_norm_eps\":1e-6,\"rope_parameters\":{"
                     "\"sliding_attention\":{\"rope_type\":\"default\",\"rope_theta\":10000.0},"
                     "\"full_attention\":{\"rope_type\":\"linear\",\"factor\":8.0,"
                     "\"rope_theta\":1000000.0}}}";
    cJSON *cfg = cJSON_Parse(v5);
    srv_model *m = NULL, *old = derive_file("gemma3");
    srv_model_err e;
    assert_true(srv_model_derive(cfg, NULL, &m, &e));
    for (int32_t l = 0; l < 6; l++)
        assert_true(cJSON_Compare(srv_model_layer_at(m, NULL, l)->options,
                                  srv_model_layer_at(old, NULL, l)->options, true));
    srv_model_free(m);
    srv_model_free(old);
    cJSON_Delete(cfg);

    /* Flat (Llama 3 on transformers 5), theta inside the dict. */
    cfg = cJSON_Parse("{\"model_type\":\"llama\",\"hidden_size\":64,\"num_attention_heads\":4,"
                      "\"num_key_value_heads\":2,\"num_hidden_layers\":2,\"rope_parameters\":{"
                      "\"rope_type\":\"llama3\",\"rope_theta\":500000.0,\"factor\":8.0,"
                      "\"low_freq_factor\":1.0,\"high_freq_factor\":4.0,"
                      "\"original_max_position_embeddings\":8192}}");
    old = derive_file("llama");
    assert_true(srv_model_derive(cfg, NULL, &m, &e));
    assert_true(cJSON_Compare(m->layers[0].options, old->layers[0].options, true));
    srv_model_free(m);
    srv_model_free(old);
    cJSON_Delete(cfg);
}

/* The scheme object of layer l of m. */
static const cJSON *layer_scheme(const srv_model *m, int32_t l)
{
    return cJSON_GetObjectItemCaseSensitive(srv_model_layer_at(m, NULL, l)->options, "scheme");
}

static double scheme_num(const cJSON *sc, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(sc, name);
    assert_true(cJSON_IsNumber(v));
    return v->valuedouble;
}

/* rope_type "proportional" (Gemma 4's global layers) under a known model
 * type: the whole head rotates, partial_rotary_factor is the share of
 * pairs; a "dynamic" dict with alpha is Hunyuan's ntk_alpha (vLLM's rule). */
static void test_proportional_and_ntk_alpha(void **state)
{
    (void)state;
    srv_model *m = NULL;
    srv_model_err e;
    cJSON *cfg = cJSON_Parse(
        "{\"model_type\":\"gemma3_text\",\"hidden_size\":64,\"num_attention_heads\":4,"
        "\"num_key_value_heads\":2,\"head_dim\":32,\"num_hidden_layers\":6,"
        "\"query_pre_attn_scalar\":256,\"sliding_window\":1024,\"rms_norm_eps\":1e-6,"
        "\"rope_parameters\":{"
        "\"sliding_attention\":{\"rope_type\":\"default\",\"rope_theta\":10000.0},"
        "\"full_attention\":{\"rope_type\":\"proportional\",\"partial_rotary_factor\":0.25,"
        "\"rope_theta\":1000000.0}}}");
    assert_true(srv_model_derive(cfg, NULL, &m, &e));
    const cJSON *full = layer_scheme(m, 5), *local = layer_scheme(m, 0);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(full, "scaling")),
                        "proportional");
    assert_true(scheme_num(full, "partial_rotary_factor") == 0.25);
    assert_true(scheme_num(full, "rotary_dim") == 32);
    assert_true(scheme_num(full, "base") == 1e6);
    assert_true(scheme_num(full, "factor") == 1.0);
    assert_null(cJSON_GetObjectItemCaseSensitive(local, "scaling"));
    srv_model_free(m);
    cJSON_Delete(cfg);

    cfg = cJSON_Parse("{\"model_type\":\"llama\",\"hidden_size\":128,\"num_attention_heads\":4,"
                      "\"num_hidden_layers\":2,\"rope_theta\":10000.0,\"rope_scaling\":{"
                      "\"type\":\"dynamic\",\"alpha\":1000.0,\"factor\":1.0,\"beta_fast\":32,"
                      "\"beta_slow\":1,\"mscale\":1.0,\"mscale_all_dim\":1.0}}");
    assert_true(srv_model_derive(cfg, NULL, &m, &e));
    const cJSON *sc = layer_scheme(m, 1);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(sc, "scaling")),
                        "ntk_alpha");
    assert_true(scheme_num(sc, "alpha") == 1000.0);
    assert_null(cJSON_GetObjectItemCaseSensitive(sc, "factor"));
    srv_model_free(m);
    cJSON_Delete(cfg);
}

/* ------------------------------------------------------------------------- */
/* --model                                                                   */
/* ------------------------------------------------------------------------- */

static void test_model_set_load(void **state)
{
    (void)state;
    srv_model_spec specs[2] = {{"a", "tests/fixtures/models/gemma2.json"},
                               {"b", "tests/fixtures/models/t5.json"}};
    srv_model_set *s = NULL;
    char err[512];
    assert_true(srv_model_set_load(specs, 2, &s, err, sizeof err));
    assert_int_equal(srv_model_set_count(s), 2);
    assert_string_equal(srv_model_set_find(s, "b")->model_type, "t5");
    assert_null(srv_model_set_find(s, "c"));
    assert_string_equal(srv_model_set_at(s, 0)->name, "a");
    srv_model_set_free(s);

    assert_true(srv_model_set_load(specs, 0, &s, err, sizeof err));
    assert_null(s);
    assert_int_equal(srv_model_set_count(NULL), 0);

    snprintf(specs[1].path, sizeof specs[1].path, "tests/fixtures/models/missing.json");
    assert_false(srv_model_set_load(specs, 2, &s, err, sizeof err));
    assert_non_null(strstr(err, "--model b=tests/fixtures/models/missing.json: cannot open"));
    assert_null(s);

    snprintf(specs[1].path, sizeof specs[1].path, "Makefile");
    assert_false(srv_model_set_load(specs, 2, &s, err, sizeof err));
    assert_non_null(strstr(err, "not valid JSON"));

    snprintf(specs[1].name, sizeof specs[1].name, "a");
    snprintf(specs[1].path, sizeof specs[1].path, "tests/fixtures/models/t5.json");
    assert_false(srv_model_set_load(specs, 2, &s, err, sizeof err));
    assert_non_null(strstr(err, "given twice"));
}

/* DeepSeek's MLA: q's head dim is qk_nope + qk_rope whatever head_dim
 * says, the kv heads are the heads, the option mla names qk_rope_head_dim,
 * V3's rope_interleave false is rotate_half (neox), V3 leaves the scale to
 * the MLA call (HF's mscale_all_dim), an odd qk_rope_head_dim is refused. */
static void test_deepseek_mla(void **state)
{
    (void)state;
    srv_model *m = derive_file("deepseek_v3"), *n = NULL;
    srv_model_err e;
    const srv_model_source *s = srv_model_source_of(&m->layers[0], "mla");
    assert_non_null(s);
    assert_string_equal(s->key, "qk_rope_head_dim");
    assert_string_equal(s->value, "8");
    assert_null(cJSON_GetObjectItem(m->layers[0].options, "scale"));
    assert_string_equal(m->layers[0].dim.key, "qk_nope_head_dim + qk_rope_head_dim");
    srv_model_free(m);
    cJSON *cfg = cJSON_Parse("{\"model_type\":\"deepseek_v3\",\"hidden_size\":64,"
                             "\"num_attention_heads\":4,\"num_key_value_heads\":1,"
                             "\"head_dim\":8,\"num_hidden_layers\":1,\"qk_nope_head_dim\":16,"
                             "\"qk_rope_head_dim\":8,\"rope_interleave\":false}");
    assert_true(srv_model_derive(cfg, NULL, &n, &e));
    assert_int_equal(n->layers[0].head_dim, 24);
    assert_int_equal(n->layers[0].num_kv_heads, 4);
    assert_string_equal(
        cJSON_GetObjectItem(cJSON_GetObjectItem(n->layers[0].options, "scheme"), "layout")
            ->valuestring,
        "neox");
    srv_model_free(n);
    cJSON_Delete(cfg);
    cfg = cJSON_Parse("{\"model_type\":\"deepseek_v2\",\"hidden_size\":64,"
                      "\"num_attention_heads\":4,\"num_hidden_layers\":1,"
                      "\"qk_rope_head_dim\":7}");
    assert_false(srv_model_derive(cfg, NULL, &n, &e));
    assert_string_equal(e.key, "qk_rope_head_dim");
    cJSON_Delete(cfg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_model_type_derives_as_written),
        cmocka_unit_test(test_sources_name_the_config_keys),
        cmocka_unit_test(test_layers_and_stacks),
        cmocka_unit_test(test_refusals_name_the_key),
        cmocka_unit_test(test_rope_parameters_of_transformers_5),
        cmocka_unit_test(test_proportional_and_ntk_alpha),
        cmocka_unit_test(test_model_set_load),
        cmocka_unit_test(test_deepseek_mla),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
