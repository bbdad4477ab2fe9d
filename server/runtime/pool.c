/* pool.c - see pool.h.
 *
 * Deadlines: each task handed to libuv with a deadline is on a list the
 * loop thread keeps (in_libuv); every EXPIRY_MS while that list holds any,
 * a timer cancels (uv_cancel) the ones whose deadline passed and that no
 * worker has taken yet, so a request queued behind long work is answered at
 * its deadline instead of when a worker frees up.
 *
 * uv_queue_work must be called on the loop's own thread, so submissions go
 * through a mutex-protected list and a uv_async_t wake-up. Each worker keeps
 * one srv_workspace for its whole life: a fresh allocation per request would
 * cost more in page faults than the attention itself (measured on these machines).
 */
#include "runtime/pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uv.h>

typedef struct pool_item {
    uv_work_t work; /* first: the libuv callbacks get &work */
    srv_task *task;
    srv_pool *pool;
    struct pool_item *next;          /* the submission list */
    struct pool_item *lprev, *lnext; /* in_libuv, loop thread only */
} pool_item;

enum { EXPIRY_MS = 100 };

struct srv_pool {
    uv_loop_t loop;
    uv_async_t wake;
    uv_timer_t timer;   /* the ticker's */
    uv_timer_t expiry;  /* cancels tasks past their deadline */
    pool_item in_libuv; /* sentinel: handed to libuv with a deadline, not done */
    uv_thread_t thread;
    pthread_mutex_t lock;
    pool_item *head, *tail; /* submitted, not yet handed to libuv */
    bool stopping;
    unsigned tick_ms;          /* under lock: the period wanted, 0 = none */
    bool tick_changed;         /* under lock: the loop thread must (re)arm */
    pthread_mutex_t tick_lock; /* held around each tick call */
    void (*tick_fn)(void *);   /* under tick_lock */
    void *tick_arg;
    int max_queued;
    atomic_int_fast64_t queued;  /* submitted, not started */
    atomic_int_fast64_t pending; /* submitted, not done */
};

static _Thread_local srv_workspace worker_ws;

uint64_t srv_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void work_cb(uv_work_t *w)
{
    pool_item *it = (pool_item *)w;
    uint64_t queue_us = (srv_now_ns() - it->task->submitted_ns) / 1000u;
    atomic_fetch_sub(&it->pool->queued, 1);
    it->task->run(it->task->arg, queue_us, &worker_ws);
}

static void unlink_item(pool_item *it)
{
    if (it->lnext != NULL) {
        it->lprev->lnext = it->lnext;
        it->lnext->lprev = it->lprev;
        it->lprev = it->lnext = NULL;
    }
}

static void after_work_cb(uv_work_t *w, int status)
{
    pool_item *it = (pool_item *)w;
    srv_pool *p = it->pool;
    unlink_item(it);
    if (status == UV_ECANCELED) { /* dropped at its deadline, never run */
        atomic_fetch_sub(&p->queued, 1);
        it->task->expired(it->task->arg, (srv_now_ns() - it->task->submitted_ns) / 1000u);
    }
    it->task->done(it->task->arg);
    atomic_fetch_sub(&p->pending, 1);
    free(it);
}

/* Cancels the tasks past their deadline that no worker has taken (libuv
 * refuses to cancel one that started: it runs to its end). */
static void expiry_cb(uv_timer_t *t)
{
    srv_pool *p = t->data;
    const uint64_t now = srv_now_ns();
    pool_item *it = p->in_libuv.lnext, *next;
    for (; it != &p->in_libuv; it = next) {
        next = it->lnext;
        if (now <= it->task->deadline_ns)
            continue;
        if (it->task->keep != NULL && it->task->keep(it->task->arg))
            unlink_item(it); /* it runs whenever a worker takes it */
        else if (uv_cancel((uv_req_t *)&it->work) != 0)
            unlink_item(it); /* started: nothing more to do for it here */
    }
    if (p->in_libuv.lnext == &p->in_libuv)
        uv_timer_stop(&p->expiry);
}

static void timer_cb(uv_timer_t *t)
{
    srv_pool *p = t->data;
    pthread_mutex_lock(&p->tick_lock);
    if (p->tick_fn != NULL)
        p->tick_fn(p->tick_arg);
    pthread_mutex_unlock(&p->tick_lock);
}

static void wake_cb(uv_async_t *a)
{
    srv_pool *p = a->data;
    pool_item *list;
    bool stopping, tick_changed;
    unsigned tick_ms;

    pthread_mutex_lock(&p->lock);
    list = p->head;
    p->head = p->tail = NULL;
    stopping = p->stopping;
    tick_changed = p->tick_changed;
    tick_ms = p->tick_ms;
    p->tick_changed = false;
    pthread_mutex_unlock(&p->lock);

    /* uv_timer_* belong to the loop thread, hence the request by wake-up. */
    if (tick_changed && !stopping) {
        uv_timer_stop(&p->timer);
        if (tick_ms > 0)
            uv_timer_start(&p->timer, timer_cb, tick_ms, tick_ms);
    }

    while (list != NULL) {
        pool_item *next = list->next;
        if (uv_queue_work(&p->loop, &list->work, work_cb, after_work_cb) != 0) {
            /* Cannot happen with valid callbacks; run it here rather than lose it. */
            work_cb(&list->work);
            after_work_cb(&list->work, 0);
        } else if (list->task->deadline_ns != 0 && list->task->expired != NULL) {
            list->lprev = p->in_libuv.lprev;
            list->lnext = &p->in_libuv;
            p->in_libuv.lprev->lnext = list;
            p->in_libuv.lprev = list;
            if (!uv_is_active((uv_handle_t *)&p->expiry) && !stopping)
                uv_timer_start(&p->expiry, expiry_cb, EXPIRY_MS, EXPIRY_MS);
        }
        list = next;
    }
    if (stopping) {
        uv_close((uv_handle_t *)&p->wake, NULL);
        uv_close((uv_handle_t *)&p->timer, NULL);
        uv_close((uv_handle_t *)&p->expiry, NULL);
    }
}

static void loop_main(void *arg)
{
    srv_pool *p = arg;
    uv_run(&p->loop, UV_RUN_DEFAULT);
}

srv_pool *srv_pool_start(int workers, int max_queued)
{
    char n[16];
    srv_pool *p = calloc(1, sizeof *p);
    if (p == NULL)
        return NULL;
    snprintf(n, sizeof n, "%d", workers > 0 ? workers : 1);
    setenv("UV_THREADPOOL_SIZE", n, 1);
    p->max_queued = max_queued;
    atomic_init(&p->queued, 0);
    atomic_init(&p->pending, 0);
    if (pthread_mutex_init(&p->lock, NULL) != 0)
        goto fail_free;
    if (pthread_mutex_init(&p->tick_lock, NULL) != 0)
        goto fail_mutex;
    if (uv_loop_init(&p->loop) != 0)
        goto fail_tick_lock;
    if (uv_async_init(&p->loop, &p->wake, wake_cb) != 0)
        goto fail_loop;
    p->wake.data = p;
    uv_timer_init(&p->loop, &p->timer); /* cannot fail */
    p->timer.data = p;
    uv_timer_init(&p->loop, &p->expiry);
    p->expiry.data = p;
    p->in_libuv.lprev = p->in_libuv.lnext = &p->in_libuv;
    if (uv_thread_create(&p->thread, loop_main, p) != 0)
        goto fail_async;
    return p;

fail_async:
    uv_close((uv_handle_t *)&p->wake, NULL);
    uv_close((uv_handle_t *)&p->timer, NULL);
    uv_close((uv_handle_t *)&p->expiry, NULL);
    uv_run(&p->loop, UV_RUN_DEFAULT);
fail_loop:
    uv_loop_close(&p->loop);
fail_tick_lock:
    pthread_mutex_destroy(&p->tick_lock);
fail_mutex:
    pthread_mutex_destroy(&p->lock);
fail_free:
    free(p);
    return NULL;
}

bool srv_pool_submit(srv_pool *p, srv_task *tasks, size_t n)
{
    pool_item *first = NULL, *last = NULL;
    uint64_t now = srv_now_ns();
    int64_t waiting = atomic_load(&p->queued);

    if (waiting > 0 && waiting + (int64_t)n > p->max_queued)
        return false;
    for (size_t i = 0; i < n; i++) {
        pool_item *it = calloc(1, sizeof *it);
        if (it == NULL) {
            while (first != NULL) {
                pool_item *next = first->next;
                free(first);
                first = next;
            }
            return false;
        }
        tasks[i].submitted_ns = now;
        it->task = &tasks[i];
        it->pool = p;
        if (last != NULL)
            last->next = it;
        else
            first = it;
        last = it;
    }
    if (first == NULL)
        return true;
    atomic_fetch_add(&p->queued, (int64_t)n);
    atomic_fetch_add(&p->pending, (int64_t)n);
    pthread_mutex_lock(&p->lock);
    if (p->tail != NULL)
        p->tail->next = first;
    else
        p->head = first;
    p->tail = last;
    pthread_mutex_unlock(&p->lock);
    uv_async_send(&p->wake);
    return true;
}

int64_t srv_pool_queued(const srv_pool *p)
{
    return atomic_load(&((srv_pool *)p)->queued);
}

int64_t srv_pool_pending(const srv_pool *p)
{
    return atomic_load(&((srv_pool *)p)->pending);
}

int srv_pool_max_queued(const srv_pool *p)
{
    return p->max_queued;
}

void srv_pool_set_ticker(srv_pool *p, unsigned period_ms, void (*fn)(void *), void *arg)
{
    /* Taking tick_lock waits out a call in progress; after it no call of
     * the old function starts. */
    if (fn == NULL)
        period_ms = 0;
    pthread_mutex_lock(&p->tick_lock);
    p->tick_fn = period_ms > 0 ? fn : NULL;
    p->tick_arg = arg;
    pthread_mutex_unlock(&p->tick_lock);
    pthread_mutex_lock(&p->lock);
    p->tick_ms = period_ms;
    p->tick_changed = true;
    pthread_mutex_unlock(&p->lock);
    uv_async_send(&p->wake);
}

void srv_pool_stop(srv_pool *p)
{
    if (p == NULL)
        return;
    pthread_mutex_lock(&p->lock);
    p->stopping = true;
    pthread_mutex_unlock(&p->lock);
    uv_async_send(&p->wake);
    /* uv_run returns once the async handle is closed and every queued work
     * item's after_work callback has run. */
    uv_thread_join(&p->thread);
    uv_loop_close(&p->loop);
    pthread_mutex_destroy(&p->tick_lock);
    pthread_mutex_destroy(&p->lock);
    free(p);
}
