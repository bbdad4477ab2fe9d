/* tensor_file.c - see tensor_file.h. Header parsers for safetensors and
 * .npy, and the float16/bfloat16/float64 conversions. Everything read from
 * the buffer is bounds-checked: the fuzzer (tests/fuzz/fuzz_safetensors.c)
 * drives srv_safetensors_parse with arbitrary bytes.
 */
#include "store/tensor_file.h"

#include "codec/float32.h"
#include "codec/half.h"

#include <cjson/cJSON.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* safetensors' own reader refuses headers above 100 MB. */
#define ST_HEADER_MAX ((uint64_t)100 << 20)

const char *srv_dtype_name(srv_dtype d)
{
    switch (d) {
    case SRV_DTYPE_F32:
        return "F32";
    case SRV_DTYPE_F16:
        return "F16";
    case SRV_DTYPE_BF16:
        return "BF16";
    case SRV_DTYPE_F64:
        return "F64";
    case SRV_DTYPE_OTHER:
        break;
    }
    return "?";
}

size_t srv_dtype_size(srv_dtype d)
{
    return d == SRV_DTYPE_F64 ? 8 : d == SRV_DTYPE_F32 ? 4 : d == SRV_DTYPE_OTHER ? 0 : 2;
}

static bool fail(char *err, size_t cap, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static bool fail(char *err, size_t cap, const char *fmt, ...)
{
    va_list ap;
    if (err != NULL && cap > 0) {
        va_start(ap, fmt);
        vsnprintf(err, cap, fmt, ap);
        va_end(ap);
    }
    return false;
}

static uint64_t rd_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static void shape_str(char *buf, size_t cap, int ndim, const int64_t *shape)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int d = 0; d < ndim && used < cap; d++) {
        int w = snprintf(buf + used, cap - used, "%s%lld", d ? ", " : "", (long long)shape[d]);
        if (w < 0)
            break;
        used += (size_t)w;
    }
}

/* count = product(shape) and nbytes = count * size, false on overflow. */
static bool shape_bytes(int ndim, const int64_t *shape, size_t size, size_t *count, size_t *nbytes)
{
    size_t c = 1;
    for (int d = 0; d < ndim; d++) {
        if (c != 0 && (uint64_t)shape[d] > SIZE_MAX / c) /* a 0 dim makes it 0 */
            return false;
        c *= (size_t)shape[d];
    }
    if (c > SIZE_MAX / size)
        return false;
    *count = c;
    *nbytes = c * size;
    return true;
}

/* ------------------------------------------------------------------------- */
/* safetensors                                                               */
/* ------------------------------------------------------------------------- */

/* The safetensors dtypes of whole bytes (safetensors' Dtype enum). The
 * sub-byte ones (F4, F6_*) pack several elements a byte: a file with them
 * is refused, as their sizes cannot be checked per element. */
static bool st_dtype(const char *s, srv_dtype *d, size_t *size)
{
    static const struct {
        const char *name;
        srv_dtype d;
        size_t size;
    } map[] = {
        {"F32", SRV_DTYPE_F32, 4},       {"F16", SRV_DTYPE_F16, 2},
        {"BF16", SRV_DTYPE_BF16, 2},     {"F64", SRV_DTYPE_F64, 8},
        {"BOOL", SRV_DTYPE_OTHER, 1},    {"U8", SRV_DTYPE_OTHER, 1},
        {"I8", SRV_DTYPE_OTHER, 1},      {"F8_E5M2", SRV_DTYPE_OTHER, 1},
        {"F8_E4M3", SRV_DTYPE_OTHER, 1}, {"F8_E8M0", SRV_DTYPE_OTHER, 1},
        {"I16", SRV_DTYPE_OTHER, 2},     {"U16", SRV_DTYPE_OTHER, 2},
        {"I32", SRV_DTYPE_OTHER, 4},     {"U32", SRV_DTYPE_OTHER, 4},
        {"I64", SRV_DTYPE_OTHER, 8},     {"U64", SRV_DTYPE_OTHER, 8},
        {"C64", SRV_DTYPE_OTHER, 8},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        if (strcmp(s, map[i].name) == 0) {
            *d = map[i].d;
            *size = map[i].size;
            return true;
        }
    }
    return false;
}

/* A JSON number that is a whole number in [0, 2^53]. */
static bool st_uint(const cJSON *v, uint64_t *out)
{
    double x;
    if (!cJSON_IsNumber(v))
        return false;
    x = v->valuedouble;
    if (!(x >= 0 && x <= 9007199254740992.0) || x != floor(x))
        return false;
    *out = (uint64_t)x;
    return true;
}

/* Parses one header member into *e (offsets still relative to the data
 * area in e->offset). */
static bool st_entry(const cJSON *m, size_t data_len, srv_tensor_entry *e, char *err, size_t cap)
{
    const char *name = m->string;
    const cJSON *dt = NULL, *shape = NULL, *offs = NULL, *c;
    uint64_t begin, end;
    char shp[128];
    int k;

    if (strlen(name) >= SRV_TENSOR_FILE_NAME_MAX)
        return fail(err, cap, "tensor name '%.64s...' is %zu bytes long, at most %d allowed", name,
                    strlen(name), SRV_TENSOR_FILE_NAME_MAX - 1);
    if (!cJSON_IsObject(m))
        return fail(err, cap, "tensor '%s': header entry is not an object", name);
    cJSON_ArrayForEach(c, m)
    {
        const char *key = c->string != NULL ? c->string : "";
        const cJSON **slot = strcmp(key, "dtype") == 0          ? &dt
                             : strcmp(key, "shape") == 0        ? &shape
                             : strcmp(key, "data_offsets") == 0 ? &offs
                                                                : NULL;
        if (slot == NULL)
            return fail(err, cap,
                        "tensor '%s': unknown header field '%.64s' (known: dtype, shape, "
                        "data_offsets)",
                        name, key);
        if (*slot != NULL)
            return fail(err, cap, "tensor '%s': header field '%s' given twice", name, key);
        *slot = c;
    }
    if (!cJSON_IsString(dt))
        return fail(err, cap, "tensor '%s': dtype is missing or not a string", name);
    if (!st_dtype(dt->valuestring, &e->dtype, &e->elem_size))
        return fail(err, cap,
                    "tensor '%s': dtype '%.32s' is not a safetensors dtype of whole bytes (BOOL, "
                    "U8, I8, F8_E5M2, F8_E4M3, F8_E8M0, I16, U16, F16, BF16, I32, U32, F32, C64, "
                    "F64, I64, U64)",
                    name, dt->valuestring);
    snprintf(e->dtype_name, sizeof e->dtype_name, "%s", dt->valuestring);
    if (!cJSON_IsArray(shape))
        return fail(err, cap, "tensor '%s': shape is missing or not an array", name);
    e->ndim = cJSON_GetArraySize(shape);
    if (e->ndim > SRV_MAX_DIMS)
        return fail(err, cap, "tensor '%s': shape has %d dimensions; at most %d are allowed", name,
                    e->ndim, SRV_MAX_DIMS);
    k = 0;
    cJSON_ArrayForEach(c, shape)
    {
        uint64_t v;
        if (!st_uint(c, &v) || v > INT64_MAX)
            return fail(err, cap, "tensor '%s': shape[%d] is not a non-negative integer", name, k);
        e->shape[k++] = (int64_t)v;
    }
    shape_str(shp, sizeof shp, e->ndim, e->shape);
    if (!shape_bytes(e->ndim, e->shape, e->elem_size, &e->count, &e->nbytes))
        return fail(err, cap, "tensor '%s': shape [%s] has more elements than can be addressed",
                    name, shp);
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 || !st_uint(offs->child, &begin) ||
        !st_uint(offs->child->next, &end))
        return fail(err, cap,
                    "tensor '%s': data_offsets must be two non-negative integers [begin, end]",
                    name);
    if (begin > end)
        return fail(err, cap, "tensor '%s': data_offsets [%llu, %llu] end before they begin", name,
                    (unsigned long long)begin, (unsigned long long)end);
    if (end > data_len)
        return fail(err, cap,
                    "tensor '%s': data_offsets [%llu, %llu] are out of range: the data area is "
                    "%zu bytes",
                    name, (unsigned long long)begin, (unsigned long long)end, data_len);
    if (end - begin != e->nbytes)
        return fail(err, cap,
                    "tensor '%s': data_offsets [%llu, %llu] hold %llu bytes but shape [%s] of %s "
                    "needs %zu",
                    name, (unsigned long long)begin, (unsigned long long)end,
                    (unsigned long long)(end - begin), shp, e->dtype_name, e->nbytes);
    snprintf(e->name, sizeof e->name, "%s", name);
    e->offset = (size_t)begin;
    return true;
}

/* By offset, and an empty tensor before a full one at the same offset. */
static int cmp_offset(const void *a, const void *b)
{
    const srv_tensor_entry *x = *(const srv_tensor_entry *const *)a;
    const srv_tensor_entry *y = *(const srv_tensor_entry *const *)b;
    if (x->offset != y->offset)
        return x->offset < y->offset ? -1 : 1;
    return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes ? 1 : 0;
}

/* "__metadata__": a map of strings to strings (the format's rule). */
static bool st_metadata(const cJSON *m, char *err, size_t cap)
{
    const cJSON *c;
    if (!cJSON_IsObject(m))
        return fail(err, cap, "__metadata__ is not an object (it maps strings to strings)");
    cJSON_ArrayForEach(c, m)
    {
        if (!cJSON_IsString(c))
            return fail(err, cap,
                        "__metadata__ value '%.64s' is not a string (it maps strings to strings)",
                        c->string != NULL ? c->string : "");
    }
    return true;
}

bool srv_safetensors_parse(const unsigned char *buf, size_t len, srv_tensor_entry **entries,
                           size_t *n, char *err, size_t cap)
{
    uint64_t hlen;
    size_t data_len, count = 0, i;
    const char *end = NULL;
    cJSON *root = NULL;
    const cJSON *m;
    srv_tensor_entry *es = NULL, **order = NULL;
    bool ok = false;

    if (len < 8)
        return fail(err, cap, "file is %zu bytes, too short for the 8-byte header length", len);
    hlen = rd_u64(buf);
    if (hlen > len - 8)
        return fail(err, cap,
                    "header length %llu runs past the end of the file (%zu bytes, so at most %zu)",
                    (unsigned long long)hlen, len, len - 8);
    if (hlen > ST_HEADER_MAX)
        return fail(err, cap, "header length %llu is above the 100 MB safetensors allows",
                    (unsigned long long)hlen);
    if (hlen < 2)
        return fail(err, cap, "header length %llu is too short for a JSON object",
                    (unsigned long long)hlen);
    if (buf[8] != '{')
        return fail(err, cap,
                    "header begins with byte 0x%02x, not '{' (safetensors: the header MUST "
                    "begin with '{')",
                    buf[8]);
    data_len = len - 8 - (size_t)hlen;
    root = cJSON_ParseWithLengthOpts((const char *)buf + 8, (size_t)hlen, &end, false);
    if (root == NULL) {
        const char *h = (const char *)buf + 8;
        size_t at = end != NULL && end >= h && end <= h + hlen ? (size_t)(end - h) : 0;
        return fail(err, cap, "header is not valid JSON (error at byte %zu of %llu)", at,
                    (unsigned long long)hlen);
    }
    /* Writers pad the header with spaces (0x20, and only those) to align
     * the data. */
    for (const char *p = end; p < (const char *)buf + 8 + hlen; p++) {
        if (*p != ' ') {
            fail(err, cap,
                 "header has byte 0x%02x after the JSON object (at byte %zu of %llu); only "
                 "spaces may pad it",
                 (unsigned char)*p, (size_t)(p - (const char *)buf - 8), (unsigned long long)hlen);
            goto fail;
        }
    }
    if (!cJSON_IsObject(root)) {
        fail(err, cap, "header is not a JSON object");
        goto fail;
    }
    cJSON_ArrayForEach(m, root) count += strcmp(m->string, "__metadata__") != 0;
    if (count > 0) {
        es = calloc(count, sizeof *es);
        order = calloc(count, sizeof *order);
        if (es == NULL || order == NULL) {
            fail(err, cap, "out of memory for %zu tensor entries", count);
            goto fail;
        }
    }
    i = 0;
    cJSON_ArrayForEach(m, root)
    {
        if (strcmp(m->string, "__metadata__") == 0) {
            if (!st_metadata(m, err, cap))
                goto fail;
            continue;
        }
        if (!st_entry(m, data_len, &es[i], err, cap))
            goto fail;
        for (size_t j = 0; j < i; j++) {
            if (strcmp(es[j].name, es[i].name) == 0) {
                fail(err, cap, "tensor '%s' appears twice in the header", es[i].name);
                goto fail;
            }
        }
        order[i] = &es[i];
        i++;
    }
    if (count > 1)
        qsort(order, count, sizeof *order, cmp_offset);
    /* The format: "the byte buffer needs to be entirely indexed, and cannot
     * contain holes". Each tensor begins where the one before it ends. */
    {
        size_t at = 0;
        const srv_tensor_entry *prev = NULL;
        for (i = 0; i < count; i++) {
            const srv_tensor_entry *b = order[i];
            if (b->offset < at) {
                fail(err, cap, "tensors '%s' [%zu, %zu) and '%s' [%zu, %zu) overlap", prev->name,
                     prev->offset, at, b->name, b->offset, b->offset + b->nbytes);
                goto fail;
            }
            if (b->offset > at) {
                fail(err, cap,
                     "bytes [%zu, %zu) of the data area belong to no tensor (a hole before '%s'); "
                     "safetensors allows none",
                     at, b->offset, b->name);
                goto fail;
            }
            at = b->offset + b->nbytes;
            prev = b;
        }
        if (at != data_len) {
            fail(err, cap,
                 "%zu bytes follow the last tensor's data (it ends at %zu, the data area is %zu "
                 "bytes); safetensors allows none",
                 data_len - at, at, data_len);
            goto fail;
        }
    }
    for (i = 0; i < count; i++)
        es[i].offset += 8 + (size_t)hlen;
    *entries = es;
    *n = count;
    es = NULL;
    ok = true;
fail:
    free(order);
    free(es);
    cJSON_Delete(root);
    return ok;
}

/* ------------------------------------------------------------------------- */
/* .npy                                                                      */
/* ------------------------------------------------------------------------- */

/* A cursor over the header's Python literal. */
typedef struct npy_cur {
    const char *p, *end;
} npy_cur;

static void npy_ws(npy_cur *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

static bool npy_eat(npy_cur *c, char ch)
{
    npy_ws(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return true;
    }
    return false;
}

/* A quoted string ('...' or "...", no escapes) into buf. */
static bool npy_str(npy_cur *c, char *buf, size_t cap)
{
    char q;
    size_t n = 0;
    npy_ws(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"'))
        return false;
    q = *c->p++;
    while (c->p < c->end && *c->p != q && *c->p != '\\') {
        if (n + 1 < cap)
            buf[n++] = *c->p;
        c->p++;
    }
    buf[n] = '\0';
    if (c->p >= c->end || *c->p != q)
        return false;
    c->p++;
    return true;
}

static bool npy_word(npy_cur *c, const char *w)
{
    size_t n = strlen(w);
    npy_ws(c);
    if ((size_t)(c->end - c->p) >= n && memcmp(c->p, w, n) == 0) {
        c->p += n;
        return true;
    }
    return false;
}

static bool npy_shape(npy_cur *c, srv_tensor_entry *e, char *err, size_t cap)
{
    e->ndim = 0;
    if (!npy_eat(c, '('))
        return fail(err, cap, "header 'shape' is not a tuple");
    for (;;) {
        int64_t v = 0;
        npy_ws(c);
        if (npy_eat(c, ')'))
            break;
        if (c->p >= c->end || *c->p < '0' || *c->p > '9')
            return fail(err, cap, "header 'shape' has a value that is not an integer");
        while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
            if (v > (INT64_MAX - 9) / 10)
                return fail(err, cap, "header 'shape' has a dimension too large to address");
            v = v * 10 + (*c->p++ - '0');
        }
        (void)npy_word(c, "L"); /* Python 2 wrote longs as 3L */
        if (e->ndim == SRV_MAX_DIMS)
            return fail(err, cap, "shape has more than %d dimensions", SRV_MAX_DIMS);
        if (v == 0)
            return fail(err, cap, "shape[%d] is 0; every dimension must be positive", e->ndim);
        e->shape[e->ndim++] = v;
        if (npy_eat(c, ')'))
            break;
        if (!npy_eat(c, ','))
            return fail(err, cap, "header 'shape' is not a tuple of integers");
    }
    if (e->ndim == 0)
        return fail(err, cap, "shape () is a scalar; 1 to %d dimensions are allowed", SRV_MAX_DIMS);
    return true;
}

/* descr: a byte order ('<' little, '>' big, '=' or '|' native) and f4, f2
 * or f8 (NumPy's array-protocol type strings). */
static bool npy_descr(const char *s, srv_tensor_entry *e, char *err, size_t cap)
{
    const char *t = s + 1;
    if (s[0] != '<' && s[0] != '>' && s[0] != '=' && s[0] != '|')
        t = s;
    if (strcmp(t, "f4") == 0)
        e->dtype = SRV_DTYPE_F32;
    else if (strcmp(t, "f2") == 0)
        e->dtype = SRV_DTYPE_F16;
    else if (strcmp(t, "f8") == 0)
        e->dtype = SRV_DTYPE_F64;
    else
        return fail(err, cap,
                    "dtype '%.32s' is not supported (posattnd loads f4, f2 and f8, either byte "
                    "order)",
                    s);
    e->elem_size = srv_dtype_size(e->dtype);
    e->big_endian = s[0] == '>' || ((s[0] == '=' || s[0] == '|') && !srv_host_little_endian());
    snprintf(e->dtype_name, sizeof e->dtype_name, "%.15s", s);
    return true;
}

bool srv_npy_parse(const unsigned char *buf, size_t len, srv_tensor_entry *out, char *err,
                   size_t cap)
{
    static const unsigned char magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
    size_t hlen, start;
    npy_cur c;
    srv_tensor_entry e;
    bool have_descr = false, have_order = false, have_shape = false;
    char shp[128];

    memset(&e, 0, sizeof e);
    if (len < 10 || memcmp(buf, magic, sizeof magic) != 0)
        return fail(err, cap, "not a .npy file: it does not start with \\x93NUMPY");
    if (buf[6] == 1) {
        hlen = (size_t)buf[8] | (size_t)buf[9] << 8;
        start = 10;
    } else if (buf[6] == 2 || buf[6] == 3) {
        if (len < 12)
            return fail(err, cap, "file is %zu bytes, too short for a version %d header", len,
                        buf[6]);
        hlen = (size_t)buf[8] | (size_t)buf[9] << 8 | (size_t)buf[10] << 16 | (size_t)buf[11] << 24;
        start = 12;
    } else {
        return fail(err, cap, ".npy format version %d.%d is not supported (1, 2 and 3 are)", buf[6],
                    buf[7]);
    }
    if (hlen > len - start)
        return fail(err, cap,
                    "header length %zu runs past the end of the file (%zu bytes after the %zu-byte "
                    "preamble)",
                    hlen, len - start, start);
    c.p = (const char *)buf + start;
    c.end = c.p + hlen;
    if (!npy_eat(&c, '{'))
        return fail(err, cap, "header is not a Python dict");
    for (;;) {
        char key[32], val[64];
        if (npy_eat(&c, '}'))
            break;
        if (!npy_str(&c, key, sizeof key) || !npy_eat(&c, ':'))
            return fail(err, cap, "header is not a dict of 'descr', 'fortran_order', 'shape'");
        if (strcmp(key, "descr") == 0 && !have_descr) {
            if (!npy_str(&c, val, sizeof val))
                return fail(err, cap,
                            "header 'descr' is not a simple dtype string (structured arrays are "
                            "not supported)");
            if (!npy_descr(val, &e, err, cap))
                return false;
            have_descr = true;
        } else if (strcmp(key, "fortran_order") == 0 && !have_order) {
            if (npy_word(&c, "True"))
                e.fortran = true;
            else if (!npy_word(&c, "False"))
                return fail(err, cap, "header 'fortran_order' is not True or False");
            have_order = true;
        } else if (strcmp(key, "shape") == 0 && !have_shape) {
            if (!npy_shape(&c, &e, err, cap))
                return false;
            have_shape = true;
        } else {
            return fail(err, cap, "header has an unknown or repeated key '%s'", key);
        }
        if (npy_eat(&c, '}'))
            break;
        if (!npy_eat(&c, ','))
            return fail(err, cap, "header is not a Python dict");
    }
    if (!have_descr || !have_order || !have_shape)
        return fail(err, cap, "header lacks '%s'",
                    !have_descr   ? "descr"
                    : !have_order ? "fortran_order"
                                  : "shape");
    shape_str(shp, sizeof shp, e.ndim, e.shape);
    if (!shape_bytes(e.ndim, e.shape, e.elem_size, &e.count, &e.nbytes))
        return fail(err, cap, "shape (%s) has more elements than can be addressed", shp);
    e.offset = start + hlen;
    if (len - e.offset != e.nbytes)
        return fail(err, cap,
                    "%s: shape (%s) of %s needs %zu data bytes, the file has %zu after the header",
                    len - e.offset < e.nbytes ? "truncated data" : "size mismatch", shp,
                    e.dtype_name, e.nbytes, len - e.offset);
    *out = e;
    return true;
}

/* ------------------------------------------------------------------------- */
/* Conversions                                                               */
/* ------------------------------------------------------------------------- */

/* F16 and BF16 widen through codec/half.h. */

/* Element i of type d at src, in the byte order given. */
static float load_elem(srv_dtype d, const unsigned char *p, bool big)
{
    unsigned char b[8];
    const size_t n = srv_dtype_size(d);
    float v;
    for (size_t k = 0; k < n; k++)
        b[k] = big ? p[n - 1 - k] : p[k];
    switch (d) {
    case SRV_DTYPE_F32: {
        uint32_t u =
            (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
        memcpy(&v, &u, sizeof v);
        return v;
    }
    case SRV_DTYPE_F16:
        return srv_f16_to_f32((uint16_t)(b[0] | b[1] << 8));
    case SRV_DTYPE_BF16:
        return srv_bf16_to_f32((uint16_t)(b[0] | b[1] << 8));
    default: {
        uint64_t u = rd_u64(b);
        double x;
        memcpy(&x, &u, sizeof x);
        return isfinite(x) && fabs(x) <= FLT_MAX ? (float)x : INFINITY;
    }
    }
}

bool srv_dtype_to_f32(srv_dtype d, const unsigned char *src, size_t count, float *dst, size_t *bad)
{
    const size_t size = srv_dtype_size(d);
    for (size_t i = 0; i < count; i++) {
        float v = load_elem(d, src + i * size, false);
        if (!isfinite(v)) {
            *bad = i;
            return false;
        }
        dst[i] = v;
    }
    return true;
}

bool srv_tensor_entry_servable(const srv_tensor_entry *e, char *err, size_t cap)
{
    char shp[128];
    const char *name = e->name[0] != '\0' ? e->name : "the array";
    shape_str(shp, sizeof shp, e->ndim, e->shape);
    if (e->dtype == SRV_DTYPE_OTHER)
        return fail(err, cap,
                    "tensor '%s' is %s: posattnd computes with F32, F16, BF16 and F64 (the "
                    "file's other tensors may be of any dtype)",
                    name, e->dtype_name);
    if (e->ndim == 0)
        return fail(err, cap,
                    "tensor '%s' is 0-rank (a scalar): posattnd serves 1 to %d dimensions", name,
                    SRV_MAX_DIMS);
    if (e->count == 0)
        return fail(err, cap, "tensor '%s' is empty (shape [%s]): posattnd serves values", name,
                    shp);
    return true;
}

bool srv_tensor_entry_to_f32(const srv_tensor_entry *e, const unsigned char *buf, float *dst,
                             size_t *bad)
{
    const unsigned char *src = buf + e->offset;
    size_t cstride[SRV_MAX_DIMS], idx[SRV_MAX_DIMS] = {0}, at = 0;
    if (!e->fortran || e->ndim < 2) {
        for (size_t i = 0; i < e->count; i++) {
            float v = load_elem(e->dtype, src + i * e->elem_size, e->big_endian);
            if (!isfinite(v)) {
                *bad = i;
                return false;
            }
            dst[i] = v;
        }
        return true;
    }
    /* Fortran order: the file runs the first index fastest. Walk it in file
     * order, keeping the multi-index and its C-order position. */
    cstride[e->ndim - 1] = 1;
    for (int d = e->ndim - 1; d > 0; d--)
        cstride[d - 1] = cstride[d] * (size_t)e->shape[d];
    for (size_t i = 0; i < e->count; i++) {
        float v = load_elem(e->dtype, src + i * e->elem_size, e->big_endian);
        if (!isfinite(v)) {
            *bad = i;
            return false;
        }
        dst[at] = v;
        for (int d = 0; d < e->ndim; d++) {
            at += cstride[d];
            if (++idx[d] < (size_t)e->shape[d])
                break;
            at -= cstride[d] * idx[d];
            idx[d] = 0;
        }
    }
    return true;
}
