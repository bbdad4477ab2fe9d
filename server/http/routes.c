/* routes.c - see routes.h. */
#include "http/routes.h"

#include "api/api.h"
#include "v2/v2.h"

#include <stdio.h>
#include <string.h>

#define V2 &srv_v2_protocol
const srv_route_def srv_routes[] = {
    [SRV_ROUTE_NOT_FOUND] = {NULL, NULL, "other", false, NULL, NULL, 0},
    [SRV_ROUTE_ATTENTION] = {"/v1/attention", "POST", "attention", true, &srv_ep_attention},
    [SRV_ROUTE_ENCODE] = {"/v1/encode", "POST", "encode", true, &srv_ep_encode},
    [SRV_ROUTE_ANALYZE] = {"/v1/analyze", "POST", "analyze", true, &srv_ep_analyze},
    [SRV_ROUTE_SCHEMES] = {"/v1/schemes", "GET", "schemes", true, &srv_ep_schemes},
    [SRV_ROUTE_TENSORS] = {"/v1/tensors", "GET", "tensors", true, &srv_ep_tensors},
    [SRV_ROUTE_MODELS] = {"/v1/models", "GET", "models", true, &srv_ep_models},
    [SRV_ROUTE_MODELS_RESOLVE] = {"/v1/models/resolve", "POST", "models_resolve", true,
                                  &srv_ep_models_resolve},
    [SRV_ROUTE_SESSIONS] = {"/v1/sessions", "GET", "sessions", true, &srv_ep_sessions_list},
    [SRV_ROUTE_SESSIONS_CREATE] = {"/v1/sessions", "POST", "sessions_create", true,
                                   &srv_ep_sessions_create},
    [SRV_ROUTE_SESSION] = {"/v1/sessions/{id}", "GET", "session", true, &srv_ep_session_get},
    [SRV_ROUTE_SESSION_DELETE] = {"/v1/sessions/{id}", "DELETE", "session_delete", true,
                                  &srv_ep_session_delete},
    [SRV_ROUTE_SESSION_APPEND] = {"/v1/sessions/{id}/append", "POST", "session_append", true,
                                  &srv_ep_session_append},
    [SRV_ROUTE_SESSION_FORK] = {"/v1/sessions/{id}/fork", "POST", "session_fork", true,
                                &srv_ep_session_fork},
    [SRV_ROUTE_HEALTHZ] = {"/healthz", "GET", "healthz", false},
    [SRV_ROUTE_READYZ] = {"/readyz", "GET", "readyz", false},
    [SRV_ROUTE_METRICS] = {"/metrics", "GET", "metrics", false},
    [SRV_ROUTE_OPENAPI] = {"/openapi.yaml", "GET", "openapi", false},
    [SRV_ROUTE_PAGE] = {"/", "GET", "page", false},
    [SRV_ROUTE_WEB] = {"/web/", "GET", "page", false},
    /* The Open Inference Protocol (v2/v2.h). The OpenAPI document spells
     * the server's metadata "/v2/"; "/v2/models/stats" is every model's,
     * before the {name} rows take "stats" for a name. */
    {"/v2", "GET", "v2_metadata", true, NULL, V2, SRV_V2_OP_SERVER},
    {"/v2/", "GET", "v2_metadata", true, NULL, V2, SRV_V2_OP_SERVER},
    {"/v2/health/live", "GET", "v2_health", false, NULL, V2, SRV_V2_OP_LIVE},
    {"/v2/health/ready", "GET", "v2_health", false, NULL, V2, SRV_V2_OP_READY},
    {"/v2/models/stats", "GET", "v2_stats", true, NULL, V2, SRV_V2_OP_STATS},
    {"/v2/models/{name}", "GET", "v2_metadata", true, NULL, V2, SRV_V2_OP_MODEL},
    {"/v2/models/{name}/ready", "GET", "v2_health", false, NULL, V2, SRV_V2_OP_MODEL_READY},
    {"/v2/models/{name}/infer", "POST", "v2_infer", true, NULL, V2, SRV_V2_OP_INFER},
    {"/v2/models/{name}/stats", "GET", "v2_stats", true, NULL, V2, SRV_V2_OP_MODEL_STATS},
    {"/v2/models/{name}/versions/{version}", "GET", "v2_metadata", true, NULL, V2, SRV_V2_OP_MODEL},
    {"/v2/models/{name}/versions/{version}/ready", "GET", "v2_health", false, NULL, V2,
     SRV_V2_OP_MODEL_READY},
    {"/v2/models/{name}/versions/{version}/infer", "POST", "v2_infer", true, NULL, V2,
     SRV_V2_OP_INFER},
    {"/v2/models/{name}/versions/{version}/stats", "GET", "v2_stats", true, NULL, V2,
     SRV_V2_OP_MODEL_STATS},
    {NULL, NULL, NULL, false, NULL, NULL, 0},
};
#undef V2

/* The protocols of the rows, for srv_url_protocol. */
static const srv_protocol *const protocols[] = {&srv_v2_protocol};

const srv_protocol *srv_url_protocol(const char *url)
{
    for (size_t i = 0; i < sizeof protocols / sizeof *protocols; i++) {
        size_t n = strlen(protocols[i]->prefix);
        if (strncmp(url, protocols[i]->prefix, n) == 0 && (url[n] == '\0' || url[n] == '/'))
            return protocols[i];
    }
    return NULL;
}

bool srv_route_has_params(srv_route r)
{
    return r > SRV_ROUTE_NOT_FOUND && srv_routes[r].path != NULL &&
           strchr(srv_routes[r].path, '{') != NULL;
}

static void copy_cut(char *dst, size_t cap, const char *src, size_t n)
{
    snprintf(dst, cap, "%.*s", (int)(n < cap ? n : cap - 1), src);
}

/* Whether url matches the row's path, segment by segment; the parameters'
 * values into *p. */
static bool match(const char *path, const char *url, srv_route_params *p)
{
    while (*path != '\0') {
        if (path[0] == '{') {
            const char *close = strchr(path, '}');
            size_t n = strcspn(url, "/");
            if (close == NULL || n == 0)
                return false;
            if (strncmp(path, "{name}", 6) == 0)
                copy_cut(p->name, sizeof p->name, url, n);
            else if (strncmp(path, "{id}", 4) == 0)
                copy_cut(p->id, sizeof p->id, url, n);
            else
                copy_cut(p->version, sizeof p->version, url, n);
            path = close + 1;
            url += n;
            continue;
        }
        if (*path++ != *url++)
            return false;
    }
    return *url == '\0';
}

static bool method_matches(const char *method, const char *row)
{
    return strcmp(method, row) == 0 || (strcmp(method, "HEAD") == 0 && strcmp(row, "GET") == 0);
}

srv_route srv_route_find(const char *url, const char *method, bool *method_ok, srv_route_params *p)
{
    srv_route first = SRV_ROUTE_NOT_FOUND;
    srv_route_params first_p = {"", "", ""};
    for (srv_route i = SRV_ROUTE_NOT_FOUND + 1; srv_routes[i].path != NULL; i++) {
        const srv_route_def *d = &srv_routes[i];
        srv_route_params found = {"", "", ""};
        bool hit = i == SRV_ROUTE_WEB ? strncmp(url, d->path, strlen(d->path)) == 0
                                      : match(d->path, url, &found);
        if (!hit)
            continue;
        if (method_matches(method, d->method)) {
            *method_ok = true;
            *p = found;
            return i;
        }
        if (first == SRV_ROUTE_NOT_FOUND) {
            first = i;
            first_p = found;
        }
    }
    *method_ok = first == SRV_ROUTE_NOT_FOUND;
    *p = first_p;
    return first;
}

const char *srv_route_allow(srv_route r, char *buf, size_t cap)
{
    size_t used = 0;
    buf[0] = '\0';
    if (r <= SRV_ROUTE_NOT_FOUND || srv_routes[r].path == NULL)
        return buf;
    for (srv_route i = SRV_ROUTE_NOT_FOUND + 1; srv_routes[i].path != NULL; i++) {
        int w;
        if (strcmp(srv_routes[i].path, srv_routes[r].path) != 0)
            continue;
        w = snprintf(buf + used, cap - used, "%s%s", used ? ", " : "", srv_routes[i].method);
        if (w < 0 || (size_t)w >= cap - used)
            break;
        used += (size_t)w;
    }
    return buf;
}
