/* test_sessions.c - server/api/sessions.c: /v1/sessions through the api
 * layer (srv_job_prepare_args, every task on this thread, srv_job_finish;
 * srv_endpoint_answer_args for GET and DELETE): create, get, list, append,
 * fork, delete; every refusal naming its field; SESSION_FULL, CACHE_FULL
 * and the pool-full eviction with small budgets; ttl expiry; the request
 * memory limit; a server without a cache; a session of a served model's
 * layer, an item over it and its session step (srv_job_session_step).
 */
#include "api/api.h"
#include "api_harness.h"
#include "store/kv_cache.h"
#include "testutil.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* A query string's values: "offset=1&limit=2" parsed on each lookup. */
static const char *query_of(void *arg, const char *key)
{
    static char value[64];
    const char *q = arg;
    size_t kn = strlen(key);
    while (q != NULL && *q != '\0') {
        size_t n = strcspn(q, "&");
        if (n > kn && strncmp(q, key, kn) == 0 && q[kn] == '=') {
            snprintf(value, sizeof value, "%.*s", (int)(n - kn - 1), q + kn + 1);
            return value;
        }
        q += n + (q[n] == '&');
    }
    return NULL;
}

static srv_limits lim_of(srv_kv_cache *c)
{
    srv_limits l = {.max_batch_items = 64,
                    .max_tensor_elements = (size_t)16 << 20,
                    .max_request_memory = (size_t)64 << 20,
                    .parallel_parts = 1,
                    .sessions = c};
    return l;
}

static srv_kv_cache *cache_new(size_t budget, double ttl)
{
    srv_kv_cache *c = srv_kv_cache_new(
        &(srv_kv_config){.budget_bytes = budget, .block_tokens = 16, .ttl_s = ttl});
    assert_non_null(c);
    return c;
}

static cJSON *parse_reply(srv_reply *r, int *status)
{
    cJSON *ans;
    *status = r->http_status;
    ans = r->body != NULL ? cJSON_ParseWithLength(r->body, r->body_len) : cJSON_CreateObject();
    assert_non_null(ans);
    srv_reply_free(r);
    return ans;
}

/* POST ep (path {id} = id) with body. */
static cJSON *post(const srv_endpoint *ep, const char *id, const char *body, const srv_limits *lim,
                   int *status)
{
    srv_route_params p = {"", "", ""};
    srv_endpoint_args a = {&p, NULL, NULL};
    srv_reply r;
    srv_job *job = NULL;
    memset(&r, 0, sizeof r);
    snprintf(p.id, sizeof p.id, "%s", id != NULL ? id : "");
    if (srv_job_prepare_args(ep, &a, body, strlen(body), lim, &job, &r)) {
        for (size_t i = 0; i < srv_job_task_count(job); i++)
            srv_job_run_task(job, i, NULL);
        srv_job_finish(job, &r);
        srv_job_free(job);
    }
    return parse_reply(&r, status);
}

/* GET or DELETE ep with {id} and a query string. */
static cJSON *answer(const srv_endpoint *ep, const char *id, const char *query,
                     const srv_limits *lim, int *status)
{
    srv_route_params p = {"", "", ""};
    srv_endpoint_args a = {&p, query_of, (void *)query};
    srv_reply r;
    memset(&r, 0, sizeof r);
    snprintf(p.id, sizeof p.id, "%s", id != NULL ? id : "");
    srv_endpoint_answer_args(ep, lim, &a, &r);
    return parse_reply(&r, status);
}

static double at_num(const cJSON *o, const char *name)
{
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!cJSON_IsNumber(n))
        fail_msg("%s is not a number", name);
    return n->valuedouble;
}

static double at(const cJSON *o, const char *a, const char *b)
{
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(o, a);
    if (b != NULL)
        n = cJSON_GetObjectItemCaseSensitive(n, b);
    if (!cJSON_IsNumber(n))
        fail_msg("%s%s%s is not a number", a, b ? "." : "", b ? b : "");
    return n->valuedouble;
}

/* Creates a session from body; its id into id[SRV_KV_ID_LEN]. */
static void create(const char *body, const srv_limits *lim, char *id)
{
    int status;
    cJSON *ans = post(&srv_ep_sessions_create, NULL, body, lim, &status);
    if (status != 201)
        fail_msg("create %s: %d %s", body, status, str_at(ans, "error", "message"));
    snprintf(id, SRV_KV_ID_LEN, "%s", cJSON_GetObjectItemCaseSensitive(ans, "id")->valuestring);
    cJSON_Delete(ans);
}

/* An append body of n tokens of Hkv heads, D = Dv = d, values from seed. */
static char *append_body(int n, int hkv, int d, unsigned seed, const char *extra)
{
    tu_rng g;
    float *k = tu_alloc((size_t)n * hkv * d, sizeof *k),
          *v = tu_alloc((size_t)n * hkv * d, sizeof *v);
    cJSON *req = cJSON_CreateObject();
    char *text, *out;
    tu_rng_seed(&g, seed);
    tu_fill(&g, k, (size_t)n * hkv * d, -1, 1);
    tu_fill(&g, v, (size_t)n * hkv * d, -1, 1);
    cJSON_AddItemToObject(req, "k", jtensor(k, 3, n, hkv, d));
    cJSON_AddItemToObject(req, "v", jtensor_b64(v, 3, (const int[]){n, hkv, d}));
    text = cJSON_PrintUnformatted(req);
    cJSON_Delete(req);
    free(k);
    free(v);
    if (extra == NULL)
        return text;
    /* extra members spliced in before the closing brace */
    out = malloc(strlen(text) + strlen(extra) + 2);
    text[strlen(text) - 1] = '\0';
    sprintf(out, "%s,%s}", text, extra);
    free(text);
    return out;
}

static cJSON *append(const char *id, int n, int hkv, int d, const char *extra,
                     const srv_limits *lim, int *status)
{
    char *body = append_body(n, hkv, d, (unsigned)n * 7u + 1u, extra);
    cJSON *ans = post(&srv_ep_session_append, id, body, lim, status);
    free(body);
    return ans;
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

/* A create body's refusal: status, code and field. */
static void create_refused(const srv_limits *lim, const char *body, int want, const char *code,
                           const char *field, const char *words)
{
    int status;
    cJSON *ans = post(&srv_ep_sessions_create, NULL, body, lim, &status);
    if (code == NULL)
        assert_int_equal(status, want);
    else
        expect_error(ans, status, want, code, field);
    if (words != NULL && strstr(str_at(ans, "error", "message"), words) == NULL)
        fail_msg("message '%s' lacks '%s'", str_at(ans, "error", "message"), words);
    cJSON_Delete(ans);
}

static void test_create_refusals(void **state)
{
    (void)state;
    srv_kv_cache *c = cache_new((size_t)1 << 20, 0);
    srv_limits lim = lim_of(c);
#define S "\"scheme\":{\"type\":\"rope\"}"
    create_refused(&lim, "{\"num_kv_heads\":1,\"head_dim\":2,\"max_tokens\":4}", 400,
                   "INVALID_ARGUMENT", "scheme", "required");
    create_refused(&lim, "{" S ",\"head_dim\":2,\"max_tokens\":4}", 400, "INVALID_ARGUMENT",
                   "num_kv_heads", "required");
    create_refused(&lim, "{" S ",\"num_kv_heads\":1,\"max_tokens\":4}", 400, "INVALID_ARGUMENT",
                   "head_dim", "required");
    create_refused(&lim, "{" S ",\"num_kv_heads\":1,\"head_dim\":2}", 400, "INVALID_ARGUMENT",
                   "max_tokens", "required");
    create_refused(&lim, "{" S ",\"num_kv_heads\":0,\"head_dim\":2,\"max_tokens\":4}", 400,
                   "INVALID_ARGUMENT", "num_kv_heads", "num_kv_heads=0");
    create_refused(&lim, "{" S ",\"num_kv_heads\":1,\"head_dim\":2,\"max_tokens\":0}", 400,
                   "INVALID_ARGUMENT", "max_tokens", "max_tokens=0");
    create_refused(&lim, "{" S ",\"num_kv_heads\":1,\"head_dim\":3,\"max_tokens\":4}", 400, NULL,
                   NULL, NULL);
    create_refused(&lim, "{" S ",\"num_kv_heads\":1,\"head_dim\":2,\"max_tokens\":4,\"bogus\":1}",
                   400, "UNKNOWN_FIELD", "bogus", "bogus");
    create_refused(&lim,
                   "{" S ",\"num_kv_heads\":1,\"head_dim\":2,\"max_tokens\":4,\"dtype\":\"i8\"}",
                   400, "INVALID_ARGUMENT", "dtype", "i8");
    create_refused(&lim, "{" S ",\"num_kv_heads\":1,\"head_dim\":2,\"max_tokens\":4,\"dtype\":3}",
                   400, "INVALID_ARGUMENT", "dtype", NULL);
    create_refused(&lim,
                   "{" S ",\"num_kv_heads\":1,\"head_dim\":2,\"max_tokens\":4,\"eviction\":1}", 400,
                   "INVALID_ARGUMENT", "eviction", "object");
    create_refused(&lim,
                   "{" S ",\"num_kv_heads\":1,\"head_dim\":2,\"max_tokens\":4,\"eviction\":{}}",
                   400, "INVALID_ARGUMENT", "eviction.type", "required");
    create_refused(
        &lim,
        "{" S
        ",\"num_kv_heads\":1,\"head_dim\":2,\"max_tokens\":4,\"eviction\":{\"type\":\"lru\"}}",
        400, "INVALID_ARGUMENT", "eviction.type", "lru");
    create_refused(&lim,
                   "{" S ",\"num_kv_heads\":1,\"head_dim\":2,\"max_tokens\":4,\"eviction\":{"
                   "\"type\":\"none\",\"window\":2}}",
                   400, "INVALID_ARGUMENT", "eviction.window", "window");
    create_refused(&lim,
                   "{" S ",\"num_kv_heads\":1,\"head_dim\":2,\"max_tokens\":4,\"eviction\":{"
                   "\"type\":\"window\",\"size\":2}}",
                   400, "UNKNOWN_FIELD", "eviction.size", NULL);
    create_refused(&lim,
                   "{" S ",\"num_kv_heads\":1,\"head_dim\":2,\"max_tokens\":4,\"eviction\":{"
                   "\"type\":\"window\",\"sinks\":2}}",
                   400, "INVALID_ARGUMENT", "eviction.window", "required");
    create_refused(&lim,
                   "{" S ",\"num_kv_heads\":1,\"head_dim\":2,\"max_tokens\":4,\"eviction\":{"
                   "\"type\":\"window\",\"window\":4,\"sinks\":1}}",
                   400, "INVALID_ARGUMENT", "eviction.window", "max_tokens=4");
    create_refused(&lim,
                   "{" S ",\"num_kv_heads\":1,\"head_dim\":2,\"max_tokens\":4,\"eviction\":{"
                   "\"type\":\"window\",\"window\":2,\"reposition\":1}}",
                   400, "INVALID_ARGUMENT", "eviction.reposition", NULL);
    create_refused(&lim,
                   "{\"scheme\":{\"type\":\"cope\"},\"num_kv_heads\":1,\"head_dim\":2,"
                   "\"max_tokens\":4}",
                   400, "UNSUPPORTED", "scheme.type", "cope");
    create_refused(&lim,
                   "{\"scheme\":{\"type\":\"rope\",\"bogus\":1},\"num_kv_heads\":1,\"head_dim\":2,"
                   "\"max_tokens\":4}",
                   400, "UNKNOWN_FIELD", "scheme.bogus", NULL);
    create_refused(&lim, "[1]", 400, "INVALID_ARGUMENT", NULL, NULL);
    create_refused(&lim, "{", 400, "MALFORMED_JSON", NULL, NULL);
#undef S
    /* Nothing was created. */
    {
        srv_kv_stats st;
        srv_kv_stats_get(c, &st);
        assert_int_equal(st.sessions, 0);
    }
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

/* A client's "id": taken as is, SESSION_EXISTS when taken, refused naming
 * "id" when not of the charset; SESSION_NOT_FOUND names the replica. */
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

static void test_chosen_id(void **state)
{
    (void)state;
    srv_kv_cache *c = cache_new((size_t)1 << 20, 0);
    srv_limits lim = lim_of(c);
    char id[SRV_KV_ID_LEN];
    int status;
    cJSON *ans;
#define BODY(idjson)                                                                               \
    "{\"id\":" idjson ",\"scheme\":{\"type\":\"alibi\"},\"num_kv_heads\":1,\"head_dim\":2,"        \
    "\"max_tokens\":4}"
    create(BODY("\"conv-9.a_B\""), &lim, id);
    assert_string_equal(id, "conv-9.a_B");
    create_refused(&lim, BODY("\"conv-9.a_B\""), 409, "SESSION_EXISTS", "id", "conv-9.a_B");
    create_refused(&lim, BODY("\".x\""), 400, "INVALID_ARGUMENT", "id", "not starting with '.'");
    create_refused(&lim, BODY("\"a/b\""), 400, "INVALID_ARGUMENT", "id", "A-Z a-z 0-9 _ . -");
    create_refused(&lim, BODY("\"\""), 400, "INVALID_ARGUMENT", "id", NULL);
    create_refused(&lim, BODY("7"), 400, "INVALID_ARGUMENT", "id", NULL);
    create_refused(&lim,
                   BODY("\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\""),
                   400, "INVALID_ARGUMENT", "id", "1 to 64");
    create(BODY("\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\""), &lim, id);
    assert_int_equal(strlen(id), 64);
#undef BODY
    ans = answer(&srv_ep_session_get, "conv-9.a_B", NULL, &lim, &status);
    assert_int_equal(status, 200);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(ans, "id")),
                        "conv-9.a_B");
    cJSON_Delete(ans);
    /* The replica is named when the server has a name. */
    ans = answer(&srv_ep_session_get, "nope", NULL, &lim, &status);
    expect_error(ans, status, 404, "SESSION_NOT_FOUND", "session");
    assert_null(strstr(str_at(ans, "error", "message"), "(replica"));
    cJSON_Delete(ans);
    lim.replica = "pod-3";
    ans = answer(&srv_ep_session_get, "nope", NULL, &lim, &status);
    expect_error(ans, status, 404, "SESSION_NOT_FOUND", "session");
    assert_non_null(strstr(str_at(ans, "error", "message"), "(replica pod-3)"));
    cJSON_Delete(ans);
    ans = append("nope", 1, 1, 2, NULL, &lim, &status);
    expect_error(ans, status, 404, "SESSION_NOT_FOUND", "session");
    assert_non_null(strstr(str_at(ans, "error", "message"), "(replica pod-3)"));
    cJSON_Delete(ans);
    srv_kv_cache_free(c);
}

/* Create keeps the request's scheme as JSON (arrays the parser lifted out
 * of the body put back), and srv_api_session_scheme makes the same scheme
 * from it; a delete removes the session's file under --cache-dir. */
static void test_scheme_json(void **state)
{
    (void)state;
    srv_kv_cache *c = cache_new((size_t)1 << 20, 0);
    srv_limits lim = lim_of(c);
    char id[SRV_KV_ID_LEN], dir[] = "/tmp/posattn-sessions-XXXXXX", path[128], err[256];
    srv_kv_info info;
    srv_kv_err ke;
    srv_kv_spec sp;
    int status;
    cJSON *ans, *kept;
    FILE *f;

    create("{\"scheme\":{\"type\":\"t5\",\"num_buckets\":4,\"max_distance\":8,"
           "\"table\":{\"shape\":[4,1],\"data\":[0.5,1.5,-2,3]}},"
           "\"num_kv_heads\":1,\"head_dim\":2,\"max_tokens\":4}",
           &lim, id);
    assert_true(srv_kv_info_get(c, id, &info, &ke));
    assert_non_null(info.spec.scheme_json);
    kept = cJSON_Parse(info.spec.scheme_json);
    assert_non_null(kept);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(kept, "type")), "t5");
    {
        const cJSON *data = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(kept, "table"), "data");
        assert_true(cJSON_IsArray(data));
        assert_int_equal(cJSON_GetArraySize(data), 4);
        assert_true(cJSON_GetArrayItem(data, 2)->valuedouble == -2.0);
    }
    cJSON_Delete(kept);
    memset(&sp, 0, sizeof sp);
    assert_true(srv_api_session_scheme(&lim, info.spec.scheme_json, &sp, err, sizeof err));
    assert_int_equal(sp.scheme->type, PA_SCHEME_T5);
    assert_int_equal(sp.scheme->t5.num_buckets, 4);
    assert_true(sp.scheme->t5.table[2] == -2.0f);
    sp.scheme_free(sp.scheme_owner);
    /* What does not parse says why. */
    memset(&sp, 0, sizeof sp);
    assert_false(srv_api_session_scheme(&lim, "{\"type\":", &sp, err, sizeof err));
    assert_non_null(strstr(err, "not JSON"));
    assert_false(srv_api_session_scheme(&lim, "{\"type\":\"warp\"}", &sp, err, sizeof err));
    assert_non_null(strstr(err, "scheme.type"));
    assert_null(sp.scheme_owner);

    /* DELETE removes dir/ID.safetensors. */
    assert_non_null(mkdtemp(dir));
    lim.cache_dir = dir;
    snprintf(path, sizeof path, "%s/%s.safetensors", dir, id);
    f = fopen(path, "w");
    assert_non_null(f);
    fclose(f);
    ans = answer(&srv_ep_session_delete, id, NULL, &lim, &status);
    assert_int_equal(status, 200);
    cJSON_Delete(ans);
    assert_int_equal(access(path, F_OK), -1);
    assert_int_equal(rmdir(dir), 0);
    srv_kv_cache_free(c);
}

/* A /v1/attention body of one item over session id: extra members (each
 * followed by a comma), q [1, 4, 16] and append (a JSON object). */
static char *step_body(const char *id, const char *extra, const char *append_json)
{
    char *b = malloc(strlen(extra) + strlen(append_json) + 512);
    sprintf(b,
            "{\"inputs\":[{\"session\":\"%s\",%s"
            "\"q\":{\"shape\":[1,4,16],\"data\":[%s]},\"append\":%s}]}",
            id, extra,
            "1,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,1,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,"
            "1,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,1,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0",
            append_json);
    return b;
}

/* A session of a served model's layer: its scheme and dims from the
 * config (dims sent must agree), model and layer shown; an item over it
 * takes the layer's options (a conflicting one refused unless override);
 * the finished job's session step has its scheme and wall time; a saved
 * session's scheme is rebuilt only while the model still derives it. */
static void test_model_session(void **state)
{
    (void)state;
    srv_kv_cache *c = cache_new((size_t)1 << 20, 0);
    srv_limits lim = lim_of(c);
    srv_model_set *models = NULL;
    srv_model_spec specs[] = {{"g2", "tests/fixtures/models/gemma2.json"}};
    char id[SRV_KV_ID_LEN], err[256], *kv, *body;
    srv_kv_info info;
    srv_kv_spec sp;
    srv_job *job = NULL;
    srv_reply r;
    const char *scheme = NULL;
    double seconds = 0;
    size_t at = 0;
    int status;
    cJSON *ans;

    assert_true(srv_model_set_load(specs, 1, &models, err, sizeof err));
    lim.models = models;
    ans = post(&srv_ep_sessions_create, NULL,
               "{\"model\":\"g2\",\"layer\":0,\"head_dim\":16,\"max_tokens\":8}", &lim, &status);
    assert_int_equal(status, 201);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(ans, "model")), "g2");
    assert_int_equal((int)at_num(ans, "layer"), 0);
    assert_int_equal((int)at_num(ans, "num_kv_heads"), 2);
    assert_int_equal((int)at_num(ans, "v_head_dim"), 16);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(ans, "scheme")),
                        "rope");
    snprintf(id, sizeof id, "%s",
             cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(ans, "id")));
    cJSON_Delete(ans);
    ans = post(&srv_ep_sessions_create, NULL,
               "{\"model\":\"g2\",\"layer\":0,\"v_head_dim\":8,\"max_tokens\":8}", &lim, &status);
    expect_error(ans, status, 400, "SHAPE_MISMATCH", "v_head_dim");
    cJSON_Delete(ans);
    ans = post(&srv_ep_sessions_create, NULL, "{\"model\":\"g2\",\"layer\":-1,\"max_tokens\":8}",
               &lim, &status);
    expect_error(ans, status, 400, "OUT_OF_RANGE", "layer");
    cJSON_Delete(ans);

    /* One step over it: the layer's options merged (softcap refused
     * without override, layer refused), then the step's scheme and wall
     * time. */
    kv = append_body(1, 2, 16, 3, NULL);
    body = step_body(id, "\"softcap\":2,", kv);
    ans = call(&srv_ep_attention, body, &lim, &status);
    expect_item_error(ans, 0, "INVALID_ARGUMENT", "inputs[0].softcap");
    cJSON_Delete(ans);
    free(body);
    body = step_body(id, "\"layer\":1,", kv);
    ans = call(&srv_ep_attention, body, &lim, &status);
    expect_item_error(ans, 0, "INVALID_ARGUMENT", "inputs[0].layer");
    cJSON_Delete(ans);
    free(body);
    body = step_body(id, "\"softcap\":2,\"override\":true,", kv);
    memset(&r, 0, sizeof r);
    assert_true(srv_job_prepare(&srv_ep_attention, body, strlen(body), &lim, &job, &r));
    assert_int_equal(srv_job_task_count(job), 1);
    srv_job_run_task(job, 0, NULL);
    srv_job_set_timing(job, 0, 5, 1000, 1250);
    assert_true(srv_job_session_step(job, &at, &scheme, &seconds));
    assert_string_equal(scheme, "rope");
    assert_true(seconds == 250e-6);
    assert_false(srv_job_session_step(job, &at, &scheme, &seconds));
    srv_job_finish(job, &r);
    srv_job_free(job);
    ans = parse_reply(&r, &status);
    expect_ok(ans, status);
    cJSON_Delete(ans);
    free(body);
    free(kv);

    /* A saved session's scheme, checked against the model loaded now. */
    assert_true(srv_kv_info_get(c, id, &info, NULL));
    assert_string_equal(info.model, "g2");
    memset(&sp, 0, sizeof sp);
    sp.model = "g2";
    sp.num_kv_heads = 2;
    sp.head_dim = sp.v_head_dim = 16;
    assert_true(srv_api_session_scheme(&lim, info.spec.scheme_json, &sp, err, sizeof err));
    sp.scheme_free(sp.scheme_owner);
    memset(&sp, 0, sizeof sp);
    sp.model = "g3";
    assert_false(srv_api_session_scheme(&lim, "{\"type\":\"none\"}", &sp, err, sizeof err));
    assert_non_null(strstr(err, "not loaded"));
    sp.model = "g2";
    sp.num_kv_heads = 2;
    sp.head_dim = sp.v_head_dim = 16;
    assert_false(srv_api_session_scheme(&lim, "{\"type\":\"none\"}", &sp, err, sizeof err));
    assert_non_null(strstr(err, "another scheme"));
    sp.layer = 7;
    assert_false(srv_api_session_scheme(&lim, info.spec.scheme_json, &sp, err, sizeof err));
    assert_non_null(strstr(err, "has 4 layers"));
    assert_null(sp.scheme_owner);
    srv_kv_cache_free(c);
    srv_model_set_free(models);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lifecycle),
        cmocka_unit_test(test_window),
        cmocka_unit_test(test_create_refusals),
        cmocka_unit_test(test_append_refusals),
        cmocka_unit_test(test_full),
        cmocka_unit_test(test_ttl),
        cmocka_unit_test(test_no_cache),
        cmocka_unit_test(test_dtypes),
        cmocka_unit_test(test_chosen_id),
        cmocka_unit_test(test_scheme_json),
        cmocka_unit_test(test_model_session),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
