/* routes.c - see routes.h. */
#include "http/routes.h"

#include "api/api.h"

#include <stdio.h>
#include <string.h>

const srv_route_def srv_routes[SRV_ROUTE_NOT_FOUND + 1] = {
    [SRV_ROUTE_ATTENTION] = {"/v1/attention", "POST", "attention", true, &srv_ep_attention},
    [SRV_ROUTE_ENCODE] = {"/v1/encode", "POST", "encode", true, &srv_ep_encode},
    [SRV_ROUTE_ANALYZE] = {"/v1/analyze", "POST", "analyze", true, &srv_ep_analyze},
    [SRV_ROUTE_SCHEMES] = {"/v1/schemes", "GET", "schemes", true, &srv_ep_schemes},
    [SRV_ROUTE_TENSORS] = {"/v1/tensors", "GET", "tensors", true, &srv_ep_tensors},
    [SRV_ROUTE_HEALTHZ] = {"/healthz", "GET", "healthz", false},
    [SRV_ROUTE_READYZ] = {"/readyz", "GET", "readyz", false},
    [SRV_ROUTE_METRICS] = {"/metrics", "GET", "metrics", false},
    [SRV_ROUTE_OPENAPI] = {"/openapi.yaml", "GET", "openapi", false},
    [SRV_ROUTE_V2_SERVER] = {"/v2", "GET", "v2_metadata", true},
    [SRV_ROUTE_V2_LIVE] = {"/v2/health/live", "GET", "v2_health", false},
    [SRV_ROUTE_V2_READY] = {"/v2/health/ready", "GET", "v2_health", false},
    [SRV_ROUTE_V2_STATS] = {"/v2/models/stats", "GET", "v2_stats", true},
    [SRV_ROUTE_V2_MODEL] = {"/v2/models/{name}", "GET", "v2_metadata", true},
    [SRV_ROUTE_V2_MODEL_READY] = {"/v2/models/{name}/ready", "GET", "v2_health", false},
    [SRV_ROUTE_V2_INFER] = {"/v2/models/{name}/infer", "POST", "v2_infer", true},
    [SRV_ROUTE_V2_MODEL_STATS] = {"/v2/models/{name}/stats", "GET", "v2_stats", true},
    [SRV_ROUTE_PAGE] = {"/", "GET", "page", false},
    [SRV_ROUTE_WEB] = {"/web/", "GET", "page", false},
    [SRV_ROUTE_NOT_FOUND] = {NULL, NULL, "other", false},
};

bool srv_route_is_v2(srv_route r)
{
    return r >= SRV_ROUTE_V2_SERVER && r <= SRV_ROUTE_V2_MODEL_STATS;
}

bool srv_route_is_v2_model(srv_route r)
{
    return r >= SRV_ROUTE_V2_MODEL && r <= SRV_ROUTE_V2_MODEL_STATS;
}

bool srv_url_is_v2(const char *url)
{
    return strncmp(url, "/v2", 3) == 0 && (url[3] == '\0' || url[3] == '/');
}

/* The next segment of a path at *p (up to '/' or the end): its length, *p
 * moved past it. */
static size_t segment(const char **p)
{
    const char *s = *p, *slash = strchr(s, '/');
    size_t n = slash != NULL ? (size_t)(slash - s) : strlen(s);
    *p = s + n;
    return n;
}

static void copy_cut(char *dst, size_t cap, const char *src, size_t n)
{
    snprintf(dst, cap, "%.*s", (int)(n < cap ? n : cap - 1), src);
}

/* /v2/models/{name}[/versions/{version}][/ready|/infer|/stats]: the route,
 * name and version in *m ([V2] and the OpenAPI document define the
 * versioned form; the statistics extension adds /stats). */
static srv_route v2_model_route(const char *url, srv_route_model *m)
{
    static const char prefix[] = "/v2/models/";
    const char *p = url + sizeof prefix - 1, *name = p, *version = "";
    size_t n, nv = 0;
    if (strncmp(url, prefix, sizeof prefix - 1) != 0)
        return SRV_ROUTE_NOT_FOUND;
    n = segment(&p);
    if (n == 0 || (*p == '\0' && strcmp(name, "stats") == 0))
        return SRV_ROUTE_NOT_FOUND; /* /v2/models/stats is every model's */
    if (strncmp(p, "/versions/", 10) == 0) {
        p += 10;
        version = p;
        if ((nv = segment(&p)) == 0)
            return SRV_ROUTE_NOT_FOUND;
    }
    copy_cut(m->name, sizeof m->name, name, n);
    copy_cut(m->version, sizeof m->version, version, nv);
    if (*p == '\0')
        return SRV_ROUTE_V2_MODEL;
    if (strcmp(p, "/ready") == 0)
        return SRV_ROUTE_V2_MODEL_READY;
    if (strcmp(p, "/stats") == 0)
        return SRV_ROUTE_V2_MODEL_STATS;
    return strcmp(p, "/infer") == 0 ? SRV_ROUTE_V2_INFER : SRV_ROUTE_NOT_FOUND;
}

srv_route srv_route_find(const char *url, const char *method, bool *method_ok, srv_route_model *m)
{
    srv_route_model found;
    srv_route v2 = v2_model_route(url, &found);
    if (strcmp(url, "/v2/") == 0)
        url = "/v2";
    for (int i = 0; i < SRV_ROUTE_NOT_FOUND; i++) {
        const srv_route_def *d = &srv_routes[i];
        bool match =
            i == (int)v2 || (v2 == SRV_ROUTE_NOT_FOUND && !srv_route_is_v2_model((srv_route)i) &&
                             (i == SRV_ROUTE_WEB ? strncmp(url, d->path, strlen(d->path)) == 0
                                                 : strcmp(url, d->path) == 0));
        if (match) {
            *method_ok = strcmp(method, d->method) == 0 ||
                         (strcmp(method, "HEAD") == 0 && strcmp(d->method, "GET") == 0);
            if (srv_route_is_v2_model((srv_route)i))
                *m = found;
            return (srv_route)i;
        }
    }
    *method_ok = true;
    return SRV_ROUTE_NOT_FOUND;
}
