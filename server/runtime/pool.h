/* pool.h - the worker pool: a libuv loop thread that hands tasks to libuv's
 * thread pool (uv_queue_work) and runs their completions, with a bounded
 * queue so that overload is refused at once instead of piling up.
 *
 * HTTP threads submit; workers run the task functions; the loop thread runs
 * the done callbacks (one per task, in completion order).
 */
#ifndef SRV_POOL_H
#define SRV_POOL_H

#include "api/api.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct srv_pool srv_pool;

typedef struct srv_task {
    /* Runs on a worker thread with that thread's reusable workspace.
     * queue_us is the time the task waited for a worker. */
    void (*run)(void *arg, uint64_t queue_us, srv_workspace *ws);
    /* Runs on the pool's loop thread after run returned (or expired). */
    void (*done)(void *arg);
    void *arg;
    /* A task not taken by a worker by deadline_ns (srv_now_ns's clock; 0:
     * none) is dropped within about 0.1 s of it: expired(arg, queue_us)
     * runs on the loop thread instead of run, then done. A task that a
     * worker took runs to its end. expired NULL: never dropped. */
    uint64_t deadline_ns;
    void (*expired)(void *arg, uint64_t queue_us);
    /* Asked (on the loop thread) before a task past its deadline is
     * dropped: true keeps it queued until a worker runs it. NULL: drop. */
    bool (*keep)(void *arg);
    /* Filled by the pool. */
    uint64_t submitted_ns;
} srv_task;

/* Starts the pool with `workers` threads (sets UV_THREADPOOL_SIZE, so call
 * it before anything else in the process uses libuv) and at most
 * `max_queued` tasks waiting. NULL on failure. */
srv_pool *srv_pool_start(int workers, int max_queued);

/* Submits n tasks (the array and each task must stay valid until its done
 * callback). Returns false, submitting none, when the tasks already waiting
 * plus n exceed max_queued and something is waiting (so one batch larger than
 * the queue still runs on an idle pool). Thread-safe. */
bool srv_pool_submit(srv_pool *p, srv_task *tasks, size_t n);

/* Tasks submitted and not yet started / submitted and not yet done. */
int64_t srv_pool_queued(const srv_pool *p);
int64_t srv_pool_pending(const srv_pool *p);
int srv_pool_max_queued(const srv_pool *p);

/* Calls fn(arg) on the pool's loop thread every period_ms milliseconds, in
 * place of any earlier ticker; period_ms 0 (or fn NULL) stops ticking. When
 * this returns, no call of an earlier function is running or will start, so
 * its arg may be freed. fn must not call srv_pool_set_ticker. Thread-safe. */
void srv_pool_set_ticker(srv_pool *p, unsigned period_ms, void (*fn)(void *), void *arg);

/* Stops the loop thread after every submitted task is done, then frees. */
void srv_pool_stop(srv_pool *p);

/* Monotonic clock in nanoseconds. */
uint64_t srv_now_ns(void);

#endif
