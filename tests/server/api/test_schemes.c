/* test_schemes.c - server/api/schemes.c: GET /v1/schemes lists every scheme
 * in order with its site and default scale, its parameters as api_params
 * has them with pa_scheme_init's defaults, enum values, rope scalings and
 * what each reads, options, dtypes and shapes; it takes no body.
 */
#include "api/job.h"
#include "api/protocol.h"
#include "api/request.h"
#include "testutil.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static srv_limits lim_of(void)
{
    srv_limits lim = {.max_batch_items = 4,
                      .max_tensor_elements = 1 << 16,
                      .max_request_memory = (size_t)64 << 20,
                      .parallel_parts = 1};
    return lim;
}

/* The answer, parsed; its text in *text when asked (malloc'd). */
static cJSON *answer(const srv_limits *lim, char **text)
{
    srv_reply r;
    memset(&r, 0, sizeof r);
    srv_endpoint_answer(&srv_ep_schemes, lim, &r);
    assert_int_equal(r.http_status, 200);
    assert_non_null(r.content_type);
    assert_non_null(strstr(r.content_type, "application/json"));
    cJSON *ans = cJSON_ParseWithLength(r.body, r.body_len);
    assert_non_null(ans);
    if (text != NULL) {
        *text = tu_alloc(r.body_len + 1, 1);
        memcpy(*text, r.body, r.body_len);
    }
    srv_reply_free(&r);
    return ans;
}

static const char *str(const cJSON *obj, const char *name)
{
    const char *s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(obj, name));
    if (s == NULL)
        fail_msg("no string '%s'", name);
    return s;
}

static const cJSON *scheme_named(const cJSON *ans, const char *name)
{
    const cJSON *s;
    cJSON_ArrayForEach(s, cJSON_GetObjectItemCaseSensitive(ans, "schemes"))
    {
        if (strcmp(str(s, "name"), name) == 0)
            return s;
    }
    fail_msg("no scheme '%s'", name);
    return NULL;
}

static const cJSON *param_named(const cJSON *scheme, const char *name)
{
    const cJSON *p;
    cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(scheme, "parameters"))
    {
        if (strcmp(str(p, "name"), name) == 0)
            return p;
    }
    fail_msg("no parameter '%s' in scheme '%s'", name, str(scheme, "name"));
    return NULL;
}

/* arr is the array of strings want[0..n) (NULL-terminated list). */
static void strings_are(const cJSON *arr, const char *const *want)
{
    size_t i = 0;
    const cJSON *s;
    assert_true(cJSON_IsArray(arr));
    cJSON_ArrayForEach(s, arr)
    {
        if (want[i] == NULL)
            fail_msg("more than %zu values: '%s'", i, cJSON_GetStringValue(s));
        if (!cJSON_IsString(s) || strcmp(s->valuestring, want[i]) != 0)
            fail_msg("value %zu is '%s', wanted '%s'", i, cJSON_GetStringValue(s), want[i]);
        i++;
    }
    if (want[i] != NULL)
        fail_msg("only %zu values, '%s' is missing", i, want[i]);
}

static void test_every_scheme(void **state)
{
    (void)state;
    srv_limits lim = lim_of();
    cJSON *ans = answer(&lim, NULL);
    const cJSON *schemes = cJSON_GetObjectItemCaseSensitive(ans, "schemes"), *s;
    static const char *const sites[PA_SCHEME_COUNT] = {
        "none",   "input",  "input",       "logits_values", "logits", "qk_rotation", "logits",
        "logits", "logits", "qk_rotation", "qk_rotation",   "logits", "logits"};
    int t = 0;
    assert_int_equal(cJSON_GetArraySize(schemes), PA_SCHEME_COUNT);
    cJSON_ArrayForEach(s, schemes)
    {
        assert_string_equal(str(s, "name"), pa_scheme_type_name((pa_scheme_type)t));
        assert_string_equal(str(s, "position_site"), sites[t]);
        assert_string_equal(str(s, "default_scale"),
                            t == PA_SCHEME_T5 ? "1.0" : "1/sqrt(head_dim)");
        assert_true(strlen(str(s, "description")) > 10);
        assert_true(cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(s, "parameters")));
        /* Only rope has scalings. */
        assert_true((cJSON_GetObjectItemCaseSensitive(s, "scalings") != NULL) ==
                    (t == PA_SCHEME_ROPE));
        t++;
    }
    assert_int_equal(cJSON_GetArraySize(
                         cJSON_GetObjectItemCaseSensitive(scheme_named(ans, "none"), "parameters")),
                     0);
    cJSON_Delete(ans);
}

/* Each scheme's parameters are the table's, in its order, each with its
 * JSON type, shape, requirement, description, scalings and default. */
static void test_parameters_from_the_table(void **state)
{
    (void)state;
    srv_limits lim = lim_of();
    cJSON *ans = answer(&lim, NULL);
    size_t n, seen = 0;
    const api_param *p = api_params(&n);
    for (int t = 0; t < PA_SCHEME_COUNT; t++) {
        const cJSON *scheme = scheme_named(ans, pa_scheme_type_name((pa_scheme_type)t));
        const cJSON *got = cJSON_GetObjectItemCaseSensitive(scheme, "parameters")->child;
        pa_scheme def;
        pa_scheme_init(&def, (pa_scheme_type)t);
        for (size_t i = 0; i < n; i++) {
            if (p[i].type != (pa_scheme_type)t)
                continue;
            if (got == NULL)
                fail_msg("%s: parameter %s is missing", pa_scheme_type_name(p[i].type), p[i].name);
            assert_string_equal(str(got, "name"), p[i].name);
            assert_string_equal(str(got, "type"), api_param_kind_name(p[i].kind));
            assert_string_equal(str(got, "required"), p[i].need);
            assert_string_equal(str(got, "description"), p[i].doc);
            if (p[i].shape != NULL)
                assert_string_equal(str(got, "shape"), p[i].shape);
            else
                assert_null(cJSON_GetObjectItemCaseSensitive(got, "shape"));
            const cJSON *d = cJSON_GetObjectItemCaseSensitive(got, "default");
            const char *at = (const char *)&def + p[i].offset;
            assert_non_null(d);
            switch (p[i].kind) {
            case API_PARAM_NUMBER: {
                double v;
                memcpy(&v, at, sizeof v);
                assert_true(cJSON_IsNumber(d) && d->valuedouble == v);
                break;
            }
            case API_PARAM_INT: {
                int32_t v;
                memcpy(&v, at, sizeof v);
                assert_true(cJSON_IsNumber(d) && d->valuedouble == (double)v);
                break;
            }
            case API_PARAM_BOOL: {
                bool v;
                memcpy(&v, at, sizeof v);
                assert_true(cJSON_IsBool(d) && cJSON_IsTrue(d) == v);
                break;
            }
            case API_PARAM_ENUM:
                assert_true(cJSON_IsString(d));
                assert_non_null(cJSON_GetObjectItemCaseSensitive(got, "values"));
                break;
            default:
                assert_true(cJSON_IsNull(d)); /* tables have no default */
                break;
            }
            const cJSON *sc = cJSON_GetObjectItemCaseSensitive(got, "scalings"), *x;
            if (p[i].scalings == 0) {
                assert_null(sc);
            } else {
                unsigned mask = 0;
                cJSON_ArrayForEach(x, sc)
                {
                    pa_rope_scaling k;
                    assert_true(pa_rope_scaling_from_name(cJSON_GetStringValue(x), &k));
                    mask |= 1u << k;
                }
                assert_int_equal(mask, p[i].scalings);
            }
            got = got->next;
            seen++;
        }
        if (got != NULL)
            fail_msg("%s: parameter %s is not in the table", pa_scheme_type_name((pa_scheme_type)t),
                     str(got, "name"));
    }
    assert_int_equal(seen, n);
    cJSON_Delete(ans);
}

/* The defaults as posattn.h states them, and the enums' values. */
static void test_defaults_and_values(void **state)
{
    (void)state;
    srv_limits lim = lim_of();
    cJSON *ans = answer(&lim, NULL);
    const cJSON *rope = scheme_named(ans, "rope"), *sin = scheme_named(ans, "sinusoidal");
    const cJSON *t5 = scheme_named(ans, "t5"), *alibi = scheme_named(ans, "alibi");
    static const struct {
        const char *scheme, *param;
        double value;
    } nums[] = {
        {"sinusoidal", "base", 10000},
        {"rope", "base", 10000},
        {"rope", "rotary_dim", 0},
        {"rope", "factor", 0},
        {"rope", "beta_fast", 32},
        {"rope", "beta_slow", 1},
        {"rope", "low_freq_factor", 1},
        {"rope", "high_freq_factor", 4},
        {"t5", "num_buckets", 32},
        {"t5", "max_distance", 128},
        {"alibi", "max_bias", 8},
        {"learned", "offset", 0},
        {"shaw", "max_relative_position", 0},
    };
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(
            param_named(scheme_named(ans, nums[i].scheme), nums[i].param), "default");
        if (!cJSON_IsNumber(d) || d->valuedouble != nums[i].value)
            fail_msg("%s.%s: default is not %g", nums[i].scheme, nums[i].param, nums[i].value);
    }
    assert_true(
        cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(param_named(rope, "truncate"), "default")));
    assert_true(cJSON_IsFalse(
        cJSON_GetObjectItemCaseSensitive(param_named(rope, "mrope_interleaved"), "default")));
    assert_true(cJSON_IsTrue(
        cJSON_GetObjectItemCaseSensitive(param_named(t5, "bidirectional"), "default")));
    assert_true(cJSON_IsFalse(
        cJSON_GetObjectItemCaseSensitive(param_named(alibi, "symmetric"), "default")));
    assert_true(
        cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(param_named(t5, "table"), "default")));

    static const char *const sin_layouts[] = {"interleaved", "concat", NULL};
    static const char *const rope_layouts[] = {"neox", "gptj", NULL};
    static const char *const scalings[] = {"none",      "linear", "ntk",      "dynamic",
                                           "yarn",      "llama3", "longrope", "proportional",
                                           "ntk_alpha", NULL};
    assert_string_equal(str(param_named(sin, "layout"), "default"), "interleaved");
    strings_are(cJSON_GetObjectItemCaseSensitive(param_named(sin, "layout"), "values"),
                sin_layouts);
    assert_string_equal(str(param_named(rope, "layout"), "default"), "neox");
    strings_are(cJSON_GetObjectItemCaseSensitive(param_named(rope, "layout"), "values"),
                rope_layouts);
    assert_string_equal(str(param_named(rope, "scaling"), "default"), "none");
    strings_are(cJSON_GetObjectItemCaseSensitive(param_named(rope, "scaling"), "values"), scalings);
    static const char *const factor_scalings[] = {"linear", "ntk",      "dynamic",      "yarn",
                                                  "llama3", "longrope", "proportional", NULL};
    strings_are(cJSON_GetObjectItemCaseSensitive(param_named(rope, "factor"), "scalings"),
                factor_scalings);
    /* shaw: Shaw's direction by default, BERT's the other; no key term. */
    const cJSON *shaw = scheme_named(ans, "shaw");
    static const char *const directions[] = {"key_minus_query", "query_minus_key", NULL};
    assert_string_equal(str(param_named(shaw, "direction"), "default"), "key_minus_query");
    assert_string_equal(str(param_named(shaw, "direction"), "type"), "string");
    strings_are(cJSON_GetObjectItemCaseSensitive(param_named(shaw, "direction"), "values"),
                directions);
    assert_true(
        cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(param_named(shaw, "key_term"), "default")));
    assert_string_equal(str(param_named(shaw, "key_term"), "type"), "boolean");
    assert_non_null(strstr(str(param_named(shaw, "direction"), "description"), "BERT"));
    cJSON_Delete(ans);
}

/* rope's scalings, each with the parameters that it reads. */
static void test_rope_scalings(void **state)
{
    (void)state;
    srv_limits lim = lim_of();
    cJSON *ans = answer(&lim, NULL);
    const cJSON *sc = cJSON_GetObjectItemCaseSensitive(scheme_named(ans, "rope"), "scalings"), *s;
    static const char *const none[] = {NULL};
    static const char *const factor[] = {"factor", NULL};
    static const char *const dynamic[] = {"factor", "original_max_position", NULL};
    static const char *const yarn[] = {
        "factor", "original_max_position", "beta_fast", "beta_slow", "truncate",
        "mscale", "mscale_all_dim",        NULL};
    static const char *const llama3[] = {"factor", "original_max_position", "low_freq_factor",
                                         "high_freq_factor", NULL};
    static const char *const longrope[] = {"factor", "original_max_position", "short_factor",
                                           "long_factor", NULL};
    static const char *const proportional[] = {"factor", "partial_rotary_factor", NULL};
    static const char *const alpha[] = {"alpha", NULL};
    static const char *const *const want[PA_ROPE_SCALING_COUNT] = {
        none, factor, factor, dynamic, yarn, llama3, longrope, proportional, alpha};
    int k = 0;
    assert_int_equal(cJSON_GetArraySize(sc), PA_ROPE_SCALING_COUNT);
    cJSON_ArrayForEach(s, sc)
    {
        assert_string_equal(str(s, "name"), pa_rope_scaling_name((pa_rope_scaling)k));
        assert_true(strlen(str(s, "description")) > 5);
        strings_are(cJSON_GetObjectItemCaseSensitive(s, "parameters"), want[k]);
        k++;
    }
    assert_non_null(strstr(str(sc->child->next->next->next->next, "description"), "YaRN"));
    cJSON_Delete(ans);
}

static void test_options_dtypes_shapes(void **state)
{
    (void)state;
    srv_limits lim = lim_of();
    cJSON *ans = answer(&lim, NULL);
    size_t n;
    const api_option *o = api_options(&n);
    const cJSON *opts = cJSON_GetObjectItemCaseSensitive(ans, "options"), *x = opts->child;
    assert_int_equal(cJSON_GetArraySize(opts), n);
    for (size_t i = 0; i < n; i++, x = x->next) {
        assert_string_equal(str(x, "name"), o[i].name);
        assert_string_equal(str(x, "type"), o[i].type);
        assert_string_equal(str(x, "description"), o[i].formula);
        assert_string_equal(str(x, "models"), o[i].models);
        assert_string_equal(str(x, "kserve"), o[i].kserve);
        if (o[i].shape != NULL)
            assert_string_equal(str(x, "shape"), o[i].shape);
        else
            assert_null(cJSON_GetObjectItemCaseSensitive(x, "shape"));
        /* The table's JSON text, as a JSON value; no member without one. */
        const cJSON *def = cJSON_GetObjectItemCaseSensitive(x, "default");
        if (o[i].defaults != NULL) {
            cJSON *want = cJSON_Parse(o[i].defaults);
            assert_non_null(want);
            assert_non_null(def);
            assert_true(cJSON_Compare(def, want, true));
            cJSON_Delete(want);
        } else {
            assert_null(def);
        }
    }

    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(ans, "dtypes");
    static const char *const in[] = {"f32", "f16", "bf16", "f64", NULL};
    static const char *const out[] = {"f32", "f16", "bf16", NULL};
    strings_are(cJSON_GetObjectItemCaseSensitive(dt, "input"), in);
    strings_are(cJSON_GetObjectItemCaseSensitive(dt, "output"), out);
    assert_non_null(strstr(str(dt, "description"), "output_dtype"));

    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(ans, "shapes");
    static const char *const rows[][3] = {
        {"q", "[Lq, H, D]", "[B, Lq, H, D]"},
        {"k", "[Lk, Hkv, D]", "[B, Lk, Hkv, D]"},
        {"v", "[Lk, Hkv, Dv]", "[B, Lk, Hkv, Dv]"},
        {"weights", "[H, Lq, Lk]", "[B, H, Lq, Lk]"},
        {"k_rot", "[Lk, Hkv, D] (mla: [Lk, D_rope])", "[B, Lk, Hkv, D]"},
        {"entropy", "[H, Lq]", "[B, H, Lq]"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(sh, rows[i][0]);
        assert_string_equal(str(r, "one"), rows[i][1]);
        assert_string_equal(str(r, "batch"), rows[i][2]);
    }
    /* Every result name has its shape. */
    for (int i = 0; i < API_NRES; i++)
        assert_non_null(cJSON_GetObjectItemCaseSensitive(sh, api_result_names[i]));
    /* + cu_seqlens, cu_seqlens_k, mla's k_rope and c_kv */
    assert_int_equal(cJSON_GetArraySize(sh), 22 + 1);
    cJSON_Delete(ans);
}

/* A GET endpoint: no body taken, the same answer with or without limits. */
static void test_no_body(void **state)
{
    (void)state;
    srv_limits lim = lim_of();
    srv_reply r;
    srv_job *job = NULL;
    char *a = NULL, *b = NULL;
    assert_false(srv_endpoint_takes_body(&srv_ep_schemes));
    memset(&r, 0, sizeof r);
    assert_false(srv_job_prepare(&srv_ep_schemes, "{}", 2, &lim, &job, &r));
    assert_null(job);
    assert_int_equal(r.http_status, 404);
    srv_reply_free(&r);
    cJSON_Delete(answer(&lim, &a));
    cJSON_Delete(answer(NULL, &b));
    assert_string_equal(a, b);
    free(a);
    free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_scheme),
        cmocka_unit_test(test_parameters_from_the_table),
        cmocka_unit_test(test_defaults_and_values),
        cmocka_unit_test(test_rope_scalings),
        cmocka_unit_test(test_options_dtypes_shapes),
        cmocka_unit_test(test_no_body),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
