/* test_snapshot.c - server/runtime/snapshot.c: the periodic saves of
 * --cache-snapshot-s. With a period of 1 s, sessions appended to from
 * another thread meanwhile are on disk after a period and load back
 * whole; a stop wakes the sleeping thread at once (well before its
 * period); a failing save is logged, not fatal. Under TSan (make tsan)
 * this is the check that saves and appends share the cache safely.
 */
#include "testutil.h"

#include "runtime/snapshot.h"
#include "store/kv_snapshot.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { HKV = 1, D = 16 };

static pa_scheme alibi;

static bool mk(void *arg, const char *json, srv_kv_spec *spec, char *err, size_t cap)
{
    (void)arg;
    (void)err;
    (void)cap;
    (void)json;
    spec->scheme = &alibi;
    spec->scheme_owner = NULL;
    spec->scheme_free = NULL;
    return true;
}

static srv_kv_cache *cache(void)
{
    srv_kv_config cfg = {(size_t)8 << 20, 16, 0};
    srv_kv_cache *c = srv_kv_cache_new(&cfg);
    assert_non_null(c);
    return c;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

typedef struct writer {
    srv_kv_cache *c;
    char id[SRV_KV_ID_LEN];
    atomic_bool stop;
    int appended;
} writer;

static void *write_main(void *arg)
{
    writer *w = arg;
    float k[HKV * D], v[HKV * D];
    for (int i = 0; i < HKV * D; i++)
        k[i] = v[i] = (float)i / 7.0f;
    while (!atomic_load(&w->stop)) {
        srv_kv_err e;
        if (w->appended < 200 && srv_kv_append(w->c, w->id, k, v, 1, NULL, &e))
            w->appended++;
        sleep_ms(2);
    }
    return NULL;
}

static void rm_rf(const char *dir)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

static void test_periodic_saves(void **state)
{
    (void)state;
    char dir[] = "/tmp/posattn-snapshot-XXXXXX", path[128];
    srv_kv_cache *c = cache(), *back = cache();
    srv_kv_spec sp;
    srv_kv_info a, b;
    srv_kv_err e;
    srv_snapshotter *s;
    writer w;
    pthread_t t;
    double t0;

    pa_scheme_init(&alibi, PA_SCHEME_ALIBI);
    assert_non_null(mkdtemp(dir));
    memset(&sp, 0, sizeof sp);
    sp.scheme = &alibi;
    sp.scheme_json = "{\"type\":\"alibi\"}";
    sp.num_kv_heads = HKV;
    sp.head_dim = D;
    sp.v_head_dim = D;
    sp.max_tokens = 1000;
    memset(&w, 0, sizeof w);
    w.c = c;
    atomic_init(&w.stop, false);
    assert_true(srv_kv_create(c, &sp, w.id, &e));
    assert_int_equal(pthread_create(&t, NULL, write_main, &w), 0);

    s = srv_snapshotter_start(c, dir, 1, SRV_LOG_TEXT);
    assert_non_null(s);
    sleep_ms(1500); /* one save, appends running */
    snprintf(path, sizeof path, "%s/%s.safetensors", dir, w.id);
    assert_int_equal(access(path, F_OK), 0);
    atomic_store(&w.stop, true);
    pthread_join(t, NULL);
    sleep_ms(1200); /* the next save holds every append */
    t0 = now_s();
    srv_snapshotter_stop(s);
    assert_true(now_s() - t0 < 0.9); /* woken, not slept out */

    assert_int_equal(srv_kv_load_dir(back, dir, mk, NULL, NULL), 1);
    assert_true(srv_kv_info_get(c, w.id, &a, &e));
    assert_true(srv_kv_info_get(back, w.id, &b, &e));
    assert_int_equal(a.length, w.appended);
    assert_int_equal(b.length, a.length);
    assert_int_equal(b.appended, a.appended);
    assert_int_equal(b.next_position, a.next_position);

    /* Stopped at once, before its first save; NULL is a no-op. */
    s = srv_snapshotter_start(c, dir, 3600, SRV_LOG_TEXT);
    assert_non_null(s);
    t0 = now_s();
    srv_snapshotter_stop(s);
    assert_true(now_s() - t0 < 0.9);
    srv_snapshotter_stop(NULL);
    srv_kv_cache_free(c);
    srv_kv_cache_free(back);
    rm_rf(dir);
}

/* A directory that vanished: each save fails and is logged; the thread
 * keeps going and stops when told. */
static void test_failing_saves(void **state)
{
    (void)state;
    char dir[] = "/tmp/posattn-snapshot-XXXXXX", id[SRV_KV_ID_LEN];
    srv_kv_cache *c = cache();
    srv_kv_spec sp;
    srv_kv_err e;
    srv_snapshotter *s;

    pa_scheme_init(&alibi, PA_SCHEME_ALIBI);
    assert_non_null(mkdtemp(dir));
    memset(&sp, 0, sizeof sp);
    sp.scheme = &alibi;
    sp.scheme_json = "{\"type\":\"alibi\"}";
    sp.num_kv_heads = HKV;
    sp.head_dim = D;
    sp.v_head_dim = D;
    sp.max_tokens = 10;
    assert_true(srv_kv_create(c, &sp, id, &e));
    rm_rf(dir);
    s = srv_snapshotter_start(c, dir, 1, SRV_LOG_JSON);
    assert_non_null(s);
    sleep_ms(1300);
    srv_snapshotter_stop(s);
    {
        srv_kv_info info;
        assert_true(srv_kv_info_get(c, id, &info, &e)); /* the session is untouched */
    }
    srv_kv_cache_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_periodic_saves),
        cmocka_unit_test(test_failing_saves),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
