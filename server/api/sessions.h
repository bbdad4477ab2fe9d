/* sessions.h - private to api/: what the two files of /v1/sessions share,
 * sessions.c (list, get, delete, append) and session_create.c (create and
 * fork): the cache a request works on, the store's errors as the API's,
 * the {id} of the path and a session's JSON.
 */
#ifndef SRV_API_SESSIONS_H
#define SRV_API_SESSIONS_H

#include "api/api.h"
#include "api/protocol.h"
#include "store/kv_cache.h"

#include <cjson/cJSON.h>
#include <stdbool.h>

/* The server's cache (lim->sessions) into *c, with the sessions idle past
 * their ttl dropped (srv_kv_expire); false with NOT_IMPLEMENTED when the
 * server keeps none (lim NULL or without a cache: tests of other
 * endpoints). */
bool api_session_cache(const srv_limits *lim, srv_kv_cache **c, api_err *e);
/* The store's error ke as the API's, into *e; SESSION_NOT_FOUND names this
 * replica (lim->replica, --replica-id) when it has a name. lim may be
 * NULL. */
void api_session_err(api_err *e, const srv_kv_err *ke, const srv_limits *lim);
/* The route's {id} ("" when a has none); borrowed from a. */
const char *api_session_path_id(const srv_endpoint_args *a);
/* The members of session in's JSON, added to o (id, length, positions,
 * bytes, dims, eviction, ...: docs/sessions.md); false when out of
 * memory. */
bool api_session_fill(cJSON *o, const srv_kv_info *in);

#endif
