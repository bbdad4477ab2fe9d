/* tensor.c - see tensor.h. Turns the tensors of a request (cJSON trees) into
 * float32 buffers, validating every field once at the boundary (the codec is
 * base64.c). Rendering results back is tensor_render.c.
 */
#include "codec/tensor.h"

#include "codec/float32.h"
#include "codec/half.h"
#include "codec/json_lift.h"

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------- */
/* Parsing                                                                   */
/* ------------------------------------------------------------------------- */

/* Room for a caller's path plus eight "[2147483647]" indices. */
enum { PATH_MAX_LEN = 512 };

static const char *json_type_name(const cJSON *n)
{
    if (cJSON_IsNumber(n))
        return "a number";
    if (cJSON_IsString(n))
        return "a string";
    if (cJSON_IsArray(n))
        return "an array";
    if (cJSON_IsObject(n))
        return "an object";
    if (cJSON_IsBool(n))
        return "a boolean";
    if (cJSON_IsNull(n))
        return "null";
    return "an unknown value";
}

/* Fills *err with code e, the field `path` and the formatted message (which
 * names the path itself). Always returns false. */
static bool fail(srv_reply *err, srv_error e, const char *path, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
static bool fail(srv_reply *err, srv_error e, const char *path, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    srv_reply_error(err, e, path, "%s", msg);
    return false;
}

/* Formats a field path into dst[PATH_MAX_LEN], truncating if it must. */
static void make_path(char *dst, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static void make_path(char *dst, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(dst, PATH_MAX_LEN, fmt, ap);
    va_end(ap);
}

/* base then sub into dst[PATH_MAX_LEN], truncated as make_path would; on
 * every request's path, so without printf. */
static void join_path(char *dst, const char *base, const char *sub)
{
    size_t a = strlen(base), b = strlen(sub);
    if (a > PATH_MAX_LEN - 1)
        a = PATH_MAX_LEN - 1;
    if (b > PATH_MAX_LEN - 1 - a)
        b = PATH_MAX_LEN - 1 - a;
    memcpy(dst, base, a);
    memcpy(dst + a, sub, b);
    dst[a + b] = '\0';
}

/* "base.data[i0][i1]..." for the first `depth` indices. */
static void index_path(char *dst, const char *base, const size_t *idx, int depth)
{
    int o = snprintf(dst, PATH_MAX_LEN, "%s.data", base);
    for (int k = 0; k < depth && o > 0 && o < PATH_MAX_LEN; k++)
        o += snprintf(dst + o, (size_t)(PATH_MAX_LEN - o), "[%zu]", idx[k]);
}

static void shape_string(char *dst, size_t cap, int ndim, const int64_t *shape)
{
    size_t o = 0;
    dst[o++] = '[';
    for (int k = 0; k < ndim && o < cap; k++)
        o += (size_t)snprintf(dst + o, cap - o, k ? ",%lld" : "%lld", (long long)shape[k]);
    if (o + 2 <= cap) {
        dst[o++] = ']';
        dst[o] = '\0';
    } else {
        dst[cap - 1] = '\0';
    }
}

/* What a tensor's elements are (srv_elem) and how they travel: the wire
 * type of its b64 bytes, or the type its JSON numbers are rounded to. */
typedef struct elem_type {
    srv_elem kind;
    srv_wire wire;
} elem_type;

bool srv_wire_from_name(const char *name, srv_wire *out)
{
    static const char *const names[][2] = {
        {"f32", "FP32"}, {"f16", "FP16"}, {"bf16", "BF16"}, {"f64", "FP64"}};
    for (int w = 0; w < 4; w++) {
        if (strcmp(name, names[w][0]) == 0 || strcmp(name, names[w][1]) == 0) {
            *out = (srv_wire)w;
            return true;
        }
    }
    return false;
}

size_t srv_wire_size(srv_wire w)
{
    return w == SRV_WIRE_F16 || w == SRV_WIRE_BF16 ? 2 : w == SRV_WIRE_F64 ? 8 : 4;
}

static const char *wire_name(srv_wire w)
{
    return w == SRV_WIRE_F16    ? "f16"
           : w == SRV_WIRE_BF16 ? "bf16"
           : w == SRV_WIRE_F64  ? "f64"
                                : "float32";
}

/* A JSON number rounded to the wire type, then to float32: false when it
 * falls outside the type's (or float32's) finite range. */
static inline bool number_to_float(double d, srv_wire w, float *out)
{
    uint16_t h;
    if (w == SRV_WIRE_F16) {
        h = srv_f64_to_f16(d);
        if ((h & 0x7c00u) == 0x7c00u)
            return false;
        *out = srv_f16_to_f32(h);
        return true;
    }
    if (w == SRV_WIRE_BF16) {
        h = srv_f64_to_bf16(d);
        if ((h & 0x7f80u) == 0x7f80u)
            return false;
        *out = srv_bf16_to_f32(h);
        return true;
    }
    return srv_double_to_float(d, out);
}

/* One JSON element as a tensor value of the kind asked for. */
static inline bool to_elem(const cJSON *n, elem_type et, float *out)
{
    if (et.kind == SRV_ELEM_BOOL) {
        if (cJSON_IsBool(n)) {
            *out = cJSON_IsTrue(n) ? 1.0f : 0.0f;
            return true;
        }
        if (!cJSON_IsNumber(n) || (n->valuedouble != 0.0 && n->valuedouble != 1.0))
            return false;
        *out = (float)n->valuedouble;
        return true;
    }
    return cJSON_IsNumber(n) && number_to_float(n->valuedouble, et.wire, out);
}

static bool element_error(srv_reply *err, const char *field, const size_t *idx, int depth,
                          const cJSON *n, elem_type et)
{
    char path[PATH_MAX_LEN];
    index_path(path, field, idx, depth);
    if (et.kind == SRV_ELEM_BOOL) {
        if (cJSON_IsNumber(n))
            return fail(err, SRV_ERR_INVALID_ARGUMENT, path,
                        "%s=%.17g: a mask holds true, false, 0 or 1", path, n->valuedouble);
        return fail(err, SRV_ERR_INVALID_ARGUMENT, path,
                    "%s must be true, false, 0 or 1 (a mask), got %s", path, json_type_name(n));
    }
    if (cJSON_IsNumber(n) && et.wire == SRV_WIRE_F16)
        return fail(err, SRV_ERR_OUT_OF_RANGE, path,
                    "%s=%.17g is outside the f16 range (magnitude below 65520)", path,
                    n->valuedouble);
    if (cJSON_IsNumber(n) && et.wire == SRV_WIRE_BF16)
        return fail(err, SRV_ERR_OUT_OF_RANGE, path,
                    "%s=%.17g is outside the bf16 range (magnitude below 3.3961e38)", path,
                    n->valuedouble);
    if (cJSON_IsNumber(n))
        return fail(err, SRV_ERR_OUT_OF_RANGE, path,
                    "%s=%.17g is outside the float32 range (magnitude at most %.9g)", path,
                    n->valuedouble, (double)FLT_MAX);
    return fail(err, SRV_ERR_INVALID_ARGUMENT, path, "%s must be a number, got %s", path,
                json_type_name(n));
}

static bool parse_shape(const cJSON *node, const char *field, int want_ndim, int *ndim,
                        int64_t *shape, srv_reply *err)
{
    char path[PATH_MAX_LEN];
    join_path(path, field, ".shape");
    if (!node)
        return fail(err, SRV_ERR_INVALID_ARGUMENT, path,
                    "%s is missing (an array of 1 to %d positive integers)", path, SRV_MAX_DIMS);
    if (!cJSON_IsArray(node))
        return fail(err, SRV_ERR_INVALID_ARGUMENT, path,
                    "%s must be an array of positive integers, got %s", path, json_type_name(node));
    int n = 0;
    for (const cJSON *c = node->child; c; c = c->next)
        n++;
    if (n < 1 || n > SRV_MAX_DIMS)
        return fail(err, SRV_ERR_INVALID_ARGUMENT, path,
                    "%s has %d dimensions; 1 to %d are allowed", path, n, SRV_MAX_DIMS);
    if (want_ndim > 0 && n != want_ndim)
        return fail(err, SRV_ERR_SHAPE_MISMATCH, path, "%s has %d dimensions, expected %d", path, n,
                    want_ndim);
    int k = 0;
    for (const cJSON *c = node->child; c; c = c->next, k++) {
        double v = cJSON_IsNumber(c) ? c->valuedouble : 0;
        if (cJSON_IsNumber(c) && v == floor(v) && v >= 1 && v <= INT32_MAX) {
            shape[k] = (int64_t)v;
            continue;
        }
        /* The element's path is formatted only for the error. */
        char dim[PATH_MAX_LEN];
        make_path(dim, "%s[%d]", path, k);
        if (!cJSON_IsNumber(c))
            return fail(err, SRV_ERR_INVALID_ARGUMENT, dim, "%s must be a positive integer, got %s",
                        dim, json_type_name(c));
        if (v != floor(v)) /* NaN fails too */
            return fail(err, SRV_ERR_INVALID_ARGUMENT, dim, "%s=%.17g must be an integer", dim, v);
        return fail(err, SRV_ERR_OUT_OF_RANGE, dim, "%s=%.17g must be between 1 and %d", dim, v,
                    INT32_MAX);
    }
    *ndim = n;
    return true;
}

/* Fills dst[count] from the nested arrays under `node` at `level`; idx holds
 * the indices above. The recursion is at most SRV_MAX_DIMS deep. */
static bool fill_nested(const cJSON *node, int level, int ndim, const int64_t *shape, size_t *idx,
                        float **dst, const char *field, elem_type et, srv_reply *err)
{
    char path[PATH_MAX_LEN];
    size_t len = 0;
    for (const cJSON *c = node->child; c; c = c->next)
        len++;
    if (len != (size_t)shape[level]) {
        index_path(path, field, idx, level);
        return fail(err, SRV_ERR_SHAPE_MISMATCH, path, "%s has %zu elements, but shape[%d]=%lld",
                    path, len, level, (long long)shape[level]);
    }
    size_t i = 0;
    for (const cJSON *c = node->child; c; c = c->next, i++) {
        idx[level] = i;
        if (level + 1 < ndim) {
            if (!cJSON_IsArray(c)) {
                index_path(path, field, idx, level + 1);
                return fail(err, SRV_ERR_SHAPE_MISMATCH, path,
                            "%s is %s, but the shape has %d dimensions: expected an array of %lld",
                            path, json_type_name(c), ndim, (long long)shape[level + 1]);
            }
            if (!fill_nested(c, level + 1, ndim, shape, idx, dst, field, et, err))
                return false;
        } else {
            if (cJSON_IsArray(c)) {
                index_path(path, field, idx, level + 1);
                return fail(err, SRV_ERR_SHAPE_MISMATCH, path,
                            "%s is an array, nested deeper than the shape's %d dimensions", path,
                            ndim);
            }
            if (!to_elem(c, et, *dst))
                return element_error(err, field, idx, level + 1, c, et);
            (*dst)++;
        }
    }
    return true;
}

static bool parse_data(const cJSON *data, const srv_lift *lift, const char *field, int ndim,
                       const int64_t *shape, size_t count, elem_type et, float *out, srv_reply *err)
{
    char path[PATH_MAX_LEN];
    join_path(path, field, ".data");
    /* Parsed before cJSON (json_lift.h) but not fitting the shape (or a
     * "data" holding base64): the array's own text goes through the checks
     * below for the usual error. */
    bool failed;
    cJSON *tree = srv_lift_reparse(lift, data, &failed);
    if (failed)
        return fail(err, SRV_ERR_INTERNAL, path, "out of memory parsing %s", path);
    if (tree != NULL) {
        bool ok = parse_data(tree, NULL, field, ndim, shape, count, et, out, err);
        cJSON_Delete(tree);
        return ok;
    }
    if (!cJSON_IsArray(data))
        return fail(err, SRV_ERR_INVALID_ARGUMENT, path, "%s must be an array, got %s", path,
                    json_type_name(data));
    size_t idx[SRV_MAX_DIMS] = {0};
    if (data->child && cJSON_IsArray(data->child) && ndim > 1) {
        float *dst = out;
        return fill_nested(data, 0, ndim, shape, idx, &dst, field, et, err);
    }
    size_t len = 0;
    for (const cJSON *c = data->child; c; c = c->next)
        len++;
    if (len != count)
        return fail(err, SRV_ERR_SHAPE_MISMATCH, path,
                    "%s.shape product %zu does not match data length %zu", field, count, len);
    size_t i = 0;
    for (const cJSON *c = data->child; c; c = c->next, i++) {
        if (!to_elem(c, et, &out[i])) {
            idx[0] = i;
            return element_error(err, field, idx, 1, c, et);
        }
    }
    return true;
}

static bool b64_floats(float *out, size_t count, const char *field, elem_type et, srv_reply *err);
static bool floats_finite(const float *out, size_t count, const char *field, elem_type et,
                          srv_reply *err);
static bool b64_bools(const unsigned char *bytes, size_t count, const char *field, float *out,
                      srv_reply *err);

static bool parse_b64(const cJSON *b64, const srv_lift *lift, const char *field, int ndim,
                      const int64_t *shape, size_t count, elem_type et, float *out, srv_reply *err)
{
    char path[PATH_MAX_LEN];
    char shp[128];
    join_path(path, field, ".b64");
    /* Decoded before cJSON (json_lift.h) but of another size (or a "b64"
     * holding numbers): the usual checks on its own text. */
    bool failed;
    cJSON *tree = srv_lift_reparse(lift, b64, &failed);
    if (failed)
        return fail(err, SRV_ERR_INTERNAL, path, "out of memory parsing %s", path);
    if (tree != NULL) {
        bool ok = parse_b64(tree, NULL, field, ndim, shape, count, et, out, err);
        cJSON_Delete(tree);
        return ok;
    }
    if (!cJSON_IsString(b64) || !b64->valuestring)
        return fail(err, SRV_ERR_INVALID_ARGUMENT, path, "%s must be a base64 string, got %s", path,
                    json_type_name(b64));
    const char *s = b64->valuestring;
    size_t len = strlen(s);
    const bool bytewise = et.kind == SRV_ELEM_BOOL; /* one byte per element */
    const size_t esize = bytewise ? 1 : srv_wire_size(et.wire);
    const char *unit = bytewise ? "one-byte" : wire_name(et.wire);
    size_t bytes = count * esize;
    size_t want = srv_b64_encoded_len(bytes);
    size_t got = 0, bad_at = 0;
    unsigned char *dst = (unsigned char *)out, *tmp = NULL;
    shape_string(shp, sizeof shp, ndim, shape);
    if (len != want) {
        /* Say how many bytes it holds when that is well defined. */
        if (len % 4 == 0 && len > 0) {
            size_t pad = s[len - 1] == '=' ? (s[len - 2] == '=' ? 2 : 1) : 0;
            return fail(err, SRV_ERR_SHAPE_MISMATCH, path,
                        "%s decodes to %zu bytes, but shape %s needs %zu %s = %zu bytes "
                        "(%zu base64 characters, got %zu)",
                        path, len / 4 * 3 - pad, shp, count, unit, bytes, want, len);
        }
        return fail(err, SRV_ERR_SHAPE_MISMATCH, path,
                    "%s has %zu characters, but shape %s needs %zu %s = %zu bytes "
                    "(%zu base64 characters)",
                    path, len, shp, count, unit, bytes, want);
    }
    /* Bytes go to the back of out, then spread forward as floats; other
     * widths through a buffer of their own. */
    if (bytewise)
        dst += count * (sizeof(float) - 1);
    else if (esize != sizeof(float)) {
        if ((tmp = malloc(bytes ? bytes : 1)) == NULL)
            return fail(err, SRV_ERR_INTERNAL, path, "out of memory for %s", path);
        dst = tmp;
    }
    switch (srv_b64_decode_detail(s, len, dst, bytes, &got, &bad_at)) {
    case SRV_B64_FAULT_NONE:
        break;
    case SRV_B64_FAULT_CHAR:
        free(tmp);
        return fail(err, SRV_ERR_INVALID_ARGUMENT, path,
                    "%s is not valid base64: character %zu (0x%02x) is not in the standard "
                    "alphabet or is misplaced padding",
                    path, bad_at, (unsigned)(unsigned char)s[bad_at]);
    case SRV_B64_FAULT_PADDING:
        free(tmp);
        return fail(err, SRV_ERR_INVALID_ARGUMENT, path,
                    "%s is not valid base64: non-zero bits before the padding at character %zu",
                    path, bad_at);
    case SRV_B64_FAULT_LENGTH:
    case SRV_B64_FAULT_TOO_BIG:
        free(tmp);
        return fail(err, SRV_ERR_SHAPE_MISMATCH, path, "%s does not decode to %zu bytes (shape %s)",
                    path, bytes, shp);
    }
    if (got != bytes) {
        free(tmp);
        return fail(err, SRV_ERR_SHAPE_MISMATCH, path,
                    "%s decodes to %zu bytes, but shape %s needs %zu %s = %zu bytes", path, got,
                    shp, count, unit, bytes);
    }
    if (bytewise)
        return b64_bools(dst, count, field, out, err);
    if (tmp != NULL) {
        /* To float32 once; then the finiteness check every tensor has. */
        if (et.wire == SRV_WIRE_F16) {
            srv_f16_to_f32_n(tmp, out, count);
        } else if (et.wire == SRV_WIRE_BF16) {
            srv_bf16_to_f32_n(tmp, out, count);
        } else {
            for (size_t i = 0; i < count; i++) {
                uint64_t u = 0;
                double d;
                for (int k = 7; k >= 0; k--)
                    u = u << 8 | tmp[8 * i + (size_t)k]; /* little-endian */
                memcpy(&d, &u, sizeof d);
                if (!srv_double_to_float(d, &out[i]) &&
                    !(et.kind == SRV_ELEM_FLOAT_NEG_INF && d == -INFINITY)) {
                    char at[PATH_MAX_LEN];
                    free(tmp);
                    make_path(at, "%s[%zu]", path, i);
                    return fail(err, SRV_ERR_OUT_OF_RANGE, at,
                                "%s holds %.17g at element %zu, outside float32's finite range",
                                path, d, i);
                }
                if (d == -INFINITY)
                    out[i] = -INFINITY;
            }
        }
        free(tmp);
        return floats_finite(out, count, field, et, err);
    }
    return b64_floats(out, count, field, et, err);
}

/* Decoded one-byte booleans (at the back of out, which holds count floats)
 * to floats 0 and 1, front to back: float i ends at byte 4i + 3, before
 * byte i of the booleans, 3 * count + i, is read. */
static bool b64_bools(const unsigned char *bytes, size_t count, const char *field, float *out,
                      srv_reply *err)
{
    for (size_t i = 0; i < count; i++) {
        const unsigned char b = bytes[i];
        if (b > 1) {
            char path[PATH_MAX_LEN], at[PATH_MAX_LEN];
            join_path(path, field, ".b64");
            make_path(at, "%s[%zu]", path, i);
            return fail(err, SRV_ERR_INVALID_ARGUMENT, at,
                        "%s is byte %u at element %zu: a mask holds 0 or 1", path, (unsigned)b, i);
        }
        out[i] = (float)b;
    }
    return true;
}

/* Decoded base64 bytes to floats: byte order, then every value finite (or
 * -inf, for SRV_ELEM_FLOAT_NEG_INF). field is the tensor's path (errors
 * name field.b64[i]). */
static bool b64_floats(float *out, size_t count, const char *field, elem_type et, srv_reply *err)
{
    if (!srv_host_little_endian())
        srv_swap_bytes32(out, count);
    return floats_finite(out, count, field, et, err);
}

/* Every value finite (or -inf, for SRV_ELEM_FLOAT_NEG_INF); else the error
 * names the first that is not (field.b64[i]). */
static bool floats_finite(const float *out, size_t count, const char *field, elem_type et,
                          srv_reply *err)
{
    if (srv_floats_finite(out, count))
        return true;
    for (size_t i = 0; i < count; i++) { /* where, for the message */
        if (et.kind == SRV_ELEM_FLOAT_NEG_INF && out[i] == -INFINITY)
            continue;
        if (!isfinite(out[i])) {
            char path[PATH_MAX_LEN], at[PATH_MAX_LEN];
            join_path(path, field, ".b64");
            make_path(at, "%s[%zu]", path, i);
            return fail(err, SRV_ERR_OUT_OF_RANGE, at,
                        "%s holds a non-finite float32 (%s) at element %zu%s", path,
                        isnan(out[i]) ? "NaN" : "infinity", i,
                        et.kind == SRV_ELEM_FLOAT_NEG_INF ? " (only -infinity is allowed here)"
                                                          : "");
        }
    }
    return true;
}

bool srv_tensor_parse(const cJSON *node, const char *field, int want_ndim, size_t max_elements,
                      srv_tensor *out, srv_reply *err)
{
    return srv_tensor_parse_as(node, field, want_ndim, max_elements, SRV_ELEM_FLOAT, NULL, out,
                               err);
}

/* Past k more commas from p (at most end): in a lifted array of numbers
 * the commas are exactly the separators between them, rows' "],[" included,
 * so number j follows the j-th. Counted eight bytes at a time: x has a zero
 * byte where w has a comma, and t the top bit of each such byte (exactly:
 * no carry crosses bytes). */
static const char *skip_commas(const char *p, const char *end, size_t k)
{
    const uint64_t low7 = 0x7F7F7F7F7F7F7F7Full;
    while (k > 0 && end - p >= 8) {
        uint64_t w, x, t;
        memcpy(&w, p, sizeof w);
        x = w ^ 0x2C2C2C2C2C2C2C2Cull;
        t = ~(((x & low7) + low7) | x | low7);
        /* t's bits are byte tops: their count, summed by a multiply (a
         * popcount is a libgcc call without -mpopcnt). */
        const size_t c = (size_t)(((t >> 7) * 0x0101010101010101ull) >> 56);
        if (c >= k)
            break; /* the k-th is in these eight: byte by byte */
        k -= c;
        p += 8;
    }
    for (; k > 0 && p < end; p++)
        k -= *p == ',';
    return p;
}

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* Lifted numbers (float32, rounded once from their text) to f16 or bf16
 * in place. Rounding on through float32 gives the text's own rounding
 * unless the float32 lands exactly on a tie (srv_f32_is_tie: a float32 of
 * 1/65536 bf16 patterns); srv_f32_round_through_half rounds the others
 * and leaves those few, read again from the array's text, found by
 * counting the commas before them. False when a value leaves the type's
 * range: the caller parses the text then, for the message. */
static bool lifted_to_half(float *buf, size_t count, srv_wire w, const srv_lifted *lf)
{
    int bf16 = w == SRV_WIRE_BF16;
    size_t ties = srv_f32_round_through_half(buf, count, bf16);
    if (ties == SIZE_MAX)
        return false;
    if (ties == 0)
        return true;
    if (lf == NULL)
        return false;
    /* The ties again from their text, found by counting commas: p is before
     * the comma that precedes number at + 1 (before number 0 at first). */
    const char *p = lf->text, *end = lf->text + lf->text_len;
    size_t at = 0;
    for (size_t i = 0; i < count && ties > 0; i++) {
        char num[64], *stop;
        size_t len = 0;
        if (!srv_f32_is_tie(buf[i], bf16))
            continue;
        p = skip_commas(p, end, i - at);
        at = i;
        while (p < end && (*p == '[' || is_space(*p)))
            p++;
        while (p + len < end && p[len] != ',' && p[len] != ']' && !is_space(p[len]))
            len++;
        if (len == 0 || len >= sizeof num) /* not a number this scan understands */
            return false;
        memcpy(num, p, len);
        num[len] = '\0';
        if (!number_to_float(strtod(num, &stop), w, &buf[i]) || *stop != '\0')
            return false;
        ties--;
        p += len;
    }
    return ties == 0;
}

/* A lifted base64 of count 16-bit values (f16 or bf16, little-endian),
 * widened to floats (malloc'd; not yet checked finite). NULL when b64 was
 * not lifted whole at that size (count odd, or not base64 the lift
 * understood): parse_b64 then decodes its text and says what is wrong.
 * The text would have been copied by cJSON byte by byte and decoded once
 * more: 2.5 ms of the 3.6 a 1024 x 8 x 64 bf16 q, k and v took. */
static float *lifted_half_b64(const srv_lift *lift, const cJSON *b64, size_t count, srv_wire w)
{
    void *bytes = count <= SIZE_MAX / 2 ? srv_lift_take_bytes(lift, b64, 2 * count) : NULL;
    float *f = bytes != NULL ? malloc((count ? count : 1) * sizeof *f) : NULL;
    if (f != NULL) {
        if (w == SRV_WIRE_F16)
            srv_f16_to_f32_n(bytes, f, count);
        else
            srv_bf16_to_f32_n(bytes, f, count);
    }
    free(bytes);
    return f;
}

bool srv_tensor_parse_as(const cJSON *node, const char *field, int want_ndim, size_t max_elements,
                         srv_elem kind, const srv_lift *lift, srv_tensor *out, srv_reply *err)
{
    char path[PATH_MAX_LEN];
    elem_type et = {kind, SRV_WIRE_F32};
    if (!field)
        field = "";
    if (!node)
        return fail(err, SRV_ERR_INVALID_ARGUMENT, field,
                    "%s is missing (expected {\"shape\":[...], \"data\":[...]} or "
                    "{\"shape\":[...], \"b64\":\"...\"})",
                    field);
    if (!cJSON_IsObject(node))
        return fail(err, SRV_ERR_INVALID_ARGUMENT, field,
                    "%s must be a tensor object {\"shape\":[...], \"data\":[...]}, got %s", field,
                    json_type_name(node));

    const cJSON *shape_node = NULL, *data = NULL, *b64 = NULL, *datatype = NULL, *dtype = NULL;
    for (const cJSON *c = node->child; c; c = c->next) {
        const cJSON **slot = NULL;
        const char *key = c->string ? c->string : "";
        if (strcmp(key, "shape") == 0)
            slot = &shape_node;
        else if (strcmp(key, "data") == 0)
            slot = &data;
        else if (strcmp(key, "b64") == 0)
            slot = &b64;
        else if (strcmp(key, "datatype") == 0)
            slot = &datatype;
        else if (strcmp(key, "dtype") == 0)
            slot = &dtype;
        if (!slot) {
            make_path(path, "%s.%.64s", field, key);
            return fail(err, SRV_ERR_UNKNOWN_FIELD, path,
                        "%s is not a tensor field (shape, data, b64, dtype, datatype)", path);
        }
        if (*slot) {
            make_path(path, "%s.%s", field, key);
            return fail(err, SRV_ERR_INVALID_ARGUMENT, path, "%s appears more than once", path);
        }
        *slot = c;
    }

    for (int k = 0; k < 2; k++) { /* the wire type: datatype, then dtype */
        const cJSON *t = k == 0 ? datatype : dtype;
        srv_wire w;
        if (t == NULL)
            continue;
        join_path(path, field, k == 0 ? ".datatype" : ".dtype");
        if (!cJSON_IsString(t))
            return fail(err, SRV_ERR_INVALID_ARGUMENT, path, "%s must be a string, got %s", path,
                        json_type_name(t));
        if (kind == SRV_ELEM_BOOL) {
            if (strcmp(t->valuestring, "BOOL") != 0 && strcmp(t->valuestring, "bool") != 0)
                return fail(err, SRV_ERR_UNSUPPORTED, path,
                            "%s \"%.32s\" is not supported; a mask is \"BOOL\"", path,
                            t->valuestring);
            continue;
        }
        if (!srv_wire_from_name(t->valuestring, &w))
            return fail(err, SRV_ERR_UNSUPPORTED, path,
                        "%s \"%.32s\" is not supported: \"f32\", \"f16\", \"bf16\" or \"f64\" "
                        "(FP32, FP16, BF16, FP64)",
                        path, t->valuestring);
        if (k == 1 && datatype != NULL && w != et.wire)
            return fail(err, SRV_ERR_INVALID_ARGUMENT, path,
                        "%s \"%.32s\" disagrees with %s.datatype \"%.32s\"", path, t->valuestring,
                        field, datatype->valuestring);
        et.wire = w;
    }

    int ndim = 0;
    int64_t shape[SRV_MAX_DIMS] = {0};
    if (!parse_shape(shape_node, field, want_ndim, &ndim, shape, err))
        return false;

    size_t count = 1;
    char shp[128]; /* for the errors only */
    for (int k = 0; k < ndim; k++) {
        if ((uint64_t)shape[k] > SIZE_MAX / count) {
            shape_string(shp, sizeof shp, ndim, shape);
            join_path(path, field, ".shape");
            return fail(
                err, SRV_ERR_PAYLOAD_TOO_LARGE, path,
                "%s %s has more elements than can be addressed (the limit is %zu " SRV_LIMIT_TENSOR
                ")",
                path, shp, max_elements);
        }
        count *= (size_t)shape[k];
    }
    if (count > max_elements || count > SIZE_MAX / sizeof(float)) {
        shape_string(shp, sizeof shp, ndim, shape);
        return fail(err, SRV_ERR_PAYLOAD_TOO_LARGE, field,
                    "%s has %zu elements (shape %s), more than the limit of %zu " SRV_LIMIT_TENSOR,
                    field, count, shp, max_elements);
    }

    if (data && b64) {
        return fail(err, SRV_ERR_INVALID_ARGUMENT, field,
                    "%s has both data and b64; send exactly one", field);
    }
    if (!data && !b64)
        return fail(err, SRV_ERR_INVALID_ARGUMENT, field,
                    kind == SRV_ELEM_BOOL
                        ? "%s needs data (true/false or 0/1) or b64 (base64 of one byte, 0 or 1, "
                          "per element)"
                        : "%s needs data (numbers) or b64 (base64 of little-endian float32)",
                    field);

    /* Parsed before cJSON and fitting: the floats are taken, not copied.
     * Never a lifted base64 for a mask (its bytes are not float32), and
     * lifted numbers of a mask only when each is 0 or 1 (else its text goes
     * through the checks below, for the message). */
    bool narrow = et.wire == SRV_WIRE_F16 || et.wire == SRV_WIRE_BF16;
    const srv_lifted *lf = narrow && data ? srv_lift_find(lift, data) : NULL; /* before the take */
    float *buf;
    if (narrow && b64 != NULL && kind != SRV_ELEM_BOOL)
        buf = lifted_half_b64(lift, b64, count, et.wire); /* exact: nothing to round */
    else if ((kind == SRV_ELEM_BOOL && b64 != NULL) ||
             (et.wire != SRV_WIRE_F32 && !(narrow && data)))
        buf = NULL; /* base64 of another width, or f64 numbers (read as doubles) */
    else
        buf = srv_lift_take(lift, data ? data : b64, b64 != NULL, ndim, shape, count);
    if (buf != NULL && narrow && data != NULL && !lifted_to_half(buf, count, et.wire, lf)) {
        free(buf); /* a tie or out of range: the text path decides, and says why */
        buf = NULL;
    }
    bool ok;
    if (buf != NULL && kind == SRV_ELEM_BOOL) {
        for (size_t i = 0; i < count; i++) {
            if (buf[i] != 0.0f && buf[i] != 1.0f) {
                free(buf);
                buf = NULL;
                break;
            }
        }
    }
    if (buf != NULL) {
        /* Lifted float32 base64 on a little-endian host is already checked
         * finite, block by block as it was decoded (json_lift.h); 16-bit
         * values are checked once widened, as parse_b64 checks them. */
        ok = data != NULL ? true
             : narrow     ? floats_finite(buf, count, field, et, err)
                          : srv_host_little_endian() || b64_floats(buf, count, field, et, err);
    } else {
        buf = malloc(count * sizeof(float));
        if (!buf)
            return fail(err, SRV_ERR_INTERNAL, field, "out of memory for %s (%zu bytes)", field,
                        count * sizeof(float));
        ok = data ? parse_data(data, lift, field, ndim, shape, count, et, buf, err)
                  : parse_b64(b64, lift, field, ndim, shape, count, et, buf, err);
    }
    if (!ok) {
        free(buf);
        return false;
    }
    out->ndim = ndim;
    memcpy(out->shape, shape, sizeof shape);
    out->count = count;
    out->data = buf;
    out->bits16 = NULL; /* a request's own floats: nothing lent */
    out->bits16_type = 0;
    return true;
}

void srv_tensor_free(srv_tensor *t)
{
    if (!t)
        return;
    if (!t->borrowed)
        free(t->data);
    t->data = NULL;
    t->count = 0;
    t->borrowed = false;
}
