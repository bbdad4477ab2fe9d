/* tensor_render.c - see tensor.h. Result tensors back to the client: JSON
 * numbers (codec/fmt_float.c), base64 of float32 or of the output dtype
 * (codec/half.c), either of float32 deferred until the body is written.
 * The parsing side is tensor.c.
 */
#include "codec/tensor.h"

#include "codec/base64.h"
#include "codec/float32.h"
#include "codec/fmt_float.h"
#include "codec/half.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------- */
/* Rendering                                                                 */
/* ------------------------------------------------------------------------- */

/* A cJSON raw node that owns `text` (from cJSON_malloc), without the copy
 * cJSON_CreateRaw would make of a possibly huge buffer. */
static cJSON *raw_node_take(char *text)
{
    cJSON *node = cJSON_CreateRaw("");
    if (!node) {
        cJSON_free(text);
        return NULL;
    }
    cJSON_free(node->valuestring);
    node->valuestring = text;
    return node;
}

cJSON *srv_json_int(int64_t v)
{
    char buf[24], *p = buf + sizeof buf;
    uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    *--p = '\0';
    do {
        *--p = (char)('0' + u % 10);
        u /= 10;
    } while (u != 0);
    if (v < 0)
        *--p = '-';
    return cJSON_CreateRaw(p);
}

/* Finite values get the shortest text that reads back as exactly v;
 * non-finite ones (masked logits are -inf) become null. One buffer sized
 * up front, written by one loop with the formatter inlined. */
static cJSON *render_json_array(const float *data, size_t count)
{
    size_t size = srv_fmt_float_array_size(count);
    if (size == 0)
        return NULL;
    char *buf = cJSON_malloc(size);
    if (!buf)
        return NULL;
    srv_fmt_float_array(data, count, buf);
    return raw_node_take(buf);
}

static cJSON *render_b64_string(const float *data, size_t count)
{
    if (count > SIZE_MAX / 8)
        return NULL;
    size_t bytes = count * sizeof(float);
    size_t enc = srv_b64_encoded_len(bytes);
    char *buf = cJSON_malloc(enc + 3);
    if (!buf)
        return NULL;
    const unsigned char *src = (const unsigned char *)data;
    float *swapped = NULL;
    if (!srv_host_little_endian() && count) {
        swapped = malloc(bytes);
        if (!swapped) {
            cJSON_free(buf);
            return NULL;
        }
        memcpy(swapped, data, bytes);
        srv_swap_bytes32(swapped, count);
        src = (const unsigned char *)swapped;
    }
    buf[0] = '"';
    srv_b64_encode(src, bytes, buf + 1);
    buf[enc + 1] = '"';
    buf[enc + 2] = '\0';
    free(swapped);
    return raw_node_take(buf);
}

/* ------------------------------------------------------------------------- */
/* Deferred base64 (see srv_defer in tensor.h)                               */
/* ------------------------------------------------------------------------- */

enum { DEFER_OPEN = 0x02, DEFER_CLOSE = 0x03 };

static _Thread_local srv_defer *defer_current;

void srv_defer_set_current(srv_defer *d)
{
    defer_current = d;
}

bool srv_defer_uses(const float *p)
{
    const srv_defer *d = defer_current;
    for (size_t i = 0; p != NULL && d != NULL && i < d->n; i++)
        if (d->data[i] == p)
            return true;
    return false;
}

static bool defer_wanted(size_t count, srv_encoding enc)
{
    return defer_current != NULL && count > 0 &&
           (enc == SRV_ENCODING_JSON ? srv_fmt_float_array_size(count) != 0
                                     : srv_host_little_endian());
}

/* A placeholder raw node for data's text (JSON numbers or base64),
 * recorded in the current defer. */
static cJSON *defer_node(const float *data, size_t count, bool json)
{
    srv_defer *d = defer_current;
    char text[32];
    int n;
    if (d->n == d->cap) {
        size_t cap = d->cap ? 2 * d->cap : 4;
        const float **pd = realloc(d->data, cap * sizeof *pd);
        if (pd == NULL)
            return NULL;
        d->data = pd;
        size_t *pc = realloc(d->count, cap * sizeof *pc);
        if (pc == NULL)
            return NULL;
        d->count = pc;
        unsigned char *pj = realloc(d->json, cap * sizeof *pj);
        if (pj == NULL)
            return NULL;
        d->json = pj;
        d->cap = cap;
    }
    {
        /* DEFER_OPEN, the index in decimal, DEFER_CLOSE. */
        char digits[24];
        size_t k = 0, i = d->n;
        do {
            digits[k++] = (char)('0' + i % 10);
            i /= 10;
        } while (i != 0);
        n = 0;
        text[n++] = DEFER_OPEN;
        while (k > 0)
            text[n++] = digits[--k];
        text[n++] = DEFER_CLOSE;
        text[n] = '\0';
    }
    cJSON *node = cJSON_CreateRaw(text);
    if (node == NULL)
        return NULL;
    d->data[d->n] = data;
    d->count[d->n] = count;
    d->json[d->n] = json;
    d->n++;
    return node;
}

char *srv_defer_apply(const srv_defer *d, const char *printed, size_t printed_len, size_t *out_len)
{
    size_t size = printed_len + 1, at = 0, pos = 0;
    char *out;
    for (size_t i = 0; i < d->n; i++) /* an upper bound: placeholders drop out */
        size += d->json[i] ? srv_fmt_float_array_size(d->count[i])
                           : srv_b64_encoded_len(d->count[i] * sizeof(float)) + 2;
    out = malloc(size);
    if (out == NULL)
        return NULL;
    for (;;) {
        const char *p = memchr(printed + pos, DEFER_OPEN, printed_len - pos);
        const size_t upto = p ? (size_t)(p - printed) : printed_len;
        char *end;
        unsigned long long i;
        memcpy(out + at, printed + pos, upto - pos);
        at += upto - pos;
        if (p == NULL)
            break;
        i = strtoull(p + 1, &end, 10);
        if (*end != DEFER_CLOSE || i >= d->n) { /* cannot happen: see tensor.h */
            free(out);
            return NULL;
        }
        if (d->json[i]) {
            /* The formatter may write scratch bytes past its NUL: the
             * next pieces overwrite them. */
            at += srv_fmt_float_array(d->data[i], d->count[i], out + at);
        } else {
            out[at++] = '"';
            srv_b64_encode((const unsigned char *)d->data[i], d->count[i] * sizeof(float),
                           out + at);
            at += srv_b64_encoded_len(d->count[i] * sizeof(float));
            out[at++] = '"';
        }
        pos = (size_t)(end - printed) + 1;
    }
    out[at] = '\0';
    *out_len = at;
    return out;
}

void srv_defer_free(srv_defer *d)
{
    if (d == NULL)
        return;
    free(d->data);
    free(d->count);
    free(d->json);
    memset(d, 0, sizeof *d);
}

/* ------------------------------------------------------------------------- */

bool srv_wire_overflow(const float *data, size_t n, srv_wire wire, size_t *at)
{
    /* A finite value rounds to infinity from the tie above the type's
     * largest on: 65520 for f16 (65504 and 2^16 tie to 2^16, the even
     * one), 0x7f7f8000's magnitude for bf16 (0x7f7f is odd). Compared as
     * bits: not NaN, not infinite, at least the tie. */
    const uint32_t lo = wire == SRV_WIRE_F16 ? 0x477ff000u : 0x7f7f8000u;
    uint32_t any = 0;
    if (wire != SRV_WIRE_F16 && wire != SRV_WIRE_BF16)
        return false;
    for (size_t i = 0; i < n; i++) { /* a pass with no exit, then the first */
        uint32_t u;
        memcpy(&u, &data[i], sizeof u);
        u &= 0x7fffffffu;
        any |= u >= lo && u < 0x7f800000u;
    }
    for (size_t i = 0; any && i < n; i++) {
        uint32_t u;
        memcpy(&u, &data[i], sizeof u);
        u &= 0x7fffffffu;
        if (u >= lo && u < 0x7f800000u) {
            *at = i;
            return true;
        }
    }
    return false;
}

/* data [count] rounded to a 16-bit wire type: as floats (for JSON) or as
 * little-endian bytes (for b64). malloc'd; NULL on allocation failure. */
static void *narrowed(const float *data, size_t count, srv_wire wire, bool as_bytes)
{
    const int bf16 = wire == SRV_WIRE_BF16;
    uint16_t *h = malloc((count ? count : 1) * sizeof *h);
    unsigned char *b;
    float *f;
    if (h == NULL)
        return NULL;
    srv_f32_to_half_n(data, h, count, bf16);
    if (as_bytes) {
        if (srv_host_little_endian())
            return h; /* the bytes as they are */
        b = (unsigned char *)(void *)h;
        for (size_t i = 0; i < count; i++) { /* in place: each value's own 2 bytes */
            const uint16_t v = h[i];
            b[2 * i] = (unsigned char)(v & 0xff);
            b[2 * i + 1] = (unsigned char)(v >> 8);
        }
        return b;
    }
    f = malloc((count ? count : 1) * sizeof *f);
    if (f != NULL) {
        if (srv_host_little_endian()) {
            if (bf16)
                srv_bf16_to_f32_n(h, f, count);
            else
                srv_f16_to_f32_n(h, f, count);
        } else {
            for (size_t i = 0; i < count; i++)
                f[i] = bf16 ? srv_bf16_to_f32(h[i]) : srv_f16_to_f32(h[i]);
        }
    }
    free(h);
    return f;
}

bool srv_tensor_render(cJSON *parent, const char *name, const float *data, int ndim,
                       const int64_t *shape, srv_encoding enc)
{
    return srv_tensor_render_as(parent, name, data, ndim, shape, enc, SRV_WIRE_F32);
}

bool srv_tensor_render_as(cJSON *parent, const char *name, const float *data, int ndim,
                          const int64_t *shape, srv_encoding enc, srv_wire wire)
{
    if (!parent || !name || ndim < 1 || ndim > SRV_MAX_DIMS || !shape)
        return false;
    size_t count = 1;
    for (int k = 0; k < ndim; k++) {
        if (shape[k] < 0 || (count > 0 && (uint64_t)shape[k] > SIZE_MAX / count))
            return false;
        count *= (size_t)shape[k];
    }
    if (count > 0 && !data)
        return false;

    cJSON *obj = cJSON_CreateObject();
    cJSON *shp = cJSON_AddArrayToObject(obj, "shape");
    if (!shp)
        goto fail;
    for (int k = 0; k < ndim; k++) {
        cJSON *d = srv_json_int(shape[k]);
        if (!d || !cJSON_AddItemToArray(shp, d)) {
            cJSON_Delete(d);
            goto fail;
        }
    }
    if (!cJSON_AddStringToObject(obj, "datatype",
                                 wire == SRV_WIRE_F16    ? "FP16"
                                 : wire == SRV_WIRE_BF16 ? "BF16"
                                                         : "FP32"))
        goto fail;
    cJSON *values;
    if (wire == SRV_WIRE_F16 || wire == SRV_WIRE_BF16) {
        void *tmp = narrowed(data, count, wire, enc == SRV_ENCODING_B64);
        if (tmp == NULL)
            goto fail;
        if (enc == SRV_ENCODING_JSON) {
            values = render_json_array(tmp, count);
        } else {
            size_t len = srv_b64_encoded_len(2 * count);
            char *buf = cJSON_malloc(len + 3);
            values = NULL;
            if (buf != NULL) {
                buf[0] = '"';
                srv_b64_encode(tmp, 2 * count, buf + 1);
                buf[len + 1] = '"';
                buf[len + 2] = '\0';
                values = raw_node_take(buf);
            }
        }
        free(tmp);
    } else {
        values = defer_wanted(count, enc)   ? defer_node(data, count, enc == SRV_ENCODING_JSON)
                 : enc == SRV_ENCODING_JSON ? render_json_array(data, count)
                                            : render_b64_string(data, count);
    }
    if (!values)
        goto fail;
    if (!cJSON_AddItemToObject(obj, enc == SRV_ENCODING_B64 ? "b64" : "data", values)) {
        cJSON_Delete(values);
        goto fail;
    }
    if (!cJSON_AddItemToObject(parent, name, obj))
        goto fail;
    return true;
fail:
    cJSON_Delete(obj);
    return false;
}
