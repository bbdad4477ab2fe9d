/* test_model.c - server/v2/model.c, models.c and metadata.c: the
 * protocol's surface without HTTP: /v1 errors rewritten into
 * {"error":"..."}, the models (the schemes' and those of --model) and their
 * versions, the keys of their counters, model metadata (with the dims, the
 * parameters and the requirements a config gives), the start-up check of
 * --model names, and Triton's statistics from the counters.
 */
#include "testutil.h"
#include "v2/v2.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The fixture configs as --model g2, oss and t5 would load them. */
static srv_model_set *load_set(void)
{
    static const srv_model_spec specs[] = {
        {"g2", "tests/fixtures/models/gemma2.json"},
        {"oss", "tests/fixtures/models/gpt_oss.json"},
        {"t5", "tests/fixtures/models/t5.json"},
    };
    srv_model_set *set = NULL;
    char err[512];
    if (!srv_model_set_load(specs, 3, &set, err, sizeof err))
        fail_msg("%s", err);
    return set;
}

/* One model's metadata, parsed. */
static cJSON *metadata(const srv_model_set *set, const char *name)
{
    srv_reply r;
    cJSON *root;
    memset(&r, 0, sizeof r);
    srv_v2_model_metadata(set, name, &r);
    assert_int_equal(r.http_status, 200);
    root = cJSON_ParseWithLength(r.body, r.body_len);
    assert_non_null(root);
    srv_reply_free(&r);
    return root;
}

/* The shape of input (or output) name of metadata root as text: "[-1,4,16]". */
static void shape_of(const cJSON *root, const char *list, const char *name, char *buf, size_t cap)
{
    const cJSON *t;
    buf[0] = '\0';
    cJSON_ArrayForEach(
        t, cJSON_GetObjectItemCaseSensitive(
               root, list)) if (strcmp(cJSON_GetObjectItemCaseSensitive(t, "name")->valuestring,
                                       name) == 0)
    {
        char *text = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(t, "shape"));
        snprintf(buf, cap, "%s", text);
        free(text);
    }
}

static const char *prop(const cJSON *root, const char *name)
{
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(root, "properties"), name);
    return cJSON_IsString(p) ? p->valuestring : NULL;
}

static void test_reply_error_conversion(void **state)
{
    (void)state;
    srv_reply r;
    memset(&r, 0, sizeof r);
    srv_reply_error(&r, SRV_ERR_SHAPE_MISMATCH, "inputs[0].k", "k.shape[1]=%d is wrong", 3);
    srv_v2_reply_error(&r);
    assert_int_equal(r.http_status, 400);
    assert_int_equal(r.body_len, strlen("{\"error\":\"k.shape[1]=3 is wrong\"}"));
    assert_memory_equal(r.body, "{\"error\":\"k.shape[1]=3 is wrong\"}", r.body_len);
    srv_v2_reply_error(&r); /* already converted: unchanged */
    assert_memory_equal(r.body, "{\"error\":\"k.shape[1]=3 is wrong\"}", r.body_len);
    srv_reply_free(&r);
    srv_reply_json(&r, 200, strdup("{\"error\":{\"message\":\"not an error\"}}"), 36);
    srv_v2_reply_error(&r); /* a 200 is left alone */
    assert_memory_equal(r.body, "{\"error\":{\"message\":\"not an error\"}}", 36);
    srv_reply_free(&r);
}

static void test_metadata(void **state)
{
    (void)state;
    srv_reply r;
    char msg[256], key[80];
    memset(&r, 0, sizeof r);
    srv_v2_model_metadata(NULL, "attention-shaw", &r);
    assert_int_equal(r.http_status, 200);
    assert_non_null(strstr(r.body, "{\"name\":\"rel_k\",\"datatype\":\"FP32\",\"shape\":[-1,-1]}"));
    srv_reply_free(&r);
    srv_v2_model_metadata(NULL, "attention-shaww", &r);
    assert_int_equal(r.http_status, 404);
    srv_reply_free(&r);
    assert_true(srv_v2_model_known(NULL, "attention-none"));
    assert_false(srv_v2_model_known(NULL, "attention-"));
    assert_false(srv_v2_model_known(NULL, "rope"));
    srv_v2_unknown_model(NULL, "x", NULL, msg, 160);
    assert_true(strlen(msg) < 159);
    /* Versions: "" (none named) and "1" only. */
    assert_true(srv_v2_model_version_known(NULL, "attention-t5", ""));
    assert_true(srv_v2_model_version_known(NULL, "attention-t5", NULL));
    assert_true(srv_v2_model_version_known(NULL, "attention-t5", "1"));
    assert_false(srv_v2_model_version_known(NULL, "attention-t5", "2"));
    assert_false(srv_v2_model_version_known(NULL, "attention-t5", "1x"));
    assert_false(srv_v2_model_version_known(NULL, "attention-t6", "1"));
    srv_v2_unknown_model(NULL, "attention-t5", "0123456789abcdefghij", msg, 160);
    assert_string_equal(msg, "model 'attention-t5' has no version '0123456789abcdef...': its one "
                             "version is 1");
    /* The key of a scheme's counters is the scheme's name. */
    assert_string_equal(srv_v2_model_key(NULL, "attention-alibi", key, sizeof key), "alibi");
    assert_null(srv_v2_model_key(NULL, "alibi", key, sizeof key));
}

/* The counters by key, as runtime/metrics.c keeps them: a scheme's name or
 * "model:NAME". */
typedef struct counters {
    const char *keys[8];
    srv_model_counts c[8];
    int asked;
} counters;

static void counts_of(void *arg, const char *key, srv_model_counts *out)
{
    counters *k = arg;
    k->asked++;
    for (int i = 0; i < 8 && k->keys[i] != NULL; i++)
        if (strcmp(k->keys[i], key) == 0)
            *out = k->c[i];
}

/* Triton's statistics: one $model_stat per model from the counters of its
 * key, the schemes' in the order of pa_scheme_type, then those of --model;
 * unknown models are a 404. */
static void test_stats(void **state)
{
    (void)state;
    srv_reply r;
    counters k = {{"t5", "model:g2"}, {{0}}, 0};
    srv_model_set *set = load_set();
    k.c[0] = (srv_model_counts){.success = 3,
                                .fail = 2,
                                .success_ns = 3000,
                                .fail_ns = 200,
                                .phase_ns = {10, 20, 30, 40},
                                .last_ms = 1700000000123u};
    k.c[1] = (srv_model_counts){.success = 7, .fail = 1};
    memset(&r, 0, sizeof r);
    srv_v2_model_stats(NULL, "attention-t5", counts_of, &k, &r);
    assert_int_equal(r.http_status, 200);
    cJSON *root = cJSON_ParseWithLength(r.body, r.body_len);
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(root, "model_stats");
    assert_int_equal(cJSON_GetArraySize(arr), 1);
    const cJSON *s = cJSON_GetArrayItem(arr, 0);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(s, "name")->valuestring, "attention-t5");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(s, "version")->valuestring, "1");
    assert_true(cJSON_GetObjectItemCaseSensitive(s, "last_inference")->valuedouble ==
                1700000000123.0);
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(s, "inference_count")->valueint, 3);
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(s, "execution_count")->valueint, 3);
    const cJSON *inf = cJSON_GetObjectItemCaseSensitive(s, "inference_stats");
    static const struct {
        const char *name;
        int count, ns;
    } want[] = {{"success", 3, 3000},     {"fail", 2, 200},         {"queue", 3, 10},
                {"compute_input", 3, 20}, {"compute_infer", 3, 30}, {"compute_output", 3, 40},
                {"cache_hit", 0, 0},      {"cache_miss", 0, 0}};
    assert_int_equal(cJSON_GetArraySize(inf), 8);
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(inf, want[i].name);
        assert_non_null(d);
        assert_int_equal(cJSON_GetObjectItemCaseSensitive(d, "count")->valueint, want[i].count);
        assert_int_equal(cJSON_GetObjectItemCaseSensitive(d, "ns")->valueint, want[i].ns);
    }
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(s, "batch_stats")), 0);
    cJSON_Delete(root);
    srv_reply_free(&r);

    /* Every model: the schemes', then the set's (g2, oss, t5), each asked
     * by its key; without models, the schemes' only. */
    k.asked = 0;
    srv_v2_model_stats(set, NULL, counts_of, &k, &r);
    assert_int_equal(k.asked, PA_SCHEME_COUNT + 3);
    root = cJSON_ParseWithLength(r.body, r.body_len);
    arr = cJSON_GetObjectItemCaseSensitive(root, "model_stats");
    assert_int_equal(cJSON_GetArraySize(arr), PA_SCHEME_COUNT + 3);
    s = cJSON_GetArrayItem(arr, PA_SCHEME_T5);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(s, "name")->valuestring, "attention-t5");
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(s, "inference_count")->valueint, 3);
    s = cJSON_GetArrayItem(arr, PA_SCHEME_ROPE);
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(s, "inference_count")->valueint, 0);
    s = cJSON_GetArrayItem(arr, PA_SCHEME_COUNT);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(s, "name")->valuestring, "g2");
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(s, "inference_count")->valueint, 7);
    /* The --model t5 is not attention-t5: its counters are its own. */
    s = cJSON_GetArrayItem(arr, PA_SCHEME_COUNT + 2);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(s, "name")->valuestring, "t5");
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(s, "inference_count")->valueint, 0);
    cJSON_Delete(root);
    srv_reply_free(&r);
    srv_v2_model_stats(NULL, NULL, NULL, NULL, &r); /* no counters: zeros */
    root = cJSON_ParseWithLength(r.body, r.body_len);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(root, "model_stats")),
                     PA_SCHEME_COUNT);
    cJSON_Delete(root);
    srv_reply_free(&r);

    srv_v2_model_stats(set, "oss", counts_of, &k, &r);
    assert_int_equal(r.http_status, 200);
    assert_non_null(strstr(r.body, "\"name\":\"oss\""));
    srv_reply_free(&r);
    srv_v2_model_stats(NULL, "attention-t7", counts_of, &k, &r);
    assert_int_equal(r.http_status, 404);
    assert_non_null(strstr(r.body, "{\"error\":\"unknown model 'attention-t7'"));
    srv_reply_free(&r);
    srv_v2_model_stats(NULL, "g2", counts_of, &k, &r); /* not loaded here */
    assert_int_equal(r.http_status, 404);
    srv_reply_free(&r);
    srv_model_set_free(set);
}

/* A --model model is a model of its name beside the schemes' (a model
 * called t5 is not attention-t5), with one version, its counters keyed
 * "model:NAME", and the 404 listing the loaded names. */
static void test_config_models(void **state)
{
    (void)state;
    srv_model_set *set = load_set();
    char key[80], msg[256];
    assert_true(srv_v2_model_known(set, "g2"));
    assert_true(srv_v2_model_known(set, "t5"));
    assert_true(srv_v2_model_known(set, "attention-t5"));
    assert_false(srv_v2_model_known(set, "gemma2"));
    assert_false(srv_v2_model_known(NULL, "g2"));
    assert_true(srv_v2_model_version_known(set, "oss", "1"));
    assert_false(srv_v2_model_version_known(set, "oss", "2"));
    assert_string_equal(srv_v2_model_key(set, "t5", key, sizeof key), "model:t5");
    assert_string_equal(srv_v2_model_key(set, "attention-t5", key, sizeof key), "t5");
    assert_null(srv_v2_model_key(set, "t6", key, sizeof key));
    srv_v2_unknown_model(set, "nope", NULL, msg, sizeof msg);
    assert_non_null(strstr(msg, "unknown model 'nope'"));
    assert_non_null(strstr(msg, "attention-<scheme>"));
    assert_non_null(strstr(msg, "and those of --model: g2, oss, t5"));
    srv_v2_unknown_model(set, "oss", "3", msg, sizeof msg);
    assert_string_equal(msg, "model 'oss' has no version '3': its one version is 1");
    srv_model_set_free(set);

    /* Many long names: the list is cut short to fit the HTTP layer's 256. */
    srv_model_spec specs[40];
    for (unsigned i = 0; i < 40; i++) {
        snprintf(specs[i].name, sizeof specs[i].name,
                 "a-rather-long-model-name-%02u-padding-xxxxxxxxxxxxxxxxxxxx", i % 100u);
        snprintf(specs[i].path, sizeof specs[i].path, "tests/fixtures/models/gemma2.json");
    }
    assert_true(srv_model_set_load(specs, 40, &set, msg, sizeof msg));
    srv_v2_unknown_model(set, "nope", NULL, msg, sizeof msg);
    assert_true(strlen(msg) < 255);
    assert_non_null(strstr(msg, ", ..."));
    srv_model_set_free(set);
}

/* Start-up refuses a --model name that is a scheme's model or a route's. */
static void test_check_models(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        bool ok;
        const char *why;
    } cases[] = {
        {"attention-rope", false, "is the /v2 model of the scheme rope"},
        {"attention-none", false, "scheme none"},
        {"stats", false, "/v2/models/stats is not a model's path"},
        {"..", false, "not a model's path"},
        {"rope", true, NULL},
        {"t5", true, NULL},
        {"attention-gemma", true, NULL},
        {"attention-ropes", true, NULL},
    };
    char err[512];
    assert_true(srv_v2_check_models(NULL, err, sizeof err));
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        srv_model_spec spec;
        srv_model_set *set = NULL;
        snprintf(spec.name, sizeof spec.name, "%s", cases[i].name);
        snprintf(spec.path, sizeof spec.path, "tests/fixtures/models/gemma2.json");
        assert_true(srv_model_set_load(&spec, 1, &set, err, sizeof err));
        err[0] = '\0';
        if (srv_v2_check_models(set, err, sizeof err) != cases[i].ok)
            fail_msg("%s: %s", cases[i].name, err);
        if (!cases[i].ok) {
            assert_non_null(strstr(err, cases[i].name));
            assert_non_null(strstr(err, cases[i].why));
        }
        srv_model_set_free(set);
    }
}

/* A --model model's metadata: the dims its config fixes, the parameter
 * layer (and stack for T5) with its default, and what its layers need. */
static void test_config_metadata(void **state)
{
    (void)state;
    srv_model_set *set = load_set();
    char shape[64];
    cJSON *m = metadata(set, "oss");
    static const struct {
        const char *name, *shape;
    } oss[] = {{"q", "[-1,4,16]"},        {"k", "[-1,2,16]"}, {"v", "[-1,2,-1]"},
               {"x", "[-1,64]"},          {"w_q", "[64,64]"}, {"w_k", "[64,32]"},
               {"w_v", "[64,-1]"},        {"sinks", "[4]"},   {"q_positions", "[-1]"},
               {"q_norm_weight", "[-1]"}, {"b_k", "[32]"},    {"mask", "[-1,-1,-1]"}};
    for (size_t i = 0; i < sizeof oss / sizeof oss[0]; i++) {
        shape_of(m, "inputs", oss[i].name, shape, sizeof shape);
        if (strcmp(shape, oss[i].shape) != 0)
            fail_msg("oss input %s: shape %s, want %s", oss[i].name, shape, oss[i].shape);
    }
    shape_of(m, "outputs", "output", shape, sizeof shape);
    assert_string_equal(shape, "[-1,4,-1]");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(m, "name")->valuestring, "oss");
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(m, "parameters");
    assert_int_equal(cJSON_GetArraySize(params), 1);
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(params, "layer")->valueint, 0);
    assert_string_equal(prop(m, "model_type"), "gpt_oss");
    assert_string_equal(prop(m, "num_layers"), "4");
    assert_string_equal(prop(m, "required_inputs"), "q, k and v (or x, w_q, w_k and w_v), sinks");
    assert_non_null(strstr(prop(m, "sinks"), "attention sinks [4], required by every layer"));
    assert_non_null(strstr(prop(m, "decided_by_config"), "scheme, scale, window"));
    assert_non_null(strstr(prop(m, "layer"), "0 to 3"));
    assert_null(prop(m, "stack"));
    cJSON_Delete(m);

    /* T5: the table its stacks need, and the parameter stack. */
    m = metadata(set, "t5");
    shape_of(m, "inputs", "table", shape, sizeof shape);
    assert_string_equal(shape, "[32,4]");
    params = cJSON_GetObjectItemCaseSensitive(m, "parameters");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(params, "stack")->valuestring, "encoder");
    assert_string_equal(prop(m, "num_decoder_layers"), "2");
    assert_non_null(strstr(prop(m, "stack"), "encoder (the default) or decoder"));
    assert_non_null(strstr(prop(m, "required_inputs"), ", table"));
    cJSON_Delete(m);

    /* Gemma 2 needs no tensor beyond q, k and v. */
    m = metadata(set, "g2");
    assert_string_equal(prop(m, "required_inputs"), "q, k and v (or x, w_q, w_k and w_v)");
    assert_null(prop(m, "sinks"));
    assert_non_null(strstr(prop(m, "decided_by_config"), "softcap"));
    cJSON_Delete(m);
    srv_model_set_free(set);

    /* A tensor only some layers need is not required of every request. */
    srv_model_spec spec = {"gpt2", "tests/fixtures/models/gpt2.json"};
    char err[256];
    assert_true(srv_model_set_load(&spec, 1, &set, err, sizeof err));
    m = metadata(set, "gpt2");
    assert_non_null(strstr(prop(m, "table"), "required by layer 0 (config \"n_positions\""));
    assert_string_equal(prop(m, "required_inputs"), "q, k and v (or x, w_q, w_k and w_v)");
    assert_non_null(prop(m, "note"));
    cJSON_Delete(m);
    srv_model_set_free(set);
}

/* The models of #32: DiffLlama's output is H/2 heads of 2 head_dim and its
 * lambda vectors are inputs; Qwen2-VL's vision tower is the stack vision,
 * Qwen2.5-VL's is refused, saying why. */
static void test_differential_and_vision_metadata(void **state)
{
    (void)state;
    static const srv_model_spec specs[] = {
        {"dl", "tests/fixtures/models/diffllama.json"},
        {"vl", "tests/fixtures/models/qwen2_vl.json"},
        {"vl5", "tests/fixtures/models/qwen2_5_vl.json"},
    };
    srv_model_set *set = NULL;
    char err[512], shape[64];
    assert_true(srv_model_set_load(specs, 3, &set, err, sizeof err));

    cJSON *m = metadata(set, "dl");
    shape_of(m, "inputs", "q", shape, sizeof shape);
    assert_string_equal(shape, "[-1,4,16]");
    shape_of(m, "outputs", "output", shape, sizeof shape);
    assert_string_equal(shape, "[-1,2,32]");
    shape_of(m, "inputs", "lambda_k2", shape, sizeof shape);
    assert_string_equal(shape, "[16]");
    assert_string_equal(prop(m, "required_inputs"), "q, k and v (or x, w_q, w_k and w_v), "
                                                    "lambda_q1, lambda_k1, lambda_q2, lambda_k2");
    assert_non_null(strstr(prop(m, "lambda_q1"), "[16], required by every layer"));
    assert_non_null(strstr(prop(m, "decided_by_config"), "differential"));
    cJSON_Delete(m);

    /* Other models have no lambda inputs. The text model's and the
     * tower's shapes differ: -1. */
    m = metadata(set, "vl");
    shape_of(m, "inputs", "lambda_q1", shape, sizeof shape);
    assert_string_equal(shape, "");
    shape_of(m, "inputs", "q", shape, sizeof shape);
    assert_string_equal(shape, "[-1,-1,-1]");
    shape_of(m, "inputs", "q_positions", shape, sizeof shape);
    assert_string_equal(shape, "[-1,-1]"); /* M-RoPE's 3 rows, rope2d's 2 */
    shape_of(m, "inputs", "grid", shape, sizeof shape);
    assert_string_equal(shape, "[-1]");
    assert_non_null(strstr(prop(m, "stack"), "text (the default) or vision"));
    assert_non_null(strstr(prop(m, "stack"), "2 layers (0 to 1"));
    cJSON_Delete(m);

    m = metadata(set, "vl5");
    shape_of(m, "inputs", "q", shape, sizeof shape);
    assert_string_equal(shape, "[-1,2,128]");
    shape_of(m, "inputs", "q_positions", shape, sizeof shape);
    assert_string_equal(shape, "[3,-1]");
    assert_non_null(strstr(prop(m, "stack"), "vision is refused"));
    assert_non_null(strstr(prop(m, "stack"), "fullatt_block_indexes"));
    cJSON_Delete(m);
    srv_model_set_free(set);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reply_error_conversion),
        cmocka_unit_test(test_metadata),
        cmocka_unit_test(test_stats),
        cmocka_unit_test(test_config_models),
        cmocka_unit_test(test_check_models),
        cmocka_unit_test(test_config_metadata),
        cmocka_unit_test(test_differential_and_vision_metadata),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
