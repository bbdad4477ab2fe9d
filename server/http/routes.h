/* routes.h - the URL paths posattnd answers, and which one a request names.
 *
 * One table (srv_routes) gives each route its path, method, metrics label,
 * whether it needs the API key, and what answers it: an endpoint of api/
 * (the /v1 JSON API), a wire protocol's record and operation (api/api.h's
 * srv_protocol: /v2), or http/ itself (health, metrics, the page). http.c
 * hands a route to its endpoint or protocol without knowing which one it
 * is, so a new endpoint is a file in api/ and a row here, and a new
 * protocol a folder and rows here.
 */
#ifndef SRV_ROUTES_H
#define SRV_ROUTES_H

#include "api/api.h"

#include <stdbool.h>
#include <stddef.h>

/* A row of srv_routes. The rows http/ answers itself are named; the rows
 * from SRV_ROUTE_PROTOCOLS on are the protocols'. */
typedef int srv_route;
enum {
    SRV_ROUTE_NOT_FOUND, /* no route: path NULL */
    SRV_ROUTE_ATTENTION,
    SRV_ROUTE_ENCODE,
    SRV_ROUTE_ANALYZE,
    SRV_ROUTE_SCHEMES,
    SRV_ROUTE_TENSORS,
    SRV_ROUTE_MODELS,
    SRV_ROUTE_MODELS_RESOLVE,
    SRV_ROUTE_SESSIONS,        /* GET /v1/sessions: the list */
    SRV_ROUTE_SESSIONS_CREATE, /* POST /v1/sessions */
    SRV_ROUTE_SESSION,         /* GET /v1/sessions/{id} */
    SRV_ROUTE_SESSION_DELETE,  /* DELETE /v1/sessions/{id} */
    SRV_ROUTE_SESSION_APPEND,  /* POST /v1/sessions/{id}/append */
    SRV_ROUTE_SESSION_FORK,    /* POST /v1/sessions/{id}/fork */
    SRV_ROUTE_HEALTHZ,
    SRV_ROUTE_READYZ,
    SRV_ROUTE_METRICS,
    SRV_ROUTE_OPENAPI,
    SRV_ROUTE_PAGE, /* GET /: the web page (server/http/web/index.html) */
    SRV_ROUTE_WEB,  /* GET /web/NAME: a file of the page; matched by prefix */
    SRV_ROUTE_PROTOCOLS
};

typedef struct srv_route_def {
    /* Segments match exactly, except "{name}", "{version}" and "{id}",
     * which match any one non-empty segment (srv_route_params); the first
     * row whose path and method match is the route, else the first whose
     * path does (a 405). NULL for SRV_ROUTE_NOT_FOUND and the end. */
    const char *path;
    const char *method;        /* "GET" routes answer HEAD too; "DELETE" has no body */
    const char *label;         /* metrics endpoint label */
    bool api;                  /* needs the API key when one is set */
    const srv_endpoint *ep;    /* the JSON API endpoint that answers it, or NULL */
    const srv_protocol *proto; /* the protocol that answers it, or NULL */
    int op;                    /* which of proto's routes */
} srv_route_def;

/* Indexed by srv_route; ends with a row whose path is NULL. */
extern const srv_route_def srv_routes[];

/* The route of url (the path, without the query): the first row whose
 * path and method match, else the first whose path does. *method_ok says
 * whether method is the route's (HEAD for GET too); true for
 * SRV_ROUTE_NOT_FOUND. *p gets the path's {name}, {version} and {id} (""
 * when the route has none). */
srv_route srv_route_find(const char *url, const char *method, bool *method_ok, srv_route_params *p);

/* Whether the route's path has parameters ({name}, {id}). */
bool srv_route_has_params(srv_route r);

/* The methods of every row with r's path, as an Allow header lists them
 * ("GET, POST"), into buf[cap]; returns buf. */
const char *srv_route_allow(srv_route r, char *buf, size_t cap);

/* The protocol whose prefix url is under ("/v2" or "/v2/..."), a route or
 * not: its errors take that protocol's shape. NULL for none. */
const srv_protocol *srv_url_protocol(const char *url);

#endif
