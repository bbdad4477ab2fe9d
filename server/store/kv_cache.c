/* kv_cache.c - see kv_cache.h.
 *
 * One mutex guards the session table, the block counts and the budget;
 * the copying and rotating of an append run outside it, on blocks that
 * only the appending session holds (an append reserves every block it
 * will write first, copying shared ones, so it cannot fail half way).
 */
#include "store/kv_cache.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

/* A block: block_tokens rows of keys, then of values. refs counts the
 * sessions and views that hold it. */
typedef struct kv_block {
    int32_t refs;
    size_t bytes;
    float *k, *v;
} kv_block;

/* The scheme's owner, shared by a session and its forks. */
typedef struct kv_scheme {
    int32_t refs;
    pa_scheme scheme;
    void *owner;
    void (*free_fn)(void *);
} kv_scheme;

typedef struct kv_session {
    char id[SRV_KV_ID_LEN];
    srv_kv_spec spec; /* spec.scheme points into sch */
    kv_scheme *sch;
    bool rotate;       /* keys kept rotated at their virtual positions */
    size_t krow, vrow; /* floats per token */
    kv_block **blocks;
    int32_t nblocks;
    int32_t len;       /* retained tokens: slots [0, len) */
    int32_t *pos;      /* [nblocks * bt] each slot's own position */
    int32_t next_pos;  /* the next token's position */
    int32_t ring;      /* window, full: the slot sinks + ring is the oldest */
    int32_t shift;     /* reposition: the window's shift (kv_cache.h) */
    float *sink_raw;   /* reposition with rotation: the sinks' keys as sent */
    char *scheme_json; /* the request's scheme, for snapshots; NULL: none */
    int64_t appended, evicted;
    bool busy; /* an append runs */
    uint64_t last_ms;
    struct kv_session *hnext;               /* hash chain */
    struct kv_session *prev, *next;         /* creation order */
    struct kv_session *lru_prev, *lru_next; /* most recently used first */
} kv_session;

enum { NBUCKET = 4096 };

struct srv_kv_cache {
    pthread_mutex_t lock;
    pthread_cond_t idle; /* signalled when an append ends */
    srv_kv_config cfg;
    kv_session *bucket[NBUCKET];
    kv_session *first, *last; /* creation order */
    kv_session *lru_head, *lru_tail;
    size_t sessions, bytes, blocks, shared;
    uint64_t evicted_ttl, evicted_full, tokens_appended, tokens_evicted;
    char (*kept)[SRV_KV_ID_LEN]; /* files srv_kv_load_dir skipped (srv_kv_keep_file) */
    size_t n_kept, cap_kept;
};

/* ------------------------------------------------------------------------- */

static void fail(srv_kv_err *e, srv_error code, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void fail(srv_kv_err *e, srv_error code, const char *field, const char *fmt, ...)
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

static uint64_t now_ms(void)
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

static kv_session *find(srv_kv_cache *c, const char *id)
{
    if (id == NULL)
        return NULL;
    for (kv_session *s = c->bucket[hash(id)]; s != NULL; s = s->hnext)
        if (strcmp(s->id, id) == 0)
            return s;
    return NULL;
}

static bool not_found(srv_kv_err *e, const char *id)
{
    fail(e, SRV_ERR_SESSION_NOT_FOUND, "session",
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

static void touch(srv_kv_cache *c, kv_session *s)
{
    s->last_ms = now_ms();
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

static size_t block_bytes(const srv_kv_cache *c, const kv_session *s)
{
    return (size_t)c->cfg.block_tokens * (s->krow + s->vrow) * sizeof(float);
}

/* Counts a reference going (the lock held); frees the block with the last. */
static void block_unref(srv_kv_cache *c, kv_block *b)
{
    if (b == NULL)
        return;
    if (b->refs == 2)
        c->shared--;
    if (--b->refs > 0)
        return;
    c->bytes -= b->bytes;
    c->blocks--;
    free(b);
}

static void block_ref(srv_kv_cache *c, kv_block *b)
{
    if (b->refs++ == 1)
        c->shared++;
}

/* A new block (its bytes already reserved), rows NaN-free but unset. */
static kv_block *block_new(const srv_kv_cache *c, const kv_session *s)
{
    const size_t bytes = block_bytes(c, s);
    kv_block *b = malloc(sizeof *b + bytes + 64);
    uintptr_t p;
    if (b == NULL)
        return NULL;
    p = ((uintptr_t)(b + 1) + 63) & ~(uintptr_t)63;
    b->refs = 1;
    b->bytes = bytes;
    b->k = (float *)p;
    b->v = b->k + (size_t)c->cfg.block_tokens * s->krow;
    memset(b->k, 0, bytes);
    return b;
}

static void scheme_unref(kv_scheme *sch)
{
    if (sch == NULL || --sch->refs > 0)
        return;
    if (sch->free_fn != NULL)
        sch->free_fn(sch->owner);
    free(sch);
}

/* Unlinks and frees s (the lock held). */
static void drop(srv_kv_cache *c, kv_session *s)
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
        block_unref(c, s->blocks[i]);
    free(s->blocks);
    free(s->pos);
    free(s->sink_raw);
    free(s->scheme_json);
    scheme_unref(s->sch);
    c->sessions--;
    free(s);
}

static void new_id(char id[SRV_KV_ID_LEN])
{
    unsigned char r[16];
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) {
        /* no entropy source: the clock and a counter keep ids unique */
        static uint64_t n;
        const uint64_t t = now_ms() ^ (++n * 0x9e3779b97f4a7c15u);
        memcpy(r, &t, 8);
        memcpy(r + 8, &n, 8);
    }
    for (int i = 0; i < 16; i++)
        snprintf(id + 2 * i, 3, "%02x", r[i]);
}

/* Links s in under want_id (free: the caller checked), or a new random id
 * when want_id is NULL. */
static void link_new(srv_kv_cache *c, kv_session *s, const char *want_id)
{
    if (want_id != NULL)
        snprintf(s->id, sizeof s->id, "%s", want_id);
    else
        do
            new_id(s->id);
        while (find(c, s->id) != NULL);
    s->hnext = c->bucket[hash(s->id)];
    c->bucket[hash(s->id)] = s;
    s->prev = c->last;
    if (c->last != NULL)
        c->last->next = s;
    else
        c->first = s;
    c->last = s;
    c->sessions++;
    touch(c, s);
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
        drop(c, c->first);
    free(c->kept);
    pthread_cond_destroy(&c->idle);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

/* The session id once no append runs on it (the lock held; it may be
 * released while waiting): NULL when there is none, or no longer. */
static kv_session *find_idle(srv_kv_cache *c, const char *id)
{
    kv_session *s;
    while ((s = find(c, id)) != NULL && s->busy)
        pthread_cond_wait(&c->idle, &c->lock);
    return s;
}

/* Whether keys are kept rotated: rope whose angles depend on the position
 * alone (dynamic and longrope scale by a call's largest position, M-RoPE
 * takes three rows: those keep their keys as sent). */
static bool keeps_rotated(const pa_scheme *s)
{
    const pa_rope *r = &s->rope;
    return s->type == PA_SCHEME_ROPE && r->scaling != PA_ROPE_SCALING_DYNAMIC &&
           r->scaling != PA_ROPE_SCALING_LONGROPE && r->mrope_section[0] == 0 &&
           r->mrope_section[1] == 0 && r->mrope_section[2] == 0;
}

static bool check_spec(const srv_kv_spec *sp, srv_kv_err *e)
{
    pa_error pe;
    if (sp->scheme == NULL) {
        fail(e, SRV_ERR_INVALID_ARGUMENT, "scheme", "a session needs its scheme");
        return false;
    }
    switch (sp->scheme->type) {
    case PA_SCHEME_SINUSOIDAL:
    case PA_SCHEME_LEARNED:
    case PA_SCHEME_ROPE2D:
    case PA_SCHEME_COPE:
        fail(e, SRV_ERR_UNSUPPORTED, "scheme.type", "scheme '%s' cannot keep a session: %s",
             pa_scheme_type_name(sp->scheme->type),
             sp->scheme->type == PA_SCHEME_ROPE2D ? "its keys have (row, column) coordinates"
             : sp->scheme->type == PA_SCHEME_COPE ? "its positions depend on every key's gate"
                                                  : "it adds positions to token embeddings");
        return false;
    default:
        break;
    }
    if (sp->num_kv_heads < 1 || sp->head_dim < 1 || sp->v_head_dim < 1) {
        fail(e, SRV_ERR_INVALID_ARGUMENT,
             sp->num_kv_heads < 1 ? "num_kv_heads"
             : sp->head_dim < 1   ? "head_dim"
                                  : "v_head_dim",
             "num_kv_heads=%d, head_dim=%d and v_head_dim=%d must be >= 1", (int)sp->num_kv_heads,
             (int)sp->head_dim, (int)sp->v_head_dim);
        return false;
    }
    if ((int64_t)sp->num_kv_heads * sp->head_dim > (1 << 20) ||
        (int64_t)sp->num_kv_heads * sp->v_head_dim > (1 << 20)) {
        fail(e, SRV_ERR_OUT_OF_RANGE, "num_kv_heads",
             "num_kv_heads * head_dim = %lld floats per token is past 2^20",
             (long long)sp->num_kv_heads * sp->head_dim);
        return false;
    }
    if (sp->max_tokens < 1) {
        fail(e, SRV_ERR_INVALID_ARGUMENT, "max_tokens", "max_tokens=%d must be >= 1",
             (int)sp->max_tokens);
        return false;
    }
    if (sp->eviction == SRV_KV_EVICT_WINDOW) {
        if (sp->window < 1 || sp->sinks < 0 || (int64_t)sp->sinks + sp->window > sp->max_tokens) {
            fail(e, SRV_ERR_INVALID_ARGUMENT, sp->sinks < 0 ? "eviction.sinks" : "eviction.window",
                 "eviction window=%d and sinks=%d: window >= 1, sinks >= 0 and sinks + window "
                 "<= max_tokens=%d",
                 (int)sp->window, (int)sp->sinks, (int)sp->max_tokens);
            return false;
        }
    } else if (sp->eviction != SRV_KV_EVICT_NONE || sp->reposition) {
        fail(e, SRV_ERR_INVALID_ARGUMENT, "eviction.reposition",
             "reposition belongs to eviction window");
        return false;
    }
    if (sp->reposition && sp->scheme->type == PA_SCHEME_ROPE &&
        (sp->scheme->rope.scaling == PA_ROPE_SCALING_DYNAMIC ||
         sp->scheme->rope.scaling == PA_ROPE_SCALING_LONGROPE)) {
        fail(e, SRV_ERR_UNSUPPORTED, "eviction.reposition",
             "rope scaling '%s' picks its frequencies by the largest position, which "
             "repositioning changes: reposition needs frequencies fixed by position alone",
             pa_rope_scaling_name(sp->scheme->rope.scaling));
        return false;
    }
    if (sp->scheme->type == PA_SCHEME_ROPE &&
        pa_rope_check(&sp->scheme->rope, sp->head_dim, &pe) != PA_STATUS_OK) {
        fail(e, srv_error_from_pa(pe.status), pe.field, "%s", pe.message);
        return false;
    }
    return true;
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
        fail(e, SRV_ERR_INVALID_ARGUMENT, "id",
             "id='%.80s' is not a session id: 1 to %d characters of A-Z a-z 0-9 _ . -, not "
             "starting with '.'",
             want_id, SRV_KV_ID_LEN - 1);
        return false;
    }
    if (!check_spec(spec, e))
        return false;
    s = calloc(1, sizeof *s);
    sch = calloc(1, sizeof *sch);
    if (s == NULL || sch == NULL) {
        free(s);
        free(sch);
        fail(e, SRV_ERR_INTERNAL, "", "out of memory creating a session");
        return false;
    }
    sch->refs = 1;
    sch->scheme = *spec->scheme;
    sch->owner = spec->scheme_owner;
    sch->free_fn = spec->scheme_free;
    s->sch = sch;
    s->spec = *spec;
    s->spec.scheme = &sch->scheme;
    s->rotate = keeps_rotated(&sch->scheme);
    if (spec->scheme_json != NULL && (s->scheme_json = strdup(spec->scheme_json)) == NULL) {
        free(s);
        free(sch);
        fail(e, SRV_ERR_INTERNAL, "", "out of memory creating a session");
        return false;
    }
    s->spec.scheme_json = s->scheme_json;
    s->krow = (size_t)spec->num_kv_heads * spec->head_dim;
    s->vrow = (size_t)spec->num_kv_heads * spec->v_head_dim;
    pthread_mutex_lock(&c->lock);
    if (want_id != NULL && find(c, want_id) != NULL) {
        pthread_mutex_unlock(&c->lock);
        free(s->scheme_json);
        free(s);
        free(sch);
        fail(e, SRV_ERR_SESSION_EXISTS, "id", "session '%s' exists already", want_id);
        return false;
    }
    link_new(c, s, want_id);
    snprintf(id, SRV_KV_ID_LEN, "%s", s->id);
    pthread_mutex_unlock(&c->lock);
    return true;
}

bool srv_kv_delete(srv_kv_cache *c, const char *id, srv_kv_err *e)
{
    kv_session *s;
    pthread_mutex_lock(&c->lock);
    s = find(c, id);
    if (s != NULL && s->busy) {
        pthread_mutex_unlock(&c->lock);
        fail(e, SRV_ERR_SESSION_BUSY, "session",
             "session '%s' has an append in flight: delete it after that answers", id);
        return false;
    }
    if (s != NULL)
        drop(c, s);
    pthread_mutex_unlock(&c->lock);
    return s != NULL || not_found(e, id);
}

bool srv_kv_fork(srv_kv_cache *c, const char *id, char new_id[SRV_KV_ID_LEN], srv_kv_err *e)
{
    kv_session *p, *s = calloc(1, sizeof *s);
    size_t slots;
    if (s == NULL) {
        fail(e, SRV_ERR_INTERNAL, "", "out of memory forking a session");
        return false;
    }
    pthread_mutex_lock(&c->lock);
    p = find_idle(c, id);
    if (p == NULL) {
        pthread_mutex_unlock(&c->lock);
        free(s);
        return not_found(e, id);
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
        fail(e, SRV_ERR_INTERNAL, "", "out of memory forking a session");
        return false;
    }
    for (int32_t i = 0; i < p->nblocks; i++) {
        s->blocks[i] = p->blocks[i];
        if (s->blocks[i] != NULL)
            block_ref(c, s->blocks[i]);
    }
    if (slots > 0) /* an empty parent has no positions yet (p->pos NULL) */
        memcpy(s->pos, p->pos, slots * sizeof *s->pos);
    if (p->sink_raw != NULL)
        memcpy(s->sink_raw, p->sink_raw, (size_t)p->spec.sinks * p->krow * sizeof(float));
    s->sch->refs++;
    touch(c, p);
    link_new(c, s, NULL);
    snprintf(new_id, SRV_KV_ID_LEN, "%s", s->id);
    pthread_mutex_unlock(&c->lock);
    return true;
}

/* ------------------------------------------------------------------------- */
/* Append                                                                    */
/* ------------------------------------------------------------------------- */

/* The slot the next token takes, and whether it drops the oldest window
 * token there (s as it is before that token). */
static int32_t next_slot(const kv_session *s, int32_t len, int32_t ring, bool *evicts)
{
    const srv_kv_spec *sp = &s->spec;
    *evicts = false;
    if (sp->eviction != SRV_KV_EVICT_WINDOW || len < sp->sinks + sp->window)
        return len;
    *evicts = true;
    return sp->sinks + ring;
}

/* Drops idle sessions, least recently used first, until need more bytes
 * fit the budget (the lock held); keep is never dropped, and nothing is
 * when dropping every idle session would not make room (counting the
 * blocks each holds alone). */
static bool make_room(srv_kv_cache *c, size_t need, const kv_session *keep)
{
    kv_session *s = c->lru_tail;
    size_t freeable = 0;
    if (c->bytes + need <= c->cfg.budget_bytes)
        return true;
    for (kv_session *t = c->lru_tail; t != NULL; t = t->lru_prev)
        for (int32_t b = 0; t != keep && !t->busy && b < t->nblocks; b++)
            if (t->blocks[b] != NULL && t->blocks[b]->refs == 1)
                freeable += t->blocks[b]->bytes;
    if (c->bytes - freeable + need > c->cfg.budget_bytes)
        return false;
    while (c->bytes + need > c->cfg.budget_bytes && s != NULL) {
        kv_session *prev = s->lru_prev;
        if (s != keep && !s->busy) {
            drop(c, s);
            c->evicted_full++;
        }
        s = prev;
    }
    return c->bytes + need <= c->cfg.budget_bytes;
}

/* Rotates n rows of keys (Hkv heads of D) at positions pos into dst. */
static void rotate_rows(const kv_session *s, const float *src, const int32_t *pos, int32_t n,
                        float *dst, float *cs, float *sn)
{
    const pa_rope *r = &s->spec.scheme->rope;
    for (int32_t i = 0; i < n; i++) {
        /* Angles of one position (its own table row, as attention's). */
        pa_rope_cos_sin(r, s->spec.head_dim, pos + i, 1, pos[i], cs, sn, NULL);
        /* in place on a copy, as the kernels rotate keys: the same bits */
        memcpy(dst + (size_t)i * s->krow, src + (size_t)i * s->krow, s->krow * sizeof(float));
        pa_rope_apply(r, s->spec.head_dim, 1, s->spec.num_kv_heads, cs, sn,
                      dst + (size_t)i * s->krow, dst + (size_t)i * s->krow);
    }
}

bool srv_kv_append(srv_kv_cache *c, const char *id, const float *k, const float *v, int32_t n,
                   const int32_t *positions, srv_kv_err *e)
{
    kv_session *s;
    const int32_t bt = c->cfg.block_tokens;
    int32_t len, ring, nb_new, evicts = 0, *slot = NULL, *posv = NULL;
    kv_block **nb = NULL;
    bool ok = false;
    float *cs = NULL, *sn = NULL;
    size_t need = 0;

    if (n < 1) {
        fail(e, SRV_ERR_INVALID_ARGUMENT, "k",
             "an append needs at least one token (k [n, Hkv, D])");
        return false;
    }
    pthread_mutex_lock(&c->lock);
    s = find(c, id);
    if (s == NULL) {
        pthread_mutex_unlock(&c->lock);
        return not_found(e, id);
    }
    if (s->busy) {
        pthread_mutex_unlock(&c->lock);
        fail(e, SRV_ERR_SESSION_BUSY, "session",
             "session '%s' has another append in flight: appends to one session are ordered, "
             "send the next after it answers",
             id);
        return false;
    }
    if (positions != NULL && s->spec.reposition) {
        pthread_mutex_unlock(&c->lock);
        fail(e, SRV_ERR_INVALID_ARGUMENT, "k_positions",
             "session '%s' repositions its tokens (eviction.reposition): positions come from "
             "the cache, leave k_positions out",
             id);
        return false;
    }
    if (s->spec.eviction == SRV_KV_EVICT_NONE && (int64_t)s->len + n > s->spec.max_tokens) {
        pthread_mutex_unlock(&c->lock);
        fail(e, SRV_ERR_SESSION_FULL, "k",
             "session '%s' holds %d of its max_tokens=%d tokens: %d more do not fit (eviction "
             "none)",
             id, (int)s->len, (int)s->spec.max_tokens, (int)n);
        return false;
    }
    s->busy = true;
    pthread_mutex_unlock(&c->lock);

    /* Where each token goes, and every block written: new ones, and copies
     * of shared ones (a fork's, or a view's). */
    slot = malloc((size_t)n * sizeof *slot);
    posv = malloc((size_t)n * sizeof *posv);
    len = s->len;
    ring = s->ring;
    if (slot == NULL || posv == NULL) {
        fail(e, SRV_ERR_INTERNAL, "", "out of memory appending");
        goto out;
    }
    for (int32_t i = 0; i < n; i++) {
        bool ev;
        if (positions != NULL) {
            posv[i] = positions[i];
        } else {
            const int64_t p = (int64_t)s->next_pos + i;
            if (p > INT32_MAX - 1) {
                fail(e, SRV_ERR_OUT_OF_RANGE, "k_positions",
                     "session '%s' is at position %d: %d more tokens pass 2^31", id,
                     (int)s->next_pos, (int)n);
                goto out;
            }
            posv[i] = (int32_t)p;
        }
        slot[i] = next_slot(s, len, ring, &ev);
        if (ev)
            ring = (ring + 1) % s->spec.window, evicts++;
        else
            len++;
    }
    {
        const int32_t last = (len + bt - 1) / bt; /* blocks the slots reach */
        const bool resink = s->rotate && s->spec.reposition && s->spec.sinks > 0;
        nb_new = last > s->nblocks ? last : s->nblocks;
        nb = calloc((size_t)nb_new + 1, sizeof *nb);
        if (nb == NULL) {
            fail(e, SRV_ERR_INTERNAL, "", "out of memory appending");
            goto out;
        }
        pthread_mutex_lock(&c->lock);
        for (int32_t b = 0; b < nb_new; b++) {
            bool written = false;
            for (int32_t i = 0; i < n && !written; i++)
                written = slot[i] / bt == b;
            if (resink && b * bt < s->spec.sinks)
                written = true; /* the sinks are re-rotated */
            nb[b] = b < s->nblocks ? s->blocks[b] : NULL;
            if (written && (nb[b] == NULL || nb[b]->refs > 1))
                need += block_bytes(c, s);
        }
        if (!make_room(c, need, s)) {
            pthread_mutex_unlock(&c->lock);
            fail(e, SRV_ERR_CACHE_FULL, "k",
                 "the session cache holds %zu of its %zu bytes (%zu sessions): %zu more for "
                 "session '%s' do not fit (set by --cache-mb)",
                 c->bytes, c->cfg.budget_bytes, c->sessions, need, id);
            goto out;
        }
        c->bytes += need; /* reserved: the blocks come below */
        pthread_mutex_unlock(&c->lock);
    }
    {
        /* The new table: fresh blocks and private copies, outside the lock
         * (only this append writes them). */
        size_t taken = 0;
        const bool resink = s->rotate && s->spec.reposition && s->spec.sinks > 0;
        int32_t *pos2 = realloc(s->pos, (size_t)nb_new * bt * sizeof *pos2 + sizeof *pos2);
        if (pos2 == NULL) {
            fail(e, SRV_ERR_INTERNAL, "", "out of memory appending");
            goto unreserve;
        }
        s->pos = pos2;
        for (int32_t b = 0; b < nb_new; b++) {
            bool written = false;
            for (int32_t i = 0; i < n && !written; i++)
                written = slot[i] / bt == b;
            if (resink && b * bt < s->spec.sinks)
                written = true;
            if (!written || (nb[b] != NULL && nb[b]->refs == 1))
                continue;
            {
                kv_block *fresh = block_new(c, s);
                if (fresh == NULL) {
                    fail(e, SRV_ERR_INTERNAL, "", "out of memory appending");
                    for (int32_t q = 0; q < b; q++) /* undo the copies made */
                        if (nb[q] != NULL && (q >= s->nblocks || nb[q] != s->blocks[q]))
                            free(nb[q]);
                    goto unreserve;
                }
                if (nb[b] != NULL)
                    memcpy(fresh->k, nb[b]->k, fresh->bytes);
                taken += fresh->bytes;
                nb[b] = fresh;
            }
        }
        (void)taken;
    }
    if (s->rotate && s->spec.reposition && s->spec.sinks > 0 && s->sink_raw == NULL)
        s->sink_raw = calloc((size_t)s->spec.sinks * s->krow, sizeof(float));
    if (s->rotate) {
        cs = malloc((size_t)s->spec.head_dim * sizeof *cs);
        sn = malloc((size_t)s->spec.head_dim * sizeof *sn);
        if (cs == NULL || sn == NULL ||
            (s->spec.reposition && s->spec.sinks > 0 && s->sink_raw == NULL)) {
            fail(e, SRV_ERR_INTERNAL, "", "out of memory appending");
            goto unreserve_blocks;
        }
    }
    /* Write the rows. */
    {
        int32_t shift = s->shift;
        for (int32_t i = 0; i < n; i++) {
            kv_block *b = nb[slot[i] / bt];
            const int32_t r = slot[i] % bt;
            float *kd = b->k + (size_t)r * s->krow;
            if (s->rotate)
                rotate_rows(s, k + (size_t)i * s->krow, posv + i, 1, kd, cs, sn);
            else
                memcpy(kd, k + (size_t)i * s->krow, s->krow * sizeof(float));
            memcpy(b->v + (size_t)r * s->vrow, v + (size_t)i * s->vrow, s->vrow * sizeof(float));
            s->pos[slot[i]] = posv[i];
            if (slot[i] < s->spec.sinks && s->spec.reposition && s->rotate)
                memcpy(s->sink_raw + (size_t)slot[i] * s->krow, k + (size_t)i * s->krow,
                       s->krow * sizeof(float));
        }
        /* The window's shift: its oldest position minus the sinks. */
        if (s->spec.reposition) {
            const int32_t nlen = len, full = s->spec.sinks + s->spec.window;
            shift = nlen < full ? 0 : s->pos[s->spec.sinks + ring] - s->spec.sinks;
            if (s->rotate && shift != s->shift)
                for (int32_t j = 0; j < s->spec.sinks && j < nlen; j++) {
                    kv_block *b = nb[j / bt];
                    const int32_t vp = s->pos[j] + shift;
                    rotate_rows(s, s->sink_raw + (size_t)j * s->krow, &vp, 1,
                                b->k + (size_t)(j % bt) * s->krow, cs, sn);
                }
        }
        pthread_mutex_lock(&c->lock);
        for (int32_t b = 0; b < nb_new; b++) {
            kv_block *old = b < s->nblocks ? s->blocks[b] : NULL;
            if (nb[b] != old) {
                c->blocks++;
                block_unref(c, old);
            }
        }
        free(s->blocks);
        s->blocks = nb;
        nb = NULL;
        s->nblocks = nb_new;
        s->evicted += evicts;
        c->tokens_evicted += (uint64_t)evicts;
        s->len = len;
        s->ring = ring;
        s->shift = shift;
        s->next_pos = posv[n - 1] + 1;
        s->appended += n;
        c->tokens_appended += (uint64_t)n;
        s->busy = false;
        touch(c, s);
        pthread_cond_broadcast(&c->idle);
        pthread_mutex_unlock(&c->lock);
        ok = true;
        goto done;
    }
unreserve_blocks:
    for (int32_t b = 0; b < nb_new; b++)
        if (nb[b] != NULL && (b >= s->nblocks || nb[b] != s->blocks[b]))
            free(nb[b]);
unreserve:
    pthread_mutex_lock(&c->lock);
    c->bytes -= need;
    pthread_mutex_unlock(&c->lock);
out:
    pthread_mutex_lock(&c->lock);
    s->busy = false;
    pthread_cond_broadcast(&c->idle);
    pthread_mutex_unlock(&c->lock);
done:
    free(nb);
    free(slot);
    free(posv);
    free(cs);
    free(sn);
    return ok;
}

/* ------------------------------------------------------------------------- */
/* Views, figures                                                            */
/* ------------------------------------------------------------------------- */

/* Slot j's virtual position (kv_cache.h). */
static int32_t virtual_pos(const kv_session *s, int32_t j)
{
    if (s->spec.reposition && j < s->spec.sinks)
        return s->pos[j] + s->shift;
    return s->pos[j];
}

typedef struct kv_hold {
    kv_block **blocks;
    int32_t n;
    kv_scheme *sch;
} kv_hold;

bool srv_kv_view_take(srv_kv_cache *c, const char *id, srv_kv_view *v, srv_kv_err *e)
{
    kv_session *s;
    kv_hold *h;
    memset(v, 0, sizeof *v);
    pthread_mutex_lock(&c->lock);
    s = find_idle(c, id);
    if (s == NULL) {
        pthread_mutex_unlock(&c->lock);
        return not_found(e, id);
    }
    h = calloc(1, sizeof *h);
    v->k_pages = calloc((size_t)s->nblocks + 1, sizeof *v->k_pages);
    v->v_pages = calloc((size_t)s->nblocks + 1, sizeof *v->v_pages);
    v->positions = malloc(((size_t)s->len + 1) * sizeof *v->positions);
    if (h != NULL)
        h->blocks = calloc((size_t)s->nblocks + 1, sizeof *h->blocks);
    if (h == NULL || h->blocks == NULL || v->k_pages == NULL || v->v_pages == NULL ||
        v->positions == NULL) {
        pthread_mutex_unlock(&c->lock);
        if (h != NULL)
            free(h->blocks);
        free(h);
        free(v->k_pages);
        free(v->v_pages);
        free(v->positions);
        memset(v, 0, sizeof *v);
        fail(e, SRV_ERR_INTERNAL, "", "out of memory reading a session");
        return false;
    }
    h->n = s->nblocks;
    for (int32_t b = 0; b < s->nblocks; b++) {
        h->blocks[b] = s->blocks[b];
        block_ref(c, s->blocks[b]);
        v->k_pages[b] = s->blocks[b]->k;
        v->v_pages[b] = s->blocks[b]->v;
    }
    for (int32_t j = 0; j < s->len; j++)
        v->positions[j] = virtual_pos(s, j);
    v->n_pages = s->nblocks;
    v->page_tokens = c->cfg.block_tokens;
    v->length = s->len;
    v->next_position = s->next_pos;
    v->prerotated = s->rotate;
    v->spec = s->spec;
    v->hold = h;
    h->sch = s->sch;
    s->sch->refs++; /* the spec's scheme outlives a delete while viewed */
    touch(c, s);
    pthread_mutex_unlock(&c->lock);
    return true;
}

void srv_kv_view_release(srv_kv_cache *c, srv_kv_view *v)
{
    kv_hold *h = v->hold;
    if (h == NULL)
        return;
    pthread_mutex_lock(&c->lock);
    for (int32_t b = 0; b < h->n; b++)
        block_unref(c, h->blocks[b]);
    scheme_unref(h->sch);
    pthread_mutex_unlock(&c->lock);
    free(h->blocks);
    free(h);
    free(v->k_pages);
    free(v->v_pages);
    free(v->positions);
    memset(v, 0, sizeof *v);
}

static void info_of(const srv_kv_cache *c, const kv_session *s, srv_kv_info *o)
{
    const uint64_t t = now_ms();
    memset(o, 0, sizeof *o);
    snprintf(o->id, sizeof o->id, "%s", s->id);
    o->length = s->len;
    o->appended = s->appended;
    o->next_position = s->next_pos;
    o->evicted = s->evicted;
    o->first_position = INT32_MAX;
    o->last_position = INT32_MIN;
    for (int32_t j = 0; j < s->len; j++) {
        const int32_t p = virtual_pos(s, j);
        o->first_position = p < o->first_position ? p : o->first_position;
        o->last_position = p > o->last_position ? p : o->last_position;
    }
    if (s->len == 0)
        o->first_position = o->last_position = 0;
    for (int32_t b = 0; b < s->nblocks; b++) {
        o->bytes += s->blocks[b]->bytes;
        o->shared_blocks += s->blocks[b]->refs > 1;
    }
    o->idle_s = t > s->last_ms ? (double)(t - s->last_ms) / 1000.0 : 0.0;
    o->spec = s->spec;
    o->scheme_type = s->spec.scheme->type;
    o->prerotated = s->rotate;
    o->page_tokens = c->cfg.block_tokens;
}

bool srv_kv_info_get(srv_kv_cache *c, const char *id, srv_kv_info *out, srv_kv_err *e)
{
    kv_session *s;
    pthread_mutex_lock(&c->lock);
    s = find(c, id);
    if (s != NULL)
        info_of(c, s, out);
    pthread_mutex_unlock(&c->lock);
    return s != NULL || not_found(e, id);
}

bool srv_kv_info_hold(srv_kv_cache *c, const char *id, srv_kv_info *out, void **hold, srv_kv_err *e)
{
    kv_session *s;
    *hold = NULL;
    pthread_mutex_lock(&c->lock);
    s = find(c, id);
    if (s != NULL) {
        info_of(c, s, out);
        s->sch->refs++;
        *hold = s->sch;
    }
    pthread_mutex_unlock(&c->lock);
    return s != NULL || not_found(e, id);
}

void srv_kv_scheme_release(srv_kv_cache *c, void *hold)
{
    if (hold == NULL)
        return;
    pthread_mutex_lock(&c->lock);
    scheme_unref(hold);
    pthread_mutex_unlock(&c->lock);
}

size_t srv_kv_list(srv_kv_cache *c, size_t offset, srv_kv_info *out, size_t cap, size_t *total)
{
    size_t i = 0, n = 0;
    pthread_mutex_lock(&c->lock);
    for (kv_session *s = c->first; s != NULL; s = s->next, i++)
        if (i >= offset && n < cap)
            info_of(c, s, &out[n++]);
    *total = c->sessions;
    pthread_mutex_unlock(&c->lock);
    return n;
}

size_t srv_kv_expire(srv_kv_cache *c)
{
    size_t n = 0;
    const uint64_t t = now_ms();
    if (c->cfg.ttl_s <= 0.0)
        return 0;
    pthread_mutex_lock(&c->lock);
    for (kv_session *s = c->lru_tail, *prev; s != NULL; s = prev) {
        prev = s->lru_prev;
        if ((double)(t - s->last_ms) / 1000.0 < c->cfg.ttl_s)
            break; /* the rest were used more recently */
        if (s->busy)
            continue;
        drop(c, s);
        c->evicted_ttl++;
        n++;
    }
    pthread_mutex_unlock(&c->lock);
    return n;
}

void srv_kv_stats_get(srv_kv_cache *c, srv_kv_stats *o)
{
    pthread_mutex_lock(&c->lock);
    o->sessions = c->sessions;
    o->bytes = c->bytes;
    o->budget = c->cfg.budget_bytes;
    o->blocks_used = c->blocks;
    o->blocks_shared = c->shared;
    o->evicted_ttl = c->evicted_ttl;
    o->evicted_full = c->evicted_full;
    o->tokens_appended = c->tokens_appended;
    o->tokens_evicted = c->tokens_evicted;
    pthread_mutex_unlock(&c->lock);
}

/* ------------------------------------------------------------------------- */
/* Export, import                                                            */
/* ------------------------------------------------------------------------- */

void srv_kv_state_free(srv_kv_state *st)
{
    free(st->k);
    free(st->v);
    free(st->pos);
    free(st->sink_raw);
    st->k = st->v = st->sink_raw = NULL;
    st->pos = NULL;
}

bool srv_kv_export(srv_kv_cache *c, const char *id, srv_kv_state *st, srv_kv_err *e)
{
    kv_session *s;
    const int32_t bt = c->cfg.block_tokens;
    memset(st, 0, sizeof *st);
    pthread_mutex_lock(&c->lock);
    s = find_idle(c, id);
    if (s == NULL) {
        pthread_mutex_unlock(&c->lock);
        return not_found(e, id);
    }
    st->k = malloc(((size_t)s->len * s->krow + 1) * sizeof(float));
    st->v = malloc(((size_t)s->len * s->vrow + 1) * sizeof(float));
    st->pos = malloc(((size_t)s->len + 1) * sizeof(int32_t));
    if (s->sink_raw != NULL)
        st->sink_raw = malloc((size_t)s->spec.sinks * s->krow * sizeof(float) + 1);
    if (st->k == NULL || st->v == NULL || st->pos == NULL ||
        (s->sink_raw != NULL && st->sink_raw == NULL)) {
        pthread_mutex_unlock(&c->lock);
        srv_kv_state_free(st);
        fail(e, SRV_ERR_INTERNAL, "", "out of memory saving a session");
        return false;
    }
    for (int32_t j = 0; j < s->len; j++) {
        const kv_block *b = s->blocks[j / bt];
        memcpy(st->k + (size_t)j * s->krow, b->k + (size_t)(j % bt) * s->krow,
               s->krow * sizeof(float));
        memcpy(st->v + (size_t)j * s->vrow, b->v + (size_t)(j % bt) * s->vrow,
               s->vrow * sizeof(float));
        st->pos[j] = s->pos[j];
    }
    if (s->sink_raw != NULL)
        memcpy(st->sink_raw, s->sink_raw, (size_t)s->spec.sinks * s->krow * sizeof(float));
    snprintf(st->id, sizeof st->id, "%s", s->id);
    st->spec = s->spec;
    st->length = s->len;
    st->next_position = s->next_pos;
    st->ring = s->ring;
    st->shift = s->shift;
    st->appended = s->appended;
    st->evicted = s->evicted;
    st->prerotated = s->rotate;
    pthread_mutex_unlock(&c->lock);
    return true;
}

/* Whether st holds together (its spec already checked). */
static bool state_ok(const srv_kv_state *st, srv_kv_err *e)
{
    const srv_kv_spec *sp = &st->spec;
    const bool window = sp->eviction == SRV_KV_EVICT_WINDOW;
    const int32_t cap = window ? sp->sinks + sp->window : sp->max_tokens;
    const char *why = NULL;
    if (st->length < 0 || st->length > cap)
        why = "its length does not fit its eviction";
    else if (st->prerotated != keeps_rotated(sp->scheme))
        why = "its keys were kept otherwise than its scheme keeps them";
    else if (window && (st->ring < 0 || st->ring >= sp->window || (st->length < cap && st->ring)))
        why = "its window ring is out of range";
    else if (!window && (st->ring != 0 || st->shift != 0))
        why = "it has a window state without a window";
    else if (st->length > 0 && (st->k == NULL || st->v == NULL || st->pos == NULL))
        why = "its keys, values or positions are missing";
    else if (sp->reposition && st->prerotated && sp->sinks > 0 && st->length > 0 &&
             st->sink_raw == NULL)
        why = "its sinks' raw keys are missing";
    else if (st->appended < st->length || st->evicted < 0)
        why = "its counts do not add up";
    for (int32_t j = 0; why == NULL && j < st->length; j++)
        if (st->pos[j] >= st->next_position)
            why = "a position is past its next position";
    if (why != NULL)
        fail(e, SRV_ERR_INVALID_ARGUMENT, "session", "session '%s' cannot be restored: %s", st->id,
             why);
    return why == NULL;
}

/* Frees a session that never went into the table. */
static void discard(kv_session *s)
{
    if (s == NULL)
        return;
    for (int32_t b = 0; s->blocks != NULL && b < s->nblocks; b++)
        free(s->blocks[b]);
    free(s->blocks);
    free(s->pos);
    free(s->sink_raw);
    free(s->scheme_json);
    free(s);
}

bool srv_kv_import(srv_kv_cache *c, const srv_kv_state *st, srv_kv_err *e)
{
    kv_session *s;
    kv_scheme *sch;
    const int32_t bt = c->cfg.block_tokens;
    int32_t nb;
    size_t need;
    if (!srv_kv_id_valid(st->id)) {
        fail(e, SRV_ERR_INVALID_ARGUMENT, "id", "'%.80s' is not a session id", st->id);
        return false;
    }
    if (!check_spec(&st->spec, e) || !state_ok(st, e))
        return false;
    s = calloc(1, sizeof *s);
    sch = calloc(1, sizeof *sch);
    nb = (st->length + bt - 1) / bt;
    if (s != NULL) {
        s->blocks = calloc((size_t)nb + 1, sizeof *s->blocks);
        s->pos = calloc((size_t)nb * bt + 1, sizeof *s->pos);
        if (st->sink_raw != NULL)
            s->sink_raw = malloc((size_t)st->spec.sinks * st->spec.num_kv_heads *
                                     st->spec.head_dim * sizeof(float) +
                                 1);
        if (st->spec.scheme_json != NULL)
            s->scheme_json = strdup(st->spec.scheme_json);
    }
    if (s == NULL || sch == NULL || s->blocks == NULL || s->pos == NULL ||
        (st->sink_raw != NULL && s->sink_raw == NULL) ||
        (st->spec.scheme_json != NULL && s->scheme_json == NULL)) {
        discard(s);
        free(sch);
        fail(e, SRV_ERR_INTERNAL, "", "out of memory restoring a session");
        return false;
    }
    s->spec = st->spec;
    s->spec.scheme_json = s->scheme_json;
    s->rotate = st->prerotated;
    s->krow = (size_t)st->spec.num_kv_heads * st->spec.head_dim;
    s->vrow = (size_t)st->spec.num_kv_heads * st->spec.v_head_dim;
    s->len = st->length;
    s->next_pos = st->next_position;
    s->ring = st->ring;
    s->shift = st->shift;
    s->appended = st->appended;
    s->evicted = st->evicted;
    if (st->sink_raw != NULL)
        memcpy(s->sink_raw, st->sink_raw, (size_t)st->spec.sinks * s->krow * sizeof(float));
    memcpy(s->pos, st->pos, (size_t)st->length * sizeof *s->pos);
    need = (size_t)nb * block_bytes(c, s);
    pthread_mutex_lock(&c->lock);
    if (find(c, st->id) != NULL || c->bytes + need > c->cfg.budget_bytes) {
        const bool dup = find(c, st->id) != NULL;
        const size_t used = c->bytes;
        pthread_mutex_unlock(&c->lock);
        discard(s);
        free(sch);
        if (dup)
            fail(e, SRV_ERR_SESSION_EXISTS, "session", "session '%s' exists already", st->id);
        else
            fail(e, SRV_ERR_CACHE_FULL, "session",
                 "session '%s' needs %zu bytes; the cache holds %zu of its %zu (set by "
                 "--cache-mb)",
                 st->id, need, used, c->cfg.budget_bytes);
        return false;
    }
    c->bytes += need;
    pthread_mutex_unlock(&c->lock);
    for (int32_t b = 0; b < nb; b++) {
        kv_block *blk = block_new(c, s);
        if (blk == NULL) {
            pthread_mutex_lock(&c->lock);
            c->bytes -= need;
            pthread_mutex_unlock(&c->lock);
            s->nblocks = b;
            discard(s);
            free(sch);
            fail(e, SRV_ERR_INTERNAL, "", "out of memory restoring a session");
            return false;
        }
        s->blocks[b] = blk;
        for (int32_t r = 0; r < bt && b * bt + r < st->length; r++) {
            const size_t j = (size_t)b * bt + (size_t)r;
            memcpy(blk->k + (size_t)r * s->krow, st->k + j * s->krow, s->krow * sizeof(float));
            memcpy(blk->v + (size_t)r * s->vrow, st->v + j * s->vrow, s->vrow * sizeof(float));
        }
    }
    s->nblocks = nb;
    sch->refs = 1;
    sch->scheme = *st->spec.scheme;
    sch->owner = st->spec.scheme_owner;
    sch->free_fn = st->spec.scheme_free;
    s->sch = sch;
    s->spec.scheme = &sch->scheme;
    pthread_mutex_lock(&c->lock);
    if (find(c, st->id) != NULL) { /* imported meanwhile by another thread */
        c->bytes -= need;
        pthread_mutex_unlock(&c->lock);
        sch->free_fn = NULL; /* the owner stays the caller's */
        discard(s);
        free(sch);
        fail(e, SRV_ERR_SESSION_EXISTS, "session", "session '%s' exists already", st->id);
        return false;
    }
    c->blocks += (size_t)nb;
    link_new(c, s, st->id);
    pthread_mutex_unlock(&c->lock);
    return true;
}

bool srv_kv_keep_file(srv_kv_cache *c, const char *id)
{
    bool ok = true;
    pthread_mutex_lock(&c->lock);
    if (c->n_kept == c->cap_kept) {
        size_t cap = c->cap_kept ? 2 * c->cap_kept : 8;
        void *p = realloc(c->kept, cap * sizeof *c->kept);
        if (p != NULL) {
            c->kept = p;
            c->cap_kept = cap;
        }
    }
    if (c->n_kept < c->cap_kept)
        snprintf(c->kept[c->n_kept++], SRV_KV_ID_LEN, "%s", id);
    else
        ok = false;
    pthread_mutex_unlock(&c->lock);
    return ok;
}

bool srv_kv_file_kept(srv_kv_cache *c, const char *id)
{
    bool found = false;
    pthread_mutex_lock(&c->lock);
    for (size_t i = 0; i < c->n_kept && !found; i++)
        found = strcmp(c->kept[i], id) == 0;
    pthread_mutex_unlock(&c->lock);
    return found;
}
