/* kv_view.c - see kv_cache.h: what readers of the session cache get, each
 * under its lock: views of a session (its blocks held for attention,
 * srv_kv_view_take, and an append's, kv_append.c), a session's figures
 * (srv_kv_info_get, srv_kv_list) and the cache's (srv_kv_stats_get).
 */
#include "store/kv_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

bool kv_view_alloc(srv_kv_view *v, int32_t nblocks, int32_t len)
{
    kv_hold *h = calloc(1, sizeof *h);
    memset(v, 0, sizeof *v);
    v->k_pages = calloc((size_t)nblocks + 1, sizeof *v->k_pages);
    v->v_pages = calloc((size_t)nblocks + 1, sizeof *v->v_pages);
    v->positions = malloc(((size_t)len + 1) * sizeof *v->positions);
    if (h != NULL)
        h->blocks = calloc((size_t)nblocks + 1, sizeof *h->blocks);
    v->hold = h;
    v->n_pages = nblocks; /* the capacity until kv_view_fill */
    v->length = len;
    if (h == NULL || h->blocks == NULL || v->k_pages == NULL || v->v_pages == NULL ||
        v->positions == NULL) {
        kv_view_discard(v);
        return false;
    }
    return true;
}

void kv_view_discard(srv_kv_view *v)
{
    kv_hold *h = v->hold;
    if (h != NULL)
        free(h->blocks);
    free(h);
    free(v->k_pages);
    free(v->v_pages);
    free(v->positions);
    memset(v, 0, sizeof *v);
}

void kv_view_fill(srv_kv_cache *c, kv_session *s, srv_kv_view *v)
{
    kv_hold *h = v->hold;
    h->n = s->nblocks;
    for (int32_t b = 0; b < s->nblocks; b++) {
        h->blocks[b] = s->blocks[b];
        kv_block_ref(c, s->blocks[b]);
        v->k_pages[b] = (const float *)s->blocks[b]->k; /* esize-byte elements */
        v->v_pages[b] = (const float *)s->blocks[b]->v;
    }
    for (int32_t j = 0; j < s->len; j++)
        v->positions[j] = virtual_pos(s, j);
    v->n_pages = s->nblocks;
    v->page_tokens = c->cfg.block_tokens;
    v->length = s->len;
    v->next_position = s->next_pos;
    v->prerotated = s->rotate;
    v->dtype = s->spec.dtype;
    v->spec = s->spec;
    h->sch = s->sch;
    s->sch->refs++; /* the spec's scheme outlives a delete while viewed */
    kv_touch(c, s);
}

bool srv_kv_view_take(srv_kv_cache *c, const char *id, srv_kv_view *v, srv_kv_err *e)
{
    kv_session *s;
    int32_t nblocks = 0, len = 0;
    memset(v, 0, sizeof *v);
    /* The arrays are sized outside the lock, so the session may have grown
     * by the time it is filled: then again, larger. */
    for (;;) {
        pthread_mutex_lock(&c->lock);
        s = kv_find_idle(c, id);
        if (s == NULL) {
            pthread_mutex_unlock(&c->lock);
            if (v->hold != NULL)
                kv_view_discard(v);
            return kv_not_found(e, id);
        }
        if (v->hold != NULL && s->nblocks <= nblocks && s->len <= len)
            break;
        nblocks = s->nblocks;
        len = s->len;
        pthread_mutex_unlock(&c->lock);
        if (v->hold != NULL)
            kv_view_discard(v);
        if (!kv_view_alloc(v, nblocks, len)) {
            kv_fail(e, SRV_ERR_INTERNAL, "", "out of memory reading a session");
            return false;
        }
    }
    kv_view_fill(c, s, v);
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
        kv_block_unref(c, h->blocks[b]);
    kv_scheme_unref(h->sch);
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
    const uint64_t t = kv_now_ms();
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
    snprintf(o->model, sizeof o->model, "%s", s->model);
    o->layer = s->spec.layer;
}

bool srv_kv_info_get(srv_kv_cache *c, const char *id, srv_kv_info *out, srv_kv_err *e)
{
    kv_session *s;
    pthread_mutex_lock(&c->lock);
    s = kv_find(c, id);
    if (s != NULL)
        info_of(c, s, out);
    pthread_mutex_unlock(&c->lock);
    return s != NULL || kv_not_found(e, id);
}

bool srv_kv_info_hold(srv_kv_cache *c, const char *id, srv_kv_info *out, void **hold, srv_kv_err *e)
{
    kv_session *s;
    *hold = NULL;
    pthread_mutex_lock(&c->lock);
    s = kv_find(c, id);
    if (s != NULL) {
        info_of(c, s, out);
        s->sch->refs++;
        *hold = s->sch;
    }
    pthread_mutex_unlock(&c->lock);
    return s != NULL || kv_not_found(e, id);
}

void srv_kv_scheme_release(srv_kv_cache *c, void *hold)
{
    if (hold == NULL)
        return;
    pthread_mutex_lock(&c->lock);
    kv_scheme_unref(hold);
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

void srv_kv_stats_get(srv_kv_cache *c, srv_kv_stats *o)
{
    pthread_mutex_lock(&c->lock);
    o->sessions = c->sessions;
    o->bytes = c->bytes;
    for (int t = 0; t < 3; t++)
        o->bytes_by_dtype[t] = c->bytes_by[t];
    o->budget = c->cfg.budget_bytes;
    o->blocks_used = c->blocks;
    o->blocks_shared = c->shared;
    o->evicted_ttl = c->evicted_ttl;
    o->evicted_full = c->evicted_full;
    o->tokens_appended = c->tokens_appended;
    o->tokens_evicted = c->tokens_evicted;
    pthread_mutex_unlock(&c->lock);
}
