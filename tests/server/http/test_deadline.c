/* test_deadline.c - connection deadlines (server/http/deadline.c) and the pool's
 * ticker that sweeps them (server/runtime/pool.c): each phase's bound, busy
 * connections never cut, keep-alive restarting the clock, cut once, and the
 * ticker stopping for good. Sockets are socketpair(2) ends: a cut shows as
 * end-of-stream on the peer. */
#include "testutil.h"

#include "http/deadline.h"
#include "runtime/pool.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define S 1000000000ull

typedef struct pair {
    int ours, peer;
} pair;

static pair make_pair(void)
{
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    fcntl(sv[1], F_SETFL, O_NONBLOCK);
    return (pair){sv[0], sv[1]};
}

/* True when the peer sees end-of-stream, false when the socket is still open. */
static bool peer_sees_eof(const pair *p)
{
    char b;
    ssize_t n = recv(p->peer, &b, 1, 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return false;
    return n == 0;
}

static void close_pair(pair *p)
{
    close(p->ours);
    close(p->peer);
}

static void test_headers_deadline(void **state)
{
    srv_deadlines *d = srv_deadlines_new(2 * S);
    pair a = make_pair(), b = make_pair();
    srv_conn *ca, *cb;
    (void)state;
    assert_non_null(d);
    ca = srv_deadlines_open(d, a.ours, 10 * S);
    cb = srv_deadlines_open(d, b.ours, 11 * S);
    assert_int_equal(srv_deadlines_open_count(d), 2);
    /* Exactly at the limit: not yet. */
    assert_int_equal(srv_deadlines_sweep(d, 12 * S, NULL), 0);
    assert_false(peer_sees_eof(&a));
    assert_int_equal(srv_deadlines_sweep(d, 12 * S + 1, NULL), 1);
    assert_true(peer_sees_eof(&a));
    assert_false(peer_sees_eof(&b));
    /* Cut once only. */
    assert_int_equal(srv_deadlines_sweep(d, 20 * S, NULL), 1);
    assert_true(peer_sees_eof(&b));
    assert_int_equal(srv_deadlines_sweep(d, 30 * S, NULL), 0);
    assert_int_equal(srv_deadlines_cut_count(d), 2);
    srv_deadlines_close(d, ca);
    srv_deadlines_close(d, cb);
    assert_int_equal(srv_deadlines_open_count(d), 0);
    srv_deadlines_free(d);
    close_pair(&a);
    close_pair(&b);
}

static void test_phases(void **state)
{
    srv_deadlines *d = srv_deadlines_new(2 * S);
    pair a = make_pair();
    srv_conn *c;
    (void)state;
    c = srv_deadlines_open(d, a.ours, 0);
    /* Headers done at 1 s: the body has its own 2 s from there. */
    srv_conn_set_phase(c, SRV_CONN_BODY, 1 * S);
    assert_int_equal(srv_deadlines_sweep(d, 3 * S, NULL), 0);
    /* Computing: never cut, however long. */
    srv_conn_set_phase(c, SRV_CONN_BUSY, 0);
    assert_int_equal(srv_deadlines_sweep(d, 100 * S, NULL), 0);
    /* Answered at 100 s; keep-alive: the next headers are due by 102 s. */
    srv_conn_set_phase(c, SRV_CONN_HEADERS, 100 * S);
    assert_int_equal(srv_deadlines_sweep(d, 101 * S, NULL), 0);
    assert_false(peer_sees_eof(&a));
    assert_int_equal(srv_deadlines_sweep(d, 103 * S, NULL), 1);
    assert_true(peer_sees_eof(&a));
    srv_deadlines_close(d, c);
    srv_deadlines_close(d, NULL);
    srv_conn_set_phase(NULL, SRV_CONN_BUSY, 0);
    srv_deadlines_free(d);
    close_pair(&a);
}

/* An answer queued at 200 s must be read by 202 s; the cut is counted in
 * the send phase. */
static void test_send_deadline(void **state)
{
    srv_deadlines *d = srv_deadlines_new(2 * S);
    pair a = make_pair(), b = make_pair();
    srv_conn *ca, *cb;
    size_t cut[SRV_CONN_CUT_PHASES];
    (void)state;
    ca = srv_deadlines_open(d, a.ours, 0);
    cb = srv_deadlines_open(d, b.ours, 0);
    srv_conn_set_phase(ca, SRV_CONN_SEND, 200 * S);
    srv_conn_set_phase(cb, SRV_CONN_BODY, 201 * S);
    assert_int_equal(srv_deadlines_sweep(d, 202 * S, cut), 0);
    assert_int_equal(srv_deadlines_sweep(d, 202 * S + 1, cut), 1);
    assert_int_equal(cut[SRV_CONN_SEND], 1);
    assert_int_equal(cut[SRV_CONN_BODY], 0);
    assert_true(peer_sees_eof(&a));
    assert_int_equal(srv_deadlines_sweep(d, 204 * S, cut), 1);
    assert_int_equal(cut[SRV_CONN_BODY], 1);
    assert_int_equal(cut[SRV_CONN_SEND], 0);
    srv_deadlines_close(d, ca);
    srv_deadlines_close(d, cb);
    srv_deadlines_free(d);
    close_pair(&a);
    close_pair(&b);
}

static void test_no_limit(void **state)
{
    srv_deadlines *d = srv_deadlines_new(0);
    pair a = make_pair();
    srv_conn *c;
    (void)state;
    c = srv_deadlines_open(d, a.ours, 0);
    assert_int_equal(srv_deadlines_sweep(d, 1000 * S, NULL), 0);
    assert_false(peer_sees_eof(&a));
    srv_deadlines_close(d, c);
    srv_deadlines_free(d);
    srv_deadlines_free(NULL);
    close_pair(&a);
}

static atomic_int ticks;
static void count_tick(void *arg)
{
    (void)arg;
    atomic_fetch_add(&ticks, 1);
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void test_pool_ticker(void **state)
{
    srv_pool *p = srv_pool_start(1, 4);
    int n;
    (void)state;
    assert_non_null(p);
    atomic_store(&ticks, 0);
    srv_pool_set_ticker(p, 10, count_tick, NULL);
    for (int i = 0; i < 200 && atomic_load(&ticks) < 3; i++)
        sleep_ms(10);
    assert_true(atomic_load(&ticks) >= 3);
    srv_pool_set_ticker(p, 0, NULL, NULL);
    n = atomic_load(&ticks);
    sleep_ms(60);
    assert_int_equal(atomic_load(&ticks), n); /* stopped for good */
    /* Stopping the pool with a ticker armed ends too. */
    srv_pool_set_ticker(p, 5, count_tick, NULL);
    sleep_ms(20);
    srv_pool_stop(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_headers_deadline), cmocka_unit_test(test_phases),
        cmocka_unit_test(test_send_deadline),    cmocka_unit_test(test_no_limit),
        cmocka_unit_test(test_pool_ticker),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
