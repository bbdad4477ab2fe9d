/* json.c - reading request JSON for the API layer: member-name checks
 * (unknown and repeated names are errors, never ignored), typed readers that
 * name the field and the type found, and the error records every file of
 * api/ fills. The body itself is parsed in api/body.c.
 */
#include "api/json.h"

#include "codec/base64.h"
#include "codec/json_lift.h"
#include "store/tensor_store.h"

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------- */
/* Errors                                                                    */
/* ------------------------------------------------------------------------- */

/* Appends s to buf[*at..cap), truncating; buf stays NUL-terminated. */
static void path_put(char *buf, size_t cap, size_t *at, const char *s)
{
    size_t n = strlen(s);
    if (*at + 1 >= cap)
        return;
    if (n > cap - 1 - *at)
        n = cap - 1 - *at;
    memcpy(buf + *at, s, n);
    *at += n;
    buf[*at] = '\0';
}

const char *api_item_prefix(char *buf, size_t i)
{
    char digits[24];
    size_t n = 0, at = sizeof "inputs[" - 1;
    do {
        digits[n++] = (char)('0' + i % 10);
        i /= 10;
    } while (i != 0);
    memcpy(buf, "inputs[", at);
    while (n > 0)
        buf[at++] = digits[--n];
    buf[at++] = ']';
    buf[at] = '\0';
    return buf;
}

cJSON *api_id_node(const cJSON *id)
{
    if (cJSON_IsNumber(id) && id->valuedouble == floor(id->valuedouble) &&
        fabs(id->valuedouble) < 1e15 && !signbit(id->valuedouble)) /* -0 prints "-0" */
        return srv_json_int((int64_t)id->valuedouble);
    return cJSON_Duplicate(id, true);
}

const char *api_path(char *buf, size_t cap, const api_ctx *ctx, const char *name)
{
    const char *prefix = ctx != NULL && ctx->prefix != NULL ? ctx->prefix : "";
    size_t at = 0;
    if (cap == 0)
        return buf;
    if (name == NULL)
        name = "";
    buf[0] = '\0';
    path_put(buf, cap, &at, prefix);
    if (prefix[0] != '\0' && name[0] != '\0' && name[0] != '[')
        path_put(buf, cap, &at, ".");
    path_put(buf, cap, &at, name);
    return buf;
}

bool api_fail(api_err *e, const api_ctx *ctx, srv_error code, const char *name, const char *fmt,
              ...)
{
    va_list ap;
    e->code = code;
    api_path(e->field, sizeof e->field, ctx, name);
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return false;
}

/* The library's fields that the API spells otherwise: rope2d's coordinates
 * are q_positions / k_positions [2, L], its grids two-number arrays. */
static const char *api_field_name(const char *lib)
{
    static const char *const map[][2] = {
        {"q_positions_2d", "q_positions"},      {"k_positions_2d", "k_positions"},
        {"scheme.grid_rows", "scheme.grid"},    {"scheme.grid_cols", "scheme.grid"},
        {"scheme.ref_rows", "scheme.ref_grid"}, {"scheme.ref_cols", "scheme.ref_grid"},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (strcmp(lib, map[i][0]) == 0)
            return map[i][1];
    return lib;
}

bool api_fail_pa(api_err *e, const api_ctx *ctx, const pa_error *pe)
{
    e->code = srv_error_from_pa(pe->status);
    api_path(e->field, sizeof e->field, ctx, api_field_name(pe->field));
    snprintf(e->message, sizeof e->message, "%s", pe->message);
    return false;
}

bool api_fail_reply(api_err *e, srv_reply *reply)
{
    cJSON *root = reply->body != NULL ? cJSON_ParseWithLength(reply->body, reply->body_len) : NULL;
    const cJSON *obj = cJSON_GetObjectItemCaseSensitive(root, "error");
    const char *msg = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(obj, "message"));
    const char *field = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(obj, "field"));

    e->code = reply->error;
    snprintf(e->message, sizeof e->message, "%s", msg != NULL ? msg : "invalid tensor");
    snprintf(e->field, sizeof e->field, "%s", field != NULL ? field : "");
    cJSON_Delete(root);
    srv_reply_free(reply);
    return false;
}

void api_reply_err(srv_reply *reply, const api_err *e)
{
    srv_reply_error(reply, e->code, e->field[0] ? e->field : NULL, "%s", e->message);
}

/* The name of node's JSON type, for messages ("found string"). */
const char *api_json_type(const cJSON *node)
{
    if (node == NULL)
        return "nothing";
    if (cJSON_IsBool(node))
        return "boolean";
    if (cJSON_IsNull(node))
        return "null";
    if (cJSON_IsNumber(node))
        return "number";
    if (cJSON_IsString(node))
        return "string";
    if (cJSON_IsArray(node))
        return "array";
    if (cJSON_IsObject(node))
        return "object";
    return "an invalid value";
}

bool api_check_fields(const cJSON *obj, const char *const *known, size_t n, const char *parent,
                      const char *what, const api_ctx *ctx, api_err *e)
{
    uint64_t seen = 0;
    const cJSON *m;
    char rel[API_FIELD_MAX];

    cJSON_ArrayForEach(m, obj)
    {
        const char *name = m->string != NULL ? m->string : "";
        size_t k = 0;
        while (k < n && (known[k][0] != name[0] || strcmp(known[k], name) != 0))
            k++;
        if (k == n || (k < 64 && (seen & ((uint64_t)1 << k)))) {
            /* The member's path, for the error only. */
            if (parent != NULL && parent[0] != '\0')
                snprintf(rel, sizeof rel, "%s.%s", parent, name);
            else
                snprintf(rel, sizeof rel, "%s", name);
        }
        if (k == n) {
            char list[API_MESSAGE_MAX / 2];
            size_t used = 0;
            list[0] = '\0';
            for (size_t j = 0; j < n && used < sizeof list; j++) {
                int w = snprintf(list + used, sizeof list - used, "%s%s", j ? ", " : "", known[j]);
                if (w < 0)
                    break;
                used += (size_t)w;
            }
            if (n == 0)
                snprintf(list, sizeof list, "none");
            /* The name is request text: it goes into the field as is (the
             * reply layer escapes it) and into the message shortened. */
            api_fail(e, ctx, SRV_ERR_UNKNOWN_FIELD, rel, "%s has no field '%.64s%s' (known: %s)",
                     what, name, strlen(name) > 64 ? "..." : "", list);
            return false;
        }
        if (k < 64) {
            if (seen & ((uint64_t)1 << k))
                return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, rel,
                                "field '%s' appears more than once in %s", known[k], what);
            seen |= (uint64_t)1 << k;
        }
    }
    return true;
}

/* ------------------------------------------------------------------------- */
/* Typed readers                                                             */
/* ------------------------------------------------------------------------- */

/* A number that must be an int32: integral, finite and in range. */
static bool int_value(const cJSON *v, const char *name, const api_ctx *ctx, int32_t *out,
                      api_err *e)
{
    double d;
    if (!cJSON_IsNumber(v))
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, name, "%s must be an integer, found %s",
                        name, api_json_type(v));
    d = v->valuedouble;
    if (!isfinite(d))
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, name,
                        "%s must be a finite integer, found %g", name, d);
    if (d != floor(d))
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, name,
                        "%s must be an integer, found %.17g", name, d);
    if (d < (double)INT32_MIN || d > (double)INT32_MAX)
        return api_fail(e, ctx, SRV_ERR_OUT_OF_RANGE, name,
                        "%s=%.17g is outside the int32 range [%d, %d]", name, d, (int)INT32_MIN,
                        (int)INT32_MAX);
    *out = (int32_t)d;
    return true;
}

bool api_get_int(const cJSON *v, const char *name, const api_ctx *ctx, int32_t *out, api_err *e)
{
    return int_value(v, name, ctx, out, e);
}

bool api_get_number(const cJSON *v, const char *name, const api_ctx *ctx, double *out, api_err *e)
{
    if (!cJSON_IsNumber(v))
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, name, "%s must be a number, found %s",
                        name, api_json_type(v));
    if (!isfinite(v->valuedouble))
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, name,
                        "%s must be a finite number, found %g", name, v->valuedouble);
    *out = v->valuedouble;
    return true;
}

bool api_get_bool(const cJSON *v, const char *name, const api_ctx *ctx, bool *out, api_err *e)
{
    if (!cJSON_IsBool(v))
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, name,
                        "%s must be true or false, found %s", name, api_json_type(v));
    *out = cJSON_IsTrue(v);
    return true;
}

bool api_get_string(const cJSON *v, const char *name, const api_ctx *ctx, const char **out,
                    api_err *e)
{
    if (!cJSON_IsString(v) || v->valuestring == NULL)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, name, "%s must be a string, found %s",
                        name, api_json_type(v));
    *out = v->valuestring;
    return true;
}

/* Checks that v is an array of 1 .. max_tensor_elements values. */
static bool array_len(const cJSON *v, const char *name, const api_ctx *ctx, int32_t *n, api_err *e)
{
    size_t count = 0;
    const cJSON *it;
    if (!cJSON_IsArray(v))
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, name, "%s must be an array, found %s",
                        name, api_json_type(v));
    cJSON_ArrayForEach(it, v)
    {
        count++;
    }
    if (count == 0)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, name, "%s must not be empty", name);
    if (count > ctx->lim->max_tensor_elements || count > (size_t)INT32_MAX)
        return api_fail(e, ctx, SRV_ERR_PAYLOAD_TOO_LARGE, name,
                        "%s has %zu values; the limit per array is %zu " SRV_LIMIT_TENSOR, name,
                        count, ctx->lim->max_tensor_elements);
    *n = (int32_t)count;
    return true;
}

/* An integer tensor {"shape":[n] or [rows, n], "dtype":"i32"|"i64",
 * "b64":"..."} (little-endian), or with "data" instead of "b64": *out
 * [rows * n] int32 values (an i64 outside int32 is OUT_OF_RANGE). rank is
 * the rank the caller wants (1, or 2 with rows). */
/* count little-endian int32 or int64 (width 4 or 8) values, each held to
 * int32 naming the element that is not, into *out (malloc'd). */
static bool ints_from_le(const unsigned char *bytes, size_t count, size_t width, const char *name,
                         const api_ctx *ctx, int32_t **out, api_err *e)
{
    char path[API_FIELD_MAX];
    int32_t *a = malloc((count ? count : 1) * sizeof *a);
    if (a == NULL)
        return api_fail(e, ctx, SRV_ERR_INTERNAL, name, "out of memory reading %s", name);
    for (size_t i = 0; i < count; i++) {
        const unsigned char *p = bytes + i * width;
        uint64_t u = 0;
        int64_t x;
        for (size_t k = 0; k < width; k++)
            u |= (uint64_t)p[k] << (8 * k);
        x = width == 8 ? (int64_t)u : (int64_t)(int32_t)(uint32_t)u;
        if (x < INT32_MIN || x > INT32_MAX) {
            free(a);
            snprintf(path, sizeof path, "%s[%zu]", name, i);
            /* The words of a JSON number out of range (int_value). */
            return api_fail(e, ctx, SRV_ERR_OUT_OF_RANGE, path,
                            "%s=%lld is outside the int32 range [%d, %d]", path, (long long)x,
                            (int)INT32_MIN, (int)INT32_MAX);
        }
        a[i] = (int32_t)x;
    }
    *out = a;
    return true;
}

static bool int_tensor(const cJSON *v, const char *name, const api_ctx *ctx, int rank, int rows,
                       int32_t **out, int32_t *n, api_err *e)
{
    static const char *const fields[] = {"shape", "dtype", "b64", "data"};
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(v, "shape");
    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(v, "dtype");
    const cJSON *b64 = cJSON_GetObjectItemCaseSensitive(v, "b64");
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(v, "data");
    char path[API_FIELD_MAX];
    int64_t dims[2] = {1, 0};
    size_t count, width = 4;

    /* A protocol's own bytes (a /v2 binary segment) carry shape and dtype
     * like the others, and no data or b64. */
    const bool sourced =
        ctx->source != NULL && ctx->source->bytes != NULL && ctx->source->owns(ctx->source, v);
    if (!sourced && !api_check_fields(v, fields, 4, name, name, ctx, e))
        return false;
    snprintf(path, sizeof path, "%s.shape", name);
    if (!cJSON_IsArray(shape) || cJSON_GetArraySize(shape) != rank)
        return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, path, "%s must be %s", path,
                        rank == 1 ? "[n]" : "[rows, n]");
    for (int d = 0; d < rank; d++) {
        const cJSON *x = cJSON_GetArrayItem(shape, d);
        if (!cJSON_IsNumber(x) || x->valuedouble < 1 || x->valuedouble > INT32_MAX ||
            x->valuedouble != floor(x->valuedouble))
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, path,
                            "%s[%d] must be a positive integer", path, d);
        dims[rank == 1 ? 1 : d] = (int64_t)x->valuedouble;
    }
    if (rank == 2 && dims[0] != rows)
        return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, path, "%s=[%lld, %lld] must have %d rows",
                        path, (long long)dims[0], (long long)dims[1], rows);
    count = (size_t)dims[0] * (size_t)dims[1];
    if (count > ctx->lim->max_tensor_elements)
        return api_fail(e, ctx, SRV_ERR_PAYLOAD_TOO_LARGE, name,
                        "%s has %zu values; the limit per array is %zu " SRV_LIMIT_TENSOR, name,
                        count, ctx->lim->max_tensor_elements);
    if (dtype != NULL) {
        snprintf(path, sizeof path, "%s.dtype", name);
        if (!cJSON_IsString(dtype) ||
            (strcmp(dtype->valuestring, "i32") != 0 && strcmp(dtype->valuestring, "i64") != 0))
            return api_fail(e, ctx, SRV_ERR_UNSUPPORTED, path,
                            "%s must be \"i32\" or \"i64\" (integers, little-endian in b64)", path);
        width = strcmp(dtype->valuestring, "i64") == 0 ? 8 : 4;
    }
    if (sourced) {
        size_t len = 0;
        const unsigned char *bytes = ctx->source->bytes(ctx->source, v, &len);
        if (len != count * width)
            return api_fail(e, ctx, SRV_ERR_INTERNAL, name,
                            "%s: %zu bytes for %zu values of %zu bytes", name, len, count, width);
        if (!ints_from_le(bytes, count, width, name, ctx, out, e))
            return false;
        *n = (int32_t)dims[1];
        return true;
    }
    if ((b64 == NULL) == (data == NULL))
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, name,
                        "%s needs exactly one of data (integers) or b64 (%s little-endian)", name,
                        width == 8 ? "int64" : "int32");
    if (data != NULL) {
        int32_t got = 0;
        /* A plain array of numbers was lifted before cJSON as floats
         * (json_lift.h): read its own text, as integers. */
        bool ok, failed;
        cJSON *orig_data = srv_lift_reparse(ctx->lift, data, &failed);
        if (failed)
            return api_fail(e, ctx, SRV_ERR_INTERNAL, name, "out of memory reading %s", name);
        if (orig_data != NULL)
            data = orig_data;
        snprintf(path, sizeof path, "%s.data", name);
        if (rank == 2 && cJSON_IsArray(data) && cJSON_IsArray(data->child)) {
            ok = api_get_int_rows(data, path, ctx, rows, out, &got, e);
        } else {
            ok = api_get_int_array(data, path, ctx, out, &got, e);
            got = (size_t)got == count ? (int32_t)dims[1] : -1;
        }
        cJSON_Delete(orig_data);
        if (!ok)
            return false;
        if (got != dims[1]) {
            free(*out);
            *out = NULL;
            return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, name,
                            "%s.data does not hold the %zu values of its shape", name, count);
        }
        *n = (int32_t)dims[1];
        return true;
    }
    snprintf(path, sizeof path, "%s.b64", name);
    /* Decoded before cJSON as float32 bytes (json_lift.h): its own text. */
    bool failed;
    cJSON *orig = srv_lift_reparse(ctx->lift, b64, &failed);
    if (failed)
        return api_fail(e, ctx, SRV_ERR_INTERNAL, path, "out of memory reading %s", path);
    if (orig != NULL)
        b64 = orig;
    if (!cJSON_IsString(b64)) {
        cJSON_Delete(orig);
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, path, "%s must be a base64 string", path);
    }
    size_t len = strlen(b64->valuestring), got = 0, cap = count * width;
    unsigned char *bytes = malloc(cap + 3);
    bool decoded = bytes != NULL && srv_b64_decode(b64->valuestring, len, bytes, cap + 3, &got);
    bool ok;
    cJSON_Delete(orig);
    if (bytes == NULL)
        return api_fail(e, ctx, SRV_ERR_INTERNAL, name, "out of memory reading %s", name);
    if (!decoded || got != cap) {
        free(bytes);
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, path,
                        "%s must be base64 of %zu bytes (%zu %s values), found %zu characters",
                        path, cap, count, width == 8 ? "int64" : "int32", len);
    }
    ok = ints_from_le(bytes, count, width, name, ctx, out, e);
    free(bytes);
    if (!ok)
        return false;
    *n = (int32_t)dims[1];
    return true;
}

int api_int_rank(const cJSON *v)
{
    if (cJSON_IsObject(v))
        return cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(v, "shape"));
    if (!cJSON_IsArray(v) || !cJSON_IsArray(v->child))
        return 1;
    return cJSON_IsArray(v->child->child) ? 3 : 2;
}

bool api_get_int_array(const cJSON *v, const char *name, const api_ctx *ctx, int32_t **out,
                       int32_t *n, api_err *e)
{
    int32_t count = 0, i = 0;
    int32_t *a;
    const cJSON *it;
    char elem[API_FIELD_MAX];

    if (cJSON_IsObject(v))
        return int_tensor(v, name, ctx, 1, 1, out, n, e);
    if (!array_len(v, name, ctx, &count, e))
        return false;
    a = malloc((size_t)count * sizeof *a);
    if (a == NULL)
        return api_fail(e, ctx, SRV_ERR_INTERNAL, name, "out of memory reading %s", name);
    cJSON_ArrayForEach(it, v)
    {
        snprintf(elem, sizeof elem, "%s[%d]", name, (int)i);
        if (!int_value(it, elem, ctx, &a[i], e)) {
            free(a);
            return false;
        }
        i++;
    }
    *out = a;
    *n = count;
    return true;
}

bool api_get_float_array(const cJSON *v, const char *name, const api_ctx *ctx, float **out,
                         int32_t *n, api_err *e)
{
    int32_t count = 0, i = 0;
    float *a;
    const cJSON *it;
    char elem[API_FIELD_MAX];

    if (ctx->source != NULL && ctx->source->owns(ctx->source, v)) { /* a /v2 binary segment */
        srv_tensor t;
        if (!ctx->source->get(ctx->source, v, name, ctx, 1, SRV_ELEM_FLOAT, &t, e))
            return false;
        a = malloc((t.count ? t.count : 1) * sizeof *a);
        if (a == NULL) {
            srv_tensor_free(&t);
            return api_fail(e, ctx, SRV_ERR_INTERNAL, name, "out of memory reading %s", name);
        }
        memcpy(a, t.data, t.count * sizeof *a);
        *n = (int32_t)t.count;
        srv_tensor_free(&t);
        *out = a;
        return true;
    }

    if (!array_len(v, name, ctx, &count, e))
        return false;
    a = malloc((size_t)count * sizeof *a);
    if (a == NULL)
        return api_fail(e, ctx, SRV_ERR_INTERNAL, name, "out of memory reading %s", name);
    cJSON_ArrayForEach(it, v)
    {
        double d;
        snprintf(elem, sizeof elem, "%s[%d]", name, (int)i);
        if (!api_get_number(it, elem, ctx, &d, e)) {
            free(a);
            return false;
        }
        if (fabs(d) > (double)FLT_MAX) {
            free(a);
            return api_fail(e, ctx, SRV_ERR_OUT_OF_RANGE, elem,
                            "%s=%g is outside the float32 range", elem, d);
        }
        a[i++] = (float)d;
    }
    *out = a;
    *n = count;
    return true;
}

/* A length given as a count or as an explicit positions array (or both,
 * when they agree). *n = 0 when neither is there. Default positions are
 * written by the caller. */
bool api_get_length(const cJSON *root, const char *len_name, const char *pos_name,
                    const api_ctx *ctx, int32_t *n, int32_t **pos, api_err *e)
{
    const cJSON *lv = cJSON_GetObjectItemCaseSensitive(root, len_name);
    const cJSON *pv = cJSON_GetObjectItemCaseSensitive(root, pos_name);
    int32_t len = 0, count = 0;

    *n = 0;
    if (lv != NULL) {
        if (!api_get_int(lv, len_name, ctx, &len, e))
            return false;
        if (len < 1)
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, len_name, "%s=%d must be at least 1",
                            len_name, (int)len);
        if ((size_t)len > ctx->lim->max_tensor_elements)
            return api_fail(
                e, ctx, SRV_ERR_PAYLOAD_TOO_LARGE, len_name,
                "%s=%d is more than the %zu values allowed per tensor " SRV_LIMIT_TENSOR, len_name,
                (int)len, ctx->lim->max_tensor_elements);
        *n = len;
    }
    if (pv != NULL) {
        if (!api_get_int_array(pv, pos_name, ctx, pos, &count, e))
            return false;
        if (lv != NULL && count != len)
            return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, pos_name, "%s has %d values but %s=%d",
                            pos_name, (int)count, len_name, (int)len);
        *n = count;
    }
    return true;
}

bool api_get_int_rows(const cJSON *v, const char *name, const api_ctx *ctx, int rows, int32_t **out,
                      int32_t *n, api_err *e)
{
    int32_t *all = NULL, len = -1;
    const cJSON *row;
    char path[API_FIELD_MAX];
    int k = 0;
    if (cJSON_IsObject(v))
        return int_tensor(v, name, ctx, 2, rows, out, n, e);
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != rows)
        return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, name,
                        "%s must be [%d, L]: %d arrays of positions, found %s of %d", name, rows,
                        rows, api_json_type(v), cJSON_IsArray(v) ? cJSON_GetArraySize(v) : 0);
    cJSON_ArrayForEach(row, v)
    {
        int32_t *r = NULL, m = 0;
        snprintf(path, sizeof path, "%s[%d]", name, k);
        if (!api_get_int_array(row, path, ctx, &r, &m, e)) {
            free(all);
            return false;
        }
        if (len >= 0 && m != len) {
            free(r);
            free(all);
            return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, path,
                            "%s has %d values but %s[0] has %d", path, (int)m, name, (int)len);
        }
        if (all == NULL && (all = malloc((size_t)rows * (size_t)m * sizeof *all)) == NULL) {
            free(r);
            return api_fail(e, ctx, SRV_ERR_INTERNAL, name, "out of memory");
        }
        len = m;
        memcpy(all + (size_t)k * (size_t)m, r, (size_t)m * sizeof *all);
        free(r);
        k++;
    }
    *out = all;
    *n = len;
    return true;
}

int32_t *api_range_positions(int32_t first, int32_t n)
{
    int32_t *p = malloc((size_t)n * sizeof *p);
    if (p != NULL)
        for (int32_t i = 0; i < n; i++)
            p[i] = (int32_t)((int64_t)first + i);
    return p;
}

bool api_get_output_dtype(const cJSON *v, const api_ctx *ctx, srv_wire *out, api_err *e)
{
    const char *s = NULL;
    if (!api_get_string(v, "output_dtype", ctx, &s, e))
        return false;
    if (strcmp(s, "f32") == 0)
        *out = SRV_WIRE_F32;
    else if (strcmp(s, "f16") == 0)
        *out = SRV_WIRE_F16;
    else if (strcmp(s, "bf16") == 0)
        *out = SRV_WIRE_BF16;
    else
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "output_dtype",
                        "output_dtype='%.32s' is not 'f32', 'f16' or 'bf16'", s);
    return true;
}

bool api_get_encoding(const cJSON *v, const api_ctx *ctx, srv_encoding *out, api_err *e)
{
    const char *s = NULL;
    if (!api_get_string(v, "output_encoding", ctx, &s, e))
        return false;
    if (strcmp(s, "json") == 0)
        *out = SRV_ENCODING_JSON;
    else if (strcmp(s, "b64") == 0)
        *out = SRV_ENCODING_B64;
    else
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "output_encoding",
                        "output_encoding='%.32s' is not 'json' or 'b64'", s);
    return true;
}

bool api_get_tensor(const cJSON *v, const char *name, const api_ctx *ctx, int want_ndim,
                    srv_tensor *out, api_err *e)
{
    return api_get_tensor_as(v, name, ctx, want_ndim, SRV_ELEM_FLOAT, out, e);
}

bool api_get_tensor_as(const cJSON *v, const char *name, const api_ctx *ctx, int want_ndim,
                       srv_elem kind, srv_tensor *out, api_err *e)
{
    char path[API_FIELD_MAX];
    srv_reply rep;
    srv_tensor t;

    if (ctx->source != NULL && ctx->source->owns(ctx->source, v)) /* binary data of a /v2 request */
        return ctx->source->get(ctx->source, v, name, ctx, want_ndim, kind, out, e);
    memset(&rep, 0, sizeof rep);
    memset(&t, 0, sizeof t);
    api_path(path, sizeof path, ctx, name);
    if (kind == SRV_ELEM_BOOL && srv_tensor_is_ref(v))
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, name,
                        "%s cannot be a named tensor (those are float32): send the mask inline",
                        name);
    if (srv_tensor_is_ref(v)
            ? !srv_tensor_store_ref(ctx->lim->tensors, v, path, want_ndim, &t, &rep)
            : !srv_tensor_parse_as(v, path, want_ndim, ctx->lim->max_tensor_elements, kind,
                                   ctx->lift, &t, &rep))
        return api_fail_reply(e, &rep);
    srv_reply_free(&rep); /* in case the parser left anything in it */
    for (int d = 0; d < t.ndim; d++) {
        if (t.shape[d] > INT32_MAX) {
            char dim[API_FIELD_MAX];
            snprintf(dim, sizeof dim, "%s.shape[%d]", name, d);
            api_fail(e, ctx, SRV_ERR_PAYLOAD_TOO_LARGE, dim, "%s=%lld is larger than %d", dim,
                     (long long)t.shape[d], (int)INT32_MAX);
            srv_tensor_free(&t);
            return false;
        }
    }
    *out = t;
    return true;
}

/* ------------------------------------------------------------------------- */
/* Sizes                                                                     */
/* ------------------------------------------------------------------------- */

size_t api_mul_sat(size_t a, size_t b)
{
    if (a != 0 && b > SIZE_MAX / a)
        return SIZE_MAX;
    return a * b;
}

size_t api_add_sat(size_t a, size_t b)
{
    return a > SIZE_MAX - b ? SIZE_MAX : a + b;
}

bool api_add_int_array(cJSON *parent, const char *name, const int32_t *v, int32_t n)
{
    cJSON *arr = cJSON_AddArrayToObject(parent, name);
    if (arr == NULL)
        return false;
    for (int32_t i = 0; i < n; i++) {
        cJSON *num = srv_json_int(v[i]); /* what cJSON prints, without printf */
        if (num == NULL || !cJSON_AddItemToArray(arr, num)) {
            cJSON_Delete(num);
            return false;
        }
    }
    return true;
}

const cJSON *api_member(const cJSON *obj, const char *name)
{
    /* cJSON_GetObjectItemCaseSensitive's answer (the first member of that
     * name), with the first byte compared before strcmp is called: a
     * request's parse asks for some forty members, most of them absent,
     * each a walk over the object's few members. */
    if (obj == NULL || name == NULL)
        return NULL;
    for (const cJSON *m = obj->child; m != NULL; m = m->next)
        if (m->string != NULL && m->string[0] == name[0] && strcmp(m->string, name) == 0)
            return m;
    return NULL;
}

bool api_opt_int(const cJSON *obj, const char *name, const api_ctx *ctx, int32_t *out,
                 bool *present, api_err *e)
{
    const cJSON *v = api_member(obj, name);
    *present = v != NULL;
    return v == NULL || api_get_int(v, name, ctx, out, e);
}
