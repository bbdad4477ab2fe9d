/* snapshot.c - see snapshot.h. A dedicated thread rather than a libuv
 * timer: a save writes and fsyncs files for as long as the sessions take,
 * which must not hold up the pool's loop (its completions) or http's
 * deadline sweep.
 */
#include "runtime/snapshot.h"

#include "runtime/log.h"
#include "store/kv_snapshot.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>

struct srv_snapshotter {
    srv_kv_cache *cache;
    const char *dir;
    int period_s;
    srv_log_format log;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake; /* on CLOCK_MONOTONIC */
    bool stop;           /* under lock */
};

static void *snapshot_main(void *arg)
{
    srv_snapshotter *s = arg;
    struct timespec due;

    clock_gettime(CLOCK_MONOTONIC, &due);
    pthread_mutex_lock(&s->lock);
    for (;;) {
        due.tv_sec += s->period_s;
        while (!s->stop && pthread_cond_timedwait(&s->wake, &s->lock, &due) == 0) {
            /* woken early without stop: sleep on until due */
        }
        if (s->stop)
            break;
        pthread_mutex_unlock(&s->lock);
        {
            char err[512] = "";
            size_t failed = 0;
            srv_kv_save_all(s->cache, s->dir, &failed, err, sizeof err);
            if (failed > 0)
                srv_log_event(s->log, "error", "session_snapshot",
                              "snapshot to %s: %zu session%s not saved: %s", s->dir, failed,
                              failed == 1 ? "" : "s", err);
        }
        /* A save longer than the period starts the next one at once, not
         * a burst of them. */
        {
            struct timespec now;
            clock_gettime(CLOCK_MONOTONIC, &now);
            if (now.tv_sec > due.tv_sec)
                due = now;
        }
        pthread_mutex_lock(&s->lock);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

srv_snapshotter *srv_snapshotter_start(srv_kv_cache *c, const char *dir, int period_s,
                                       srv_log_format f)
{
    srv_snapshotter *s = calloc(1, sizeof *s);
    pthread_condattr_t ca;
    bool cond_ok = false;

    if (s == NULL)
        return NULL;
    s->cache = c;
    s->dir = dir;
    s->period_s = period_s;
    s->log = f;
    if (pthread_condattr_init(&ca) == 0) {
        cond_ok = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) == 0 &&
                  pthread_cond_init(&s->wake, &ca) == 0;
        pthread_condattr_destroy(&ca);
    }
    if (!cond_ok)
        goto fail;
    if (pthread_mutex_init(&s->lock, NULL) != 0) {
        pthread_cond_destroy(&s->wake);
        goto fail;
    }
    if (pthread_create(&s->thread, NULL, snapshot_main, s) != 0) {
        pthread_mutex_destroy(&s->lock);
        pthread_cond_destroy(&s->wake);
        goto fail;
    }
    return s;

fail:
    free(s);
    return NULL;
}

void srv_snapshotter_stop(srv_snapshotter *s)
{
    if (s == NULL)
        return;
    pthread_mutex_lock(&s->lock);
    s->stop = true;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->thread, NULL);
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->wake);
    free(s);
}
