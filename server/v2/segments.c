/* segments.c - [BIN] binary segments as the tensor source of the /v1
 * parser (api_tensor_source, api/json.h): an infer request's tensor node
 * that names bytes after the JSON header becomes a float32 tensor here,
 * widened from its wire type, with /v1's checks. See v2/infer.c.
 */
#include "v2/internal.h"

#include "codec/float32.h"
#include "codec/half.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------- */
/* Binary segments (the tensor source api_get_tensor asks)                  */
/* ------------------------------------------------------------------------- */

static bool is_segment(const api_tensor_source *src, const cJSON *v)
{
    (void)src;
    const cJSON *s = cJSON_IsObject(v) ? cJSON_GetObjectItemCaseSensitive(v, V2_SEGMENT_KEY) : NULL;
    return s != NULL && cJSON_IsString(s) && (s->type & cJSON_IsReference) != 0;
}

/* Reads a protocol shape: 1..SRV_MAX_DIMS integers in [1, INT32_MAX] whose
 * product is at most max_tensor_elements. name is the input's name. */
bool v2_read_shape(const cJSON *node, const char *name, const api_ctx *ctx, int *ndim,
                   int64_t *shape, size_t *count, api_err *e)
{
    char path[64], dim[80];
    const cJSON *d;
    int n = 0;
    size_t c = 1;

    snprintf(path, sizeof path, "%s.shape", name);
    if (node == NULL)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, path,
                        "%s is required: an array of 1 to %d positive integers", path,
                        SRV_MAX_DIMS);
    if (!cJSON_IsArray(node))
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, path,
                        "%s must be an array of positive integers, found %s", path,
                        api_json_type(node));
    cJSON_ArrayForEach(d, node)
    {
        double v = cJSON_IsNumber(d) ? d->valuedouble : 0;
        snprintf(dim, sizeof dim, "%s[%d]", path, n);
        if (n == SRV_MAX_DIMS)
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, path,
                            "%s has more than %d dimensions", path, SRV_MAX_DIMS);
        if (!cJSON_IsNumber(d) || v != floor(v) || v < 1 || v > INT32_MAX)
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, dim,
                            "%s must be an integer between 1 and %d, found %s%.17g", dim,
                            (int)INT32_MAX, cJSON_IsNumber(d) ? "" : api_json_type(d),
                            cJSON_IsNumber(d) ? v : 0.0);
        shape[n++] = (int64_t)v;
        c = api_mul_sat(c, (size_t)v);
    }
    if (n == 0)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, path, "%s is empty", path);
    if (c > ctx->lim->max_tensor_elements)
        return api_fail(e, ctx, SRV_ERR_PAYLOAD_TOO_LARGE, name,
                        "%s has %zu elements, more than the limit of %zu " SRV_LIMIT_TENSOR, name,
                        c, ctx->lim->max_tensor_elements);
    *ndim = n;
    *count = c;
    return true;
}

bool v2_read_named(const cJSON *o, const char *at, const char *kinds, const char *const *known,
                   size_t n_known, char *path, size_t cap, const char **name, const api_ctx *ctx,
                   api_err *e)
{
    const cJSON *v;
    if (!cJSON_IsObject(o))
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, at, "%s must be an object %s, found %s",
                        at, kinds, api_json_type(o));
    if (!api_check_fields(o, known, n_known, at, at, ctx, e))
        return false;
    snprintf(path, cap, "%s.name", at);
    if ((v = cJSON_GetObjectItemCaseSensitive(o, "name")) == NULL)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, path, "%s is required", path);
    return api_get_string(v, path, ctx, name, e);
}

static bool segment_tensor(const api_tensor_source *src, const cJSON *v, const char *name,
                           const api_ctx *ctx, int want_ndim, srv_elem kind, srv_tensor *out,
                           api_err *e)
{
    const cJSON *seg = cJSON_GetObjectItemCaseSensitive(v, V2_SEGMENT_KEY);
    srv_tensor t;
    char path[64];

    (void)src;
    memset(&t, 0, sizeof t);
    if (!v2_read_shape(cJSON_GetObjectItemCaseSensitive(v, "shape"), name, ctx, &t.ndim, t.shape,
                       &t.count, e))
        return false;
    snprintf(path, sizeof path, "%s.shape", name);
    if (want_ndim > 0 && t.ndim != want_ndim)
        return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, path, "%s has %d dimensions, expected %d",
                        path, t.ndim, want_ndim);
    /* The wire type read_input recorded on the node ("dtype"; FP32 when none). */
    srv_wire wire = SRV_WIRE_F32;
    const char *dt = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(v, "dtype"));
    if (dt != NULL && !srv_wire_from_name(dt, &wire))
        return api_fail(e, ctx, SRV_ERR_INTERNAL, name, "%s: unknown wire type %s", name, dt);
    if ((double)(t.count * (kind == SRV_ELEM_BOOL ? 1 : srv_wire_size(wire))) != seg->valuedouble)
        return api_fail(e, ctx, SRV_ERR_INTERNAL, name, "%s: binary segment size mismatch", name);
    if (kind == SRV_ELEM_BOOL) {
        /* [BIN] BOOL: one byte per element, 0 or 1. */
        const unsigned char *b = (const unsigned char *)seg->valuestring;
        t.data = malloc(t.count * sizeof(float));
        if (t.data == NULL)
            return api_fail(e, ctx, SRV_ERR_INTERNAL, name, "out of memory for %s", name);
        for (size_t i = 0; i < t.count; i++) {
            if (b[i] > 1) {
                char at[80];
                snprintf(at, sizeof at, "%s[%zu]", name, i);
                api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, at,
                         "%s is byte %u at element %zu: a BOOL tensor holds 0 or 1", name,
                         (unsigned)b[i], i);
                srv_tensor_free(&t);
                return false;
            }
            t.data[i] = (float)b[i];
        }
        *out = t;
        return true;
    }
    /* [BIN]: little-endian, row major, no padding. FP16, BF16 and FP64 are
     * converted to float32 once; FP32 is used in place when the floats are
     * aligned (the HTTP layer aligns the binary part). */
    if (wire != SRV_WIRE_F32) {
        const unsigned char *b = (const unsigned char *)seg->valuestring;
        t.data = malloc((t.count ? t.count : 1) * sizeof(float));
        if (t.data == NULL)
            return api_fail(e, ctx, SRV_ERR_INTERNAL, name, "out of memory for %s", name);
        if (wire == SRV_WIRE_F16)
            srv_f16_to_f32_n(b, t.data, t.count);
        else if (wire == SRV_WIRE_BF16)
            srv_bf16_to_f32_n(b, t.data, t.count);
        else {
            for (size_t i = 0; i < t.count; i++) {
                uint64_t u = 0;
                double d;
                for (int k = 7; k >= 0; k--)
                    u = u << 8 | b[8 * i + (size_t)k];
                memcpy(&d, &u, sizeof d);
                if (d == -INFINITY || !srv_double_to_float(d, &t.data[i]))
                    t.data[i] = d == -INFINITY ? -INFINITY : NAN; /* refused below */
                if (isnan(t.data[i]) && !isnan(d)) {
                    char at[80];
                    snprintf(at, sizeof at, "%s[%zu]", name, i);
                    api_fail(e, ctx, SRV_ERR_OUT_OF_RANGE, at,
                             "%s holds %.17g at element %zu, outside float32's finite range", name,
                             d, i);
                    srv_tensor_free(&t);
                    return false;
                }
            }
        }
    } else if (srv_host_little_endian() && (uintptr_t)seg->valuestring % _Alignof(float) == 0) {
        t.data = (float *)(void *)seg->valuestring;
        t.borrowed = true;
    } else {
        t.data = malloc(t.count * sizeof(float));
        if (t.data == NULL)
            return api_fail(e, ctx, SRV_ERR_INTERNAL, name, "out of memory for %s", name);
        memcpy(t.data, seg->valuestring, t.count * sizeof(float));
        if (!srv_host_little_endian())
            srv_swap_bytes32(t.data, t.count);
    }
    for (size_t i = 0; i < t.count; i++) {
        if (kind == SRV_ELEM_FLOAT_NEG_INF && t.data[i] == -INFINITY)
            continue;
        if (!isfinite(t.data[i])) {
            char at[80];
            snprintf(at, sizeof at, "%s[%zu]", name, i);
            api_fail(e, ctx, SRV_ERR_OUT_OF_RANGE, at,
                     "%s holds a non-finite float32 (%s) at element %zu", name,
                     isnan(t.data[i]) ? "NaN" : "infinity", i);
            srv_tensor_free(&t);
            return false;
        }
    }
    *out = t;
    return true;
}

/* The bytes of a segment: the integer readers decode them (INT32, INT64). */
static const unsigned char *segment_bytes(const api_tensor_source *src, const cJSON *v, size_t *len)
{
    const cJSON *seg = cJSON_GetObjectItemCaseSensitive(v, V2_SEGMENT_KEY);
    (void)src;
    *len = (size_t)seg->valuedouble;
    return (const unsigned char *)seg->valuestring;
}

const api_tensor_source v2_segments = {is_segment, segment_tensor, segment_bytes};
