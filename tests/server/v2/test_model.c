/* test_model.c - server/v2/model.c: the protocol's surface without HTTP:
 * /v1 errors rewritten into {"error":"..."}, the models and their
 * versions, model metadata, and Triton's statistics from the counters.
 */
#include "testutil.h"
#include "v2/v2.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    char msg[256];
    memset(&r, 0, sizeof r);
    srv_v2_model_metadata("attention-shaw", &r);
    assert_int_equal(r.http_status, 200);
    assert_non_null(strstr(r.body, "{\"name\":\"rel_k\",\"datatype\":\"FP32\",\"shape\":[-1,-1]}"));
    srv_reply_free(&r);
    srv_v2_model_metadata("attention-shaww", &r);
    assert_int_equal(r.http_status, 404);
    srv_reply_free(&r);
    assert_true(srv_v2_model_known("attention-none"));
    assert_false(srv_v2_model_known("attention-"));
    assert_false(srv_v2_model_known("rope"));
    srv_v2_unknown_model("x", NULL, msg, 160);
    assert_true(strlen(msg) < 159); /* fits the HTTP layer's refusal buffer */
    /* Versions: "" (none named) and "1" only. */
    assert_true(srv_v2_model_version_known("attention-t5", ""));
    assert_true(srv_v2_model_version_known("attention-t5", NULL));
    assert_true(srv_v2_model_version_known("attention-t5", "1"));
    assert_false(srv_v2_model_version_known("attention-t5", "2"));
    assert_false(srv_v2_model_version_known("attention-t5", "1x"));
    assert_false(srv_v2_model_version_known("attention-t6", "1"));
    srv_v2_unknown_model("attention-t5", "0123456789abcdefghij", msg, 160);
    assert_string_equal(msg, "model 'attention-t5' has no version '0123456789abcdef...': its one "
                             "version is 1");
    assert_string_equal(srv_v2_model_scheme("attention-alibi"), "alibi");
    assert_null(srv_v2_model_scheme("alibi"));
}

/* Triton's statistics: one $model_stat per model from the counters given,
 * in the order of pa_scheme_type; unknown models are a 404. */
static void test_stats(void **state)
{
    (void)state;
    srv_reply r;
    srv_model_counts counts[PA_SCHEME_COUNT];
    memset(counts, 0, sizeof counts);
    counts[PA_SCHEME_T5] = (srv_model_counts){.success = 3,
                                              .fail = 2,
                                              .success_ns = 3000,
                                              .fail_ns = 200,
                                              .phase_ns = {10, 20, 30, 40},
                                              .last_ms = 1700000000123u};
    memset(&r, 0, sizeof r);
    srv_v2_model_stats("attention-t5", counts, &r);
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

    srv_v2_model_stats(NULL, counts, &r);
    root = cJSON_ParseWithLength(r.body, r.body_len);
    arr = cJSON_GetObjectItemCaseSensitive(root, "model_stats");
    assert_int_equal(cJSON_GetArraySize(arr), PA_SCHEME_COUNT);
    s = cJSON_GetArrayItem(arr, PA_SCHEME_T5);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(s, "name")->valuestring, "attention-t5");
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(s, "inference_count")->valueint, 3);
    s = cJSON_GetArrayItem(arr, PA_SCHEME_ROPE);
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(s, "inference_count")->valueint, 0);
    cJSON_Delete(root);
    srv_reply_free(&r);

    srv_v2_model_stats("attention-t7", counts, &r);
    assert_int_equal(r.http_status, 404);
    assert_non_null(strstr(r.body, "{\"error\":\"unknown model 'attention-t7'"));
    srv_reply_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reply_error_conversion),
        cmocka_unit_test(test_metadata),
        cmocka_unit_test(test_stats),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
