/* test_pool.c - server/runtime/pool.c: the bound on waiting tasks. Behind a
 * worker that is busy, exactly max_queued tasks are accepted and the next
 * is refused; a batch larger than the queue still runs on an idle pool; and
 * every accepted task runs and completes once. Deadlines: a task still
 * waiting at its deadline is dropped (expired, then done, never run) while
 * the worker is still busy; one taken before its deadline runs.
 */
#include "testutil.h"

#include "runtime/pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>

static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cond = PTHREAD_COND_INITIALIZER;
static bool gate_open;
static atomic_int started, ran, done;

static void blocking_run(void *arg, uint64_t queue_us, srv_workspace *ws)
{
    (void)arg;
    (void)queue_us;
    (void)ws;
    atomic_fetch_add(&started, 1);
    pthread_mutex_lock(&gate_lock);
    while (!gate_open)
        pthread_cond_wait(&gate_cond, &gate_lock);
    pthread_mutex_unlock(&gate_lock);
    atomic_fetch_add(&ran, 1);
}

static void quick_run(void *arg, uint64_t queue_us, srv_workspace *ws)
{
    (void)arg;
    (void)queue_us;
    (void)ws;
    atomic_fetch_add(&ran, 1);
}

static void count_done(void *arg)
{
    (void)arg;
    atomic_fetch_add(&done, 1);
}

static void wait_until(atomic_int *v, int want)
{
    for (int i = 0; i < 5000 && atomic_load(v) < want; i++)
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    assert_true(atomic_load(v) >= want);
}

static void test_queue_bound(void **state)
{
    (void)state;
    enum { DEPTH = 3 };
    srv_task busy = {.run = blocking_run, .done = count_done}, waiting[DEPTH + 1], big[DEPTH + 2];
    srv_pool *p = srv_pool_start(1, DEPTH);
    assert_non_null(p);
    atomic_store(&started, 0);
    atomic_store(&ran, 0);
    atomic_store(&done, 0);
    gate_open = false;

    assert_true(srv_pool_submit(p, &busy, 1));
    wait_until(&started, 1); /* the one worker is taken */
    for (int i = 0; i <= DEPTH; i++)
        waiting[i] = (srv_task){.run = quick_run, .done = count_done};
    int accepted = 0;
    int64_t queued_then;
    bool next_taken;
    for (int i = 0; i < DEPTH; i++)
        accepted += srv_pool_submit(p, &waiting[i], 1); /* exactly DEPTH wait */
    queued_then = srv_pool_queued(p);
    next_taken = srv_pool_submit(p, &waiting[DEPTH], 1); /* the next is refused */
    /* The worker goes on before any assertion: a failed one must not leave
     * it blocked (libuv joins its threads at exit). */
    pthread_mutex_lock(&gate_lock);
    gate_open = true;
    pthread_cond_broadcast(&gate_cond);
    pthread_mutex_unlock(&gate_lock);
    assert_int_equal(accepted, DEPTH);
    assert_int_equal(queued_then, DEPTH);
    assert_false(next_taken);
    wait_until(&done, 1 + DEPTH);
    assert_int_equal(srv_pool_pending(p), 0);
    assert_int_equal(atomic_load(&ran), 1 + DEPTH);

    /* Idle: one batch larger than the queue runs whole. */
    for (int i = 0; i < DEPTH + 2; i++)
        big[i] = (srv_task){.run = quick_run, .done = count_done};
    assert_true(srv_pool_submit(p, big, DEPTH + 2));
    wait_until(&done, 1 + DEPTH + DEPTH + 2);
    srv_pool_stop(p);
    assert_int_equal(atomic_load(&ran), 1 + DEPTH + DEPTH + 2);
    assert_int_equal(atomic_load(&done), 1 + DEPTH + DEPTH + 2);
}

static atomic_int expired;
static atomic_uint_fast64_t expired_queue_us;

static void count_expired(void *arg, uint64_t queue_us)
{
    (void)arg;
    atomic_store(&expired_queue_us, queue_us);
    atomic_fetch_add(&expired, 1);
}

static void open_gate(void)
{
    pthread_mutex_lock(&gate_lock);
    gate_open = true;
    pthread_cond_broadcast(&gate_cond);
    pthread_mutex_unlock(&gate_lock);
}

static atomic_int kept;

/* A task that must run past its deadline (a session's append landed). */
static bool keep_it(void *arg)
{
    (void)arg;
    atomic_fetch_add(&kept, 1);
    return true;
}

static void test_deadline_in_the_queue(void **state)
{
    (void)state;
    srv_task busy = {.run = blocking_run, .done = count_done}, late[3], timely;
    srv_pool *p = srv_pool_start(1, 8);
    const uint64_t t0 = srv_now_ns();
    assert_non_null(p);
    atomic_store(&started, 0);
    atomic_store(&ran, 0);
    atomic_store(&done, 0);
    atomic_store(&expired, 0);
    gate_open = false;
    /* The busy one has a deadline too: it started, so it is never dropped. */
    busy.deadline_ns = t0 + 1;
    busy.expired = count_expired;
    assert_true(srv_pool_submit(p, &busy, 1));
    wait_until(&started, 1);
    for (int i = 0; i < 3; i++)
        late[i] = (srv_task){.run = quick_run,
                             .done = count_done,
                             .deadline_ns = srv_now_ns() + 50 * 1000000u,
                             .expired = count_expired};
    late[1].keep = keep_it; /* asked, and kept: it waits for the worker */
    atomic_store(&kept, 0);
    assert_true(srv_pool_submit(p, late, 3));
    /* Dropped at their deadline while the worker is still busy. */
    wait_until(&done, 2);
    const int expired_then = atomic_load(&expired), ran_then = atomic_load(&ran);
    const int64_t queued_then = srv_pool_queued(p);
    const uint64_t waited_us = atomic_load(&expired_queue_us);
    /* A task with no deadline (or expired NULL) waits as long as it takes. */
    timely = (srv_task){.run = quick_run, .done = count_done, .deadline_ns = t0 + 1};
    assert_true(srv_pool_submit(p, &timely, 1));
    nanosleep(&(struct timespec){0, 300 * 1000000}, NULL);
    const int timely_done_early = atomic_load(&done) - 2;
    open_gate();
    wait_until(&done, 5);
    srv_pool_stop(p);
    assert_int_equal(expired_then, 2);
    assert_int_equal(ran_then, 0);
    assert_int_equal(queued_then, 1); /* the kept one */
    assert_true(waited_us >= 50000);
    assert_int_equal(timely_done_early, 0);
    assert_int_equal(atomic_load(&ran), 3); /* busy, the kept one and timely */
    assert_int_equal(atomic_load(&expired), 2);
    assert_int_equal(atomic_load(&kept), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_queue_bound),
        cmocka_unit_test(test_deadline_in_the_queue),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
