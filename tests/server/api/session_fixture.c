/* session_fixture.c - see session_fixture.h. */
#include "session_fixture.h"

#include "testutil.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

srv_limits lim_of(srv_kv_cache *c)
{
    srv_limits l = {.max_batch_items = 64,
                    .max_tensor_elements = (size_t)16 << 20,
                    .max_request_memory = (size_t)64 << 20,
                    .parallel_parts = 1,
                    .sessions = c};
    return l;
}

srv_kv_cache *cache_new(size_t budget, double ttl)
{
    srv_kv_cache *c = srv_kv_cache_new(
        &(srv_kv_config){.budget_bytes = budget, .block_tokens = 16, .ttl_s = ttl});
    assert_non_null(c);
    return c;
}

cJSON *parse_reply(srv_reply *r, int *status)
{
    cJSON *ans;
    *status = r->http_status;
    ans = r->body != NULL ? cJSON_ParseWithLength(r->body, r->body_len) : cJSON_CreateObject();
    assert_non_null(ans);
    srv_reply_free(r);
    return ans;
}

/* POST ep (path {id} = id) with body. */
cJSON *post(const srv_endpoint *ep, const char *id, const char *body, const srv_limits *lim,
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
cJSON *answer(const srv_endpoint *ep, const char *id, const char *query, const srv_limits *lim,
              int *status)
{
    srv_route_params p = {"", "", ""};
    srv_endpoint_args a = {&p, query_of, (void *)query};
    srv_reply r;
    memset(&r, 0, sizeof r);
    snprintf(p.id, sizeof p.id, "%s", id != NULL ? id : "");
    srv_endpoint_answer_args(ep, lim, &a, &r);
    return parse_reply(&r, status);
}

/* Creates a session from body; its id into id[SRV_KV_ID_LEN]. */
void create(const char *body, const srv_limits *lim, char *id)
{
    int status;
    cJSON *ans = post(&srv_ep_sessions_create, NULL, body, lim, &status);
    if (status != 201)
        fail_msg("create %s: %d %s", body, status, str_at(ans, "error", "message"));
    snprintf(id, SRV_KV_ID_LEN, "%s", cJSON_GetObjectItemCaseSensitive(ans, "id")->valuestring);
    cJSON_Delete(ans);
}

/* An append body of n tokens of Hkv heads, D = Dv = d, values from seed. */
char *append_body(int n, int hkv, int d, unsigned seed, const char *extra)
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

cJSON *append(const char *id, int n, int hkv, int d, const char *extra, const srv_limits *lim,
              int *status)
{
    char *body = append_body(n, hkv, d, (unsigned)n * 7u + 1u, extra);
    cJSON *ans = post(&srv_ep_session_append, id, body, lim, status);
    free(body);
    return ans;
}
