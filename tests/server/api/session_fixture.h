/* session_fixture.h - what tests/server/api/test_sessions.c and
 * test_session_create.c share: /v1/sessions's endpoints driven without
 * HTTP (srv_job_prepare_args with a path {id}, every task on this thread,
 * srv_job_finish; srv_endpoint_answer_args with a query string for GET and
 * DELETE), a cache and limits to run them on, and create and append bodies.
 * Answers are parsed back with cJSON and belong to the caller.
 */
#ifndef SESSION_FIXTURE_H
#define SESSION_FIXTURE_H

#include "api_harness.h"
#include "store/kv_cache.h"

#include <cjson/cJSON.h>
#include <stddef.h>

/* Limits of a test server whose session cache is c (NULL: none). */
srv_limits lim_of(srv_kv_cache *c);
/* A cache of budget bytes, blocks of 16 tokens, idle sessions dropped after
 * ttl seconds (0: never). */
srv_kv_cache *cache_new(size_t budget, double ttl);
/* r's status into *status and its body parsed (an empty object when it has
 * none); r freed. */
cJSON *parse_reply(srv_reply *r, int *status);
/* POST ep (path {id} = id) with body. */
cJSON *post(const srv_endpoint *ep, const char *id, const char *body, const srv_limits *lim,
            int *status);
/* GET or DELETE ep with {id} and a query string ("offset=1&limit=2", or
 * NULL). */
cJSON *answer(const srv_endpoint *ep, const char *id, const char *query, const srv_limits *lim,
              int *status);
/* Creates a session from body (201 or the test fails); its id into
 * id[SRV_KV_ID_LEN]. */
void create(const char *body, const srv_limits *lim, char *id);
/* An append body of n tokens of Hkv heads, D = Dv = d, values from seed;
 * extra members (JSON text) spliced in when not NULL. malloc'd. */
char *append_body(int n, int hkv, int d, unsigned seed, const char *extra);
/* POST /v1/sessions/{id}/append of append_body(n, hkv, d, ..., extra). */
cJSON *append(const char *id, int n, int hkv, int d, const char *extra, const srv_limits *lim,
              int *status);

#endif
