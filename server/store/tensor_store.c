/* tensor_store.c - see tensor_store.h. Maps each file read-only, parses its
 * header with tensor_file.c, takes F32 data in place or converts it, and
 * resolves {"ref":"NAME"} request tensors to borrowed views of it.
 */
#include "store/tensor_store.h"

#include "codec/float32.h"
#include "posattn.h" /* PA_DTYPE_BF16, PA_DTYPE_F16: data16 lent to attention items */

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct mapping {
    void *p;
    size_t len;
} mapping;

struct srv_tensor_store {
    srv_named_tensor *t;
    size_t n;
    mapping *maps; /* files some tensor uses in place */
    size_t n_maps;
};

static bool fail(char *err, size_t cap, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static bool fail(char *err, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
    return false;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* Maps path read-only. An empty file is mapped as nothing (p NULL). */
static bool map_file(const char *path, mapping *m, char *err, size_t cap)
{
    struct stat st;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return fail(err, cap, "%s: cannot open: %s", path, strerror(errno));
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return fail(err, cap, "%s: not a regular file", path);
    }
    m->len = (size_t)st.st_size;
    m->p = NULL;
    if (m->len > 0) {
        m->p = mmap(NULL, m->len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m->p == MAP_FAILED) {
            m->p = NULL;
            close(fd);
            return fail(err, cap, "%s: cannot map %zu bytes: %s", path, m->len, strerror(errno));
        }
    }
    close(fd);
    return true;
}

static void list_names(const srv_tensor_entry *es, size_t n, char *buf, size_t cap)
{
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < n && used + 1 < cap; i++) {
        int w = snprintf(buf + used, cap - used, "%s%s", i ? ", " : "", es[i].name);
        if (w < 0)
            break;
        used += (size_t)w;
    }
    if (used + 1 >= cap && cap > 4)
        strcpy(buf + cap - 4, "...");
}

/* Fills t from entry e of the mapped file m: in place or converted. Sets
 * *in_place when t->data points into m. */
static bool take_data(const srv_tensor_spec *spec, const mapping *m, const srv_tensor_entry *e,
                      srv_named_tensor *t, bool *in_place, char *err, size_t cap)
{
    const unsigned char *src = (const unsigned char *)m->p + e->offset;
    size_t bad = 0;
    float *buf;
    char why[320];

    /* Only the picked tensor must be one posattnd computes with. */
    if (!srv_tensor_entry_servable(e, why, sizeof why))
        return fail(err, cap, "%s: %s", spec->path, why);
    t->dtype = e->dtype;
    t->ndim = e->ndim;
    memcpy(t->shape, e->shape, sizeof t->shape);
    t->count = e->count;
    t->file_bytes = e->nbytes;
    *in_place = e->dtype == SRV_DTYPE_F32 && !e->big_endian && !e->fortran &&
                (uintptr_t)src % sizeof(float) == 0 && srv_host_little_endian();
    if (*in_place) {
        const float *f = (const float *)(const void *)src;
        for (size_t i = 0; i < e->count; i++) {
            if (!isfinite(f[i]))
                return fail(err, cap,
                            "%s: tensor '%s': element %zu is not finite (%g); posattnd needs "
                            "finite values",
                            spec->path, e->name[0] ? e->name : spec->name, i, (double)f[i]);
        }
        t->data = f;
        return true;
    }
    buf = malloc(e->count * sizeof *buf);
    if (buf == NULL)
        return fail(err, cap, "%s: tensor '%s': out of memory converting %zu values", spec->path,
                    e->name[0] ? e->name : spec->name, e->count);
    if (!srv_tensor_entry_to_f32(e, (const unsigned char *)m->p, buf, &bad)) {
        free(buf);
        return fail(err, cap,
                    "%s: tensor '%s': element %zu of %s is not finite in float32; posattnd needs "
                    "finite values",
                    spec->path, e->name[0] ? e->name : spec->name, bad, e->dtype_name);
    }
    t->data = buf;
    /* The file's 16 bits too, where the kernels can read them in place:
     * little-endian, C order, aligned as a float (pa_attention.kv_dtype). */
    if ((e->dtype == SRV_DTYPE_BF16 || e->dtype == SRV_DTYPE_F16) && !e->big_endian &&
        !e->fortran && (uintptr_t)src % sizeof(float) == 0 && srv_host_little_endian())
        t->data16 = (const uint16_t *)(const void *)src;
    return true;
}

/* Loads one spec into t; the mapping goes to s->maps when t uses it. */
static bool load_one(srv_tensor_store *s, const srv_tensor_spec *spec, srv_named_tensor *t,
                     char *err, size_t cap)
{
    mapping m = {NULL, 0};
    srv_tensor_entry *es = NULL, one;
    const srv_tensor_entry *e = NULL;
    size_t n = 0;
    char msg[512], names[256];
    bool npy = ends_with(spec->path, ".npy"), in_place = false, ok = false;

    if (!npy && !ends_with(spec->path, ".safetensors"))
        return fail(err, cap, "%s: the file name must end in .safetensors or .npy", spec->path);
    if (!map_file(spec->path, &m, err, cap))
        return false;
    if (npy) {
        if (spec->tensor[0] != '\0') {
            fail(err, cap, "%s: a .npy file holds one array; drop ':%s'", spec->path, spec->tensor);
            goto done;
        }
        if (!srv_npy_parse(m.p, m.len, &one, msg, sizeof msg)) {
            fail(err, cap, "%s: %s", spec->path, msg);
            goto done;
        }
        e = &one;
    } else {
        if (!srv_safetensors_parse(m.p, m.len, &es, &n, msg, sizeof msg)) {
            fail(err, cap, "%s: %s", spec->path, msg);
            goto done;
        }
        list_names(es, n, names, sizeof names);
        if (n == 0) {
            fail(err, cap, "%s: the file holds no tensors", spec->path);
            goto done;
        }
        if (spec->tensor[0] == '\0') {
            if (n > 1) {
                fail(err, cap,
                     "%s: the file holds %zu tensors; pick one with %s=%s:TENSOR (tensors: %s)",
                     spec->path, n, spec->name, spec->path, names);
                goto done;
            }
            e = &es[0];
        } else {
            for (size_t i = 0; i < n && e == NULL; i++)
                if (strcmp(es[i].name, spec->tensor) == 0)
                    e = &es[i];
            if (e == NULL) {
                fail(err, cap, "%s: no tensor '%s' in the file (tensors: %s)", spec->path,
                     spec->tensor, names);
                goto done;
            }
        }
    }
    snprintf(t->name, sizeof t->name, "%s", spec->name);
    snprintf(t->file, sizeof t->file, "%s", spec->path);
    snprintf(t->tensor, sizeof t->tensor, "%s", e->name);
    if (!take_data(spec, &m, e, t, &in_place, err, cap))
        goto done;
    t->mapped = in_place;
    if (in_place || t->data16 != NULL) {
        s->maps[s->n_maps++] = m;
        m.p = NULL;
    }
    ok = true;
done:
    if (m.p != NULL)
        munmap(m.p, m.len);
    free(es);
    return ok;
}

bool srv_tensor_store_load(const srv_tensor_spec *specs, size_t n, srv_tensor_store **out,
                           char *err, size_t cap)
{
    srv_tensor_store *s;

    if (n == 0) {
        *out = NULL;
        return true;
    }
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < i; j++)
            if (strcmp(specs[i].name, specs[j].name) == 0)
                return fail(err, cap, "tensor name '%s' is given twice (for %s and %s)",
                            specs[i].name, specs[j].path, specs[i].path);
    s = calloc(1, sizeof *s);
    if (s == NULL || (s->t = calloc(n, sizeof *s->t)) == NULL ||
        (s->maps = calloc(n, sizeof *s->maps)) == NULL) {
        srv_tensor_store_free(s);
        return fail(err, cap, "out of memory loading %zu tensors", n);
    }
    for (size_t i = 0; i < n; i++) {
        if (!load_one(s, &specs[i], &s->t[i], err, cap)) {
            srv_tensor_store_free(s);
            return false;
        }
        s->n++;
    }
    *out = s;
    return true;
}

void srv_tensor_store_free(srv_tensor_store *s)
{
    if (s == NULL)
        return;
    for (size_t i = 0; i < s->n; i++)
        if (!s->t[i].mapped)
            free((void *)(uintptr_t)s->t[i].data);
    for (size_t i = 0; i < s->n_maps; i++)
        munmap(s->maps[i].p, s->maps[i].len);
    free(s->maps);
    free(s->t);
    free(s);
}

size_t srv_tensor_store_count(const srv_tensor_store *s)
{
    return s != NULL ? s->n : 0;
}

const srv_named_tensor *srv_tensor_store_at(const srv_tensor_store *s, size_t i)
{
    return s != NULL && i < s->n ? &s->t[i] : NULL;
}

const srv_named_tensor *srv_tensor_store_find(const srv_tensor_store *s, const char *name)
{
    for (size_t i = 0; s != NULL && name != NULL && i < s->n; i++)
        if (strcmp(s->t[i].name, name) == 0)
            return &s->t[i];
    return NULL;
}

/* ------------------------------------------------------------------------- */
/* References in requests                                                    */
/* ------------------------------------------------------------------------- */

bool srv_tensor_is_ref(const cJSON *node)
{
    return cJSON_IsObject(node) && cJSON_GetObjectItemCaseSensitive(node, "ref") != NULL;
}

bool srv_tensor_store_ref(const srv_tensor_store *s, const cJSON *node, const char *field,
                          int want_ndim, srv_tensor *out, srv_reply *err)
{
    char path[256], names[200];
    const cJSON *m, *ref = cJSON_GetObjectItemCaseSensitive(node, "ref");
    const srv_named_tensor *t;
    size_t used = 0;

    if (field == NULL)
        field = "";
    snprintf(path, sizeof path, "%s.ref", field);
    cJSON_ArrayForEach(m, node)
    {
        if (m->string == NULL || strcmp(m->string, "ref") != 0) {
            char f[256];
            snprintf(f, sizeof f, "%s.%s", field, m->string ? m->string : "");
            srv_reply_error(err, SRV_ERR_UNKNOWN_FIELD, f,
                            "%s is a tensor reference: it has only 'ref', not '%.64s'", field,
                            m->string ? m->string : "");
            return false;
        }
    }
    if (!cJSON_IsString(ref)) {
        srv_reply_error(err, SRV_ERR_INVALID_ARGUMENT, path,
                        "%s must be the name of a loaded tensor (a string)", path);
        return false;
    }
    t = srv_tensor_store_find(s, ref->valuestring);
    if (t == NULL) {
        names[0] = '\0';
        for (size_t i = 0; i < srv_tensor_store_count(s) && used + 1 < sizeof names; i++) {
            int w =
                snprintf(names + used, sizeof names - used, "%s%s", i ? ", " : "", s->t[i].name);
            if (w < 0)
                break;
            used += (size_t)w;
        }
        if (used + 1 >= sizeof names)
            strcpy(names + sizeof names - 4, "...");
        if (srv_tensor_store_count(s) == 0)
            srv_reply_error(err, SRV_ERR_UNKNOWN_TENSOR, path,
                            "%s='%.64s' names no loaded tensor: none are loaded (start posattnd "
                            "with --tensor NAME=PATH)",
                            path, ref->valuestring);
        else
            srv_reply_error(err, SRV_ERR_UNKNOWN_TENSOR, path,
                            "%s='%.64s' names no loaded tensor (loaded: %s)", path,
                            ref->valuestring, names);
        return false;
    }
    if (want_ndim > 0 && t->ndim != want_ndim) {
        srv_reply_error(err, SRV_ERR_SHAPE_MISMATCH, path, "%s='%s' has %d dimensions, expected %d",
                        path, t->name, t->ndim, want_ndim);
        return false;
    }
    memset(out, 0, sizeof *out);
    out->ndim = t->ndim;
    memcpy(out->shape, t->shape, sizeof out->shape);
    out->count = t->count;
    /* The store's data is never written: borrowed tensors are read-only. */
    out->data = (float *)(uintptr_t)t->data;
    out->borrowed = true;
    if (t->data16 != NULL) {
        out->bits16 = t->data16;
        out->bits16_type = t->dtype == SRV_DTYPE_BF16 ? PA_DTYPE_BF16 : PA_DTYPE_F16;
    }
    return true;
}
