/* body.c - see api/protocol.h: the one reader of request bodies for every
 * protocol. Tensor arrays lifted, the rest checked against RFC 8259's
 * grammar (codec/json_check.h, which cJSON is lenient about), its parse
 * tree bounded by the request's memory limit, then parsed; syntax errors
 * shown with the bytes around them. The member-name checks and the typed
 * readers of its values are in api/json.c.
 */
#include "api/json.h"
#include "api/protocol.h"

#include "codec/json_check.h"

#include <stdio.h>
#include <string.h>

static bool is_json_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
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

/* The RFC 8259 check: true with *values, the JSON values of body (the
 * nodes cJSON will make of it); false with MALFORMED_JSON naming the byte. */
static bool check_json(const char *body, size_t len, size_t *values, api_err *e)
{
    size_t at;
    const char *why;
    char near[256];
    if (srv_json_check(body, len, &at, &why, values))
        return true;
    json_near(body, len, at, near, sizeof near);
    api_fail(e, NULL, SRV_ERR_MALFORMED_JSON, "",
             "the request body is not valid JSON at byte %zu of %zu (%s): %s", at, len, near, why);
    return false;
}

/* cJSON's parse of a checked body of `values` JSON values, its tree bounded
 * by max_memory first: it is the one allocation the request memory bound
 * cannot see later, and a body of "0,0,0,..." makes it 30 times the body
 * (one node per value plus copies of the strings, which are shorter than
 * the body). */
static cJSON *parse_json(const char *body, size_t len, size_t values, size_t max_memory, api_err *e)
{
    const char *end = NULL;
    size_t i, tree = api_add_sat(api_mul_sat(values, sizeof(cJSON)), len);
    cJSON *root;

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

bool api_body_read(const char *body, size_t len, const srv_limits *lim, bool lift, api_body *out,
                   api_err *e)
{
    size_t values = 0;
    const char *text;
    size_t text_len;

    memset(out, 0, sizeof *out);
    if (body == NULL) {
        /* A body of white space only is named by the check below. */
        api_fail(e, NULL, SRV_ERR_MALFORMED_JSON, "", "the request body is empty");
        return false;
    }
    /* Tensor number arrays first, straight to floats (json_lift.h). */
    out->lifted = lift && srv_lift_scan(body, len, &out->lift);
    text = out->lifted ? out->lift.text : body;
    text_len = out->lifted ? out->lift.len : len;
    /* Then JSON as RFC 8259 has it, where cJSON is lenient: over what is
     * left once the arrays are lifted (the lifter reads numbers in JSON's
     * own grammar, and leaves any it does not for this check); an error is
     * named at its byte in the body as sent. */
    if (!check_json(text, text_len, &values, e)) {
        if (out->lifted)
            (void)check_json(body, len, NULL, e);
        goto fail;
    }
    if (out->lifted && out->lift.bytes > lim->max_request_memory) {
        const size_t mb = (size_t)1 << 20;
        api_fail(e, NULL, SRV_ERR_PAYLOAD_TOO_LARGE, "",
                 "request needs %zu MB to parse (its tensor numbers as float32), limit %zu "
                 "MB " SRV_LIMIT_MEMORY,
                 out->lift.bytes / mb + (out->lift.bytes % mb != 0), lim->max_request_memory / mb);
        goto fail;
    }
    out->root = parse_json(text, text_len, values,
                           lim->max_request_memory - (out->lifted ? out->lift.bytes : 0), e);
    if (out->root == NULL && out->lifted) {
        /* Report cJSON's error at its place in the body as sent. */
        srv_lift_free(&out->lift);
        out->lifted = false;
        if (check_json(body, len, &values, e))
            out->root = parse_json(body, len, values, lim->max_request_memory, e);
    }
    if (out->root == NULL)
        goto fail;
    return true;
fail:
    api_body_free(out);
    return false;
}

void api_body_free(api_body *b)
{
    if (b == NULL)
        return;
    cJSON_Delete(b->root);
    srv_lift_free(&b->lift);
    memset(b, 0, sizeof *b);
}
