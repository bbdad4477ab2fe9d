/* kv_internal.h - private to store/: the session cache's structures and
 * the helpers its files share (kv_cache.c: the table, creation, forks,
 * expiry; kv_view.c: views and figures; kv_append.c: appends; kv_state.c:
 * a session's whole state out and in, for snapshots). Every helper but kv_fail, kv_keeps_rotated,
 * kv_check_spec and kv_set_model wants the cache's lock held.
 */
#ifndef SRV_KV_INTERNAL_H
#define SRV_KV_INTERNAL_H

#include "store/kv_cache.h"

#include <pthread.h>

/* A block: block_tokens rows of keys, then of values. refs counts the
 * sessions and views that hold it. */
typedef struct kv_block {
    int32_t refs;
    size_t bytes;
    pa_dtype dtype; /* its session's storage type: the bytes it counts under */
    unsigned char *k, *v; /* rows of esize-byte elements (kv_session) */
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
    size_t krow, vrow; /* elements per token */
    size_t esize;      /* bytes per element: 4 (f32) or 2 (bf16, f16): spec.dtype */
    kv_block **blocks;
    int32_t nblocks;
    int32_t len;       /* retained tokens: slots [0, len) */
    int32_t *pos;      /* [nblocks * bt] each slot's own position */
    int32_t next_pos;  /* the next token's position */
    int32_t ring;      /* window, full: the slot sinks + ring is the oldest */
    int32_t shift;     /* reposition: the window's shift (kv_cache.h) */
    float *sink_raw;   /* reposition with rotation: the sinks' keys as sent */
    char *scheme_json; /* the request's scheme, for snapshots; NULL: none */
    char model[SRV_KV_MODEL_LEN]; /* spec.model points here ("": none, spec.model NULL) */
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
    size_t bytes_by[3]; /* bytes by storage type (pa_dtype): together, bytes */
    uint64_t evicted_ttl, evicted_full, tokens_appended, tokens_evicted;
    char (*kept)[SRV_KV_ID_LEN]; /* files srv_kv_load_dir skipped (srv_kv_keep_file) */
    size_t n_kept, cap_kept;
};

/* e's code, field and message (e may be NULL). */
void kv_fail(srv_kv_err *e, srv_error code, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* SESSION_NOT_FOUND for id; returns false. */
bool kv_not_found(srv_kv_err *e, const char *id);
kv_session *kv_find(srv_kv_cache *c, const char *id);
/* kv_find once no append runs on the session (may wait on c->idle). */
kv_session *kv_find_idle(srv_kv_cache *c, const char *id);
/* CLOCK_MONOTONIC in milliseconds: sessions' last use and idle time. */
uint64_t kv_now_ms(void);
/* Marks s most recently used. */
void kv_touch(srv_kv_cache *c, kv_session *s);
size_t kv_block_bytes(const srv_kv_cache *c, const kv_session *s);
/* A zeroed block of s's shape (its bytes already counted), or NULL. */
kv_block *kv_block_new(const srv_kv_cache *c, const kv_session *s);
void kv_block_ref(srv_kv_cache *c, kv_block *b);
void kv_block_unref(srv_kv_cache *c, kv_block *b);
void kv_scheme_unref(kv_scheme *sch);
/* Unlinks and frees s. */
void kv_drop(srv_kv_cache *c, kv_session *s);
/* Puts s in the table under want_id, or a fresh id when NULL. */
void kv_link_new(srv_kv_cache *c, kv_session *s, const char *want_id);
/* Whether a scheme keeps its keys rotated (rope by position alone). */
bool kv_keeps_rotated(const pa_scheme *s);
bool kv_check_spec(const srv_kv_spec *sp, srv_kv_err *e);
/* Counts (or, with a negative n, uncounts) n bytes of storage type t
 * against the budget; c->lock held. */
static inline void kv_bytes_add(srv_kv_cache *c, pa_dtype t, ptrdiff_t n)
{
    c->bytes += (size_t)n;
    c->bytes_by[t] += (size_t)n;
}

/* Element size of a storage type. */
size_t kv_esize(pa_dtype t);
/* Row r (of row elements) of a block's k or v. */
static inline unsigned char *kv_row(const kv_session *s, unsigned char *base, size_t r, size_t row)
{
    return base + r * row * s->esize;
}
/* n floats into the session's storage type at dst (float32 copied, bf16 and
 * f16 rounded to nearest even: kv_check_row has said they fit), and back
 * (exact). */
void kv_store_row(const kv_session *s, const float *src, size_t n, unsigned char *dst);
void kv_load_row(const kv_session *s, const unsigned char *src, size_t n, float *dst);
/* Whether n floats fit the session's storage type within lim (a magnitude:
 * kv_fit_limit); else the first that does not into *at. */
bool kv_fits(const float *x, size_t n, double lim, size_t *at);
/* The largest magnitude a session of type t stores: 65504 (f16), 3.3895e38
 * (bf16), FLT_MAX (f32); keys that are rotated (any position's rotation of
 * a pair stays within the pair's norm) only up to that over sqrt(2). */
double kv_fit_limit(pa_dtype t, bool rotated);

/* A view in two steps, so that nothing is allocated under c->lock:
 * kv_view_alloc sizes v's arrays for nblocks blocks and len tokens (false:
 * out of memory, v cleared); kv_view_fill, with c->lock held and s no
 * larger, fills them and holds s's blocks and scheme (srv_kv_view_release
 * lets go); kv_view_discard frees an unfilled one. */
bool kv_view_alloc(srv_kv_view *v, int32_t nblocks, int32_t len);
void kv_view_fill(srv_kv_cache *c, kv_session *s, srv_kv_view *v);
void kv_view_discard(srv_kv_view *v);
/* Copies model (NULL: none) into s->model and points s->spec.model at it. */
void kv_set_model(kv_session *s, const char *model, int32_t layer);

#endif
