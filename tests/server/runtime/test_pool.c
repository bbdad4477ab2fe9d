/* test_pool.c - server/runtime/pool.c: the bound on waiting tasks. Behind a
 * worker that is busy, exactly max_queued tasks are accepted and the next
 * is refused; a batch larger than the queue still runs on an idle pool; and
 * every accepted task runs and completes once.
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
    srv_task busy = {blocking_run, count_done, NULL, 0}, waiting[DEPTH + 1], big[DEPTH + 2];
    srv_pool *p = srv_pool_start(1, DEPTH);
    assert_non_null(p);
    atomic_store(&started, 0);
    atomic_store(&ran, 0);
    atomic_store(&done, 0);
    gate_open = false;

    assert_true(srv_pool_submit(p, &busy, 1));
    wait_until(&started, 1); /* the one worker is taken */
    for (int i = 0; i <= DEPTH; i++)
        waiting[i] = (srv_task){quick_run, count_done, NULL, 0};
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
        big[i] = (srv_task){quick_run, count_done, NULL, 0};
    assert_true(srv_pool_submit(p, big, DEPTH + 2));
    wait_until(&done, 1 + DEPTH + DEPTH + 2);
    srv_pool_stop(p);
    assert_int_equal(atomic_load(&ran), 1 + DEPTH + DEPTH + 2);
    assert_int_equal(atomic_load(&done), 1 + DEPTH + DEPTH + 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_queue_bound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
