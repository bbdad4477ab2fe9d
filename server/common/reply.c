/* reply.c - see reply.h. Builds the JSON error body every failing request
 * answers with; the API layer fills replies, the HTTP layer sends and frees
 * them.
 */
#include "common/reply.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char json_type[] = "application/json";

/* The body of last resort, copied when building the real one fails. The
 * reply always holds a malloc'd body (or none): the HTTP layer hands bodies to
 * libmicrohttpd with MHD_RESPMEM_MUST_FREE, so a static one must never leak
 * out of this file. */
static const char fallback_body[] = "{\"error\":{\"code\":\"INTERNAL\",\"message\":"
                                    "\"out of memory while building the error reply\"}}";

/* Caps on what an error body echoes back: fields and messages may carry
 * request text (an unknown key's name), which must not blow up the answer. */
enum { MESSAGE_MAX = 1024, FIELD_MAX = 256 };

/* Copies at most cap-1 bytes of src into dst, replacing every byte that is not
 * part of a well-formed UTF-8 sequence by '?', so the body stays valid JSON
 * for strict parsers whatever the request contained. */
void srv_utf8_copy(char *dst, size_t cap, const char *src)
{
    const unsigned char *s = (const unsigned char *)src;
    size_t o = 0;
    while (*s && o + 1 < cap) {
        size_t n = 0;
        unsigned c = s[0];
        if (c < 0x80)
            n = 1;
        else if (c >= 0xC2 && c <= 0xDF)
            n = 2;
        else if (c >= 0xE0 && c <= 0xEF)
            n = 3;
        else if (c >= 0xF0 && c <= 0xF4)
            n = 4;
        bool ok = n > 0 && o + n < cap;
        for (size_t k = 1; ok && k < n; k++)
            ok = (s[k] & 0xC0) == 0x80;
        /* Overlong forms, surrogates and code points past U+10FFFF. */
        if (ok && n == 3 && ((c == 0xE0 && s[1] < 0xA0) || (c == 0xED && s[1] >= 0xA0)))
            ok = false;
        if (ok && n == 4 && ((c == 0xF0 && s[1] < 0x90) || (c == 0xF4 && s[1] >= 0x90)))
            ok = false;
        if (!ok) {
            if (n > 0 && o + n >= cap && c >= 0x80)
                break; /* a valid sequence that does not fit: stop here */
            dst[o++] = '?';
            s++;
            continue;
        }
        memcpy(dst + o, s, n);
        o += n;
        s += n;
    }
    dst[o] = '\0';
}

void srv_reply_json(srv_reply *r, int http_status, char *body, size_t len)
{
    r->http_status = http_status;
    r->content_type = json_type;
    r->body = body;
    r->body_len = body ? len : 0;
    r->error = SRV_ERR_INTERNAL;
    r->len_header = NULL;
    r->len_value = 0;
}

void srv_reply_error(srv_reply *r, srv_error e, const char *field, const char *fmt, ...)
{
    char raw[MESSAGE_MAX];
    char message[MESSAGE_MAX];
    char field_clean[FIELD_MAX];
    va_list ap;

    va_start(ap, fmt);
    int n = vsnprintf(raw, sizeof raw, fmt ? fmt : "", ap);
    va_end(ap);
    if (n < 0)
        raw[0] = '\0';
    else if ((size_t)n >= sizeof raw)
        memcpy(raw + sizeof raw - 4, "...", 4);
    srv_utf8_copy(message, sizeof message, raw);

    r->http_status = srv_error_http_status(e);
    r->content_type = json_type;
    r->error = e;
    r->body = NULL;
    r->body_len = 0;
    r->len_header = NULL;
    r->len_value = 0;

    cJSON *root = cJSON_CreateObject();
    cJSON *obj = cJSON_AddObjectToObject(root, "error");
    bool ok = obj && cJSON_AddStringToObject(obj, "code", srv_error_code(e)) &&
              cJSON_AddStringToObject(obj, "message", message);
    if (ok && field && field[0]) {
        srv_utf8_copy(field_clean, sizeof field_clean, field);
        ok = cJSON_AddStringToObject(obj, "field", field_clean) != NULL;
    }
    char *body = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    if (!body) {
        /* Out of memory: a copy of the static body (small, so likely still
         * possible); failing that, a 500 with no body at all. */
        body = strdup(fallback_body);
        r->http_status = 500;
        r->error = SRV_ERR_INTERNAL;
    }
    r->body = body;
    r->body_len = body ? strlen(body) : 0;
}

void srv_reply_free(srv_reply *r)
{
    if (!r)
        return;
    free(r->body);
    r->body = NULL;
    r->body_len = 0;
    r->len_header = NULL;
    r->len_value = 0;
}
