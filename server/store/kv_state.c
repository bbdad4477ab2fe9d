/* kv_state.c - a session's whole state copied out and back in
 * (srv_kv_export, srv_kv_import: kv_cache.h), for snapshots
 * (kv_snapshot.c), and the files a load skipped.
 */
#include "store/kv_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
/* ------------------------------------------------------------------------- */
/* Export, import                                                            */
/* ------------------------------------------------------------------------- */

void srv_kv_state_free(srv_kv_state *st)
{
    free(st->k);
    free(st->v);
    free(st->pos);
    free(st->sink_raw);
    free(st->scheme_copy);
    st->k = st->v = st->sink_raw = NULL;
    st->pos = NULL;
    st->scheme_copy = NULL;
}

bool srv_kv_export(srv_kv_cache *c, const char *id, srv_kv_state *st, srv_kv_err *e)
{
    kv_session *s;
    const int32_t bt = c->cfg.block_tokens;
    memset(st, 0, sizeof *st);
    pthread_mutex_lock(&c->lock);
    s = kv_find_idle(c, id);
    if (s == NULL) {
        pthread_mutex_unlock(&c->lock);
        return kv_not_found(e, id);
    }
    st->k = malloc(((size_t)s->len * s->krow + 1) * sizeof(float));
    st->v = malloc(((size_t)s->len * s->vrow + 1) * sizeof(float));
    st->pos = malloc(((size_t)s->len + 1) * sizeof(int32_t));
    if (s->sink_raw != NULL)
        st->sink_raw = malloc((size_t)s->spec.sinks * s->krow * sizeof(float) + 1);
    if (s->scheme_json != NULL)
        st->scheme_copy = strdup(s->scheme_json);
    if (st->k == NULL || st->v == NULL || st->pos == NULL ||
        (s->sink_raw != NULL && st->sink_raw == NULL) ||
        (s->scheme_json != NULL && st->scheme_copy == NULL)) {
        pthread_mutex_unlock(&c->lock);
        srv_kv_state_free(st);
        kv_fail(e, SRV_ERR_INTERNAL, "", "out of memory saving a session");
        return false;
    }
    for (int32_t j = 0; j < s->len; j++) {
        const kv_block *b = s->blocks[j / bt];
        kv_load_row(s, kv_row(s, b->k, (size_t)(j % bt), s->krow), s->krow,
                    st->k + (size_t)j * s->krow);
        kv_load_row(s, kv_row(s, b->v, (size_t)(j % bt), s->vrow), s->vrow,
                    st->v + (size_t)j * s->vrow);
        st->pos[j] = s->pos[j];
    }
    if (s->sink_raw != NULL)
        memcpy(st->sink_raw, s->sink_raw, (size_t)s->spec.sinks * s->krow * sizeof(float));
    snprintf(st->id, sizeof st->id, "%s", s->id);
    /* Nothing of the session's own memory leaves the lock: a delete or a
     * drop for room may free it as soon as it is released (the scheme's
     * JSON was read after it by the snapshot writer, a use after free). */
    st->spec = s->spec;
    st->spec.scheme = NULL;
    st->spec.scheme_owner = NULL;
    st->spec.scheme_free = NULL;
    st->spec.scheme_json = st->scheme_copy;
    st->length = s->len;
    st->next_position = s->next_pos;
    st->ring = s->ring;
    st->shift = s->shift;
    st->appended = s->appended;
    st->evicted = s->evicted;
    st->prerotated = s->rotate;
    snprintf(st->model, sizeof st->model, "%s", s->model);
    st->spec.model = NULL; /* st->model: the session's may go once unlocked */
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
    else if (st->prerotated != kv_keeps_rotated(sp->scheme))
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
        kv_fail(e, SRV_ERR_INVALID_ARGUMENT, "session", "session '%s' cannot be restored: %s",
                st->id, why);
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
        kv_fail(e, SRV_ERR_INVALID_ARGUMENT, "id", "'%.80s' is not a session id", st->id);
        return false;
    }
    if (!kv_check_spec(&st->spec, e) || !state_ok(st, e))
        return false;
    if (st->spec.dtype != PA_DTYPE_F32) { /* what the type holds, as an append */
        size_t at;
        const size_t nk = (size_t)st->length * st->spec.num_kv_heads * st->spec.head_dim,
                     nv = (size_t)st->length * st->spec.num_kv_heads * st->spec.v_head_dim;
        if (!kv_fits(st->k, nk, kv_fit_limit(st->spec.dtype, false), &at) ||
            !kv_fits(st->v, nv, kv_fit_limit(st->spec.dtype, false), &at)) {
            kv_fail(e, SRV_ERR_OUT_OF_RANGE, "k",
                    "the state of session '%s' holds a value past what %s holds", st->id,
                    pa_dtype_name(st->spec.dtype));
            return false;
        }
    }
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
        kv_fail(e, SRV_ERR_INTERNAL, "", "out of memory restoring a session");
        return false;
    }
    s->spec = st->spec;
    s->spec.scheme_json = s->scheme_json;
    kv_set_model(s, st->model, st->spec.layer);
    s->rotate = st->prerotated;
    s->krow = (size_t)st->spec.num_kv_heads * st->spec.head_dim;
    s->vrow = (size_t)st->spec.num_kv_heads * st->spec.v_head_dim;
    s->esize = kv_esize(st->spec.dtype);
    s->len = st->length;
    s->next_pos = st->next_position;
    s->ring = st->ring;
    s->shift = st->shift;
    s->appended = st->appended;
    s->evicted = st->evicted;
    if (st->sink_raw != NULL)
        memcpy(s->sink_raw, st->sink_raw, (size_t)st->spec.sinks * s->krow * sizeof(float));
    memcpy(s->pos, st->pos, (size_t)st->length * sizeof *s->pos);
    need = (size_t)nb * kv_block_bytes(c, s);
    pthread_mutex_lock(&c->lock);
    if (kv_find(c, st->id) != NULL || c->bytes + need > c->cfg.budget_bytes) {
        const bool dup = kv_find(c, st->id) != NULL;
        const size_t used = c->bytes;
        pthread_mutex_unlock(&c->lock);
        discard(s);
        free(sch);
        if (dup)
            kv_fail(e, SRV_ERR_SESSION_EXISTS, "session", "session '%s' exists already", st->id);
        else
            kv_fail(e, SRV_ERR_CACHE_FULL, "session",
                    "session '%s' needs %zu bytes; the cache holds %zu of its %zu (set by "
                    "--cache-mb)",
                    st->id, need, used, c->cfg.budget_bytes);
        return false;
    }
    kv_bytes_add(c, st->spec.dtype, (ptrdiff_t)need);
    pthread_mutex_unlock(&c->lock);
    for (int32_t b = 0; b < nb; b++) {
        kv_block *blk = kv_block_new(c, s);
        if (blk == NULL) {
            pthread_mutex_lock(&c->lock);
            kv_bytes_add(c, st->spec.dtype, -(ptrdiff_t)need);
            pthread_mutex_unlock(&c->lock);
            s->nblocks = b;
            discard(s);
            free(sch);
            kv_fail(e, SRV_ERR_INTERNAL, "", "out of memory restoring a session");
            return false;
        }
        s->blocks[b] = blk;
        for (int32_t r = 0; r < bt && b * bt + r < st->length; r++) {
            const size_t j = (size_t)b * bt + (size_t)r;
            kv_store_row(s, st->k + j * s->krow, s->krow, kv_row(s, blk->k, (size_t)r, s->krow));
            kv_store_row(s, st->v + j * s->vrow, s->vrow, kv_row(s, blk->v, (size_t)r, s->vrow));
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
    if (kv_find(c, st->id) != NULL) { /* imported meanwhile by another thread */
        kv_bytes_add(c, st->spec.dtype, -(ptrdiff_t)need);
        pthread_mutex_unlock(&c->lock);
        sch->free_fn = NULL; /* the owner stays the caller's */
        discard(s);
        free(sch);
        kv_fail(e, SRV_ERR_SESSION_EXISTS, "session", "session '%s' exists already", st->id);
        return false;
    }
    c->blocks += (size_t)nb;
    kv_link_new(c, s, st->id);
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
