/* cors.c - see cors.h. */
#include "http/cors.h"

#include <string.h>
#include <strings.h>

const char *srv_cors_allow(const srv_config *cfg, const char *origin)
{
    if (origin == NULL)
        return NULL;
    for (size_t i = 0; i < cfg->n_cors_origins; i++) {
        const char *o = cfg->cors_origins[i];
        if (strcmp(o, "*") == 0)
            return "*";
        if (strcasecmp(o, origin) == 0)
            return o;
    }
    return NULL;
}

/* Whether the answer depends on Origin: some origin is named, not "*". */
static bool varies(const srv_config *cfg)
{
    for (size_t i = 0; i < cfg->n_cors_origins; i++)
        if (strcmp(cfg->cors_origins[i], "*") == 0)
            return false;
    return cfg->n_cors_origins > 0;
}

void srv_cors_headers(const srv_config *cfg, struct MHD_Response *resp, const char *allow,
                      bool preflight, const char *allow_methods)
{
    if (varies(cfg))
        MHD_add_response_header(resp, MHD_HTTP_HEADER_VARY, "Origin");
    if (allow == NULL)
        return;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_ACCESS_CONTROL_ALLOW_ORIGIN, allow);
    if (!preflight) {
        /* The response headers a page's script may read besides the
         * safelisted ones (Content-Type, Content-Length, ...). */
        MHD_add_response_header(resp, "Access-Control-Expose-Headers",
                                "Server-Timing, X-Posattn-Replica, Retry-After, "
                                "Inference-Header-Content-Length, WWW-Authenticate, Allow");
        return;
    }
    MHD_add_response_header(resp, "Access-Control-Allow-Methods", allow_methods);
    /* What the clients send: the key, a JSON (or KServe v2 binary) body.
     * Named, not "*": a wildcard does not cover Authorization. */
    MHD_add_response_header(resp, "Access-Control-Allow-Headers",
                            "Authorization, Content-Type, Inference-Header-Content-Length, "
                            "Accept");
    MHD_add_response_header(resp, "Access-Control-Max-Age", SRV_CORS_MAX_AGE);
}
