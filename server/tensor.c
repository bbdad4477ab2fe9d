/* tensor.c - see tensor.h. Turns the tensors of a request (cJSON trees) into
 * float32 buffers, validating every field once at the boundary, and renders
 * result tensors back as JSON or base64. Base64 lives here because it exists
 * only to carry float32 tensors.
 */
#include "tensor.h"

#include "json_lift.h"

#include "fmt_float.h"

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------- */
/* Base64 (RFC 4648 section 4, standard alphabet, padded, no line breaks)    */
/* ------------------------------------------------------------------------- */

static const char b64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

#define BAD 0xFF
/* Character -> 6-bit value; BAD (high bit set) for anything else, '=' too. */
/* clang-format off */
static const unsigned char b64_value[256] = {
    BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD,
    BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD,
    BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, 62,  BAD, BAD, BAD, 63,
    52,  53,  54,  55,  56,  57,  58,  59,  60,  61,  BAD, BAD, BAD, BAD, BAD, BAD,
    BAD, 0,   1,   2,   3,   4,   5,   6,   7,   8,   9,   10,  11,  12,  13,  14,
    15,  16,  17,  18,  19,  20,  21,  22,  23,  24,  25,  BAD, BAD, BAD, BAD, BAD,
    BAD, 26,  27,  28,  29,  30,  31,  32,  33,  34,  35,  36,  37,  38,  39,  40,
    41,  42,  43,  44,  45,  46,  47,  48,  49,  50,  51,  BAD, BAD, BAD, BAD, BAD,
    BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD,
    BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD,
    BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD,
    BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD,
    BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD,
    BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD,
    BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD,
    BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD,
};
/* clang-format on */

typedef enum b64_fault {
    B64_OK = 0,
    B64_BAD_LENGTH,  /* not a multiple of 4 */
    B64_BAD_CHAR,    /* outside the alphabet, or '=' before the end */
    B64_BAD_PADDING, /* non-zero bits under the padding */
    B64_TOO_BIG,     /* more bytes than dst_cap */
} b64_fault;

size_t srv_b64_encoded_len(size_t n)
{
    return (n + 2) / 3 * 4;
}

void srv_b64_encode(const unsigned char *src, size_t n, char *dst)
{
    const unsigned char *s = src;
    char *d = dst;
    size_t full = n / 3;
    for (size_t i = 0; i < full; i++) {
        uint32_t x = (uint32_t)s[0] << 16 | (uint32_t)s[1] << 8 | s[2];
        d[0] = b64_alphabet[x >> 18];
        d[1] = b64_alphabet[(x >> 12) & 63];
        d[2] = b64_alphabet[(x >> 6) & 63];
        d[3] = b64_alphabet[x & 63];
        s += 3;
        d += 4;
    }
    size_t rest = n - full * 3;
    if (rest) {
        uint32_t x = (uint32_t)s[0] << 16 | (rest == 2 ? (uint32_t)s[1] << 8 : 0);
        d[0] = b64_alphabet[x >> 18];
        d[1] = b64_alphabet[(x >> 12) & 63];
        d[2] = rest == 2 ? b64_alphabet[(x >> 6) & 63] : '=';
        d[3] = '=';
        d += 4;
    }
    *d = '\0';
}

/* Offset of the first character that is not in the alphabet, or len. */
static size_t b64_first_bad(const char *src, size_t len)
{
    size_t i = 0;
    while (i < len && b64_value[(unsigned char)src[i]] != BAD)
        i++;
    return i;
}

/* The decoder. *bad_at gets the offset of the offending character for
 * B64_BAD_CHAR and B64_BAD_PADDING. */
static b64_fault b64_decode(const char *src, size_t len, unsigned char *dst, size_t dst_cap,
                            size_t *out_len, size_t *bad_at)
{
    *bad_at = 0;
    if (len % 4 != 0)
        return B64_BAD_LENGTH;
    if (len == 0) {
        *out_len = 0;
        return B64_OK;
    }
    size_t pad = src[len - 1] == '=' ? (src[len - 2] == '=' ? 2 : 1) : 0;
    size_t n = len / 4 * 3 - pad;
    if (n > dst_cap)
        return B64_TOO_BIG;

    /* Every quad but the last, branch-free: invalid characters have the high
     * bit set, which is collected in `bad` and checked once at the end (the
     * input is then rescanned to say where). */
    const unsigned char *s = (const unsigned char *)src;
    unsigned char *d = dst;
    size_t quads = len / 4 - 1;
    uint32_t bad = 0;
    for (size_t i = 0; i < quads; i++) {
        uint32_t a = b64_value[s[0]], b = b64_value[s[1]], c = b64_value[s[2]], e = b64_value[s[3]];
        bad |= a | b | c | e;
        uint32_t x = a << 18 | b << 12 | c << 6 | e;
        d[0] = (unsigned char)(x >> 16);
        d[1] = (unsigned char)(x >> 8);
        d[2] = (unsigned char)x;
        s += 4;
        d += 3;
    }
    if (bad & 0x80) {
        *bad_at = b64_first_bad(src, len);
        return B64_BAD_CHAR;
    }

    /* The last quad: 4 - pad significant characters. */
    uint32_t v[4] = {0, 0, 0, 0};
    for (size_t k = 0; k < 4 - pad; k++) {
        v[k] = b64_value[s[k]];
        if (v[k] == BAD) {
            *bad_at = (size_t)((const char *)s - src) + k;
            return B64_BAD_CHAR;
        }
    }
    uint32_t x = v[0] << 18 | v[1] << 12 | v[2] << 6 | v[3];
    /* RFC 4648 3.5: the bits under the padding must be zero, so that every
     * byte string has exactly one encoding. */
    if ((pad == 1 && (x & 0xFF)) || (pad == 2 && (x & 0xFFFF))) {
        *bad_at = len - pad - 1;
        return B64_BAD_PADDING;
    }
    d[0] = (unsigned char)(x >> 16);
    if (pad < 2)
        d[1] = (unsigned char)(x >> 8);
    if (pad < 1)
        d[2] = (unsigned char)x;
    *out_len = n;
    return B64_OK;
}

bool srv_b64_decode(const char *src, size_t len, unsigned char *dst, size_t dst_cap,
                    size_t *out_len)
{
    size_t bad_at, n = 0;
    if (b64_decode(src, len, dst, dst_cap, &n, &bad_at) != B64_OK)
        return false;
    *out_len = n;
    return true;
}

/* ------------------------------------------------------------------------- */
/* Parsing                                                                   */
/* ------------------------------------------------------------------------- */

/* Values this close to FLT_MAX still round to FLT_MAX (half an ulp above it);
 * from here on they would round to infinity. */
#define FLOAT_ROUND_LIMIT 0x1.ffffffp127

/* Room for a caller's path plus eight "[2147483647]" indices. */
enum { PATH_MAX_LEN = 512 };

bool srv_host_little_endian(void)
{
    const uint32_t one = 1;
    unsigned char b;
    memcpy(&b, &one, 1);
    return b == 1;
}

void srv_swap_bytes32(void *p, size_t count)
{
    unsigned char *b = p;
    for (size_t i = 0; i < count; i++, b += 4) {
        unsigned char t0 = b[0], t1 = b[1];
        b[0] = b[3];
        b[1] = b[2];
        b[2] = t1;
        b[3] = t0;
    }
}

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

static void join_path(char *dst, const char *base, const char *sub)
{
    make_path(dst, "%s%s", base, sub);
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

/* Converts one JSON number to float32: false when it is not a number or is
 * outside float range. */
bool srv_double_to_float(double v, float *out)
{
    if (!(fabs(v) < FLOAT_ROUND_LIMIT)) /* catches NaN and inf too */
        return false;
    /* Between FLT_MAX and the limit the conversion is out of range in C's
     * eyes, although IEEE rounds it to FLT_MAX; do that explicitly. */
    *out = fabs(v) > FLT_MAX ? (v > 0 ? FLT_MAX : -FLT_MAX) : (float)v;
    return true;
}

static inline bool to_float(const cJSON *n, float *out)
{
    return cJSON_IsNumber(n) && srv_double_to_float(n->valuedouble, out);
}

static bool element_error(srv_reply *err, const char *field, const size_t *idx, int depth,
                          const cJSON *n)
{
    char path[PATH_MAX_LEN];
    index_path(path, field, idx, depth);
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
                        float **dst, const char *field, srv_reply *err)
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
            if (!fill_nested(c, level + 1, ndim, shape, idx, dst, field, err))
                return false;
        } else {
            if (cJSON_IsArray(c)) {
                index_path(path, field, idx, level + 1);
                return fail(err, SRV_ERR_SHAPE_MISMATCH, path,
                            "%s is an array, nested deeper than the shape's %d dimensions", path,
                            ndim);
            }
            if (!to_float(c, *dst))
                return element_error(err, field, idx, level + 1, c);
            (*dst)++;
        }
    }
    return true;
}

static bool parse_data(const cJSON *data, const char *field, int ndim, const int64_t *shape,
                       size_t count, float *out, srv_reply *err)
{
    char path[PATH_MAX_LEN];
    join_path(path, field, ".data");
    const srv_lifted *lf = srv_lift_find(data);
    if (lf != NULL) {
        /* Parsed before cJSON (json_lift.h) but not fitting the shape (or
         * a "data" holding base64): the array's own text goes through the
         * checks below for the usual error. */
        cJSON *tree = cJSON_ParseWithLength(lf->text, lf->text_len);
        if (tree == NULL)
            return fail(err, SRV_ERR_INTERNAL, path, "out of memory parsing %s", path);
        bool ok = parse_data(tree, field, ndim, shape, count, out, err);
        cJSON_Delete(tree);
        return ok;
    }
    if (!cJSON_IsArray(data))
        return fail(err, SRV_ERR_INVALID_ARGUMENT, path, "%s must be an array, got %s", path,
                    json_type_name(data));
    size_t idx[SRV_MAX_DIMS] = {0};
    if (data->child && cJSON_IsArray(data->child) && ndim > 1) {
        float *dst = out;
        return fill_nested(data, 0, ndim, shape, idx, &dst, field, err);
    }
    size_t len = 0;
    for (const cJSON *c = data->child; c; c = c->next)
        len++;
    if (len != count)
        return fail(err, SRV_ERR_SHAPE_MISMATCH, path,
                    "%s.shape product %zu does not match data length %zu", field, count, len);
    size_t i = 0;
    for (const cJSON *c = data->child; c; c = c->next, i++) {
        if (!to_float(c, &out[i])) {
            idx[0] = i;
            return element_error(err, field, idx, 1, c);
        }
    }
    return true;
}

static bool b64_floats(float *out, size_t count, const char *field, srv_reply *err);

static bool parse_b64(const cJSON *b64, const char *field, int ndim, const int64_t *shape,
                      size_t count, float *out, srv_reply *err)
{
    char path[PATH_MAX_LEN];
    char shp[128];
    join_path(path, field, ".b64");
    const srv_lifted *lf = srv_lift_find(b64);
    if (lf != NULL) {
        /* Decoded before cJSON (json_lift.h) but of another size (or a
         * "b64" holding numbers): the usual checks on its own text. */
        cJSON *tree = cJSON_ParseWithLength(lf->text, lf->text_len);
        if (tree == NULL)
            return fail(err, SRV_ERR_INTERNAL, path, "out of memory parsing %s", path);
        bool ok = parse_b64(tree, field, ndim, shape, count, out, err);
        cJSON_Delete(tree);
        return ok;
    }
    if (!cJSON_IsString(b64) || !b64->valuestring)
        return fail(err, SRV_ERR_INVALID_ARGUMENT, path, "%s must be a base64 string, got %s", path,
                    json_type_name(b64));
    const char *s = b64->valuestring;
    size_t len = strlen(s);
    size_t bytes = count * sizeof(float);
    size_t want = srv_b64_encoded_len(bytes);
    size_t got = 0, bad_at = 0;
    shape_string(shp, sizeof shp, ndim, shape);
    if (len != want) {
        /* Say how many bytes it holds when that is well defined. */
        if (len % 4 == 0 && len > 0) {
            size_t pad = s[len - 1] == '=' ? (s[len - 2] == '=' ? 2 : 1) : 0;
            return fail(err, SRV_ERR_SHAPE_MISMATCH, path,
                        "%s decodes to %zu bytes, but shape %s needs %zu float32 = %zu bytes "
                        "(%zu base64 characters, got %zu)",
                        path, len / 4 * 3 - pad, shp, count, bytes, want, len);
        }
        return fail(err, SRV_ERR_SHAPE_MISMATCH, path,
                    "%s has %zu characters, but shape %s needs %zu float32 = %zu bytes "
                    "(%zu base64 characters)",
                    path, len, shp, count, bytes, want);
    }
    switch (b64_decode(s, len, (unsigned char *)out, bytes, &got, &bad_at)) {
    case B64_OK:
        break;
    case B64_BAD_CHAR:
        return fail(err, SRV_ERR_INVALID_ARGUMENT, path,
                    "%s is not valid base64: character %zu (0x%02x) is not in the standard "
                    "alphabet or is misplaced padding",
                    path, bad_at, (unsigned)(unsigned char)s[bad_at]);
    case B64_BAD_PADDING:
        return fail(err, SRV_ERR_INVALID_ARGUMENT, path,
                    "%s is not valid base64: non-zero bits before the padding at character %zu",
                    path, bad_at);
    case B64_BAD_LENGTH:
    case B64_TOO_BIG:
        return fail(err, SRV_ERR_SHAPE_MISMATCH, path, "%s does not decode to %zu bytes (shape %s)",
                    path, bytes, shp);
    }
    if (got != bytes)
        return fail(err, SRV_ERR_SHAPE_MISMATCH, path,
                    "%s decodes to %zu bytes, but shape %s needs %zu float32 = %zu bytes", path,
                    got, shp, count, bytes);
    return b64_floats(out, count, field, err);
}

/* Decoded base64 bytes to floats: byte order, then every value finite.
 * field is the tensor's path (errors name field.b64[i]). */
static bool b64_floats(float *out, size_t count, const char *field, srv_reply *err)
{
    uint32_t all = 0;
    if (!srv_host_little_endian())
        srv_swap_bytes32(out, count);
    /* Exponent bits all ones is inf or NaN: one vectorizable pass finds
     * whether any value has them, the slow loop below only says where. */
    for (size_t i = 0; i < count; i++) {
        uint32_t bits;
        memcpy(&bits, &out[i], sizeof bits);
        all |= (uint32_t)((bits & 0x7f800000u) == 0x7f800000u);
    }
    for (size_t i = 0; all && i < count; i++) {
        if (!isfinite(out[i])) {
            char path[PATH_MAX_LEN], at[PATH_MAX_LEN];
            join_path(path, field, ".b64");
            make_path(at, "%s[%zu]", path, i);
            return fail(err, SRV_ERR_OUT_OF_RANGE, at,
                        "%s holds a non-finite float32 (%s) at element %zu", path,
                        isnan(out[i]) ? "NaN" : "infinity", i);
        }
    }
    return true;
}

bool srv_tensor_parse(const cJSON *node, const char *field, int want_ndim, size_t max_elements,
                      srv_tensor *out, srv_reply *err)
{
    char path[PATH_MAX_LEN];
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

    const cJSON *shape_node = NULL, *data = NULL, *b64 = NULL, *datatype = NULL;
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
        if (!slot) {
            make_path(path, "%s.%.64s", field, key);
            return fail(err, SRV_ERR_UNKNOWN_FIELD, path,
                        "%s is not a tensor field (shape, data, b64, datatype)", path);
        }
        if (*slot) {
            make_path(path, "%s.%s", field, key);
            return fail(err, SRV_ERR_INVALID_ARGUMENT, path, "%s appears more than once", path);
        }
        *slot = c;
    }

    if (datatype) {
        join_path(path, field, ".datatype");
        if (!cJSON_IsString(datatype))
            return fail(err, SRV_ERR_INVALID_ARGUMENT, path, "%s must be a string, got %s", path,
                        json_type_name(datatype));
        if (strcmp(datatype->valuestring, "FP32") != 0)
            return fail(err, SRV_ERR_UNSUPPORTED, path,
                        "%s \"%.32s\" is not supported; only \"FP32\" is", path,
                        datatype->valuestring);
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
            return fail(err, SRV_ERR_PAYLOAD_TOO_LARGE, path,
                        "%s %s has more elements than can be addressed (limit %zu)", path, shp,
                        max_elements);
        }
        count *= (size_t)shape[k];
    }
    if (count > max_elements || count > SIZE_MAX / sizeof(float)) {
        shape_string(shp, sizeof shp, ndim, shape);
        return fail(err, SRV_ERR_PAYLOAD_TOO_LARGE, field,
                    "%s has %zu elements (shape %s), more than the limit of %zu", field, count, shp,
                    max_elements);
    }

    if (data && b64) {
        return fail(err, SRV_ERR_INVALID_ARGUMENT, field,
                    "%s has both data and b64; send exactly one", field);
    }
    if (!data && !b64)
        return fail(err, SRV_ERR_INVALID_ARGUMENT, field,
                    "%s needs data (numbers) or b64 (base64 of little-endian float32)", field);

    /* Parsed before cJSON and fitting: the floats are taken, not copied. */
    float *buf = srv_lift_take(data ? data : b64, b64 != NULL, ndim, shape, count);
    bool ok;
    if (buf != NULL) {
        ok = data != NULL || b64_floats(buf, count, field, err);
    } else {
        buf = malloc(count * sizeof(float));
        if (!buf)
            return fail(err, SRV_ERR_INTERNAL, field, "out of memory for %s (%zu bytes)", field,
                        count * sizeof(float));
        ok = data ? parse_data(data, field, ndim, shape, count, buf, err)
                  : parse_b64(b64, field, ndim, shape, count, buf, err);
    }
    if (!ok) {
        free(buf);
        return false;
    }
    out->ndim = ndim;
    memcpy(out->shape, shape, sizeof shape);
    out->count = count;
    out->data = buf;
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

bool srv_tensor_render(cJSON *parent, const char *name, const float *data, int ndim,
                       const int64_t *shape, srv_encoding enc)
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
    if (!cJSON_AddStringToObject(obj, "datatype", "FP32"))
        goto fail;
    cJSON *values =
        enc == SRV_ENCODING_B64 ? render_b64_string(data, count) : render_json_array(data, count);
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
