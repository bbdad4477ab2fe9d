/* session_load.c - a session brought into this replica from a file:
 * srv_api_session_scheme rebuilds a saved session's scheme from the JSON
 * its create request sent (for --cache-dir's load at start, main.c, and
 * for a takeover), and api_session_adopt loads on first use a session
 * another replica left in a shared --cache-dir (store/kv_snapshot.h,
 * srv_kv_adopt), for every request that names a session: the routes of
 * sessions.c and session_create.c, and item_session.c's attention items. docs/sessions.md.
 */
#include "api/api.h"
#include "api/request.h"
#include "store/kv_cache.h"
#include "store/kv_snapshot.h"

#include <stdio.h>
#include <stdlib.h>

static void scheme_owner_free(void *owner)
{
    api_scheme_free(owner);
    free(owner);
}

bool srv_api_session_scheme(void *arg, const char *scheme_json, srv_kv_spec *spec, char *err,
                            size_t cap)
{
    const api_ctx ctx = {arg, "", NULL, NULL};
    cJSON *node = cJSON_Parse(scheme_json);
    api_scheme *owner = malloc(sizeof *owner);
    api_err e;
    bool ok = false;

    if (node == NULL || owner == NULL) {
        snprintf(err, cap, "%s", node == NULL ? "its scheme is not JSON" : "out of memory");
    } else if (spec->model != NULL && !api_session_model_still(&ctx, node, spec, err, cap)) {
        /* err says why */
    } else if (!api_scheme_parse(node, &ctx, owner, &e)) {
        snprintf(err, cap, "its scheme does not parse: %s: %s", e.field, e.message);
    } else {
        spec->scheme = &owner->s;
        spec->scheme_owner = owner;
        spec->scheme_free = scheme_owner_free;
        owner = NULL;
        ok = true;
    }
    free(owner);
    cJSON_Delete(node);
    return ok;
}

bool api_session_adopt(const srv_limits *lim, const char *id, srv_kv_err *ke)
{
    if (ke->code != SRV_ERR_SESSION_NOT_FOUND || lim == NULL || lim->sessions == NULL ||
        lim->cache_root == NULL || lim->cache_root[0] == '\0' || lim->replica == NULL)
        return false;
    return srv_kv_adopt(lim->sessions, lim->cache_root, lim->replica, id, srv_api_session_scheme,
                        (void *)lim, ke);
}
