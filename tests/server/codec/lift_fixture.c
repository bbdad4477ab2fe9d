/* lift_fixture.c - see lift_fixture.h. */
#include "lift_fixture.h"

#include "codec/json_lift.h"
#include "testutil.h"

#include <cjson/cJSON.h>
#include <string.h>

size_t parse_t(const char *body, bool use_lift, outcome *o)
{
    srv_lift lift;
    bool lifted = use_lift && srv_lift_scan(body, strlen(body), &lift);
    cJSON *root = cJSON_Parse(lifted ? lift.text : body);
    size_t n = lifted ? lift.count : 0;
    memset(o, 0, sizeof *o);
    assert_non_null(root);
    o->ok = srv_tensor_parse_as(cJSON_GetObjectItemCaseSensitive(root, "t"), "t", 0, 1u << 20,
                                SRV_ELEM_FLOAT, lifted ? &lift : NULL, &o->t, &o->err);
    cJSON_Delete(root);
    if (lifted)
        srv_lift_free(&lift);
    return n;
}

void outcome_free(outcome *o)
{
    srv_tensor_free(&o->t);
    srv_reply_free(&o->err);
}

size_t check_same(const char *body)
{
    outcome a, b;
    size_t n = parse_t(body, true, &a);
    parse_t(body, false, &b);
    if (a.ok != b.ok)
        fail_msg("lifted %s, plain %s: %.200s", a.ok ? "ok" : "error", b.ok ? "ok" : "error", body);
    if (a.ok) {
        assert_int_equal(a.t.ndim, b.t.ndim);
        assert_int_equal(a.t.count, b.t.count);
        assert_memory_equal(a.t.shape, b.t.shape, sizeof a.t.shape);
        if (memcmp(a.t.data, b.t.data, a.t.count * sizeof(float)) != 0)
            fail_msg("float bits differ: %.200s", body);
    } else {
        assert_int_equal(a.err.http_status, b.err.http_status);
        assert_int_equal(a.err.body_len, b.err.body_len);
        assert_memory_equal(a.err.body, b.err.body, a.err.body_len);
    }
    outcome_free(&a);
    outcome_free(&b);
    return n;
}

uint64_t splitmix(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15u);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
    return z ^ (z >> 31);
}
