/* kv_cache.c - see kv_cache.h: the table of sessions, creation, deletion,
 * forks and expiry (views and figures: kv_view.c; appends: kv_append.c; a
 * session's state out and in: kv_state.c; what they share: kv_internal.h).
 *
 * One mutex guards the session table, the block counts and the budget;
 * the copying and rotating of an append run outside it, on blocks that
 * only the appending session holds (an append reserves every block it
 * will write first, copying shared ones, so it cannot fail half way).
 */
#include "store/kv_internal.h"

#include "codec/half.h"

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

void kv_fail(srv_kv_err *e, srv_error code, const char *field, const char *fmt, ...)
{
    va_list ap;
    if (e == NULL)
        return;
    e->code = code;
    snprintf(e->field, sizeof e->field, "%s", field);
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
}

uint64_t kv_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static unsigned hash(const char *id)
{
    unsigned h = 2166136261u;
    for (; *id != '\0'; id++)
        h = (h ^ (unsigned char)*id) * 16777619u;
    return h % NBUCKET;
}

kv_session *kv_find(srv_kv_cache *c, const char *id)
{
    if (id == NULL)
        return NULL;
    for (kv_session *s = c->bucket[hash(id)]; s != NULL; s = s->hnext)
        if (strcmp(s->id, id) == 0)
            return s;
    return NULL;
}

bool kv_not_found(srv_kv_err *e, const char *id)
{
    kv_fail(e, SRV_ERR_SESSION_NOT_FOUND, "session",
            "no session '%.40s' here (it was deleted, expired, or lives on another replica)",
            id != NULL ? id : "");
    return false;
}

static void lru_unlink(srv_kv_cache *c, kv_session *s)
{
    if (s->lru_prev != NULL)
        s->lru_prev->lru_next = s->lru_next;
    else
        c->lru_head = s->lru_next;
    if (s->lru_next != NULL)
        s->lru_next->lru_prev = s->lru_prev;
    else
        c->lru_tail = s->lru_prev;
    s->lru_prev = s->lru_next = NULL;
}

void kv_touch(srv_kv_cache *c, kv_session *s)
{
    s->last_ms = kv_now_ms();
    if (c->lru_head == s)
        return;
    if (s->lru_prev != NULL) /* linked (and not the head) */
        lru_unlink(c, s);
    s->lru_next = c->lru_head;
    if (c->lru_head != NULL)
        c->lru_head->lru_prev = s;
    c->lru_head = s;
    if (c->lru_tail == NULL)
        c->lru_tail = s;
}

size_t kv_esize(pa_dtype t)
{
    return t == PA_DTYPE_F32 ? sizeof(float) : sizeof(uint16_t);
}

void kv_store_row(const kv_session *s, const float *src, size_t n, unsigned char *dst)
{
    uint16_t *h = (uint16_t *)(void *)dst;
    switch (s->spec.dtype) {
    case PA_DTYPE_BF16:
        for (size_t i = 0; i < n; i++)
            h[i] = srv_f32_to_bf16(src[i]);
        break;
    case PA_DTYPE_F16:
        for (size_t i = 0; i < n; i++)
            h[i] = srv_f32_to_f16(src[i]);
        break;
    default:
        memcpy(dst, src, n * sizeof(float));
        break;
    }
}

void kv_load_row(const kv_session *s, const unsigned char *src, size_t n, float *dst)
{
    switch (s->spec.dtype) {
    case PA_DTYPE_BF16:
        srv_bf16_to_f32_n(src, dst, n);
        break;
    case PA_DTYPE_F16:
        srv_f16_to_f32_n(src, dst, n);
        break;
    default:
        memcpy(dst, src, n * sizeof(float));
        break;
    }
}

double kv_fit_limit(pa_dtype t, bool rotated)
{
    const double lim = t == PA_DTYPE_F16 ? 65504.0 : t == PA_DTYPE_BF16 ? 3.3895313892515355e38
                                                                        : (double)FLT_MAX;
    return rotated ? lim / sqrt(2.0) : lim;
}

bool kv_fits(const float *x, size_t n, double lim, size_t *at)
{
    for (size_t i = 0; i < n; i++)
        if (!(fabs((double)x[i]) <= lim)) {
            *at = i;
            return false;
        }
    return true;
}

size_t kv_block_bytes(const srv_kv_cache *c, const kv_session *s)
{
    return (size_t)c->cfg.block_tokens * (s->krow + s->vrow) * s->esize;
}

/* Counts a reference going (the lock held); frees the block with the last. */
void kv_block_unref(srv_kv_cache *c, kv_block *b)
{
    if (b == NULL)
        return;
    if (b->refs == 2)
        c->shared--;
    if (--b->refs > 0)
        return;
    kv_bytes_add(c, b->dtype, -(ptrdiff_t)b->bytes);
    c->blocks--;
    free(b);
}

void kv_block_ref(srv_kv_cache *c, kv_block *b)
{
    if (b->refs++ == 1)
        c->shared++;
}

/* A new block (its bytes already reserved), rows NaN-free but unset. */
kv_block *kv_block_new(const srv_kv_cache *c, const kv_session *s)
{
    const size_t bytes = kv_block_bytes(c, s);
    kv_block *b = malloc(sizeof *b + bytes + 64);
    uintptr_t p;
    if (b == NULL)
        return NULL;
    p = ((uintptr_t)(b + 1) + 63) & ~(uintptr_t)63;
    b->refs = 1;
    b->bytes = bytes;
    b->dtype = s->spec.dtype;
    b->k = (unsigned char *)p;
    b->v = b->k + (size_t)c->cfg.block_tokens * s->krow * s->esize;
    memset(b->k, 0, bytes);
    return b;
}

void kv_scheme_unref(kv_scheme *sch)
{
    if (sch == NULL || --sch->refs > 0)
        return;
    if (sch->free_fn != NULL)
        sch->free_fn(sch->owner);
    free(sch);
}

/* Unlinks and frees s (the lock held). */
void kv_drop(srv_kv_cache *c, kv_session *s)
{
    kv_session **pp = &c->bucket[hash(s->id)];
    while (*pp != s)
        pp = &(*pp)->hnext;
    *pp = s->hnext;
    if (s->prev != NULL)
        s->prev->next = s->next;
    else
        c->first = s->next;
    if (s->next != NULL)
        s->next->prev = s->prev;
    else
        c->last = s->prev;
    lru_unlink(c, s);
    for (int32_t i = 0; i < s->nblocks; i++)
        kv_block_unref(c, s->blocks[i]);
    free(s->blocks);
    free(s->pos);
    free(s->sink_raw);
    free(s->scheme_json);
    kv_scheme_unref(s->sch);
    c->sessions--;
    free(s);
}

static void new_id(char id[SRV_KV_ID_LEN])
{
    unsigned char r[16];
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) {
        /* no entropy source: the clock and a counter keep ids unique */
        static uint64_t n;
        const uint64_t t = kv_now_ms() ^ (++n * 0x9e3779b97f4a7c15u);
        memcpy(r, &t, 8);
        memcpy(r + 8, &n, 8);
    }
    for (int i = 0; i < 16; i++)
        snprintf(id + 2 * i, 3, "%02x", r[i]);
}

/* Links s in under want_id (free: the caller checked), or a new random id
 * when want_id is NULL. */
void kv_link_new(srv_kv_cache *c, kv_session *s, const char *want_id)
{
    if (want_id != NULL)
        snprintf(s->id, sizeof s->id, "%s", want_id);
    else
        do
            new_id(s->id);
        while (kv_find(c, s->id) != NULL);
    s->hnext = c->bucket[hash(s->id)];
    c->bucket[hash(s->id)] = s;
    s->prev = c->last;
    if (c->last != NULL)
        c->last->next = s;
    else
        c->first = s;
    c->last = s;
    c->sessions++;
    kv_touch(c, s);
}

/* ------------------------------------------------------------------------- */

srv_kv_cache *srv_kv_cache_new(const srv_kv_config *cfg)
{
    srv_kv_cache *c;
    if (cfg->block_tokens <= 0 || cfg->block_tokens % 16 != 0)
        return NULL;
    c = calloc(1, sizeof *c);
    if (c == NULL)
        return NULL;
    if (pthread_mutex_init(&c->lock, NULL) != 0) {
        free(c);
        return NULL;
    }
    if (pthread_cond_init(&c->idle, NULL) != 0) {
        pthread_mutex_destroy(&c->lock);
        free(c);
        return NULL;
    }
    c->cfg = *cfg;
    return c;
}

void srv_kv_cache_free(srv_kv_cache *c)
{
    if (c == NULL)
        return;
    while (c->first != NULL)
        kv_drop(c, c->first);
    free(c->kept);
    pthread_cond_destroy(&c->idle);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

/* The session id once no append runs on it (the lock held; it may be
 * released while waiting): NULL when there is none, or no longer. */
kv_session *kv_find_idle(srv_kv_cache *c, const char *id)
{
    kv_session *s;
    while ((s = kv_find(c, id)) != NULL && s->busy)
        pthread_cond_wait(&c->idle, &c->lock);
    return s;
}

/* Whether keys are kept rotated: rope whose angles depend on the position
 * alone (dynamic and longrope scale by a call's largest position, M-RoPE
 * takes three rows: those keep their keys as sent). */
bool kv_keeps_rotated(const pa_scheme *s)
{
    const pa_rope *r = &s->rope;
    return s->type == PA_SCHEME_ROPE && r->scaling != PA_ROPE_SCALING_DYNAMIC &&
           r->scaling != PA_ROPE_SCALING_LONGROPE && r->mrope_section[0] == 0 &&
           r->mrope_section[1] == 0 && r->mrope_section[2] == 0;
}

bool kv_check_spec(const srv_kv_spec *sp, srv_kv_err *e)
{
    pa_error pe;
    if (sp->scheme == NULL) {
        kv_fail(e, SRV_ERR_INVALID_ARGUMENT, "scheme", "a session needs its scheme");
        return false;
    }
    switch (sp->scheme->type) {
    case PA_SCHEME_SINUSOIDAL:
    case PA_SCHEME_LEARNED:
    case PA_SCHEME_ROPE2D:
    case PA_SCHEME_COPE:
        kv_fail(e, SRV_ERR_UNSUPPORTED, "scheme.type", "scheme '%s' cannot keep a session: %s",
                pa_scheme_type_name(sp->scheme->type),
                sp->scheme->type == PA_SCHEME_ROPE2D ? "its keys have (row, column) coordinates"
                : sp->scheme->type == PA_SCHEME_COPE ? "its positions depend on every key's gate"
                                                     : "it adds positions to token embeddings");
        return false;
    default:
        break;
    }
    if (sp->num_kv_heads < 1 || sp->head_dim < 1 || sp->v_head_dim < 1) {
        kv_fail(e, SRV_ERR_INVALID_ARGUMENT,
                sp->num_kv_heads < 1 ? "num_kv_heads"
                : sp->head_dim < 1   ? "head_dim"
                                     : "v_head_dim",
                "num_kv_heads=%d, head_dim=%d and v_head_dim=%d must be >= 1",
                (int)sp->num_kv_heads, (int)sp->head_dim, (int)sp->v_head_dim);
        return false;
    }
    if ((int64_t)sp->num_kv_heads * sp->head_dim > (1 << 20) ||
        (int64_t)sp->num_kv_heads * sp->v_head_dim > (1 << 20)) {
        kv_fail(e, SRV_ERR_OUT_OF_RANGE, "num_kv_heads",
                "num_kv_heads * head_dim = %lld floats per token is past 2^20",
                (long long)sp->num_kv_heads * sp->head_dim);
        return false;
    }
    if (sp->dtype != PA_DTYPE_F32 && sp->dtype != PA_DTYPE_BF16 && sp->dtype != PA_DTYPE_F16) {
        kv_fail(e, SRV_ERR_INVALID_ARGUMENT, "dtype", "dtype=%d is not a storage type",
                (int)sp->dtype);
        return false;
    }
    if (sp->max_tokens < 1) {
        kv_fail(e, SRV_ERR_INVALID_ARGUMENT, "max_tokens", "max_tokens=%d must be >= 1",
                (int)sp->max_tokens);
        return false;
    }
    if (sp->eviction == SRV_KV_EVICT_WINDOW) {
        if (sp->window < 1 || sp->sinks < 0 || (int64_t)sp->sinks + sp->window > sp->max_tokens) {
            kv_fail(e, SRV_ERR_INVALID_ARGUMENT,
                    sp->sinks < 0 ? "eviction.sinks" : "eviction.window",
                    "eviction window=%d and sinks=%d: window >= 1, sinks >= 0 and sinks + window "
                    "<= max_tokens=%d",
                    (int)sp->window, (int)sp->sinks, (int)sp->max_tokens);
            return false;
        }
    } else if (sp->eviction != SRV_KV_EVICT_NONE || sp->reposition) {
        kv_fail(e, SRV_ERR_INVALID_ARGUMENT, "eviction.reposition",
                "reposition belongs to eviction window");
        return false;
    }
    if (sp->reposition && sp->scheme->type == PA_SCHEME_ROPE &&
        (sp->scheme->rope.scaling == PA_ROPE_SCALING_DYNAMIC ||
         sp->scheme->rope.scaling == PA_ROPE_SCALING_LONGROPE)) {
        kv_fail(e, SRV_ERR_UNSUPPORTED, "eviction.reposition",
                "rope scaling '%s' picks its frequencies by the largest position, which "
                "repositioning changes: reposition needs frequencies fixed by position alone",
                pa_rope_scaling_name(sp->scheme->rope.scaling));
        return false;
    }
    if (sp->scheme->type == PA_SCHEME_ROPE &&
        pa_rope_check(&sp->scheme->rope, sp->head_dim, &pe) != PA_STATUS_OK) {
        kv_fail(e, srv_error_from_pa(pe.status), pe.field, "%s", pe.message);
        return false;
    }
    if (sp->model != NULL && (strlen(sp->model) >= SRV_KV_MODEL_LEN || sp->layer < 0)) {
        kv_fail(e, SRV_ERR_INVALID_ARGUMENT, "model",
                "a session's model name is 1 to %d characters and its layer >= 0",
                SRV_KV_MODEL_LEN - 1);
        return false;
    }
    return true;
}

void kv_set_model(kv_session *s, const char *model, int32_t layer)
{
    snprintf(s->model, sizeof s->model, "%s", model != NULL ? model : "");
    s->spec.model = s->model[0] != '\0' ? s->model : NULL;
    s->spec.layer = s->model[0] != '\0' ? layer : 0;
}

bool srv_kv_id_valid(const char *id)
{
    size_t n = 0;
    if (id == NULL || id[0] == '.')
        return false;
    for (; id[n] != '\0'; n++) {
        const char ch = id[n];
        if (n >= SRV_KV_ID_LEN - 1 ||
            !((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
              ch == '_' || ch == '.' || ch == '-'))
            return false;
    }
    return n > 0;
}

bool srv_kv_create(srv_kv_cache *c, const srv_kv_spec *spec, char id[SRV_KV_ID_LEN], srv_kv_err *e)
{
    return srv_kv_create_as(c, spec, NULL, id, e);
}

bool srv_kv_create_as(srv_kv_cache *c, const srv_kv_spec *spec, const char *want_id,
                      char id[SRV_KV_ID_LEN], srv_kv_err *e)
{
    kv_session *s;
    kv_scheme *sch;
    if (want_id != NULL && !srv_kv_id_valid(want_id)) {
        kv_fail(e, SRV_ERR_INVALID_ARGUMENT, "id",
                "id='%.80s' is not a session id: 1 to %d characters of A-Z a-z 0-9 _ . -, not "
                "starting with '.'",
                want_id, SRV_KV_ID_LEN - 1);
        return false;
    }
    if (!kv_check_spec(spec, e))
        return false;
    s = calloc(1, sizeof *s);
    sch = calloc(1, sizeof *sch);
    if (s == NULL || sch == NULL) {
        free(s);
        free(sch);
        kv_fail(e, SRV_ERR_INTERNAL, "", "out of memory creating a session");
        return false;
    }
    sch->refs = 1;
    sch->scheme = *spec->scheme;
    sch->owner = spec->scheme_owner;
    sch->free_fn = spec->scheme_free;
    s->sch = sch;
    s->spec = *spec;
    s->spec.scheme = &sch->scheme;
    s->rotate = kv_keeps_rotated(&sch->scheme);
    if (spec->scheme_json != NULL && (s->scheme_json = strdup(spec->scheme_json)) == NULL) {
        free(s);
        free(sch);
        kv_fail(e, SRV_ERR_INTERNAL, "", "out of memory creating a session");
        return false;
    }
    s->spec.scheme_json = s->scheme_json;
    kv_set_model(s, spec->model, spec->layer);
    s->krow = (size_t)spec->num_kv_heads * spec->head_dim;
    s->vrow = (size_t)spec->num_kv_heads * spec->v_head_dim;
    s->esize = kv_esize(spec->dtype);
    pthread_mutex_lock(&c->lock);
    if (want_id != NULL && kv_find(c, want_id) != NULL) {
        pthread_mutex_unlock(&c->lock);
        free(s->scheme_json);
        free(s);
        free(sch);
        kv_fail(e, SRV_ERR_SESSION_EXISTS, "id", "session '%s' exists already", want_id);
        return false;
    }
    kv_link_new(c, s, want_id);
    snprintf(id, SRV_KV_ID_LEN, "%s", s->id);
    pthread_mutex_unlock(&c->lock);
    return true;
}

bool srv_kv_delete(srv_kv_cache *c, const char *id, srv_kv_err *e)
{
    kv_session *s;
    pthread_mutex_lock(&c->lock);
    s = kv_find(c, id);
    if (s != NULL && s->busy) {
        pthread_mutex_unlock(&c->lock);
        kv_fail(e, SRV_ERR_SESSION_BUSY, "session",
                "session '%s' has an append in flight: delete it after that answers", id);
        return false;
    }
    if (s != NULL)
        kv_drop(c, s);
    pthread_mutex_unlock(&c->lock);
    return s != NULL || kv_not_found(e, id);
}

bool srv_kv_fork(srv_kv_cache *c, const char *id, char new_id[SRV_KV_ID_LEN], srv_kv_err *e)
{
    kv_session *p, *s = calloc(1, sizeof *s);
    size_t slots;
    if (s == NULL) {
        kv_fail(e, SRV_ERR_INTERNAL, "", "out of memory forking a session");
        return false;
    }
    pthread_mutex_lock(&c->lock);
    p = kv_find_idle(c, id);
    if (p == NULL) {
        pthread_mutex_unlock(&c->lock);
        free(s);
        return kv_not_found(e, id);
    }
    *s = *p;
    s->busy = false;
    s->hnext = s->prev = s->next = s->lru_prev = s->lru_next = NULL;
    slots = (size_t)p->nblocks * (size_t)c->cfg.block_tokens;
    s->blocks = malloc(((size_t)p->nblocks + 1) * sizeof *s->blocks);
    s->pos = malloc((slots + 1) * sizeof *s->pos);
    s->sink_raw = NULL;
    s->scheme_json = p->scheme_json != NULL ? strdup(p->scheme_json) : NULL;
    s->spec.scheme_json = s->scheme_json;
    kv_set_model(s, p->spec.model, p->spec.layer); /* spec.model pointed into p */
    if (p->sink_raw != NULL)
        s->sink_raw = malloc((size_t)p->spec.sinks * p->krow * sizeof(float) + 1);
    if (s->blocks == NULL || s->pos == NULL || (p->sink_raw != NULL && s->sink_raw == NULL) ||
        (p->scheme_json != NULL && s->scheme_json == NULL)) {
        pthread_mutex_unlock(&c->lock);
        free(s->scheme_json);
        free(s->blocks);
        free(s->pos);
        free(s->sink_raw);
        free(s);
        kv_fail(e, SRV_ERR_INTERNAL, "", "out of memory forking a session");
        return false;
    }
    for (int32_t i = 0; i < p->nblocks; i++) {
        s->blocks[i] = p->blocks[i];
        if (s->blocks[i] != NULL)
            kv_block_ref(c, s->blocks[i]);
    }
    if (slots > 0) /* an empty parent has no positions yet (p->pos NULL) */
        memcpy(s->pos, p->pos, slots * sizeof *s->pos);
    if (p->sink_raw != NULL)
        memcpy(s->sink_raw, p->sink_raw, (size_t)p->spec.sinks * p->krow * sizeof(float));
    s->sch->refs++;
    kv_touch(c, p);
    kv_link_new(c, s, NULL);
    snprintf(new_id, SRV_KV_ID_LEN, "%s", s->id);
    pthread_mutex_unlock(&c->lock);
    return true;
}

/* ------------------------------------------------------------------------- */
/* Expiry                                                                    */
/* ------------------------------------------------------------------------- */

size_t srv_kv_expire(srv_kv_cache *c)
{
    size_t n = 0;
    uint64_t t;
    if (c->cfg.ttl_s <= 0.0)
        return 0;
    pthread_mutex_lock(&c->lock);
    /* The clock read under the lock, after every touch that came before:
     * read before it, a session touched while this waited was used "after
     * now", and its unsigned idle time wrapped past any TTL. */
    t = kv_now_ms();
    for (kv_session *s = c->lru_tail, *prev; s != NULL; s = prev) {
        prev = s->lru_prev;
        if (s->last_ms >= t || (double)(t - s->last_ms) / 1000.0 < c->cfg.ttl_s)
            break; /* the rest were used more recently */
        if (s->busy)
            continue;
        kv_drop(c, s);
        c->evicted_ttl++;
        n++;
    }
    pthread_mutex_unlock(&c->lock);
    return n;
}
