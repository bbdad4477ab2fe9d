/* test_session_takeover.c - an item over a session that another replica of
 * a shared --cache-dir still holds when the item is first read, and lets go
 * of while the item is read (server/api/item.c, api/session_load.c).
 *
 * The item looks for the session twice: before its layer's options are
 * merged, and again when the session is read. A replica that finishes
 * draining between the two made the item fail with SESSION_BUSY ("deleted
 * and created again"), though nothing was. This binary links with
 * -Wl,--wrap=srv_kv_adopt (Makefile): the wrapper takes the session over as
 * the server does (__real_srv_kv_adopt) and, when that fails because
 * replica "a" still runs, lets "a" stop right after, so the race happens on
 * every run.
 */
#include "api/api.h"
#include "api_harness.h"
#include "session_fixture.h"
#include "model/model.h"
#include "store/kv_cache.h"
#include "store/kv_snapshot.h"
#include "testutil.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

bool __real_srv_kv_adopt(srv_kv_cache *c, const char *root, const char *self, const char *id,
                         srv_kv_scheme_fn mk, void *arg, srv_kv_err *e);
bool __wrap_srv_kv_adopt(srv_kv_cache *c, const char *root, const char *self, const char *id,
                         srv_kv_scheme_fn mk, void *arg, srv_kv_err *e);

static int owner_lock = -1; /* replica a's, while it runs */
static int adopts, adopted;

bool __wrap_srv_kv_adopt(srv_kv_cache *c, const char *root, const char *self, const char *id,
                         srv_kv_scheme_fn mk, void *arg, srv_kv_err *e)
{
    bool ok = __real_srv_kv_adopt(c, root, self, id, mk, arg, e);
    adopts++;
    adopted += ok;
    if (!ok && owner_lock >= 0) { /* a finishes its drain just after */
        close(owner_lock);
        owner_lock = -1;
    }
    return ok;
}

/* One item over session id: q [1, 4, 16] of ones, extra members (each
 * followed by a comma). */
static cJSON *step(const char *id, const char *extra, const srv_limits *lim, int *status)
{
    char body[1024];
    int n = snprintf(body, sizeof body,
                     "{\"inputs\":[{\"session\":\"%s\",%s\"q\":{\"shape\":[1,4,16],\"data\":[", id,
                     extra);
    for (int i = 0; i < 64; i++)
        n += snprintf(body + n, sizeof body - (size_t)n, i ? ",1" : "1");
    snprintf(body + n, sizeof body - (size_t)n, "]}}]}");
    return call(&srv_ep_attention, body, lim, status);
}

/* Replica a made a session of gemma2's layer 0 (softcap 50 in its
 * options), saved it and is draining; replica b is asked for it. */
static void test_taken_over_while_read(void **state)
{
    (void)state;
    char root[] = "/tmp/posattn-takeover-XXXXXX", dir_a[600], dir_b[600], err[512];
    char id[SRV_KV_ID_LEN], path[700];
    srv_model_spec specs[] = {{"g2", "tests/fixtures/models/gemma2.json"}};
    srv_model_set *models = NULL;
    srv_kv_cache *ca = cache_new((size_t)1 << 20, 0), *cb = cache_new((size_t)1 << 20, 0);
    srv_limits la = lim_of(ca), lb = lim_of(cb);
    srv_kv_err ke;
    int fd_b = -1, status;
    cJSON *ans;

    assert_true(srv_model_set_load(specs, 1, &models, err, sizeof err));
    assert_non_null(mkdtemp(root));
    assert_true(srv_kv_dir_own(root, "a", 0, dir_a, sizeof dir_a, &owner_lock, err, sizeof err));
    assert_true(srv_kv_dir_own(root, "b", 0, dir_b, sizeof dir_b, &fd_b, err, sizeof err));
    la.models = lb.models = models;
    lb.cache_root = root;
    lb.replica = "b";
    create("{\"model\":\"g2\",\"layer\":0,\"head_dim\":16,\"max_tokens\":8}", &la, id);
    ans = append(id, 3, 2, 16, NULL, &la, &status);
    assert_int_equal(status, 200);
    cJSON_Delete(ans);
    assert_true(srv_kv_save(ca, id, dir_a, &ke));
    srv_kv_dir_draining(dir_a);

    /* The layer's options apply: its softcap is not the item's to change
     * without override. The session was read once the merge had it. */
    ans = step(id, "\"softcap\":2,", &lb, &status);
    expect_item_error(ans, 0, "INVALID_ARGUMENT", "inputs[0].softcap");
    cJSON_Delete(ans);
    assert_int_equal(adopts, 2); /* a ran, then it had stopped */
    assert_int_equal(adopted, 1);
    snprintf(path, sizeof path, "%s/%s.safetensors", dir_b, id);
    assert_int_equal(access(path, F_OK), 0);
    /* b holds it now: a step is computed and no one looks again. */
    ans = step(id, "", &lb, &status);
    expect_ok(ans, status);
    cJSON_Delete(ans);
    assert_int_equal(adopts, 2);

    close(fd_b);
    srv_kv_cache_free(ca);
    srv_kv_cache_free(cb);
    srv_model_set_free(models);
    snprintf(path, sizeof path, "rm -rf %s", root);
    assert_int_equal(system(path), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_taken_over_while_read)};
    return cmocka_run_group_tests_name("session_takeover", tests, NULL, NULL);
}
