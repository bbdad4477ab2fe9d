/* kv_cache.h - sessions: KV caches that live in posattnd and grow token by
 * token, in fixed-size blocks of one budget, shared between forks.
 *
 * A session holds the keys and values of one attention layer's sequence
 * (num_kv_heads, head_dim, v_head_dim, float32) in blocks of block_tokens
 * tokens, a multiple of 16: the core library's paged layout
 * (pa_attention's k_pages, v_pages), so a step attends over the blocks in
 * place. Keys are kept as the scheme needs them: with rope they are
 * rotated once, at append, at their position (a step never re-rotates the
 * cache: k_prerotated); other schemes keep them as sent. Blocks are
 * counted against one budget (cfg.budget_bytes); forks share blocks by
 * reference count and copy a block only when one side writes into it.
 *
 * Eviction (per session):
 *   none    append past max_tokens is refused (SESSION_FULL);
 *   window  keep the first `sinks` tokens and the last `window` ones
 *           (StreamingLLM, Xiao et al. 2023): an append past sinks +
 *           window overwrites the oldest window token's slot, so the slots
 *           hold the window as a ring (attention does not depend on the
 *           keys' order). With reposition, the retained tokens take
 *           positions 0 .. n-1 within the cache (the sinks first, then the
 *           window in order) and a query the next, as StreamingLLM's
 *           pos_shift re-rotates them. That costs O(new tokens) here: only
 *           differences of positions reach attention, so each window key
 *           keeps its own position and the sinks take theirs plus the
 *           window's shift (its oldest position minus sinks): a query at
 *           its own position then sees every key at the distance
 *           repositioning gives. Those are the keys' virtual positions
 *           (srv_kv_view.positions); with rope the sinks are re-rotated
 *           from their raw keys when the shift moves (sinks rows per
 *           appended token), and nothing else is.
 *
 * Thread safety: every function may be called from any thread. One append
 * per session runs at a time (a second is refused, SESSION_BUSY, as is a
 * delete during one); a view or fork of a session with an append in
 * flight waits for it, so it sees the session before or after, never
 * between. Views hold references to the blocks they read: a later append
 * copies a block a view holds before writing into it, and a delete frees
 * nothing a view still reads.
 */
#ifndef SRV_KV_CACHE_H
#define SRV_KV_CACHE_H

#include "common/errors.h"
#include "posattn.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A session id: 1 .. 64 characters of [A-Za-z0-9_.-], not starting with
 * '.' (srv_kv_id_valid), chosen by the client or 32 random hex digits; the
 * NUL. The same charset names its file (ID.safetensors). */
enum { SRV_KV_ID_LEN = 65 };
/* A served model's name (model/model.h's SRV_MODEL_NAME_MAX), with its NUL. */
enum { SRV_KV_MODEL_LEN = 64 };

typedef struct srv_kv_cache srv_kv_cache;

typedef struct srv_kv_config {
    size_t budget_bytes;  /* every session's blocks together */
    int32_t block_tokens; /* a positive multiple of 16 */
    double ttl_s;         /* idle sessions expire after this; 0: never */
} srv_kv_config;

typedef enum srv_kv_evict {
    SRV_KV_EVICT_NONE = 0,
    SRV_KV_EVICT_WINDOW,
} srv_kv_evict;

/* What a session is created with. The scheme is the session's: its
 * owner (scheme_owner) is freed with scheme_free when the session goes
 * (a fork shares it, counted). */
typedef struct srv_kv_spec {
    const pa_scheme *scheme;
    /* The scheme as the request sent it (JSON text, copied): what a
     * snapshot keeps of it (kv_snapshot.h); NULL: the session is not
     * saved. */
    const char *scheme_json;
    void *scheme_owner;
    void (*scheme_free)(void *owner);
    int32_t num_kv_heads, head_dim, v_head_dim;
    int32_t max_tokens; /* the most retained tokens; > 0 */
    srv_kv_evict eviction;
    int32_t window, sinks; /* window: window > 0, sinks >= 0, sinks + window <= max_tokens */
    bool reposition;       /* window: positions 0 .. n-1 within the cache */
    /* Storage: PA_DTYPE_F32 (zero), PA_DTYPE_BF16 or PA_DTYPE_F16. Keys and
     * values are stored in it (rope keys rotated in float32, then
     * rounded) and attention reads them in place (pa_attention.kv_dtype);
     * an append whose values a 16-bit type cannot hold is refused
     * (OUT_OF_RANGE, kv_fit_limit). */
    pa_dtype dtype;
    /* The served model and layer the session was made from (POST
     * /v1/sessions with "model": api/session_create.c): the model's name, copied
     * (shorter than SRV_KV_MODEL_LEN; NULL or "": none), and the layer.
     * The store only keeps them (forks, snapshots); attention over the
     * session takes that layer's options (api/item.c). */
    const char *model;
    int32_t layer;
} srv_kv_spec;

/* An error: the code (common/errors.h), the field and the values. */
typedef struct srv_kv_err {
    srv_error code;
    char field[48];
    char message[256];
} srv_kv_err;

/* A session as GET /v1/sessions/{id} shows it. */
typedef struct srv_kv_info {
    char id[SRV_KV_ID_LEN];
    int32_t length;             /* retained tokens */
    int64_t appended;           /* tokens appended since creation (a fork: its parent's too) */
    int32_t next_position;      /* the position the next token takes */
    int32_t first_position;     /* the smallest retained position (virtual: srv_kv_view) */
    int32_t last_position;      /* the largest */
    int64_t evicted;            /* tokens dropped by the window */
    size_t bytes;               /* of its blocks (shared ones counted in each holder) */
    size_t shared_blocks;       /* blocks it shares with a fork */
    double idle_s;              /* since the last append or view */
    srv_kv_spec spec;           /* its scheme is valid while the session lives */
    pa_scheme_type scheme_type; /* spec.scheme's type, read under the lock: a reader racing
                                   a delete must not follow spec.scheme */
    bool prerotated;            /* keys kept rotated (rope) */
    int32_t page_tokens;        /* the cache's block_tokens */
    char model[SRV_KV_MODEL_LEN]; /* spec.model, copied ("" none): spec.model is not to be
                                     followed, as spec.scheme */
    int32_t layer;                /* spec.layer */
} srv_kv_info;

/* What attention reads of a session at one moment (srv_kv_view_take):
 * pages [n_pages] of block_tokens rows, the retained length, each slot's
 * virtual position, and whether keys are rotated. Holds references: the
 * blocks stay as they are until srv_kv_view_release. */
typedef struct srv_kv_view {
    const float **k_pages, **v_pages;
    int32_t n_pages, page_tokens;
    int32_t length;
    int32_t *positions;    /* [length] virtual positions (above) */
    int32_t next_position; /* the next token's virtual position: a query's default */
    bool prerotated;
    pa_dtype dtype; /* of the pages' elements */
    srv_kv_spec spec; /* its scheme lives as long as the view */
    void *hold;       /* private */
} srv_kv_view;

/* The cache's figures (metrics, /v1/sessions). */
typedef struct srv_kv_stats {
    size_t sessions;
    size_t bytes, budget;
    size_t bytes_by_dtype[3]; /* bytes by storage type (pa_dtype) */
    size_t blocks_used, blocks_shared;
    uint64_t evicted_ttl, evicted_full; /* sessions dropped: idle past ttl, pool full */
    uint64_t tokens_appended;
    uint64_t tokens_evicted; /* by windows */
} srv_kv_stats;

srv_kv_cache *srv_kv_cache_new(const srv_kv_config *cfg);
/* Frees every session (views must have been released). NULL: no-op. */
void srv_kv_cache_free(srv_kv_cache *c);

/* Validates spec (errors name the request's fields: "max_tokens",
 * "eviction.window", "num_kv_heads") and creates a session; its id into
 * id. On failure the spec's scheme owner stays the caller's. */
bool srv_kv_create(srv_kv_cache *c, const srv_kv_spec *spec, char id[SRV_KV_ID_LEN], srv_kv_err *e);
/* The same under the id the caller chose (want_id, srv_kv_id_valid;
 * INVALID_ARGUMENT naming "id" otherwise), or a random one when want_id is
 * NULL. SESSION_EXISTS when a session holds that id. */
bool srv_kv_create_as(srv_kv_cache *c, const srv_kv_spec *spec, const char *want_id,
                      char id[SRV_KV_ID_LEN], srv_kv_err *e);
/* Whether id is 1 .. SRV_KV_ID_LEN - 1 characters of [A-Za-z0-9_.-] not
 * starting with '.' (so never "", "." or "..", and never a path). */
bool srv_kv_id_valid(const char *id);
/* SESSION_NOT_FOUND when there is none (or it expired). */
bool srv_kv_delete(srv_kv_cache *c, const char *id, srv_kv_err *e);
/* A new session sharing id's blocks (copy on write); its id into new_id. */
bool srv_kv_fork(srv_kv_cache *c, const char *id, char new_id[SRV_KV_ID_LEN], srv_kv_err *e);
/* Appends n tokens: k [n, Hkv, D] and v [n, Hkv, Dv], as sent (rotated
 * here when the session keeps keys rotated); positions [n] or NULL to
 * continue from the last (refused with reposition, which sets them). All
 * or nothing: SESSION_FULL (eviction none, past max_tokens), CACHE_FULL
 * (the budget cannot hold the blocks even after dropping idle sessions,
 * least recently used first), SESSION_BUSY (another append runs): the
 * session is left as it was. */
bool srv_kv_append(srv_kv_cache *c, const char *id, const float *k, const float *v, int32_t n,
                   const int32_t *positions, srv_kv_err *e);
/* srv_kv_append for a request checked against the session as it was:
 * refused (SESSION_BUSY, nothing appended) unless the session has taken
 * exactly expect_appended tokens (srv_kv_info.appended; -1: any), so the
 * tokens land where the request was checked to put them. With view
 * non-NULL, on success *view is the session as this append left it (as
 * srv_kv_view_take, in the same step: no other append between). */
bool srv_kv_append_view(srv_kv_cache *c, const char *id, const float *k, const float *v, int32_t n,
                        const int32_t *positions, int64_t expect_appended, srv_kv_view *view,
                        srv_kv_err *e);
/* The session as it is now, held until srv_kv_view_release. */
bool srv_kv_view_take(srv_kv_cache *c, const char *id, srv_kv_view *v, srv_kv_err *e);
void srv_kv_view_release(srv_kv_cache *c, srv_kv_view *v);
/* The session's figures; false (and e) when there is none. */
bool srv_kv_info_get(srv_kv_cache *c, const char *id, srv_kv_info *out, srv_kv_err *e);
/* The session's figures and a hold on its scheme (*hold; out->spec.scheme
 * stays valid until srv_kv_scheme_release, whatever happens to the
 * session): what a request checks against before it appends or reads. */
bool srv_kv_info_hold(srv_kv_cache *c, const char *id, srv_kv_info *out, void **hold,
                      srv_kv_err *e);
void srv_kv_scheme_release(srv_kv_cache *c, void *hold);
/* Up to cap sessions from the offset-th, oldest first, into out; returns
 * how many were written and sets *total. */
size_t srv_kv_list(srv_kv_cache *c, size_t offset, srv_kv_info *out, size_t cap, size_t *total);
/* Drops sessions idle past the ttl; returns how many. */
size_t srv_kv_expire(srv_kv_cache *c);
void srv_kv_stats_get(srv_kv_cache *c, srv_kv_stats *out);

/* A session's whole state, copied out (srv_kv_export) or in
 * (srv_kv_import): for snapshots (store/kv_snapshot.h). Slots in order:
 * k as kept (rotated with rope), v, each slot's own position; the window's
 * ring and shift; the raw keys of the sinks when the session re-rotates
 * them. */
typedef struct srv_kv_state {
    char id[SRV_KV_ID_LEN];
    /* export: the session's, but scheme NULL (the session may go once the
     * export returns) and scheme_json pointing at scheme_copy. */
    srv_kv_spec spec;
    char *scheme_copy; /* export: the scheme's JSON, owned (srv_kv_state_free) */
    int32_t length, next_position, ring, shift;
    int64_t appended, evicted;
    bool prerotated;
    float *k, *v;    /* [length, Hkv * D], [length, Hkv * Dv] */
    int32_t *pos;    /* [length] */
    float *sink_raw; /* [sinks, Hkv * D] or NULL */
    char model[SRV_KV_MODEL_LEN]; /* spec.model, copied ("": none); import reads this, not
                                     spec.model (spec.layer is the layer) */
} srv_kv_state;

/* Copies session id out (the arrays malloc'd: srv_kv_state_free). Waits
 * for a running append, as a view does. */
bool srv_kv_export(srv_kv_cache *c, const char *id, srv_kv_state *st, srv_kv_err *e);
/* Recreates a session from st under st->id (refused when that id lives,
 * or the state does not hold together: lengths, ring, positions, whether
 * keys are kept rotated under its scheme); the blocks count against the
 * budget (CACHE_FULL, nothing dropped for it). On success the spec's
 * scheme owner is the session's; st's arrays stay the caller's. */
bool srv_kv_import(srv_kv_cache *c, const srv_kv_state *st, srv_kv_err *e);
void srv_kv_state_free(srv_kv_state *st);

/* The ids of session files that did not load (store/kv_snapshot.h's
 * srv_kv_load_dir notes them): srv_kv_save_all's sweep of the files of
 * gone sessions leaves them for an operator. keep returns false when out
 * of memory (the file may then be swept). */
bool srv_kv_keep_file(srv_kv_cache *c, const char *id);
bool srv_kv_file_kept(srv_kv_cache *c, const char *id);

#endif
