/* test_sessions.c - server/api/sessions.c: /v1/sessions through the api
 * layer (tests/server/api/session_fixture.h: srv_job_prepare_args, every
 * task on this thread, srv_job_finish; srv_endpoint_answer_args for GET
 * and DELETE): create, get, list, append, fork, delete; every append, fork
 * and list refusal naming its field; SESSION_FULL, CACHE_FULL and the
 * pool-full eviction with small budgets; ttl expiry; the request memory
 * limit; a server without a cache; storage in bf16 and f16. The requests
 * that make a session are test_session_create.c's.
 */
#include "api/api.h"
#include "api_harness.h"
#include "session_fixture.h"
#include "store/kv_cache.h"
#include "testutil.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double at(const cJSON *o, const char *a, const char *b)
{
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(o, a);
    if (b != NULL)
        n = cJSON_GetObjectItemCaseSensitive(n, b);
    if (!cJSON_IsNumber(n))
        fail_msg("%s%s%s is not a number", a, b ? "." : "", b ? b : "");
    return n->valuedouble;
}

static const char *const ROPE2 =
    "{\"scheme\":{\"type\":\"rope\"},\"num_kv_heads\":2,\"head_dim\":4,\"max_tokens\":64}";

static void test_lifecycle(void **state)
{
    (void)state;
    srv_kv_cache *c = cache_new((size_t)1 << 20, 0);
    srv_limits lim = lim_of(c);
    char id[SRV_KV_ID_LEN], fid[SRV_KV_ID_LEN];
    int status;
    cJSON *ans;

    /* Create: 201 and the session's JSON. */
    ans = post(&srv_ep_sessions_create, NULL, ROPE2, &lim, &status);
    assert_int_equal(status, 201);
    snprintf(id, sizeof id, "%s", cJSON_GetObjectItemCaseSensitive(ans, "id")->valuestring);
    assert_int_equal(strlen(id), 32);
    assert_int_equal(at(ans, "length", NULL), 0);
    assert_true(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(ans, "positions")));
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(ans, "dtype")->valuestring, "f32");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(ans, "scheme")->valuestring, "rope");
    assert_int_equal(at(ans, "num_kv_heads", NULL), 2);
    assert_int_equal(at(ans, "head_dim", NULL), 4);
    assert_int_equal(at(ans, "v_head_dim", NULL), 4);
    assert_int_equal(at(ans, "max_tokens", NULL), 64);
    assert_string_equal(str_at(ans, "eviction", "type"), "none");
    assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ans, "keys_prerotated")));
    assert_null(cJSON_GetObjectItemCaseSensitive(ans, "timing"));
    cJSON_Delete(ans);

    /* Append 3 tokens, then 2 at given positions. */
    ans = append(id, 3, 2, 4, NULL, &lim, &status);
    assert_int_equal(status, 200);
    assert_int_equal(at(ans, "length", NULL), 3);
    assert_int_equal(at(ans, "appended", NULL), 3);
    assert_int_equal(at(ans, "next_position", NULL), 3);
    assert_int_equal(at(ans, "positions", "first"), 0);
    assert_int_equal(at(ans, "positions", "last"), 2);
    assert_int_equal(at(ans, "bytes", NULL), 16 * 2 * (4 + 4) * 4);
    assert_non_null(cJSON_GetObjectItemCaseSensitive(ans, "timing"));
    cJSON_Delete(ans);
    ans = append(id, 2, 2, 4, "\"k_positions\":[10,11]", &lim, &status);
    assert_int_equal(status, 200);
    assert_int_equal(at(ans, "length", NULL), 5);
    assert_int_equal(at(ans, "positions", "last"), 11);
    assert_int_equal(at(ans, "next_position", NULL), 12);
    cJSON_Delete(ans);

    /* Get. */
    ans = answer(&srv_ep_session_get, id, NULL, &lim, &status);
    assert_int_equal(status, 200);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(ans, "id")->valuestring, id);
    assert_int_equal(at(ans, "length", NULL), 5);
    assert_int_equal(at(ans, "shared_blocks", NULL), 0);
    cJSON_Delete(ans);

    /* Fork (empty body, or {}): 201, sharing the block. */
    ans = post(&srv_ep_session_fork, id, "", &lim, &status);
    assert_int_equal(status, 201);
    snprintf(fid, sizeof fid, "%s", cJSON_GetObjectItemCaseSensitive(ans, "id")->valuestring);
    assert_string_not_equal(fid, id);
    assert_int_equal(at(ans, "length", NULL), 5);
    assert_int_equal(at(ans, "shared_blocks", NULL), 1);
    cJSON_Delete(ans);
    /* An append to the fork copies the block it writes into. */
    ans = append(fid, 1, 2, 4, NULL, &lim, &status);
    assert_int_equal(status, 200);
    assert_int_equal(at(ans, "length", NULL), 6);
    assert_int_equal(at(ans, "shared_blocks", NULL), 0);
    cJSON_Delete(ans);
    ans = answer(&srv_ep_session_get, id, NULL, &lim, &status);
    assert_int_equal(at(ans, "length", NULL), 5);
    assert_int_equal(at(ans, "shared_blocks", NULL), 0);
    cJSON_Delete(ans);
    ans = post(&srv_ep_session_fork, fid, "{}", &lim, &status);
    assert_int_equal(status, 201);
    cJSON_Delete(ans);

    /* List: three sessions, oldest first, paged; the cache's totals. */
    ans = answer(&srv_ep_sessions_list, NULL, NULL, &lim, &status);
    assert_int_equal(status, 200);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(ans, "sessions")), 3);
    assert_int_equal(at(ans, "total", NULL), 3);
    assert_int_equal(at(ans, "offset", NULL), 0);
    assert_int_equal(at(ans, "limit", NULL), 100);
    assert_int_equal(at(ans, "cache", "sessions"), 3);
    assert_int_equal(at(ans, "cache", "bytes"), 2 * 16 * 2 * 8 * 4);
    assert_int_equal(at(ans, "cache", "budget_bytes"), 1 << 20);
    assert_int_equal(at(ans, "cache", "blocks_used"), 2);
    assert_int_equal(at(ans, "cache", "blocks_shared"), 1);
    assert_string_equal(
        cJSON_GetObjectItemCaseSensitive(
            cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(ans, "sessions"), 0), "id")
            ->valuestring,
        id);
    cJSON_Delete(ans);
    ans = answer(&srv_ep_sessions_list, NULL, "offset=1&limit=1", &lim, &status);
    assert_int_equal(status, 200);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(ans, "sessions")), 1);
    assert_int_equal(at(ans, "total", NULL), 3);
    assert_string_equal(
        cJSON_GetObjectItemCaseSensitive(
            cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(ans, "sessions"), 0), "id")
            ->valuestring,
        fid);
    cJSON_Delete(ans);
    ans = answer(&srv_ep_sessions_list, NULL, "offset=9", &lim, &status);
    assert_int_equal(status, 200);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(ans, "sessions")), 0);
    cJSON_Delete(ans);

    /* Delete: 200, then 404 for get, delete, append and fork. */
    ans = answer(&srv_ep_session_delete, id, NULL, &lim, &status);
    assert_int_equal(status, 200);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ans, "deleted")));
    cJSON_Delete(ans);
    ans = answer(&srv_ep_session_get, id, NULL, &lim, &status);
    expect_error(ans, status, 404, "SESSION_NOT_FOUND", NULL);
    cJSON_Delete(ans);
    ans = answer(&srv_ep_session_delete, id, NULL, &lim, &status);
    expect_error(ans, status, 404, "SESSION_NOT_FOUND", NULL);
    cJSON_Delete(ans);
    ans = append(id, 1, 2, 4, NULL, &lim, &status);
    expect_error(ans, status, 404, "SESSION_NOT_FOUND", NULL);
    cJSON_Delete(ans);
    ans = post(&srv_ep_session_fork, id, "", &lim, &status);
    expect_error(ans, status, 404, "SESSION_NOT_FOUND", NULL);
    cJSON_Delete(ans);
    /* The fork lives on. */
    ans = answer(&srv_ep_session_get, fid, NULL, &lim, &status);
    assert_int_equal(status, 200);
    assert_int_equal(at(ans, "length", NULL), 6);
    cJSON_Delete(ans);
    srv_kv_cache_free(c);
}

static void test_window(void **state)
{
    (void)state;
    srv_kv_cache *c = cache_new((size_t)1 << 20, 0);
    srv_limits lim = lim_of(c);
    char id[SRV_KV_ID_LEN];
    int status;
    cJSON *ans;

    create("{\"scheme\":{\"type\":\"alibi\"},\"num_kv_heads\":1,\"head_dim\":2,\"v_head_dim\":3,"
           "\"eviction\":{\"type\":\"window\",\"window\":4,\"sinks\":1,\"reposition\":true}}",
           &lim, id);
    ans = answer(&srv_ep_session_get, id, NULL, &lim, &status);
    assert_int_equal(at(ans, "max_tokens", NULL), 5); /* sinks + window */
    assert_string_equal(str_at(ans, "eviction", "type"), "window");
    assert_int_equal(at(ans, "eviction", "window"), 4);
    assert_int_equal(at(ans, "eviction", "sinks"), 1);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(ans, "eviction"), "reposition")));
    assert_false(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ans, "keys_prerotated")));
    cJSON_Delete(ans);
    /* v [n, 1, 3]: the body's v has D = 2, refused naming v.shape[2]. */
    ans = append(id, 8, 1, 2, NULL, &lim, &status);
    expect_error(ans, status, 400, "SHAPE_MISMATCH", "v.shape[2]");
    assert_non_null(strstr(str_at(ans, "error", "message"),
                           "v.shape[2]=2 does not equal the session's v_head_dim=3"));
    cJSON_Delete(ans);
    {
        float k[8 * 2], v[8 * 3];
        for (int i = 0; i < 16; i++)
            k[i] = (float)i / 16;
        for (int i = 0; i < 24; i++)
            v[i] = (float)i / 24;
        cJSON *req = cJSON_CreateObject();
        cJSON_AddItemToObject(req, "k", jtensor(k, 3, 8, 1, 2));
        cJSON_AddItemToObject(req, "v", jtensor(v, 3, 8, 1, 3));
        char *body = cJSON_PrintUnformatted(req);
        ans = post(&srv_ep_session_append, id, body, &lim, &status);
        free(body);
        cJSON_Delete(req);
    }
    assert_int_equal(status, 200);
    assert_int_equal(at(ans, "length", NULL), 5);
    assert_int_equal(at(ans, "appended", NULL), 8);
    assert_int_equal(at(ans, "eviction", "evicted"), 3);
    /* Repositioned: the retained tokens sit at 0 .. 4 relative to the
     * window, which keeps its own positions 4 .. 7 (kv_cache.h). */
    assert_int_equal(at(ans, "positions", "last"), 7);
    assert_int_equal(at(ans, "positions", "last") - at(ans, "positions", "first"), 4);
    cJSON_Delete(ans);
    /* Reposition sets the positions: k_positions is refused. */
    ans = append(id, 1, 1, 2, "\"k_positions\":[3]", &lim, &status);
    assert_int_equal(status, 400);
    cJSON_Delete(ans);
    srv_kv_cache_free(c);
}

static void test_append_refusals(void **state)
{
    (void)state;
    srv_kv_cache *c = cache_new((size_t)1 << 20, 0);
    srv_limits lim = lim_of(c);
    char id[SRV_KV_ID_LEN];
    int status;
    cJSON *ans;

    create(ROPE2, &lim, id);
    ans = append(id, 2, 4, 4, NULL, &lim, &status);
    expect_error(ans, status, 400, "SHAPE_MISMATCH", "k.shape[1]");
    assert_non_null(strstr(str_at(ans, "error", "message"),
                           "k.shape[1]=4 does not equal the session's num_kv_heads=2"));
    cJSON_Delete(ans);
    ans = append(id, 2, 2, 8, NULL, &lim, &status);
    expect_error(ans, status, 400, "SHAPE_MISMATCH", "k.shape[2]");
    assert_non_null(strstr(str_at(ans, "error", "message"), "head_dim=4"));
    cJSON_Delete(ans);
    ans = append(id, 2, 2, 4, "\"k_positions\":[1,2,3]", &lim, &status);
    expect_error(ans, status, 400, "SHAPE_MISMATCH", "k_positions");
    cJSON_Delete(ans);
    ans = append(id, 2, 2, 4, "\"k_positions\":\"x\"", &lim, &status);
    expect_error(ans, status, 400, "INVALID_ARGUMENT", "k_positions");
    cJSON_Delete(ans);
    ans = append(id, 2, 2, 4, "\"q\":1", &lim, &status);
    expect_error(ans, status, 400, "UNKNOWN_FIELD", "q");
    cJSON_Delete(ans);
    ans = post(&srv_ep_session_append, id, "{\"v\":{\"shape\":[1,2,4],\"data\":[1,2,3,4,5,6,7,8]}}",
               &lim, &status);
    expect_error(ans, status, 400, "INVALID_ARGUMENT", "k");
    cJSON_Delete(ans);
    ans = post(&srv_ep_session_append, id,
               "{\"k\":{\"shape\":[1,2,4],\"data\":[1,2,3,4,5,6,7,8]},"
               "\"v\":{\"shape\":[2,2,4],\"data\":[1,2,3,4,5,6,7,8,1,2,3,4,5,6,7,8]}}",
               &lim, &status);
    expect_error(ans, status, 400, "SHAPE_MISMATCH", "v.shape[0]");
    cJSON_Delete(ans);
    ans = post(&srv_ep_session_append, id, "{\"k\":{\"shape\":[1,2,4],\"data\":[1]},\"v\":1}", &lim,
               &status);
    expect_error(ans, status, 400, "SHAPE_MISMATCH", "k.data");
    cJSON_Delete(ans);
    ans = post(&srv_ep_session_append, id,
               "{\"k\":{\"shape\":[1,2,4],\"data\":[1,2,3,4,5,6,7,8]},\"v\":1}", &lim, &status);
    expect_error(ans, status, 400, "INVALID_ARGUMENT", "v");
    cJSON_Delete(ans);
    /* Tensors of another wire type: f16 numbers. */
    ans = post(&srv_ep_session_append, id,
               "{\"k\":{\"shape\":[1,2,4],\"dtype\":\"f16\",\"data\":[1,2,3,4,5,6,7,8]},"
               "\"v\":{\"shape\":[1,2,4],\"data\":[1,2,3,4,5,6,7,8]}}",
               &lim, &status);
    assert_int_equal(status, 200);
    cJSON_Delete(ans);
    /* A fork takes no fields. */
    ans = post(&srv_ep_session_fork, id, "{\"n\":1}", &lim, &status);
    expect_error(ans, status, 400, "UNKNOWN_FIELD", "n");
    cJSON_Delete(ans);
    /* The session is as it was after each refusal. */
    ans = answer(&srv_ep_session_get, id, NULL, &lim, &status);
    assert_int_equal(at(ans, "length", NULL), 1);
    cJSON_Delete(ans);
    /* The request memory limit counts the tensors (64 x 2 x 4 x 4 B x 2 = 4 KiB > 2 KiB). */
    lim.max_request_memory = 4096;
    ans = append(id, 64, 2, 4, NULL, &lim, &status);
    expect_error(ans, status, 413, "PAYLOAD_TOO_LARGE", NULL);
    cJSON_Delete(ans);
    /* List queries. */
    lim.max_request_memory = (size_t)64 << 20;
    ans = answer(&srv_ep_sessions_list, NULL, "limit=abc", &lim, &status);
    expect_error(ans, status, 400, "INVALID_ARGUMENT", "limit");
    cJSON_Delete(ans);
    ans = answer(&srv_ep_sessions_list, NULL, "limit=1001", &lim, &status);
    expect_error(ans, status, 400, "INVALID_ARGUMENT", "limit");
    cJSON_Delete(ans);
    ans = answer(&srv_ep_sessions_list, NULL, "offset=-1", &lim, &status);
    expect_error(ans, status, 400, "INVALID_ARGUMENT", "offset");
    cJSON_Delete(ans);
    ans = answer(&srv_ep_sessions_list, NULL, "limit=0", &lim, &status);
    assert_int_equal(status, 200);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(ans, "sessions")), 0);
    assert_int_equal(at(ans, "total", NULL), 1);
    cJSON_Delete(ans);
    srv_kv_cache_free(c);
}

static void test_full(void **state)
{
    (void)state;
    /* A block of 16 tokens, Hkv 1, D = Dv = 2: 256 bytes; the budget two. */
    srv_kv_cache *c = cache_new(512, 0);
    srv_limits lim = lim_of(c);
    char a[SRV_KV_ID_LEN], b[SRV_KV_ID_LEN], d[SRV_KV_ID_LEN];
    const char *spec = "{\"scheme\":{\"type\":\"none\"},\"num_kv_heads\":1,\"head_dim\":2,"
                       "\"max_tokens\":40}";
    int status;
    cJSON *ans;
    srv_kv_stats st;

    create(spec, &lim, a);
    /* SESSION_FULL: past max_tokens with eviction none, naming the figure. */
    ans = append(a, 41, 1, 2, NULL, &lim, &status);
    expect_error(ans, status, 409, "SESSION_FULL", NULL);
    assert_non_null(strstr(str_at(ans, "error", "message"), "40"));
    cJSON_Delete(ans);
    /* CACHE_FULL: three blocks never fit a budget of two. */
    ans = append(a, 33, 1, 2, NULL, &lim, &status);
    expect_error(ans, status, 507, "CACHE_FULL", NULL);
    cJSON_Delete(ans);
    ans = append(a, 32, 1, 2, NULL, &lim, &status);
    assert_int_equal(status, 200);
    cJSON_Delete(ans);
    /* A fork shares both blocks: no bytes more. */
    ans = post(&srv_ep_session_fork, a, "", &lim, &status);
    assert_int_equal(status, 201);
    snprintf(d, sizeof d, "%s", cJSON_GetObjectItemCaseSensitive(ans, "id")->valuestring);
    cJSON_Delete(ans);
    srv_kv_delete(c, d, &(srv_kv_err){0});
    /* Another session's append drops the idle one (least recently used). */
    create(spec, &lim, b);
    ans = append(b, 1, 1, 2, NULL, &lim, &status);
    assert_int_equal(status, 200);
    cJSON_Delete(ans);
    ans = answer(&srv_ep_session_get, a, NULL, &lim, &status);
    expect_error(ans, status, 404, "SESSION_NOT_FOUND", NULL);
    cJSON_Delete(ans);
    srv_kv_stats_get(c, &st);
    assert_int_equal(st.evicted_full, 1);
    assert_int_equal(st.sessions, 1);
    srv_kv_cache_free(c);
}

static void test_ttl(void **state)
{
    (void)state;
    srv_kv_cache *c = cache_new((size_t)1 << 20, 0.05);
    srv_limits lim = lim_of(c);
    char id[SRV_KV_ID_LEN];
    int status;
    cJSON *ans;
    srv_kv_stats st;

    create(ROPE2, &lim, id);
    nanosleep(&(struct timespec){0, 120 * 1000 * 1000}, NULL);
    /* Any sessions request drops the idle ones first. */
    ans = answer(&srv_ep_sessions_list, NULL, NULL, &lim, &status);
    assert_int_equal(status, 200);
    assert_int_equal(at(ans, "total", NULL), 0);
    cJSON_Delete(ans);
    srv_kv_stats_get(c, &st);
    assert_int_equal(st.evicted_ttl, 1);
    ans = answer(&srv_ep_session_get, id, NULL, &lim, &status);
    expect_error(ans, status, 404, "SESSION_NOT_FOUND", NULL);
    cJSON_Delete(ans);
    srv_kv_cache_free(c);
}

static void test_no_cache(void **state)
{
    (void)state;
    srv_limits lim = lim_of(NULL);
    int status;
    cJSON *ans = post(&srv_ep_sessions_create, NULL, ROPE2, &lim, &status);
    expect_error(ans, status, 501, "NOT_IMPLEMENTED", NULL);
    cJSON_Delete(ans);
    ans = answer(&srv_ep_sessions_list, NULL, NULL, &lim, &status);
    expect_error(ans, status, 501, "NOT_IMPLEMENTED", NULL);
    cJSON_Delete(ans);
    ans = answer(&srv_ep_session_get, "x", NULL, NULL, &status);
    expect_error(ans, status, 501, "NOT_IMPLEMENTED", NULL);
    cJSON_Delete(ans);
    ans = append("x", 1, 2, 4, NULL, &lim, &status);
    expect_error(ans, status, 501, "NOT_IMPLEMENTED", NULL);
    cJSON_Delete(ans);
}

/* Storage in bf16 and f16: the type in the answer, half the bytes, the
 * stored values the inputs rounded to nearest even, and the values a type
 * cannot hold refused whole (f16: 65504; keys a rope session rotates:
 * 65504 / sqrt(2), since a rotation moves a pair's norm into one member). */
static void test_dtypes(void **state)
{
    (void)state;
    srv_kv_cache *c = cache_new((size_t)1 << 20, 0);
    srv_limits lim = limits();
    char b[SRV_KV_ID_LEN], h[SRV_KV_ID_LEN], r[SRV_KV_ID_LEN];
    int status;
    cJSON *ans;
    srv_kv_view view;
    srv_kv_err ke;

    lim.sessions = c;
    create("{\"scheme\":{\"type\":\"alibi\"},\"num_kv_heads\":1,\"head_dim\":4,\"max_tokens\":8,"
           "\"dtype\":\"bf16\"}",
           &lim, b);
    create("{\"scheme\":{\"type\":\"alibi\"},\"num_kv_heads\":1,\"head_dim\":4,\"max_tokens\":8,"
           "\"dtype\":\"f16\"}",
           &lim, h);
    create("{\"scheme\":{\"type\":\"rope\"},\"num_kv_heads\":1,\"head_dim\":4,\"max_tokens\":8,"
           "\"dtype\":\"f16\"}",
           &lim, r);
    /* bf16 keeps 8 significant bits: 1 + 2^-9 is a quarter of its step
     * above 1 (down to 1), 1 + 3 * 2^-9 three quarters (up to 1 + 2^-7). */
    ans = post(&srv_ep_session_append, b,
               "{\"k\":{\"shape\":[1,1,4],\"data\":[1.001953125,-3.5,65504,1e-3]},"
               "\"v\":{\"shape\":[1,1,4],\"data\":[1.005859375,0,70000,-2]}}",
               &lim, &status);
    assert_int_equal(status, 200);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(ans, "dtype")->valuestring, "bf16");
    assert_int_equal(at(ans, "bytes", NULL), 16 * 1 * (4 + 4) * 2);
    cJSON_Delete(ans);
    assert_true(srv_kv_view_take(c, b, &view, &ke));
    assert_int_equal(view.dtype, PA_DTYPE_BF16);
    {
        const uint16_t *k = (const uint16_t *)(const void *)view.k_pages[0],
                       *v = (const uint16_t *)(const void *)view.v_pages[0];
        assert_int_equal(k[0], 0x3f80); /* 1 + 2^-9: down to 1 */
        assert_int_equal(k[1], 0xc060);
        assert_int_equal(k[2], 0x4780); /* 65504 rounds up to 65536 */
        assert_int_equal(v[0], 0x3f81); /* 1 + 3 * 2^-9 rounds to 1 + 2^-7 */
        assert_int_equal(v[2], 0x4789); /* 70000 -> 70144 */
    }
    srv_kv_view_release(c, &view);

    /* f16: 70000 does not fit, whole request refused, nothing appended. */
    ans = post(&srv_ep_session_append, h,
               "{\"k\":{\"shape\":[2,1,4],\"data\":[1,2,3,4,5,6,7,8]},"
               "\"v\":{\"shape\":[2,1,4],\"data\":[1,2,3,4,5,6,7,70000]}}",
               &lim, &status);
    expect_error(ans, status, 400, "OUT_OF_RANGE", "v");
    assert_non_null(strstr(str_at(ans, "error", "message"), "70000 at element 7"));
    cJSON_Delete(ans);
    ans = answer(&srv_ep_session_get, h, NULL, &lim, &status);
    assert_int_equal(at(ans, "length", NULL), 0);
    cJSON_Delete(ans);
    /* 50000 fits a key of alibi's f16 session, not one rope rotates. */
    ans = post(&srv_ep_session_append, h,
               "{\"k\":{\"shape\":[1,1,4],\"data\":[50000,0,0,0]},"
               "\"v\":{\"shape\":[1,1,4],\"data\":[0,0,0,0]}}",
               &lim, &status);
    assert_int_equal(status, 200);
    cJSON_Delete(ans);
    ans = post(&srv_ep_session_append, r,
               "{\"k\":{\"shape\":[1,1,4],\"data\":[50000,0,0,0]},"
               "\"v\":{\"shape\":[1,1,4],\"data\":[0,0,0,0]}}",
               &lim, &status);
    expect_error(ans, status, 400, "OUT_OF_RANGE", "k");
    assert_non_null(strstr(str_at(ans, "error", "message"), "46318.3"));
    cJSON_Delete(ans);
    srv_kv_cache_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lifecycle),
        cmocka_unit_test(test_window),
        cmocka_unit_test(test_append_refusals),
        cmocka_unit_test(test_full),
        cmocka_unit_test(test_ttl),
        cmocka_unit_test(test_no_cache),
        cmocka_unit_test(test_dtypes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
