/* routes.h - the URL paths posattnd answers, and which one a request names.
 *
 * One table (srv_routes) gives each route its path, method, metrics label,
 * whether it needs the API key and, for the JSON API, the endpoint of api/
 * that answers it: http.c hands a route with an endpoint to api/ without
 * knowing which one it is, so a new endpoint is a new file in api/ and a
 * row here.
 */
#ifndef SRV_ROUTES_H
#define SRV_ROUTES_H

#include "api/api.h"

#include <stdbool.h>
#include <stddef.h>

typedef enum srv_route {
    SRV_ROUTE_ATTENTION,
    SRV_ROUTE_ENCODE,
    SRV_ROUTE_ANALYZE,
    SRV_ROUTE_SCHEMES,
    SRV_ROUTE_TENSORS,
    SRV_ROUTE_HEALTHZ,
    SRV_ROUTE_READYZ,
    SRV_ROUTE_METRICS,
    SRV_ROUTE_OPENAPI,
    SRV_ROUTE_V2_SERVER, /* the Open Inference Protocol (v2/v2.h), SRV_ROUTE_V2_* */
    SRV_ROUTE_V2_LIVE,
    SRV_ROUTE_V2_READY,
    SRV_ROUTE_V2_STATS, /* /v2/models/stats: every model's */
    SRV_ROUTE_V2_MODEL, /* /v2/models/{name}[/versions/{v}]...: srv_route_find gives both */
    SRV_ROUTE_V2_MODEL_READY,
    SRV_ROUTE_V2_INFER,
    SRV_ROUTE_V2_MODEL_STATS,
    SRV_ROUTE_PAGE, /* GET /: the web page (server/web/index.html) */
    SRV_ROUTE_WEB,  /* GET /web/NAME: a file of the page; matched by prefix */
    SRV_ROUTE_NOT_FOUND
} srv_route;

typedef struct srv_route_def {
    const char *path;       /* NULL for SRV_ROUTE_NOT_FOUND */
    const char *method;     /* "GET" routes answer HEAD too */
    const char *label;      /* metrics endpoint label */
    bool api;               /* needs the API key when one is set */
    const srv_endpoint *ep; /* the JSON API endpoint that answers it; NULL for the others */
} srv_route_def;

extern const srv_route_def srv_routes[SRV_ROUTE_NOT_FOUND + 1];

/* What a /v2/models/{name}[/versions/{version}][/ready|/infer|/stats]
 * path names: both cut to fit (never overflowing), version "" when the
 * path has none. */
typedef struct srv_route_model {
    char name[128];
    char version[32];
} srv_route_model;

/* The route of url (the path, without the query). *method_ok says whether
 * method is the route's (HEAD for GET too); true for SRV_ROUTE_NOT_FOUND.
 * For the /v2/models/{name} routes *m gets the name and version; *m is
 * untouched otherwise. "/v2/" is "/v2" (the OpenAPI document's spelling). */
srv_route srv_route_find(const char *url, const char *method, bool *method_ok, srv_route_model *m);

/* Routes of the Open Inference Protocol, and those that name a model. */
bool srv_route_is_v2(srv_route r);
bool srv_route_is_v2_model(srv_route r);

/* Whether url is under /v2 (a route or not): its errors take the
 * protocol's {"error": "<string>"} shape. */
bool srv_url_is_v2(const char *url);

#endif
