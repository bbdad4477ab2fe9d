/* test_e2e_http.c - end-to-end tests of posattnd's routes and answers: starts
 * the real binary once on a free loopback port (2 workers, default flags),
 * talks HTTP to it with libcurl and checks the numbers against
 * pa_attention_run called in this process on the same inputs; then errors,
 * encode/analyze, 404/405, openapi.yaml, the web page, /metrics and the
 * access log, and a clean stop on SIGTERM. Tests that need a server with
 * other flags are in test_e2e_limits.c and test_e2e_drain.c.
 *
 * The binary is $POSATTND, else posattnd beside this test's build folder
 * (<BUILD>/tests/test_e2e_http -> <BUILD>/posattnd), else build/posattnd.
 * Every wait and every request has a timeout; the server is killed in the
 * group teardown if a test failed before stopping it.
 *
 * Tolerance: JSON floats round-trip (requests %.9g, answers shortest text), the server and the
 * library run the same kernels: |got - want| <= 1e-5 + 1e-4 |want| (tests/e2e/e2e_cases.h).
 */
#include "e2e_cases.h"
#include "e2e_http.h"
#include "testutil.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The cases of the mixed batch: none, rope+yarn, alibi, t5 with a table, shaw. */
static void mixed_cases(acase cs[5])
{
    tu_rng r;
    tu_rng_seed(&r, 99);

    acase_init(&cs[0], "none", PA_SCHEME_NONE, 6, 6, 2, 2, 8, 8, 1);

    acase_init(&cs[1], "rope-yarn", PA_SCHEME_ROPE, 5, 9, 4, 2, 16, 16, 2);
    cs[1].scheme.rope.scaling = PA_ROPE_SCALING_YARN;
    cs[1].scheme.rope.factor = 4;
    cs[1].scheme.rope.original_max_position = 4;
    cs[1].scheme.rope.layout = PA_ROPE_LAYOUT_GPTJ;
    snprintf(cs[1].scheme_json, sizeof cs[1].scheme_json,
             ",\"scaling\":\"yarn\",\"factor\":4,\"original_max_position\":4,\"layout\":\"gptj\"");
    cs[1].causal = true;

    acase_init(&cs[2], "alibi", PA_SCHEME_ALIBI, 7, 7, 3, 3, 8, 8, 3);
    cs[2].causal = true;
    cs[2].want_weights = true;

    acase_init(&cs[3], "t5", PA_SCHEME_T5, 5, 5, 2, 1, 8, 4, 4);
    cs[3].scheme.t5.num_buckets = 8;
    cs[3].scheme.t5.max_distance = 16;
    cs[3].table = tensor_rand(&r, 2, 8, 2, 0);
    cs[3].scheme.t5.table = cs[3].table.data;
    cs[3].scheme.t5.table_rows = 8;
    cs[3].scheme.t5.table_cols = 2;
    snprintf(cs[3].scheme_json, sizeof cs[3].scheme_json, ",\"num_buckets\":8,\"max_distance\":16");

    acase_init(&cs[4], "shaw", PA_SCHEME_SHAW, 6, 6, 2, 2, 8, 8, 5);
    cs[4].scheme.shaw.max_relative_position = 2;
    cs[4].rel_k = tensor_rand(&r, 2, 5, 8, 0);
    cs[4].rel_v = tensor_rand(&r, 2, 5, 8, 0);
    cs[4].scheme.shaw.rel_k = cs[4].rel_k.data;
    cs[4].scheme.shaw.rel_k_rows = 5;
    cs[4].scheme.shaw.rel_k_cols = 8;
    cs[4].scheme.shaw.rel_v = cs[4].rel_v.data;
    cs[4].scheme.shaw.rel_v_rows = 5;
    cs[4].scheme.shaw.rel_v_cols = 8;
    snprintf(cs[4].scheme_json, sizeof cs[4].scheme_json, ",\"max_relative_position\":2");

    for (int i = 0; i < 5; i++)
        acase_reference(&cs[i]);
}

/* Checks the text exposition format: every sample belongs to the family of
 * the last "# TYPE" line (histograms: _bucket, _sum, _count), values parse,
 * and each histogram's buckets are cumulative up to le="+Inf" == _count. */
static void check_exposition(const char *text)
{
    char family[128] = "", type[32] = "", prev_labels[512] = "";
    double prev_bucket = -1;
    const char *line = text;
    while (line != NULL && *line) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        char buf[1024];
        assert_true(len < sizeof buf);
        memcpy(buf, line, len);
        buf[len] = '\0';
        line = end ? end + 1 : NULL;
        if (len == 0)
            continue;
        if (strncmp(buf, "# TYPE ", 7) == 0) {
            assert_int_equal(sscanf(buf + 7, "%127s %31s", family, type), 2);
            prev_bucket = -1;
            continue;
        }
        if (buf[0] == '#')
            continue;
        size_t fl = strlen(family);
        if (fl == 0 || strncmp(buf, family, fl) != 0)
            fail_msg("/metrics sample outside its family (last TYPE %s): %s", family, buf);
        const char *rest = buf + fl;
        if (strcmp(type, "histogram") == 0 && strncmp(rest, "_bucket", 7) != 0 &&
            strncmp(rest, "_sum", 4) != 0 && strncmp(rest, "_count", 6) != 0)
            fail_msg("/metrics histogram sample %s", buf);
        const char *val = strrchr(buf, ' ');
        char *vend;
        assert_non_null(val);
        double v = strtod(val + 1, &vend);
        if (vend == val + 1 || *vend != '\0' || !(v >= 0))
            fail_msg("/metrics sample value: %s", buf);
        if (strncmp(rest, "_bucket{", 8) == 0) {
            /* Labels without le, to see where one series ends. */
            char labels[512];
            const char *le = strstr(rest, "le=\"");
            assert_non_null(le);
            snprintf(labels, sizeof labels, "%.*s", (int)(le - rest), rest);
            if (strcmp(labels, prev_labels) != 0)
                prev_bucket = -1;
            snprintf(prev_labels, sizeof prev_labels, "%s", labels);
            if (v < prev_bucket)
                fail_msg("/metrics buckets are not cumulative: %s", buf);
            prev_bucket = v;
        }
    }
}

/* ------------------------------------------------------------------------- */
/* Tests on the shared server (default flags, 2 workers)                     */
/* ------------------------------------------------------------------------- */

static server main_srv;

static int group_setup(void **state)
{
    static const char *const flags[] = {"--workers", "2", NULL};
    (void)state;
    server_start(&main_srv, flags);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    server_kill(&main_srv);
    return 0;
}

static void test_health_ready_schemes(void **state)
{
    resp r;
    cJSON *j;
    char st[64];
    (void)state;

    get(&r, &main_srv, "/healthz", NULL);
    assert_int_equal(r.status, 200);
    j = parse_json(&r);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "status")), "ok");
    cJSON_Delete(j);
    assert_true(resp_header(&r, "Server-Timing", st, sizeof st));
    /* --replica-id, by default the hostname: every answer names it. */
    assert_true(resp_header(&r, "X-Posattn-Replica", st, sizeof st));
    assert_true(st[0] != '\0');
    resp_free(&r);

    get(&r, &main_srv, "/readyz", NULL);
    assert_int_equal(r.status, 200);
    resp_free(&r);

    get(&r, &main_srv, "/v1/schemes", NULL);
    assert_int_equal(r.status, 200);
    j = parse_json(&r);
    cJSON_Delete(j);
    for (int t = 0; t < PA_SCHEME_COUNT; t++) {
        char quoted[32];
        snprintf(quoted, sizeof quoted, "\"%s\"", pa_scheme_type_name((pa_scheme_type)t));
        if (strstr(r.body.p, quoted) == NULL)
            fail_msg("/v1/schemes does not name %s", quoted);
    }
    resp_free(&r);
}

/* RoPE, causal, GQA (H=4 over Hkv=2), Lq < Lk as with a KV cache. */
static void test_attention_rope_causal_gqa(void **state)
{
    acase c;
    resp r;
    char st[256], type[128];
    (void)state;

    acase_init(&c, "rope-gqa", PA_SCHEME_ROPE, 7, 13, 4, 2, 16, 16, 42);
    c.causal = true;
    acase_reference(&c);
    run_batch(&main_srv, &c, 1, ENC_FLAT, false, &r);
    assert_true(resp_header(&r, "Content-Type", type, sizeof type));
    assert_non_null(strstr(type, "application/json"));
    assert_true(resp_header(&r, "Server-Timing", st, sizeof st));
    {
        /* One task: the phases follow one another within the total. */
        static const char *const phase[] = {"upload", "parse", "queue", "compute", "render"};
        double sum = 0, total = -1;
        for (size_t i = 0; i < 5; i++) {
            char key[24];
            const char *at;
            snprintf(key, sizeof key, "%s;dur=", phase[i]);
            if ((at = strstr(st, key)) == NULL)
                fail_msg("Server-Timing '%s' lacks %s", st, key);
            sum += strtod(at + strlen(key), NULL);
        }
        if (strstr(st, "total;dur=") != NULL)
            total = strtod(strstr(st, "total;dur=") + 10, NULL);
        if (!(total > 0 && sum <= total + 0.005))
            fail_msg("Server-Timing '%s': phases add to %.3f ms, total %.3f ms", st, sum, total);
    }
    resp_free(&r);
    acase_free(&c);
}

static void test_attention_mixed_batch(void **state)
{
    acase cs[5];
    resp r;
    (void)state;
    mixed_cases(cs);
    run_batch(&main_srv, cs, 5, ENC_FLAT, false, &r);
    resp_free(&r);
    for (int i = 0; i < 5; i++)
        acase_free(&cs[i]);
}

/* b64 in (tensors and scheme tables), b64 out. */
static void test_attention_b64(void **state)
{
    acase cs[5];
    resp r;
    (void)state;
    mixed_cases(cs);
    run_batch(&main_srv, cs, 5, ENC_B64, true, &r);
    resp_free(&r);
    /* JSON in, b64 out; and b64 in, JSON out. */
    run_batch(&main_srv, cs, 2, ENC_FLAT, true, &r);
    resp_free(&r);
    run_batch(&main_srv, cs + 2, 3, ENC_B64, false, &r);
    resp_free(&r);
    for (int i = 0; i < 5; i++)
        acase_free(&cs[i]);
}

static void test_attention_nested_json(void **state)
{
    acase cs[5];
    resp r;
    (void)state;
    mixed_cases(cs);
    run_batch(&main_srv, cs, 5, ENC_NESTED, false, &r);
    resp_free(&r);
    for (int i = 0; i < 5; i++)
        acase_free(&cs[i]);
}

/* An invalid item inside a valid batch: its own error, the others run. */
static void test_attention_item_error(void **state)
{
    acase cs[3];
    sbuf body = {0};
    resp r;
    cJSON *j, *outs, *bad, *e;
    const char *code, *field;
    (void)state;

    acase_init(&cs[0], "ok-0", PA_SCHEME_NONE, 4, 4, 2, 2, 8, 8, 7);
    acase_init(&cs[1], "bad", PA_SCHEME_NONE, 4, 4, 4, 3, 8, 8, 8); /* Hkv=3 does not divide H=4 */
    acase_init(&cs[2], "ok-2", PA_SCHEME_ALIBI, 4, 4, 2, 2, 8, 8, 9);
    cs[2].causal = true;
    acase_reference(&cs[0]);
    acase_reference(&cs[2]);
    sb_request(&body, cs, 3, ENC_FLAT, false);
    post(&r, &main_srv, "/v1/attention", body.p, body.len, NULL);
    sb_free(&body);
    if (r.status != 200)
        fail_msg("HTTP %ld: %.500s", r.status, r.body.p);
    j = parse_json(&r);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "errors")));
    outs = cJSON_GetObjectItemCaseSensitive(j, "outputs");
    assert_int_equal(cJSON_GetArraySize(outs), 3);
    check_output(cJSON_GetArrayItem(outs, 0), &cs[0]);
    check_output(cJSON_GetArrayItem(outs, 2), &cs[2]);
    bad = cJSON_GetArrayItem(outs, 1);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(bad, "id")), "bad");
    assert_null(cJSON_GetObjectItemCaseSensitive(bad, "output"));
    e = cJSON_GetObjectItemCaseSensitive(bad, "error");
    assert_non_null(e);
    code = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "code"));
    field = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "field"));
    assert_non_null(code);
    assert_string_equal(code, "SHAPE_MISMATCH");
    assert_non_null(field);
    if (strncmp(field, "inputs[1]", 9) != 0)
        fail_msg("item error field '%s' does not start with inputs[1]", field);
    cJSON_Delete(j);
    resp_free(&r);
    for (int i = 0; i < 3; i++)
        acase_free(&cs[i]);
}

/* Requests that are invalid as a whole: 400 with the code and the field. */
static void test_error_400(void **state)
{
    static const struct {
        const char *body, *code, *field;
    } cases[] = {
        {"{\"inputs\":[{\"id\":\"x\",", "MALFORMED_JSON", NULL},
        {"", "MALFORMED_JSON", NULL},
        {"[1,2,3]", "INVALID_ARGUMENT", NULL},
        {"{\"inputs\":[]} trailing", "MALFORMED_JSON", NULL},
        {"{\"inputs\":[],\"colour\":\"blue\"}", "UNKNOWN_FIELD", "colour"},
        {"{\"output_encoding\":\"json\"}", "INVALID_ARGUMENT", "inputs"},
        {"{\"inputs\":{}}", "INVALID_ARGUMENT", "inputs"},
        {"{\"inputs\":[]}", "INVALID_ARGUMENT", "inputs"},
        {"{\"inputs\":[{}],\"output_encoding\":\"xml\"}", "INVALID_ARGUMENT", "output_encoding"},
    };
    resp r;
    (void)state;

    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        post(&r, &main_srv, "/v1/attention", cases[i].body, strlen(cases[i].body), NULL);
        if (r.status != 400)
            fail_msg("body %s: HTTP %ld, expected 400: %.300s", cases[i].body, r.status,
                     r.body.p ? r.body.p : "");
        check_error(&r, 400, cases[i].code, cases[i].field);
        resp_free(&r);
    }
}

/* SHAPE_MISMATCH names the field: a 400 for a single-task endpoint
 * (/v1/analyze), the item's own error inside an attention batch. */
static void test_error_400_shape_mismatch(void **state)
{
    static const char data_count[] = "{\"inputs\":[{\"id\":\"m\",\"scheme\":{\"type\":\"none\"},"
                                     "\"q\":{\"shape\":[2,1,2],\"data\":[1,2,3]},"
                                     "\"k\":{\"shape\":[2,1,2],\"data\":[1,2,3,4]},"
                                     "\"v\":{\"shape\":[2,1,2],\"data\":[1,2,3,4]}}]}";
    acase c;
    sbuf body = {0};
    resp r;
    (void)state;

    /* k.shape[1]=3 does not divide num_heads=8. */
    acase_init(&c, "gqa-bad", PA_SCHEME_ROPE, 3, 3, 8, 3, 8, 8, 11);
    sb_analysis(&body, "permutation", &c, ENC_FLAT);
    post(&r, &main_srv, "/v1/analyze", body.p, body.len, NULL);
    check_error(&r, 400, "SHAPE_MISMATCH", "k.shape");
    resp_free(&r);
    sb_free(&body);

    sb_request(&body, &c, 1, ENC_FLAT, false);
    post(&r, &main_srv, "/v1/attention", body.p, body.len, NULL);
    check_item_error(&r, 0, "SHAPE_MISMATCH", "inputs[0].k.shape");
    resp_free(&r);
    sb_free(&body);

    /* q holds 3 values for a shape of 4. */
    post(&r, &main_srv, "/v1/attention", data_count, strlen(data_count), NULL);
    check_item_error(&r, 0, "SHAPE_MISMATCH", "inputs[0].q");
    resp_free(&r);
    acase_free(&c);
}

/* A batch's status: 200 while any item succeeds (errors: true marks the
 * failures), the items' own status when every one fails, 400 when those
 * differ -- so curl -f and raise_for_status() see an all-failed batch. */
static void test_batch_status(void **state)
{
#define GOOD_ITEM                                                                                  \
    "{\"scheme\":{\"type\":\"none\"},\"q\":{\"shape\":[2,1,2],\"data\":[1,2,3,4]},"                \
    "\"k\":{\"shape\":[2,1,2],\"data\":[1,2,3,4]},\"v\":{\"shape\":[2,1,2],\"data\":[1,2,3,4]}}"
#define BAD_400 "{\"scheme\":{\"type\":\"nope\"},\"q\":{\"shape\":[1,1,1],\"data\":[1]}}"
#define BAD_413                                                                                    \
    "{\"scheme\":{\"type\":\"none\"},\"q\":{\"shape\":[4096,64,128],\"b64\":\"AAAAAAAAAAA=\"},"    \
    "\"k\":{\"shape\":[2,1,2],\"data\":[1,2,3,4]},\"v\":{\"shape\":[2,1,2],\"data\":[1,2,3,4]}}"
    static const struct {
        const char *body;
        long status;
        const char *code0; /* outputs[0].error.code, NULL when it succeeds */
    } t[] = {
        {"{\"inputs\":[" GOOD_ITEM "," BAD_400 "]}", 200, NULL},
        {"{\"inputs\":[" BAD_400 "," GOOD_ITEM "]}", 200, "INVALID_ARGUMENT"},
        {"{\"inputs\":[" BAD_400 "]}", 400, "INVALID_ARGUMENT"},
        {"{\"inputs\":[" BAD_413 "]}", 413, "PAYLOAD_TOO_LARGE"},
        {"{\"inputs\":[" BAD_413 "," BAD_413 "]}", 413, "PAYLOAD_TOO_LARGE"},
        {"{\"inputs\":[" BAD_413 "," BAD_400 "]}", 400, "PAYLOAD_TOO_LARGE"},
        {"{\"inputs\":[" BAD_400 "," BAD_413 "]}", 400, "INVALID_ARGUMENT"},
    };
#undef GOOD_ITEM
#undef BAD_400
#undef BAD_413
    (void)state;
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        resp r;
        cJSON *j, *o0;
        post(&r, &main_srv, "/v1/attention", t[i].body, strlen(t[i].body), NULL);
        if (r.status != t[i].status)
            fail_msg("case %zu: HTTP %ld, want %ld: %.300s", i, r.status, t[i].status, r.body.p);
        j = parse_json(&r);
        assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "errors")));
        o0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "outputs"), 0);
        if (t[i].code0 == NULL) {
            assert_null(cJSON_GetObjectItemCaseSensitive(o0, "error"));
            assert_non_null(cJSON_GetObjectItemCaseSensitive(o0, "output"));
        } else {
            check_item_error(&r, 0, t[i].code0, "inputs[0]");
        }
        cJSON_Delete(j);
        resp_free(&r);
    }
}

/* /v1/encode and /v1/analyze against the library in this process. */
static void test_encode_analyze(void **state)
{
    static const char alibi[] = "{\"scheme\":{\"type\":\"alibi\"},\"num_heads\":8}";
    static const char sinus[] =
        "{\"scheme\":{\"type\":\"sinusoidal\",\"layout\":\"concat\"},\"length\":7,\"dim\":6}";
    float slopes[8], pe[7 * 6];
    int32_t pos[7];
    int64_t sshape[1] = {8}, eshape[2] = {7, 6};
    pa_scheme s;
    pa_error err;
    resp r;
    cJSON *j;
    (void)state;

    for (int h = 0; h < 8; h++)
        slopes[h] = ldexpf(1.0f, -(h + 1)); /* 2^-1 .. 2^-8 */
    post(&r, &main_srv, "/v1/encode", alibi, strlen(alibi), NULL);
    assert_int_equal(r.status, 200);
    j = parse_json(&r);
    check_tensor(cJSON_GetObjectItemCaseSensitive(j, "slopes"), "alibi.slopes", 1, sshape, slopes);
    cJSON_Delete(j);
    resp_free(&r);

    pa_scheme_init(&s, PA_SCHEME_SINUSOIDAL);
    s.sinusoidal.layout = PA_SINUSOIDAL_LAYOUT_CONCAT;
    for (int i = 0; i < 7; i++)
        pos[i] = i;
    TU_ASSERT_STATUS(pa_sinusoidal_encode(&s.sinusoidal, pos, 7, 6, pe, &err), PA_STATUS_OK, &err);
    post(&r, &main_srv, "/v1/encode", sinus, strlen(sinus), NULL);
    assert_int_equal(r.status, 200);
    j = parse_json(&r);
    check_tensor(cJSON_GetObjectItemCaseSensitive(j, "encoding"), "sinusoidal.encoding", 2, eshape,
                 pe);
    cJSON_Delete(j);
    resp_free(&r);

    /* Permutation: ~0 for NoPE, clearly non-zero for RoPE. */
    for (int t = 0; t < 2; t++) {
        acase c;
        sbuf body = {0};
        double d;
        acase_init(&c, "perm", t == 0 ? PA_SCHEME_NONE : PA_SCHEME_ROPE, 6, 6, 2, 2, 8, 8, 21);
        sb_analysis(&body, "permutation", &c, ENC_B64);
        post(&r, &main_srv, "/v1/analyze", body.p, body.len, NULL);
        if (r.status != 200)
            fail_msg("analyze: HTTP %ld: %.300s", r.status, r.body.p);
        j = parse_json(&r);
        d = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(j, "max_abs_diff"));
        if (t == 0 ? !(d < 1e-5) : !(d > 1e-2))
            fail_msg("permutation max_abs_diff %g for %s", d, t == 0 ? "none" : "rope");
        cJSON_Delete(j);
        resp_free(&r);
        sb_free(&body);
        acase_free(&c);
    }
}

static void test_error_404_405(void **state)
{
    resp r;
    char allow[64], st[64];
    char url[256];
    (void)state;

    get(&r, &main_srv, "/v1/nope", NULL);
    check_error(&r, 404, "NOT_FOUND", NULL);
    assert_true(resp_header(&r, "Server-Timing", st, sizeof st));
    resp_free(&r);

    get(&r, &main_srv, "/v1/attention", NULL);
    check_error(&r, 405, "METHOD_NOT_ALLOWED", NULL);
    assert_true(resp_header(&r, "Allow", allow, sizeof allow));
    assert_string_equal(allow, "POST");
    resp_free(&r);

    post(&r, &main_srv, "/healthz", "{}", 2, NULL);
    check_error(&r, 405, "METHOD_NOT_ALLOWED", NULL);
    resp_free(&r);

    url_of(url, sizeof url, &main_srv, "/v1/schemes");
    http_do(&r, "DELETE", url, NULL, 0, NULL);
    check_error(&r, 405, "METHOD_NOT_ALLOWED", NULL);
    resp_free(&r);
}

static void test_openapi(void **state)
{
    resp r;
    char type[128];
    (void)state;
    get(&r, &main_srv, "/openapi.yaml", NULL);
    assert_int_equal(r.status, 200);
    assert_true(resp_header(&r, "Content-Type", type, sizeof type));
    assert_non_null(strstr(type, "yaml"));
    assert_non_null(r.body.p);
    assert_true(strncmp(r.body.p, "openapi:", 8) == 0 || strstr(r.body.p, "\nopenapi:") != NULL);
    static const char *const paths[] = {"/v1/attention:",   "/v1/encode:",
                                        "/v1/analyze:",     "/v1/schemes:",
                                        "/healthz:",        "/readyz:",
                                        "/metrics:",        "/openapi.yaml:",
                                        "\n  /:\n",         "/web/{name}:",
                                        "/v1/tensors:",     "/v2:",
                                        "/v2/health/live:", "/v2/models/{model}/infer:"};
    for (size_t i = 0; i < sizeof paths / sizeof *paths; i++)
        if (strstr(r.body.p, paths[i]) == NULL)
            fail_msg("openapi.yaml does not document %s", paths[i]);
    resp_free(&r);
}

/* The web page: GET / and GET /web/NAME serve the embedded files of
 * server/http/web/ with their headers; any other name is a 404, and so is a path
 * that tries to leave the folder. */
static void test_web_page(void **state)
{
    resp r;
    char h[512];
    (void)state;
    get(&r, &main_srv, "/", NULL);
    assert_int_equal(r.status, 200);
    assert_true(resp_header(&r, "Content-Type", h, sizeof h));
    assert_string_equal(h, "text/html; charset=utf-8");
    assert_true(resp_header(&r, "Content-Security-Policy", h, sizeof h));
    assert_non_null(strstr(h, "default-src 'self'"));
    assert_true(resp_header(&r, "Cache-Control", h, sizeof h));
    assert_non_null(r.body.p);
    assert_non_null(strstr(r.body.p, "<!doctype html>"));
    assert_non_null(strstr(r.body.p, "/web/app.js"));
    resp_free(&r);

    get(&r, &main_srv, "/web/index.html", NULL);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    get(&r, &main_srv, "/web/app.js", NULL);
    assert_int_equal(r.status, 200);
    assert_true(resp_header(&r, "Content-Type", h, sizeof h));
    assert_string_equal(h, "text/javascript; charset=utf-8");
    resp_free(&r);
    get(&r, &main_srv, "/web/style.css", NULL);
    assert_int_equal(r.status, 200);
    assert_true(resp_header(&r, "Content-Type", h, sizeof h));
    assert_string_equal(h, "text/css; charset=utf-8");
    resp_free(&r);

    static const char *const missing[] = {
        "/web/",       "/web/nope.js", "/web/%2e%2e/Makefile", "/web/../openapi.yaml",
        "/index.html", "/web"};
    for (size_t i = 0; i < sizeof missing / sizeof *missing; i++) {
        char url[256];
        xfer x;
        url_of(url, sizeof url, &main_srv, missing[i]);
        xfer_init(&x, "GET", url, NULL, 0, NULL, 30000L);
        curl_easy_setopt(x.e, CURLOPT_PATH_AS_IS, 1L); /* send the dots as they are */
        xfer_finish(&x, curl_easy_perform(x.e));
        r = x.r;
        xfer_cleanup(&x);
        if (r.status != 404)
            fail_msg("GET %s: %ld, want 404", missing[i], (long)r.status);
        check_error(&r, 404, "NOT_FOUND", NULL);
        resp_free(&r);
    }
    post(&r, &main_srv, "/", "{}", 2, NULL);
    check_error(&r, 405, "METHOD_NOT_ALLOWED", NULL);
    resp_free(&r);
}

/* /metrics exposes the histograms and counts the requests this test makes. */
static void test_metrics(void **state)
{
    static const char *const ok_attention[] = {"endpoint=\"attention\"", "code=\"200\"", NULL};
    static const char *const nf[] = {"code=\"404\"", NULL};
    static const char *const inf_attention[] = {"endpoint=\"attention\"", "le=\"+Inf\"", NULL};
    static const char *const alibi[] = {"scheme=\"alibi\"", NULL};
    char *before, *after;
    acase c;
    resp r;
    (void)state;

    acase_init(&c, "m", PA_SCHEME_ALIBI, 4, 4, 2, 2, 8, 8, 12);
    acase_reference(&c);
    before = get_metrics(&main_srv);
    for (int i = 0; i < 3; i++) {
        run_batch(&main_srv, &c, 1, ENC_FLAT, false, &r);
        resp_free(&r);
    }
    get(&r, &main_srv, "/no/such/path", NULL);
    resp_free(&r);
    after = get_metrics(&main_srv);

    static const char *const names[] = {"posattn_request_duration_seconds_bucket",
                                        "posattn_request_duration_seconds_sum",
                                        "posattn_request_duration_seconds_count",
                                        "posattn_queue_duration_seconds_bucket",
                                        "posattn_compute_duration_seconds_bucket",
                                        "posattn_requests_total",
                                        "posattn_items_total",
                                        "posattn_request_bytes_total",
                                        "posattn_response_bytes_total",
                                        "posattn_queue_depth",
                                        "posattn_in_flight",
                                        "posattn_build_info"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (strstr(after, names[i]) == NULL)
            fail_msg("/metrics lacks %s", names[i]);
    assert_non_null(strstr(after, "# TYPE posattn_request_duration_seconds histogram"));
    check_exposition(after);
    {
        static const char *const none[] = {NULL};
        if (metric_sum(after, "posattn_queue_depth", none) != 0 ||
            metric_sum(after, "posattn_in_flight", none) != 0)
            fail_msg("idle server: posattn_queue_depth %g, posattn_in_flight %g, expected 0",
                     metric_sum(after, "posattn_queue_depth", none),
                     metric_sum(after, "posattn_in_flight", none));
    }

    double d_ok = metric_sum(after, "posattn_requests_total", ok_attention) -
                  metric_sum(before, "posattn_requests_total", ok_attention);
    double d_nf = metric_sum(after, "posattn_requests_total", nf) -
                  metric_sum(before, "posattn_requests_total", nf);
    double d_hist = metric_sum(after, "posattn_request_duration_seconds_bucket", inf_attention) -
                    metric_sum(before, "posattn_request_duration_seconds_bucket", inf_attention);
    double d_items = metric_sum(after, "posattn_items_total", alibi) -
                     metric_sum(before, "posattn_items_total", alibi);
    if (d_ok != 3 || d_nf != 1 || d_hist != 3 || d_items != 3)
        fail_msg("metrics moved by attention 200: %g, 404: %g, histogram +Inf: %g, alibi items: "
                 "%g; expected 3, 1, 3, 3",
                 d_ok, d_nf, d_hist, d_items);
    free(before);
    free(after);
    acase_free(&c);
}

/* One JSON access-log line per request on stderr. */
static void test_access_log(void **state)
{
    FILE *f;
    char line[2048];
    bool found = false;
    (void)state;
    f = fopen(main_srv.log, "r");
    assert_non_null(f);
    while (fgets(line, sizeof line, f) != NULL) {
        if (strstr(line, "\"path\":\"/v1/attention\"") != NULL &&
            strstr(line, "\"status\":200") != NULL && line[0] == '{') {
            cJSON *j = cJSON_Parse(line);
            assert_non_null(j);
            cJSON_Delete(j);
            found = true;
        }
    }
    fclose(f);
    assert_true(found);
}

/* Last on the shared server: SIGTERM, exit 0. */
static void test_main_server_stops_cleanly(void **state)
{
    (void)state;
    server_stop_ok(&main_srv, false);
}

/* ------------------------------------------------------------------------- */

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_health_ready_schemes),
        cmocka_unit_test(test_attention_rope_causal_gqa),
        cmocka_unit_test(test_attention_mixed_batch),
        cmocka_unit_test(test_attention_b64),
        cmocka_unit_test(test_attention_nested_json),
        cmocka_unit_test(test_attention_item_error),
        cmocka_unit_test(test_error_400),
        cmocka_unit_test(test_error_400_shape_mismatch),
        cmocka_unit_test(test_batch_status),
        cmocka_unit_test(test_encode_analyze),
        cmocka_unit_test(test_error_404_405),
        cmocka_unit_test(test_openapi),
        cmocka_unit_test(test_web_page),
        cmocka_unit_test(test_metrics),
        cmocka_unit_test(test_access_log),
        cmocka_unit_test(test_main_server_stops_cleanly),
    };
    int rc;

    (void)argc;
    if (e2e_http_init(argv[0], "test_e2e_http") != 0)
        return 1;
    rc = cmocka_run_group_tests_name("e2e_http", tests, group_setup, group_teardown);
    curl_global_cleanup();
    return rc;
}
