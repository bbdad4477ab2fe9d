/* json_lift.c - see json_lift.h. The arrays themselves are read by
 * json_array.c. */
#include "codec/json_lift.h"

#include "codec/base64.h"
#include "codec/float32.h"
#include "codec/json_array.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MARKER = 0x01 };

void srv_lift_force_scalar(bool on)
{
    srv_json_array_force_scalar(on);
}

/* ------------------------------------------------------------------------- */
/* The scan                                                                  */
/* ------------------------------------------------------------------------- */

static bool add_item(srv_lift *l, const srv_json_floats *a, bool b64, const char *text,
                     size_t text_len)
{
    srv_lifted *it;
    if (l->count == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 8;
        srv_lifted *items = realloc(l->items, cap * sizeof *items);
        if (items == NULL)
            return false;
        l->items = items;
        l->cap = cap;
    }
    it = &l->items[l->count++];
    memset(it, 0, sizeof *it);
    it->data = a->data;
    it->n = a->n;
    it->b64 = b64;
    it->depth = b64 ? 0 : a->leaf + 1;
    memcpy(it->dims, a->dims, sizeof it->dims);
    it->text = text;
    it->text_len = text_len;
    return true;
}

/* Records span [p, q) of s as lifted item a. */
static bool add_span(srv_lift *l, srv_json_floats *a, bool b64, const char *s, size_t p, size_t q,
                     size_t **spans, size_t *nspans)
{
    size_t *ns = realloc(*spans, (*nspans + 1) * 2 * sizeof **spans);
    if (ns == NULL)
        return false;
    *spans = ns;
    if (!add_item(l, a, b64, s + p, q - p))
        return false;
    ns[2 * *nspans] = p;
    ns[2 * *nspans + 1] = q;
    (*nspans)++;
    a->data = NULL; /* the lift owns it now */
    return true;
}

/* Base64 characters decoded at a time (a multiple of 4): their floats are
 * checked while they are still in cache. */
enum { B64_STEP = 64 * 1024 };

/* The string at s[p] == '"' as base64 of float32 values, decoded into *a;
 * *end is past its closing quote. False (nothing kept) when it holds
 * anything but the base64 alphabet (escapes included) or not whole floats,
 * or, on a little-endian host, an inf or NaN. */
static bool decode_b64(const char *s, size_t len, size_t p, srv_json_floats *a, size_t *end)
{
    const char *text = s + p + 1;
    const char *q = memchr(text, '"', len - p - 1);
    const bool check = srv_host_little_endian();
    unsigned char *dst;
    size_t n, cap, total = 0;
    if (q == NULL)
        return false;
    n = (size_t)(q - text);
    if (n == 0 || n % 4 != 0)
        return false;
    cap = n / 4 * 3;
    a->data = malloc(cap + sizeof(float));
    if (a->data == NULL)
        return false;
    dst = (unsigned char *)a->data;
    for (size_t done = 0; done < n; done += B64_STEP) {
        const size_t step = n - done < B64_STEP ? n - done : B64_STEP;
        const bool last = done + step == n;
        size_t got = 0;
        /* Padding may only end the whole string: a step before the last
         * decodes to exactly three bytes per four characters. */
        if (!srv_b64_decode(text + done, step, dst + total, cap - total, &got) ||
            (!last && got != step / 4 * 3) || (last && (total + got) % sizeof(float) != 0) ||
            (check &&
             !srv_floats_finite((const float *)(const void *)(dst + total), got / sizeof(float)))) {
            free(a->data);
            a->data = NULL;
            return false;
        }
        total += got;
    }
    a->n = total / sizeof(float);
    *end = (size_t)(q - s) + 1;
    return true;
}

/* Lifts what it can; false when a string rules markers out or memory ran
 * out (then nothing is lifted). */
static bool scan(const char *s, size_t len, srv_lift *l, size_t **spans)
{
    size_t p = 0, nspans = 0;
    bool after_data_key = false; /* the previous token was the string "data" */
    bool after_b64_key = false;  /* ... the string "b64" */
    bool want_value = false;     /* ... and a ':' followed it */
    bool want_b64 = false;

    while (p < len) {
        const char c = s[p];
        if (c == '"' && want_b64) {
            srv_json_floats a;
            size_t q;
            memset(&a, 0, sizeof a);
            want_b64 = false;
            if (decode_b64(s, len, p, &a, &q)) {
                if (!add_span(l, &a, true, s, p, q, spans, &nspans)) {
                    free(a.data);
                    return false;
                }
                p = q;
                continue;
            }
        }
        if (c == '"') {
            size_t q = p + 1;
            for (; q < len && s[q] != '"'; q++) {
                if ((unsigned char)s[q] < 0x20)
                    return false;
                if (s[q] == '\\') {
                    if (q + 1 < len && s[q + 1] == 'u')
                        return false;
                    q++;
                }
            }
            after_data_key = q - p - 1 == 4 && memcmp(s + p + 1, "data", 4) == 0;
            after_b64_key = q - p - 1 == 3 && memcmp(s + p + 1, "b64", 3) == 0;
            want_value = want_b64 = false;
            p = q + 1;
            continue;
        }
        if (c == ':' && (after_data_key || after_b64_key)) {
            want_value = after_data_key;
            want_b64 = after_b64_key;
            after_data_key = after_b64_key = false;
            p++;
            continue;
        }
        if (srv_json_is_space(c)) {
            p++;
            continue;
        }
        if (c == '[' && want_value) {
            srv_json_floats a;
            size_t q = p;
            memset(&a, 0, sizeof a);
            a.leaf = -1;
            if (srv_json_array(s, len, &q, 0, &a)) {
                if (!add_span(l, &a, false, s, p, q, spans, &nspans)) {
                    free(a.data);
                    return false;
                }
                p = q;
                want_value = want_b64 = after_data_key = after_b64_key = false;
                continue;
            }
            free(a.data);
        }
        want_value = want_b64 = after_data_key = after_b64_key = false;
        p++;
    }
    return true;
}

/* Whether the text "data" or "b64" (with its quotes) occurs in s. */
static bool mentions_data(const char *s, size_t len)
{
    const char *p = s, *end = s + len;
    while (end - p >= 5 && (p = memchr(p, '"', (size_t)(end - p - 4))) != NULL) {
        if (memcmp(p, "\"b64\"", 5) == 0 || (end - p >= 6 && memcmp(p, "\"data\"", 6) == 0))
            return true;
        p++;
    }
    return false;
}

/* Writes marker i, "\u0001<i>" with its quotes, at p (what sprintf with
 * "\"\\u0001%zu\"" writes, without its cost); returns its length. */
static size_t put_marker(char *p, size_t i)
{
    char digits[24];
    size_t n = 0, len = 0;
    do {
        digits[n++] = (char)('0' + i % 10);
        i /= 10;
    } while (i != 0);
    memcpy(p, "\"\\u0001", 7);
    len = 7;
    while (n > 0)
        p[len++] = digits[--n];
    p[len++] = '"';
    p[len] = '\0';
    return len;
}

bool srv_lift_scan(const char *body, size_t len, srv_lift *lift)
{
    size_t *spans = NULL, out_len = 0, at = 0;
    char *text;

    memset(lift, 0, sizeof *lift);
    /* Bodies without a "data" key (base64 tensors) are left alone at the
     * cost of one substring search. */
    if (body == NULL || !mentions_data(body, len))
        return false;
    if (!scan(body, len, lift, &spans) || lift->count == 0) {
        free(spans);
        srv_lift_free(lift);
        return false;
    }
    /* Each span [a, b) becomes "\u0001<index>" (at most 6 + 20 + 2 bytes). */
    text = malloc(len + lift->count * 28 + 1);
    if (text == NULL) {
        free(spans);
        srv_lift_free(lift);
        return false;
    }
    for (size_t i = 0; i < lift->count; i++) {
        const size_t a = spans[2 * i], b = spans[2 * i + 1];
        memcpy(text + out_len, body + at, a - at);
        out_len += a - at;
        out_len += put_marker(text + out_len, i);
        at = b;
    }
    memcpy(text + out_len, body + at, len - at);
    out_len += len - at;
    text[out_len] = '\0';
    free(spans);
    lift->text = text;
    lift->len = out_len;
    lift->bytes = out_len + 1;
    for (size_t i = 0; i < lift->count; i++)
        lift->bytes += lift->items[i].n * sizeof(float);
    return true;
}

void srv_lift_free(srv_lift *lift)
{
    if (lift == NULL)
        return;
    for (size_t i = 0; i < lift->count; i++)
        free(lift->items[i].data);
    free(lift->items);
    free(lift->text);
    memset(lift, 0, sizeof *lift);
}

const srv_lifted *srv_lift_find(const srv_lift *lift, const cJSON *node)
{
    const char *v;
    char *end;
    unsigned long long i;
    if (lift == NULL || !cJSON_IsString(node) || node->valuestring == NULL)
        return NULL;
    v = node->valuestring;
    if ((unsigned char)v[0] != MARKER || !(v[1] >= '0' && v[1] <= '9'))
        return NULL;
    i = strtoull(v + 1, &end, 10);
    if (*end != '\0' || i >= lift->count)
        return NULL;
    return &lift->items[i];
}

cJSON *srv_lift_reparse(const srv_lift *lift, const cJSON *node, bool *failed)
{
    const srv_lifted *it = srv_lift_find(lift, node);
    cJSON *tree = it != NULL ? cJSON_ParseWithLength(it->text, it->text_len) : NULL;
    *failed = it != NULL && tree == NULL;
    return tree;
}

void *srv_lift_take_bytes(const srv_lift *lift, const cJSON *node, size_t nbytes)
{
    srv_lifted *it = (srv_lifted *)srv_lift_find(lift, node);
    void *data;
    if (it == NULL || it->data == NULL || !it->b64 || it->n > SIZE_MAX / sizeof(float) ||
        it->n * sizeof(float) != nbytes)
        return NULL;
    data = it->data;
    it->data = NULL;
    return data;
}

float *srv_lift_take(const srv_lift *lift, const cJSON *node, bool b64, int ndim,
                     const int64_t *shape, size_t count)
{
    /* The lift is const to its readers; taking moves one array's ownership
     * out of it, which only the parse of that request does. */
    srv_lifted *it = (srv_lifted *)srv_lift_find(lift, node);
    float *data;
    if (it == NULL || it->data == NULL || it->b64 != b64 || it->n != count)
        return NULL;
    if (!b64 && it->depth > 1) {
        if (it->depth != ndim)
            return NULL;
        for (int k = 0; k < ndim; k++)
            if (it->dims[k] != shape[k])
                return NULL;
    }
    data = it->data;
    it->data = NULL;
    return data;
}
