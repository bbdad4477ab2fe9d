/* body.c - the request body as JSON: checked against RFC 8259's grammar
 * (codec/json_check.h, which cJSON is lenient about), its parse tree bounded
 * by the request's memory limit, syntax errors shown with the bytes around
 * them. The member-name checks and the typed readers of its values are in
 * api/json.c.
 */
#include "api/json.h"

#include "codec/json_check.h"

#include <stdio.h>
#include <string.h>

static bool is_json_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* An upper bound on the bytes cJSON allocates for body: one node per value
 * (a value is first in its container or follows a comma) plus copies of the
 * strings, which are shorter than the body. */
static size_t count_byte(const char *s, size_t len, char c)
{
    size_t n = 0;
    const char *p = s, *end = s + len;
    /* memchr runs at memory speed; a byte loop was a tenth of the server
     * time of a large base64 request. */
    while (p < end && (p = memchr(p, c, (size_t)(end - p))) != NULL) {
        n++;
        p++;
    }
    return n;
}

static size_t tree_bytes(const char *body, size_t len, size_t *values)
{
    size_t n =
        1 + count_byte(body, len, ',') + count_byte(body, len, '[') + count_byte(body, len, '{');
    *values = n;
    return api_add_sat(api_mul_sat(n, sizeof(cJSON)), len);
}

/* Writes the bytes around offset at of body into out as
 * `after "..." before "..."` (up to 24 bytes each side, bytes outside
 * printable ASCII as \xNN), so that a person finds the place without
 * counting bytes. */
static void json_near(const char *body, size_t len, size_t at, char *out, size_t cap)
{
    enum { SIDE = 24 };
    char side[2][SIDE * 4 + 1];
    size_t from[2] = {at > SIDE ? at - SIDE : 0, at},
           to[2] = {at, at + SIDE < len ? at + SIDE : len};
    for (int s = 0; s < 2; s++) {
        size_t o = 0;
        for (size_t i = from[s]; i < to[s]; i++) {
            unsigned char c = (unsigned char)body[i];
            if (c >= 0x20 && c < 0x7f && c != '\\')
                side[s][o++] = (char)c;
            else
                o += (size_t)snprintf(side[s] + o, sizeof side[s] - o, "\\x%02x", c);
        }
        side[s][o] = '\0';
    }
    if (at == 0)
        snprintf(out, cap, "before '%s'", side[1]);
    else if (at >= len)
        snprintf(out, cap, "at the end, after '%s'", side[0]);
    else
        snprintf(out, cap, "after '%s', before '%s'", side[0], side[1]);
}

bool api_check_json(const char *body, size_t len, api_err *e)
{
    size_t at;
    const char *why;
    char near[256];
    if (body == NULL || srv_json_check(body, len, &at, &why))
        return true;
    json_near(body, len, at, near, sizeof near);
    api_fail(e, NULL, SRV_ERR_MALFORMED_JSON, "",
             "the request body is not valid JSON at byte %zu of %zu (%s): %s", at, len, near, why);
    return false;
}

cJSON *api_parse_body(const char *body, size_t len, size_t max_memory, api_err *e)
{
    const char *end = NULL;
    size_t i = 0, values, tree;
    cJSON *root;

    while (body != NULL && i < len && is_json_space(body[i]))
        i++;
    if (body == NULL || i == len) {
        api_fail(e, NULL, SRV_ERR_MALFORMED_JSON, "", "the request body is empty");
        return NULL;
    }
    /* The parse tree is the one allocation the request memory bound cannot
     * see later, and a body of "0,0,0,..." makes it 30 times the body. */
    tree = tree_bytes(body, len, &values);
    if (tree > max_memory) {
        const size_t mb = (size_t)1 << 20;
        api_fail(
            e, NULL, SRV_ERR_PAYLOAD_TOO_LARGE, "",
            "request needs %zu MB to parse (up to %zu JSON values), limit %zu MB " SRV_LIMIT_MEMORY
            "; send large tensors as b64",
            tree / mb + (tree % mb != 0), values, max_memory / mb);
        return NULL;
    }
    root = cJSON_ParseWithLengthOpts(body, len, &end, false);
    if (root == NULL) {
        /* srv_json_check has passed the text (grammar and nesting), so
         * this is a limit of cJSON's own, named by the place it stopped. */
        size_t at = end != NULL && end >= body && end <= body + len ? (size_t)(end - body) : 0;
        char near[256];
        json_near(body, len, at, near, sizeof near);
        api_fail(e, NULL, SRV_ERR_MALFORMED_JSON, "",
                 "the request body could not be parsed at byte %zu of %zu (%s)", at, len, near);
        return NULL;
    }
    for (i = (size_t)(end - body); i < len; i++) {
        if (!is_json_space(body[i])) {
            api_fail(e, NULL, SRV_ERR_MALFORMED_JSON, "",
                     "the request body has text after the JSON value (at byte %zu of %zu)", i, len);
            cJSON_Delete(root);
            return NULL;
        }
    }
    if (!cJSON_IsObject(root)) {
        api_fail(e, NULL, SRV_ERR_INVALID_ARGUMENT, "",
                 "the request body must be a JSON object, found %s", api_json_type(root));
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}
