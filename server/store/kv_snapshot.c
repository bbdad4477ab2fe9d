/* kv_snapshot.c - see kv_snapshot.h. */
#define _DEFAULT_SOURCE /* flock */
#include "store/kv_snapshot.h"

#include "store/tensor_file.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define FORMAT "posattn-session-1"
#define SUFFIX ".safetensors"

/* The file of session id under dir. */
static void path_of(char *buf, size_t cap, const char *dir, const char *id, const char *suffix)
{
    snprintf(buf, cap, "%s/%s%s", dir, id, suffix);
}

static bool meta_str(cJSON *m, const char *key, const char *val)
{
    return cJSON_AddStringToObject(m, key, val) != NULL;
}

static bool meta_int(cJSON *m, const char *key, int64_t v)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%" PRId64, v);
    return meta_str(m, key, buf);
}

/* Adds tensor name {dtype, shape, data_offsets} at *off, advancing it. */
static bool add_tensor(cJSON *h, const char *name, const char *dtype, const int64_t *shape,
                       int ndim, size_t bytes, size_t *off)
{
    cJSON *t = cJSON_AddObjectToObject(h, name), *s, *o;
    if (t == NULL || cJSON_AddStringToObject(t, "dtype", dtype) == NULL ||
        (s = cJSON_AddArrayToObject(t, "shape")) == NULL ||
        (o = cJSON_AddArrayToObject(t, "data_offsets")) == NULL)
        return false;
    for (int i = 0; i < ndim; i++)
        if (!cJSON_AddItemToArray(s, cJSON_CreateNumber((double)shape[i])))
            return false;
    if (!cJSON_AddItemToArray(o, cJSON_CreateNumber((double)*off)) ||
        !cJSON_AddItemToArray(o, cJSON_CreateNumber((double)(*off + bytes))))
        return false;
    *off += bytes;
    return true;
}

static bool write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n > 0) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        c += w;
        n -= (size_t)w;
    }
    return true;
}

/* The header JSON of st (padded to a multiple of 8 with spaces by the
 * caller). */
static char *header_of(const srv_kv_state *st, size_t *data_bytes)
{
    const srv_kv_spec *sp = &st->spec;
    const int64_t n = st->length, hkv = sp->num_kv_heads;
    const int64_t ks[3] = {n, hkv, sp->head_dim}, vs[3] = {n, hkv, sp->v_head_dim}, ps[1] = {n};
    const int64_t ss[3] = {sp->sinks, hkv, sp->head_dim};
    cJSON *h = cJSON_CreateObject(), *m = cJSON_AddObjectToObject(h, "__metadata__");
    size_t off = 0;
    char *txt = NULL;
    bool ok = m != NULL && meta_str(m, "format", FORMAT) && meta_str(m, "id", st->id) &&
              meta_str(m, "scheme", sp->scheme_json) &&
              meta_int(m, "num_kv_heads", sp->num_kv_heads) &&
              meta_int(m, "head_dim", sp->head_dim) && meta_int(m, "v_head_dim", sp->v_head_dim) &&
              meta_int(m, "max_tokens", sp->max_tokens) &&
              meta_str(m, "eviction", sp->eviction == SRV_KV_EVICT_WINDOW ? "window" : "none") &&
              meta_int(m, "window", sp->window) && meta_int(m, "sinks", sp->sinks) &&
              meta_str(m, "reposition", sp->reposition ? "true" : "false") &&
              meta_int(m, "next_position", st->next_position) && meta_int(m, "ring", st->ring) &&
              meta_int(m, "shift", st->shift) && meta_int(m, "appended", st->appended) &&
              meta_int(m, "evicted", st->evicted) &&
              meta_str(m, "prerotated", st->prerotated ? "true" : "false") &&
              meta_str(m, "dtype", pa_dtype_name(sp->dtype)); /* k and v are F32 here */
    /* A session made from a served model: its name and layer (kv_cache.h). */
    if (ok && st->model[0] != '\0')
        ok = meta_str(m, "model", st->model) && meta_int(m, "layer", st->spec.layer);
    ok = ok && add_tensor(h, "k", "F32", ks, 3, (size_t)(n * hkv * sp->head_dim) * 4, &off) &&
         add_tensor(h, "v", "F32", vs, 3, (size_t)(n * hkv * sp->v_head_dim) * 4, &off) &&
         add_tensor(h, "positions", "I32", ps, 1, (size_t)n * 4, &off);
    if (ok && st->sink_raw != NULL)
        ok = add_tensor(h, "sink_raw", "F32", ss, 3, (size_t)(sp->sinks * hkv * sp->head_dim) * 4,
                        &off);
    if (ok)
        txt = cJSON_PrintUnformatted(h);
    cJSON_Delete(h);
    *data_bytes = off;
    return txt;
}

bool srv_kv_save(srv_kv_cache *c, const char *id, const char *dir, srv_kv_err *e)
{
    srv_kv_state st;
    char tmp[1024], dst[1024], *hdr;
    size_t data, hlen, pad;
    unsigned char len8[8];
    int fd;
    bool ok;
    if (!srv_kv_export(c, id, &st, e))
        return false;
    if (st.spec.scheme_json == NULL) {
        srv_kv_state_free(&st);
        snprintf(e->field, sizeof e->field, "session");
        snprintf(e->message, sizeof e->message, "session '%s' keeps no scheme JSON to save", id);
        e->code = SRV_ERR_INTERNAL;
        return false;
    }
    hdr = header_of(&st, &data);
    path_of(tmp, sizeof tmp, dir, st.id, ".tmp");
    path_of(dst, sizeof dst, dir, st.id, SUFFIX);
    fd = hdr != NULL ? open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600) : -1;
    hlen = hdr != NULL ? strlen(hdr) : 0;
    pad = (8 - hlen % 8) % 8;
    for (int i = 0; i < 8; i++)
        len8[i] = (unsigned char)((uint64_t)(hlen + pad) >> (8 * i));
    ok = fd >= 0 && write_all(fd, len8, 8) && write_all(fd, hdr, hlen) &&
         write_all(fd, "        ", pad) &&
         write_all(fd, st.k, (size_t)st.length * st.spec.num_kv_heads * st.spec.head_dim * 4) &&
         write_all(fd, st.v, (size_t)st.length * st.spec.num_kv_heads * st.spec.v_head_dim * 4) &&
         write_all(fd, st.pos, (size_t)st.length * 4) &&
         (st.sink_raw == NULL ||
          write_all(fd, st.sink_raw,
                    (size_t)st.spec.sinks * st.spec.num_kv_heads * st.spec.head_dim * 4)) &&
         fsync(fd) == 0;
    if (fd >= 0 && close(fd) != 0)
        ok = false;
    ok = ok && rename(tmp, dst) == 0;
    if (ok) { /* the rename itself */
        int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            fsync(dfd);
            close(dfd);
        }
    } else {
        const int err = errno;
        unlink(tmp);
        e->code = SRV_ERR_INTERNAL;
        snprintf(e->field, sizeof e->field, "session");
        snprintf(e->message, sizeof e->message, "writing %.200s: %s", dst,
                 hdr == NULL ? "out of memory" : strerror(err));
    }
    free(hdr);
    srv_kv_state_free(&st);
    (void)data;
    /* Deleted while being written (a delete's srv_kv_unlink may have run
     * before the rename): the file must not bring it back. A delete after
     * this check unlinks the renamed file itself. */
    if (ok && !srv_kv_info_get(c, id, &(srv_kv_info){0}, e)) {
        unlink(dst);
        return false;
    }
    return ok;
}

/* Whether name is ID.safetensors with a session id (srv_kv_id_valid). */
static bool session_file(const char *name, char id[SRV_KV_ID_LEN])
{
    const size_t n = strlen(name), sl = strlen(SUFFIX);
    if (n <= sl || n - sl > SRV_KV_ID_LEN - 1 || strcmp(name + n - sl, SUFFIX) != 0)
        return false;
    memcpy(id, name, n - sl);
    id[n - sl] = '\0';
    return srv_kv_id_valid(id);
}

size_t srv_kv_save_all(srv_kv_cache *c, const char *dir, size_t *failed, char *err, size_t cap)
{
    size_t total = 0, n, saved = 0, cap_list;
    srv_kv_info *list;
    DIR *d;
    struct dirent *de;
    *failed = 0;
    if (err != NULL && cap > 0)
        err[0] = '\0';
    srv_kv_list(c, 0, NULL, 0, &total);
    cap_list = total + 64; /* sessions created meanwhile wait for the next */
    list = calloc(cap_list, sizeof *list);
    if (list == NULL) {
        snprintf(err, cap, "out of memory listing the sessions");
        *failed = total;
        return 0;
    }
    n = srv_kv_list(c, 0, list, cap_list, &total);
    for (size_t i = 0; i < n; i++) {
        srv_kv_err e;
        if (srv_kv_save(c, list[i].id, dir, &e)) {
            saved++;
        } else if (e.code != SRV_ERR_SESSION_NOT_FOUND) { /* deleted meanwhile: fine */
            if (*failed == 0 && err != NULL)
                snprintf(err, cap, "%s", e.message);
            ++*failed;
        }
    }
    /* The files of sessions that are gone. */
    if ((d = opendir(dir)) != NULL) {
        while ((de = readdir(d)) != NULL) {
            char id[SRV_KV_ID_LEN];
            srv_kv_info info;
            if (session_file(de->d_name, id) && !srv_kv_info_get(c, id, &info, NULL) &&
                !srv_kv_file_kept(c, id))
                srv_kv_unlink(dir, id);
        }
        closedir(d);
    }
    free(list);
    return saved;
}

void srv_kv_unlink(const char *dir, const char *id)
{
    char p[1024];
    path_of(p, sizeof p, dir, id, SUFFIX);
    unlink(p);
}

/* ------------------------------------------------------------------------- */
/* Loading                                                                   */
/* ------------------------------------------------------------------------- */

static unsigned char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    unsigned char *buf = NULL;
    long n;
    if (f == NULL)
        return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (buf = malloc((size_t)n + 1)) != NULL && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    } else if (buf != NULL) {
        *len = (size_t)n;
    }
    fclose(f);
    return buf;
}

static const char *meta_get(const cJSON *m, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(m, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* An integer metadata value in [lo, hi]. */
static bool meta_num(const cJSON *m, const char *key, int64_t lo, int64_t hi, int64_t *out)
{
    const char *s = meta_get(m, key);
    char *end;
    long long v;
    if (s == NULL || *s == '\0')
        return false;
    errno = 0;
    v = strtoll(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

static const srv_tensor_entry *entry(const srv_tensor_entry *es, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(es[i].name, name) == 0)
            return &es[i];
    return NULL;
}

/* Entry e as F32 of shape [a, b, c] (ndim 3) or [a] (ndim 1), or NULL. */
static bool shaped(const srv_tensor_entry *e, const char *dtype, int ndim, int64_t a, int64_t b,
                   int64_t c)
{
    if (e == NULL || strcmp(e->dtype_name, dtype) != 0 || e->ndim != ndim || e->shape[0] != a)
        return false;
    return ndim == 1 || (e->shape[1] == b && e->shape[2] == c);
}

/* Reads one file into st (its arrays malloc'd); why says what is wrong. */
static bool parse_file(const char *path, const char *want_id, srv_kv_state *st, char **scheme,
                       const char **why, char *buf_why, size_t cap)
{
    size_t len = 0, n = 0, bad;
    unsigned char *buf = read_file(path, &len);
    srv_tensor_entry *es = NULL;
    cJSON *hdr = NULL;
    const cJSON *m;
    const srv_tensor_entry *ek, *ev, *ep, *esr;
    int64_t x[12];
    uint64_t hl = 0;
    bool ok = false;
    memset(st, 0, sizeof *st);
    *scheme = NULL;
    *why = buf_why;
    if (buf == NULL) {
        snprintf(buf_why, cap, "cannot read it: %s", strerror(errno));
        return false;
    }
    if (!srv_safetensors_parse(buf, len, &es, &n, buf_why, cap))
        goto out;
    for (int i = 0; i < 8; i++)
        hl |= (uint64_t)buf[i] << (8 * i);
    hdr = cJSON_ParseWithLength((const char *)buf + 8, (size_t)hl);
    m = cJSON_GetObjectItemCaseSensitive(hdr, "__metadata__");
    if (m == NULL || meta_get(m, "format") == NULL || strcmp(meta_get(m, "format"), FORMAT) != 0) {
        *why = "not a posattn session (metadata format is not " FORMAT ")";
        goto out;
    }
    if (meta_get(m, "id") == NULL || strcmp(meta_get(m, "id"), want_id) != 0) {
        *why = "its metadata id is not its file name's";
        goto out;
    }
    if (meta_get(m, "scheme") == NULL || meta_get(m, "eviction") == NULL ||
        meta_get(m, "reposition") == NULL || meta_get(m, "prerotated") == NULL ||
        !meta_num(m, "num_kv_heads", 1, 1 << 20, &x[0]) ||
        !meta_num(m, "head_dim", 1, 1 << 20, &x[1]) ||
        !meta_num(m, "v_head_dim", 1, 1 << 20, &x[2]) ||
        !meta_num(m, "max_tokens", 1, INT32_MAX, &x[3]) ||
        !meta_num(m, "window", 0, INT32_MAX, &x[4]) || !meta_num(m, "sinks", 0, INT32_MAX, &x[5]) ||
        !meta_num(m, "next_position", INT32_MIN, INT32_MAX, &x[6]) ||
        !meta_num(m, "ring", 0, INT32_MAX, &x[7]) ||
        !meta_num(m, "shift", INT32_MIN, INT32_MAX, &x[8]) ||
        !meta_num(m, "appended", 0, INT64_MAX, &x[9]) ||
        !meta_num(m, "evicted", 0, INT64_MAX, &x[10])) {
        *why = "its metadata lacks a field or holds one out of range";
        goto out;
    }
    ek = entry(es, n, "k");
    ep = entry(es, n, "positions");
    x[11] = ep != NULL && ep->ndim == 1 ? ep->shape[0] : -1;
    ev = entry(es, n, "v");
    esr = entry(es, n, "sink_raw");
    if (x[11] < 0 || x[11] > INT32_MAX || !shaped(ek, "F32", 3, x[11], x[0], x[1]) ||
        !shaped(ev, "F32", 3, x[11], x[0], x[2]) || !shaped(ep, "I32", 1, x[11], 0, 0) ||
        (esr != NULL && !shaped(esr, "F32", 3, x[5], x[0], x[1]))) {
        *why = "its tensors are missing or of the wrong dtype or shape";
        goto out;
    }
    st->k = malloc(ek->count * sizeof(float) + 1);
    st->v = malloc(ev->count * sizeof(float) + 1);
    st->pos = malloc(ep->count * sizeof(int32_t) + 1);
    st->sink_raw = esr != NULL ? malloc(esr->count * sizeof(float) + 1) : NULL;
    *scheme = strdup(meta_get(m, "scheme"));
    if (st->k == NULL || st->v == NULL || st->pos == NULL || *scheme == NULL ||
        (esr != NULL && st->sink_raw == NULL)) {
        *why = "out of memory";
        goto out;
    }
    if (!srv_dtype_to_f32(SRV_DTYPE_F32, buf + ek->offset, ek->count, st->k, &bad) ||
        !srv_dtype_to_f32(SRV_DTYPE_F32, buf + ev->offset, ev->count, st->v, &bad) ||
        (esr != NULL &&
         !srv_dtype_to_f32(SRV_DTYPE_F32, buf + esr->offset, esr->count, st->sink_raw, &bad))) {
        *why = "a key or value is not finite";
        goto out;
    }
    for (size_t i = 0; i < ep->count; i++) {
        const unsigned char *p = buf + ep->offset + 4 * i;
        st->pos[i] = (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                               (uint32_t)p[3] << 24);
    }
    snprintf(st->id, sizeof st->id, "%s", want_id);
    st->spec.num_kv_heads = (int32_t)x[0];
    st->spec.head_dim = (int32_t)x[1];
    st->spec.v_head_dim = (int32_t)x[2];
    st->spec.max_tokens = (int32_t)x[3];
    st->spec.window = (int32_t)x[4];
    st->spec.sinks = (int32_t)x[5];
    st->spec.eviction =
        strcmp(meta_get(m, "eviction"), "window") == 0 ? SRV_KV_EVICT_WINDOW : SRV_KV_EVICT_NONE;
    st->spec.reposition = strcmp(meta_get(m, "reposition"), "true") == 0;
    st->next_position = (int32_t)x[6];
    st->ring = (int32_t)x[7];
    st->shift = (int32_t)x[8];
    st->appended = x[9];
    st->evicted = x[10];
    st->length = (int32_t)x[11];
    st->prerotated = strcmp(meta_get(m, "prerotated"), "true") == 0;
    /* The storage type (a file without one: f32); k and v are F32 in the
     * file, exactly the stored values widened. */
    {
        const char *dt = meta_get(m, "dtype");
        if (dt == NULL || strcmp(dt, "f32") == 0) {
            st->spec.dtype = PA_DTYPE_F32;
        } else if (strcmp(dt, "bf16") == 0) {
            st->spec.dtype = PA_DTYPE_BF16;
        } else if (strcmp(dt, "f16") == 0) {
            st->spec.dtype = PA_DTYPE_F16;
        } else {
            *why = "its metadata dtype is not f32, bf16 or f16";
            goto out;
        }
    }
    if (meta_get(m, "model") != NULL) { /* made from a served model (kv_cache.h) */
        const char *model = meta_get(m, "model");
        int64_t layer;
        if (model[0] == '\0' || strlen(model) >= sizeof st->model ||
            !meta_num(m, "layer", 0, INT32_MAX, &layer)) {
            *why = "its metadata model or layer is out of range";
            goto out;
        }
        snprintf(st->model, sizeof st->model, "%s", model);
        st->spec.layer = (int32_t)layer;
    }
    ok = true;
out:
    if (!ok) {
        srv_kv_state_free(st);
        free(*scheme);
        *scheme = NULL;
    }
    cJSON_Delete(hdr);
    free(es);
    free(buf);
    return ok;
}

/* Loads the session file path (of session id) into c. LOAD_OK; LOAD_KEEP
 * when it does not load (the caller keeps the file for an operator);
 * LOAD_LIVE when a live session of that id owns the name (its own file is
 * saved next). *why says why, in why_buf or a static string; e, when not
 * NULL, gets the store's error for an import that failed. */
enum { LOAD_OK, LOAD_KEEP, LOAD_LIVE };
static int load_one(srv_kv_cache *c, const char *path, const char *id, srv_kv_scheme_fn mk,
                    void *arg, char *why_buf, size_t cap, const char **why, srv_kv_err *e)
{
    char *scheme = NULL;
    srv_kv_state st;
    srv_kv_err ke;
    int r = LOAD_OK;
    if (!parse_file(path, id, &st, &scheme, why, why_buf, cap))
        return LOAD_KEEP;
    st.spec.scheme_json = scheme;
    st.spec.model = st.model[0] != '\0' ? st.model : NULL; /* for mk to check */
    if (!mk(arg, scheme, &st.spec, why_buf, cap)) {
        *why = why_buf;
        r = LOAD_KEEP;
    } else if (!srv_kv_import(c, &st, &ke)) {
        if (st.spec.scheme_free != NULL)
            st.spec.scheme_free(st.spec.scheme_owner);
        /* A live session of that id (SESSION_EXISTS) owns the name: its
         * file is its own, saved next. */
        r = ke.code == SRV_ERR_SESSION_EXISTS ? LOAD_LIVE : LOAD_KEEP;
        snprintf(why_buf, cap, "%s", ke.message);
        *why = why_buf;
        if (e != NULL)
            *e = ke;
    }
    free(scheme);
    srv_kv_state_free(&st);
    return r;
}

size_t srv_kv_load_dir(srv_kv_cache *c, const char *dir, srv_kv_scheme_fn mk, void *arg,
                       void (*skip)(void *arg, const char *path, const char *why))
{
    DIR *d = opendir(dir);
    struct dirent *de;
    size_t loaded = 0;
    if (d == NULL) {
        if (skip != NULL)
            skip(arg, dir, strerror(errno));
        return 0;
    }
    while ((de = readdir(d)) != NULL) {
        char id[SRV_KV_ID_LEN], path[1024], why_buf[256];
        const char *why = NULL;
        int r;
        if (!session_file(de->d_name, id))
            continue;
        path_of(path, sizeof path, dir, id, SUFFIX);
        r = load_one(c, path, id, mk, arg, why_buf, sizeof why_buf, &why, NULL);
        if (r == LOAD_OK) {
            loaded++;
            continue;
        }
        if (r == LOAD_KEEP)
            srv_kv_keep_file(c, id);
        if (skip != NULL)
            skip(arg, path, why);
    }
    closedir(d);
    return loaded;
}

/* ------------------------------------------------------------------------- */
/* A --cache-dir shared by replicas                                          */
/* ------------------------------------------------------------------------- */

/* Opens (creating) root/replica/.lock; -1 with errno on failure. */
static int lock_file(const char *root, const char *replica)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s/.lock", root, replica);
    return open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
}

static bool replica_name_ok(const char *name)
{
    /* The session ids' charset: a plain file name, never "." or "..". */
    return name != NULL && srv_kv_id_valid(name);
}

bool srv_kv_dir_own(const char *root, const char *replica, double wait_s, char *dir, size_t cap,
                    int *lock_fd, char *err, size_t ecap)
{
    int fd;
    double waited = 0;
    if (!replica_name_ok(replica)) {
        snprintf(err, ecap,
                 "--replica-id \"%.63s\" cannot name a folder of the shared --cache-dir "
                 "(1 to 64 characters of A-Z a-z 0-9 _ . -, not starting with a dot)",
                 replica != NULL ? replica : "");
        return false;
    }
    if ((size_t)snprintf(dir, cap, "%s/%s", root, replica) >= cap) {
        snprintf(err, ecap, "--cache-dir \"%.200s\" is too long", root);
        return false;
    }
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        snprintf(err, ecap, "cannot make %.300s: %s", dir, strerror(errno));
        return false;
    }
    if ((fd = lock_file(root, replica)) < 0) {
        snprintf(err, ecap, "cannot open %.300s/.lock: %s", dir, strerror(errno));
        return false;
    }
    /* Another replica taking over one of this one's files holds the lock
     * for a moment; a second process with this --replica-id holds it for
     * good. */
    while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        if (errno != EWOULDBLOCK && errno != EINTR) {
            snprintf(err, ecap, "cannot lock %.300s/.lock: %s", dir, strerror(errno));
            close(fd);
            return false;
        }
        if (waited >= wait_s) {
            snprintf(err, ecap,
                     "%.300s/.lock is held: another posattnd runs as replica \"%s\" on this "
                     "--cache-dir (each replica needs its own --replica-id)",
                     dir, replica);
            close(fd);
            return false;
        }
        usleep(50 * 1000);
        waited += 0.05;
    }
    {
        char mark[1024];
        snprintf(mark, sizeof mark, "%s/.draining", dir);
        unlink(mark);
    }
    *lock_fd = fd;
    return true;
}

void srv_kv_dir_draining(const char *dir)
{
    char mark[1024];
    int fd;
    snprintf(mark, sizeof mark, "%s/.draining", dir);
    fd = open(mark, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (fd >= 0)
        close(fd);
}

/* Whether replica name's lock is held: it runs (or another replica is
 * taking one of its files over, for a moment). */
static bool lock_held(const char *root, const char *name)
{
    int fd = lock_file(root, name);
    bool held;
    if (fd < 0)
        return false;
    held = flock(fd, LOCK_EX | LOCK_NB) != 0;
    close(fd); /* releases it when it was ours */
    return held;
}

/* A replica other than self that drains (its folder marked, its lock
 * held), into name; false when none does. */
static bool draining_replica(const char *root, const char *self, char *name, size_t cap)
{
    DIR *d = opendir(root);
    struct dirent *de;
    bool found = false;
    if (d == NULL)
        return false;
    while (!found && (de = readdir(d)) != NULL) {
        char mark[1024];
        if (de->d_name[0] == '.' || strcmp(de->d_name, self) == 0 ||
            !replica_name_ok(de->d_name))
            continue;
        snprintf(mark, sizeof mark, "%s/%s/.draining", root, de->d_name);
        if (access(mark, F_OK) == 0 && lock_held(root, de->d_name)) {
            snprintf(name, cap, "%s", de->d_name);
            found = true;
        }
    }
    closedir(d);
    return found;
}

/* SESSION_NOT_FOUND naming this replica (self) and, when a running
 * replica holds the session, that one (owner). */
static bool not_found(srv_kv_err *e, const char *id, const char *self, const char *owner)
{
    e->code = SRV_ERR_SESSION_NOT_FOUND;
    snprintf(e->field, sizeof e->field, "session");
    if (owner != NULL)
        snprintf(e->message, sizeof e->message,
                 "no session '%.40s' on replica %.40s: replica %.40s holds it and is running",
                 id, self, owner);
    else
        snprintf(e->message, sizeof e->message,
                 "no session '%.40s' on replica %.40s, nor a file of it from another replica "
                 "(it was deleted, expired, or never made)",
                 id, self);
    return false;
}

bool srv_kv_adopt(srv_kv_cache *c, const char *root, const char *self, const char *id,
                  srv_kv_scheme_fn mk, void *arg, srv_kv_err *e)
{
    char from[1024] = "", owner[256] = "", tmp[1024], mine[1024], why_buf[256];
    const char *why = NULL;
    DIR *d;
    struct dirent *de;
    int fd, r, err;
    bool moved;
    if (!srv_kv_id_valid(id) || (d = opendir(root)) == NULL)
        return not_found(e, id, self, NULL);
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.' || strcmp(de->d_name, self) == 0 ||
            !replica_name_ok(de->d_name))
            continue;
        snprintf(from, sizeof from, "%s/%s/%s%s", root, de->d_name, id, SUFFIX);
        if (access(from, F_OK) == 0) {
            snprintf(owner, sizeof owner, "%s", de->d_name);
            break;
        }
    }
    closedir(d);
    if (owner[0] == '\0') {
        char drainer[256];
        /* Another request of this replica may have taken it over meanwhile. */
        if (srv_kv_info_get(c, id, &(srv_kv_info){0}, NULL))
            return true;
        if (draining_replica(root, self, drainer, sizeof drainer)) {
            not_found(e, id, self, NULL);
            snprintf(e->message, sizeof e->message,
                     "no session '%.40s' on replica %.40s: replica %.40s is draining and may "
                     "hold it (its sessions are saved when it stops): retry",
                     id, self, drainer);
            return false;
        }
        return not_found(e, id, self, NULL);
    }
    /* The owner's lock, held only while its process runs (or while
     * another replica takes over one of its files): a running owner keeps
     * its sessions, so two replicas never hold one session. */
    if ((fd = lock_file(root, owner)) < 0)
        return not_found(e, id, self, NULL);
    /* Another takeover from that folder (by this process too: flock locks
     * open files, not processes) holds the lock for a moment; a running
     * owner holds it for good. */
    for (int tries = 0; flock(fd, LOCK_EX | LOCK_NB) != 0; tries++) {
        if ((errno != EWOULDBLOCK && errno != EINTR) || tries == 20) {
            close(fd);
            return not_found(e, id, self, owner);
        }
        usleep(5 * 1000);
    }
    /* The rename is the takeover: atomic, and only one replica can make
     * it. The file then lives in this replica's folder, which only this
     * replica writes, so its old owner, started again, neither loads it
     * nor overwrites it. A name the sweep of srv_kv_save_all ignores until
     * the session is in the cache. */
    snprintf(tmp, sizeof tmp, "%s/%s/%s.adopting", root, self, id);
    snprintf(mine, sizeof mine, "%s/%s/%s%s", root, self, id, SUFFIX);
    moved = rename(from, tmp) == 0;
    err = errno;
    close(fd); /* the owner's lock */
    if (!moved) {
        if (err == ENOENT)
            return not_found(e, id, self, NULL);
        e->code = SRV_ERR_INTERNAL;
        snprintf(e->field, sizeof e->field, "session");
        snprintf(e->message, sizeof e->message, "cannot take over %.150s: %.60s", from,
                 strerror(err));
        return false;
    }
    e->code = SRV_ERR_INTERNAL;
    r = load_one(c, tmp, id, mk, arg, why_buf, sizeof why_buf, &why, e);
    if (r == LOAD_LIVE) { /* made here meanwhile under that id: that one holds the name */
        unlink(tmp);
        return true;
    }
    if (r == LOAD_KEEP)
        srv_kv_keep_file(c, id); /* before the rename: the sweep must leave it */
    rename(tmp, mine);
    if (r == LOAD_OK)
        return true;
    if (e->code == SRV_ERR_INTERNAL)
        snprintf(e->field, sizeof e->field, "session");
    snprintf(e->message, sizeof e->message,
             "session '%.40s' of replica %.40s did not load (%.100s); its file is kept here",
             id, owner, why != NULL ? why : "?");
    return false;
}
