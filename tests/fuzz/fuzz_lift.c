/* fuzz_lift.c - libFuzzer differential driver for server/codec/json_lift.c.
 *
 * For any body: what srv_lift_scan lifts must equal what cJSON makes of the
 * same text (every number through strtod and the same float conversion,
 * row-major, with the recorded nesting; every base64 value decoded the same
 * way), and a body cJSON accepts must stay valid JSON with its markers.
 * The lifter must also be exactly as strict as RFC 8259 (json_check.h),
 * where cJSON is not ("007" is 7 to strtod): every array it lifts passes
 * srv_json_check, and the server's verdict, srv_json_check over what is
 * left after the lift, is srv_json_check's verdict over the body as sent
 * (only the nesting limit may differ: a lifted array is one marker).
 * And every object with a "shape" reads as the same tensor (or the same
 * error) from the marked text with the lift as from the body without it.
 * A difference aborts. Seeds: tests/fuzz/corpus (real requests, and
 * strict_* ones with leading zeros, NUL escapes, bad UTF-8, surrogates).
 */
#include "codec/float32.h"
#include "codec/json_check.h"
#include "codec/json_lift.h"
#include "codec/tensor.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c))                                                                                  \
            __builtin_trap();                                                                      \
    } while (0)

/* Walks the nested arrays of node row-major, checking each number against
 * want[*at] and the lengths against dims from depth level on. */
static void walk(const cJSON *node, int level, const srv_lifted *it, size_t *at)
{
    int64_t n = 0;
    CHECK(cJSON_IsArray(node) && level < it->depth);
    for (const cJSON *c = node->child; c != NULL; c = c->next, n++) {
        if (level + 1 < it->depth) {
            walk(c, level + 1, it, at);
        } else {
            float f;
            CHECK(cJSON_IsNumber(c));
            CHECK(srv_double_to_float(c->valuedouble, &f));
            CHECK(*at < it->n);
            CHECK(memcmp(&f, &it->data[*at], sizeof f) == 0);
            (*at)++;
        }
    }
    CHECK(n == it->dims[level]);
}

static void check_item(const srv_lifted *it)
{
    size_t at;
    const char *why;
    CHECK(srv_json_check(it->text, it->text_len, &at, &why, NULL));
    cJSON *v = cJSON_ParseWithLength(it->text, it->text_len);
    CHECK(v != NULL);
    if (it->b64) {
        size_t len, got = 0;
        unsigned char *buf;
        CHECK(cJSON_IsString(v));
        len = strlen(v->valuestring);
        buf = malloc(len / 4 * 3 + 1);
        CHECK(buf != NULL);
        CHECK(srv_b64_decode(v->valuestring, len, buf, len / 4 * 3 + 1, &got));
        CHECK(got == it->n * sizeof(float));
        CHECK(memcmp(buf, it->data, got) == 0);
        free(buf);
    } else {
        size_t at = 0;
        walk(v, 0, it, &at);
        CHECK(at == it->n);
    }
    cJSON_Delete(v);
}

/* Lifting never changes whether a body is strict JSON. */
static void check_strict(const char *body, size_t size, const srv_lift *lift, bool lifted)
{
    size_t at, at2;
    const char *why = NULL, *why2 = NULL;
    const bool whole = srv_json_check(body, size, &at, &why, NULL);
    const bool rest = lifted ? srv_json_check(lift->text, lift->len, &at2, &why2, NULL) : whole;
    if (whole)
        CHECK(rest);
    else if (rest)
        CHECK(strstr(why, "nesting") != NULL);
}

/* Every object with a "shape" in the body, read as a tensor (f32, f16,
 * bf16, f64 and all) from the plain tree and from the marked one with the
 * lift: the same floats bit for bit, or the same error. The two trees are
 * walked side by side; a marker stands where the plain tree has the
 * array or string it replaced. */
static void check_tensors(const cJSON *plain, const cJSON *marked, const srv_lift *lift, int depth)
{
    if (depth > 8 || plain == NULL || marked == NULL)
        return;
    if (cJSON_IsObject(marked) && cJSON_IsObject(plain) &&
        cJSON_GetObjectItemCaseSensitive(marked, "shape") != NULL) {
        srv_tensor a, b;
        srv_reply ea, eb;
        memset(&a, 0, sizeof a); /* as srv_tensor_parse_as's callers do */
        memset(&b, 0, sizeof b);
        memset(&ea, 0, sizeof ea);
        memset(&eb, 0, sizeof eb);
        const bool oka =
            srv_tensor_parse_as(marked, "t", 0, 1u << 16, SRV_ELEM_FLOAT, lift, &a, &ea);
        const bool okb =
            srv_tensor_parse_as(plain, "t", 0, 1u << 16, SRV_ELEM_FLOAT, NULL, &b, &eb);
        CHECK(oka == okb);
        if (oka) {
            CHECK(a.count == b.count && a.ndim == b.ndim);
            CHECK(a.count == 0 || memcmp(a.data, b.data, a.count * sizeof(float)) == 0);
            srv_tensor_free(&a);
            srv_tensor_free(&b);
        } else {
            CHECK(ea.http_status == eb.http_status && ea.body_len == eb.body_len);
            CHECK(ea.body_len == 0 || memcmp(ea.body, eb.body, ea.body_len) == 0);
        }
        srv_reply_free(&ea);
        srv_reply_free(&eb);
        return;
    }
    if ((cJSON_IsObject(marked) && cJSON_IsObject(plain)) ||
        (cJSON_IsArray(marked) && cJSON_IsArray(plain)))
        for (const cJSON *m = marked->child, *p = plain->child; m != NULL && p != NULL;
             m = m->next, p = p->next)
            check_tensors(p, m, lift, depth + 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    srv_lift lift;
    char *body = malloc(size + 1);
    if (body == NULL)
        return 0;
    memcpy(body, data, size);
    body[size] = '\0';
    const bool lifted = srv_lift_scan(body, size, &lift);
    check_strict(body, size, &lift, lifted);
    if (lifted) {
        cJSON *whole = cJSON_ParseWithLength(body, size);
        for (size_t i = 0; i < lift.count; i++)
            check_item(&lift.items[i]);
        if (whole != NULL) {
            cJSON *marked = cJSON_ParseWithLength(lift.text, lift.len);
            CHECK(marked != NULL);
            check_tensors(whole, marked, &lift, 0);
            cJSON_Delete(marked);
            cJSON_Delete(whole);
        }
        srv_lift_free(&lift);
    }
    free(body);
    return 0;
}
