/* fuzz_lift.c - libFuzzer differential driver for server/codec/json_lift.c.
 *
 * For any body: what srv_lift_scan lifts must equal what cJSON makes of the
 * same text (every number through strtod and the same float conversion,
 * row-major, with the recorded nesting; every base64 value decoded the same
 * way), and a body cJSON accepts must stay valid JSON with its markers.
 * A difference aborts. Seeds: tests/fuzz/corpus (real requests).
 */
#include "codec/float32.h"
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    srv_lift lift;
    char *body = malloc(size + 1);
    if (body == NULL)
        return 0;
    memcpy(body, data, size);
    body[size] = '\0';
    if (srv_lift_scan(body, size, &lift)) {
        cJSON *whole = cJSON_ParseWithLength(body, size);
        for (size_t i = 0; i < lift.count; i++)
            check_item(&lift.items[i]);
        if (whole != NULL) {
            cJSON *marked = cJSON_ParseWithLength(lift.text, lift.len);
            CHECK(marked != NULL);
            cJSON_Delete(marked);
            cJSON_Delete(whole);
        }
        srv_lift_free(&lift);
    }
    free(body);
    return 0;
}
