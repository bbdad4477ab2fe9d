/* kv_append.c - srv_kv_append (kv_cache.h): where each new token goes (a
 * window's ring), the blocks it writes reserved first (fresh ones, copies
 * of shared ones), then the rows written, rope keys rotated at their
 * positions and a repositioning window's sinks re-rotated.
 */
#include "store/kv_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
            kv_drop(c, s);
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
    return srv_kv_append_view(c, id, k, v, n, positions, -1, NULL, e);
}

bool srv_kv_append_view(srv_kv_cache *c, const char *id, const float *k, const float *v, int32_t n,
                        const int32_t *positions, int64_t expect_appended, srv_kv_view *view,
                        srv_kv_err *e)
{
    kv_session *s;
    const int32_t bt = c->cfg.block_tokens;
    int32_t len, ring, nb_new, evicts = 0, *slot = NULL, *posv = NULL, *pos2 = NULL;
    kv_block **nb = NULL;
    bool ok = false, *copy = NULL;
    float *cs = NULL, *sn = NULL, *row = NULL;
    size_t need = 0;

    if (n < 1) {
        kv_fail(e, SRV_ERR_INVALID_ARGUMENT, "k",
                "an append needs at least one token (k [n, Hkv, D])");
        return false;
    }
    pthread_mutex_lock(&c->lock);
    s = kv_find(c, id);
    if (s == NULL) {
        pthread_mutex_unlock(&c->lock);
        return kv_not_found(e, id);
    }
    if (s->busy) {
        pthread_mutex_unlock(&c->lock);
        kv_fail(e, SRV_ERR_SESSION_BUSY, "session",
                "session '%s' has another append in flight: appends to one session are ordered, "
                "send the next after it answers",
                id);
        return false;
    }
    if (expect_appended >= 0 && s->appended != expect_appended) {
        const long long now = (long long)s->appended;
        pthread_mutex_unlock(&c->lock);
        kv_fail(e, SRV_ERR_SESSION_BUSY, "session",
                "session '%s' took %lld tokens after this request was checked (%lld then, %lld "
                "now): another request appended to it in between, so this append would land at "
                "other positions; nothing was appended, send it again",
                id, now - (long long)expect_appended, (long long)expect_appended, now);
        return false;
    }
    if (positions != NULL && s->spec.reposition) {
        pthread_mutex_unlock(&c->lock);
        kv_fail(e, SRV_ERR_INVALID_ARGUMENT, "k_positions",
                "session '%s' repositions its tokens (eviction.reposition): positions come from "
                "the cache, leave k_positions out",
                id);
        return false;
    }
    if (s->spec.eviction == SRV_KV_EVICT_NONE && (int64_t)s->len + n > s->spec.max_tokens) {
        pthread_mutex_unlock(&c->lock);
        kv_fail(e, SRV_ERR_SESSION_FULL, "k",
                "session '%s' holds %d of its max_tokens=%d tokens: %d more do not fit (eviction "
                "none)",
                id, (int)s->len, (int)s->spec.max_tokens, (int)n);
        return false;
    }
    s->busy = true;
    pthread_mutex_unlock(&c->lock);

    /* A 16-bit session keeps what its type holds (results stay finite). */
    if (s->spec.dtype != PA_DTYPE_F32) {
        const char *what = NULL;
        size_t at = 0;
        double lim = 0;
        if (!kv_fits(k, (size_t)n * s->krow, lim = kv_fit_limit(s->spec.dtype, s->rotate), &at))
            what = "k";
        else if (!kv_fits(v, (size_t)n * s->vrow, lim = kv_fit_limit(s->spec.dtype, false), &at))
            what = "v";
        if (what != NULL) {
            kv_fail(e, SRV_ERR_OUT_OF_RANGE, what,
                    "%s holds %.9g at element %zu: session '%s' stores %s, which holds "
                    "magnitudes up to %.6g%s",
                    what, (double)(what[0] == 'k' ? k : v)[at], at, id,
                    pa_dtype_name(s->spec.dtype), lim,
                    what[0] == 'k' && s->rotate ? " for keys it rotates (the type's largest "
                                                  "over sqrt(2): any rotation of a pair fits)"
                                                : "");
            goto out;
        }
    }

    /* Where each token goes, and every block written: new ones, and copies
     * of shared ones (a fork's, or a view's). */
    slot = malloc((size_t)n * sizeof *slot);
    posv = malloc((size_t)n * sizeof *posv);
    len = s->len;
    ring = s->ring;
    if (slot == NULL || posv == NULL) {
        kv_fail(e, SRV_ERR_INTERNAL, "", "out of memory appending");
        goto out;
    }
    for (int32_t i = 0; i < n; i++) {
        bool ev;
        if (positions != NULL) {
            posv[i] = positions[i];
        } else {
            const int64_t p = (int64_t)s->next_pos + i;
            if (p > INT32_MAX - 1) {
                kv_fail(e, SRV_ERR_OUT_OF_RANGE, "k_positions",
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
        copy = calloc((size_t)nb_new + 1, sizeof *copy);
        if (nb == NULL || copy == NULL) {
            kv_fail(e, SRV_ERR_INTERNAL, "", "out of memory appending");
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
            /* Decided here, under the lock: a block's refs may drop
             * meanwhile (a reader, a fork deleted), so reading them again
             * below would race, and would leave need reserved for a copy
             * never made. */
            copy[b] = written && (nb[b] == NULL || nb[b]->refs > 1);
            if (copy[b])
                need += kv_block_bytes(c, s);
        }
        if (!make_room(c, need, s)) {
            /* The figures as of the refusal, read under the lock. */
            kv_fail(e, SRV_ERR_CACHE_FULL, "k",
                    "the session cache holds %zu of its %zu bytes (%zu sessions): %zu more for "
                    "session '%s' do not fit (set by --cache-mb)",
                    c->bytes, c->cfg.budget_bytes, c->sessions, need, id);
            pthread_mutex_unlock(&c->lock);
            goto out;
        }
        kv_bytes_add(c, s->spec.dtype, (ptrdiff_t)need); /* reserved: the blocks come below */
        pthread_mutex_unlock(&c->lock);
    }
    {
        /* The new table: fresh blocks and private copies, outside the lock
         * (only this append writes them). */
        size_t taken = 0;
        /* The positions too are a private copy, swapped in with the blocks:
         * GET and the list read s->pos under the lock while this runs (a
         * realloc here freed what they read). */
        pos2 = malloc((size_t)nb_new * bt * sizeof *pos2 + sizeof *pos2);
        if (pos2 == NULL) {
            kv_fail(e, SRV_ERR_INTERNAL, "", "out of memory appending");
            goto unreserve;
        }
        if (s->len > 0)
            memcpy(pos2, s->pos, (size_t)s->len * sizeof *pos2);
        for (int32_t b = 0; b < nb_new; b++) {
            if (!copy[b])
                continue;
            {
                kv_block *fresh = kv_block_new(c, s);
                if (fresh == NULL) {
                    kv_fail(e, SRV_ERR_INTERNAL, "", "out of memory appending");
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
    row = malloc(s->krow * sizeof *row); /* a key in float32 before its storage */
    if (row == NULL) {
        kv_fail(e, SRV_ERR_INTERNAL, "", "out of memory appending");
        goto unreserve_blocks;
    }
    if (s->rotate) {
        cs = malloc((size_t)s->spec.head_dim * sizeof *cs);
        sn = malloc((size_t)s->spec.head_dim * sizeof *sn);
        if (cs == NULL || sn == NULL ||
            (s->spec.reposition && s->spec.sinks > 0 && s->sink_raw == NULL)) {
            kv_fail(e, SRV_ERR_INTERNAL, "", "out of memory appending");
            goto unreserve_blocks;
        }
    }
    /* The view of the session as this append leaves it, taken in the same
     * step as the append's publication; its arrays now, since nothing may
     * fail once rows are written (blocks no one shares are written in
     * place) and nothing is allocated under the lock. */
    if (view != NULL && !kv_view_alloc(view, nb_new, len)) {
        kv_fail(e, SRV_ERR_INTERNAL, "", "out of memory appending");
        goto unreserve_blocks;
    }
    /* Write the rows. */
    {
        int32_t shift = s->shift;
        for (int32_t i = 0; i < n; i++) {
            kv_block *b = nb[slot[i] / bt];
            const int32_t r = slot[i] % bt;
            if (s->rotate) {
                rotate_rows(s, k + (size_t)i * s->krow, posv + i, 1, row, cs, sn);
                kv_store_row(s, row, s->krow, kv_row(s, b->k, (size_t)r, s->krow));
            } else {
                kv_store_row(s, k + (size_t)i * s->krow, s->krow,
                             kv_row(s, b->k, (size_t)r, s->krow));
            }
            kv_store_row(s, v + (size_t)i * s->vrow, s->vrow, kv_row(s, b->v, (size_t)r, s->vrow));
            pos2[slot[i]] = posv[i];
            if (slot[i] < s->spec.sinks && s->spec.reposition && s->rotate)
                memcpy(s->sink_raw + (size_t)slot[i] * s->krow, k + (size_t)i * s->krow,
                       s->krow * sizeof(float));
        }
        /* The window's shift: its oldest position minus the sinks. */
        if (s->spec.reposition) {
            const int32_t nlen = len, full = s->spec.sinks + s->spec.window;
            shift = nlen < full ? 0 : pos2[s->spec.sinks + ring] - s->spec.sinks;
            if (s->rotate && shift != s->shift)
                for (int32_t j = 0; j < s->spec.sinks && j < nlen; j++) {
                    kv_block *b = nb[j / bt];
                    const int32_t vp = pos2[j] + shift;
                    rotate_rows(s, s->sink_raw + (size_t)j * s->krow, &vp, 1, row, cs, sn);
                    kv_store_row(s, row, s->krow, kv_row(s, b->k, (size_t)(j % bt), s->krow));
                }
        }
        pthread_mutex_lock(&c->lock);
        for (int32_t b = 0; b < nb_new; b++) {
            kv_block *old = b < s->nblocks ? s->blocks[b] : NULL;
            if (nb[b] != old) {
                c->blocks++;
                kv_block_unref(c, old);
            }
        }
        free(s->blocks);
        s->blocks = nb;
        nb = NULL;
        free(s->pos);
        s->pos = pos2;
        pos2 = NULL;
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
        kv_touch(c, s);
        if (view != NULL)
            kv_view_fill(c, s, view);
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
    kv_bytes_add(c, s->spec.dtype, -(ptrdiff_t)need);
    pthread_mutex_unlock(&c->lock);
out:
    pthread_mutex_lock(&c->lock);
    s->busy = false;
    pthread_cond_broadcast(&c->idle);
    pthread_mutex_unlock(&c->lock);
done:
    free(nb);
    free(copy);
    free(pos2);
    free(slot);
    free(posv);
    free(cs);
    free(sn);
    free(row);
    return ok;
}
