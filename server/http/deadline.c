/* deadline.c - see deadline.h.
 *
 * The records form a list under one mutex. A record is unlinked (under the
 * mutex) before its socket is closed, and the sweep calls shutdown(2) with
 * the mutex held, so the sweep never touches a descriptor number that has
 * been closed and reused. The phase and its start are atomics: the serving
 * thread writes them while a sweep may read them.
 */
#include "http/deadline.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/socket.h>

struct srv_conn {
    int fd;
    atomic_int phase;
    atomic_uint_fast64_t since_ns;
    atomic_bool cut;    /* shut by the sweep, or ended mid-answer (once) */
    atomic_bool served; /* carried a request */
    srv_conn *prev, *next;
};

struct srv_deadlines {
    pthread_mutex_t lock;
    srv_conn *head;
    size_t count;
    uint64_t limit_ns;
    atomic_uint_fast64_t cut_total;
};

srv_deadlines *srv_deadlines_new(uint64_t limit_ns)
{
    srv_deadlines *d = calloc(1, sizeof *d);
    if (d == NULL)
        return NULL;
    if (pthread_mutex_init(&d->lock, NULL) != 0) {
        free(d);
        return NULL;
    }
    d->limit_ns = limit_ns;
    atomic_init(&d->cut_total, 0);
    return d;
}

void srv_deadlines_free(srv_deadlines *d)
{
    if (d == NULL)
        return;
    while (d->head != NULL) { /* should not happen: every connection closes first */
        srv_conn *next = d->head->next;
        free(d->head);
        d->head = next;
    }
    pthread_mutex_destroy(&d->lock);
    free(d);
}

srv_conn *srv_deadlines_open(srv_deadlines *d, int fd, uint64_t now_ns)
{
    srv_conn *c = calloc(1, sizeof *c);
    if (c == NULL)
        return NULL;
    c->fd = fd;
    atomic_init(&c->phase, SRV_CONN_HEADERS);
    atomic_init(&c->cut, false);
    atomic_init(&c->served, false);
    atomic_init(&c->since_ns, now_ns);
    pthread_mutex_lock(&d->lock);
    c->next = d->head;
    if (d->head != NULL)
        d->head->prev = c;
    d->head = c;
    d->count++;
    pthread_mutex_unlock(&d->lock);
    return c;
}

void srv_deadlines_close(srv_deadlines *d, srv_conn *c)
{
    if (c == NULL)
        return;
    pthread_mutex_lock(&d->lock);
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        d->head = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    d->count--;
    pthread_mutex_unlock(&d->lock);
    free(c);
}

static void no_linger(int fd)
{
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &(struct linger){1, 0}, sizeof(struct linger));
}

bool srv_conn_abort_send(srv_conn *c)
{
    if (c == NULL || atomic_load(&c->phase) != SRV_CONN_SEND)
        return false;
    no_linger(c->fd);
    return !atomic_exchange(&c->cut, true);
}

void srv_conn_set_phase(srv_conn *c, srv_conn_phase phase, uint64_t since_ns)
{
    if (c == NULL)
        return;
    /* since first: a sweep that sees the new phase sees its start too. */
    atomic_store(&c->since_ns, since_ns);
    atomic_store(&c->phase, (int)phase);
}

size_t srv_deadlines_sweep(srv_deadlines *d, uint64_t now_ns, size_t cut[SRV_CONN_CUT_PHASES])
{
    size_t n = 0;
    if (cut != NULL)
        for (int k = 0; k < SRV_CONN_CUT_PHASES; k++)
            cut[k] = 0;
    if (d->limit_ns == 0)
        return 0;
    pthread_mutex_lock(&d->lock);
    for (srv_conn *c = d->head; c != NULL; c = c->next) {
        /* Phase before start, the reverse of srv_conn_set_phase. */
        int phase = atomic_load(&c->phase);
        uint64_t since = atomic_load(&c->since_ns);
        if (atomic_load(&c->cut) || phase == SRV_CONN_BUSY || now_ns <= since ||
            now_ns - since <= d->limit_ns)
            continue;
        /* The read side wakes libmicrohttpd's poll with end-of-stream; it
         * then closes the connection as if the client had. */
        /* An answer not read in time: no lingering, so that at the close
         * the kernel drops what is still queued for the client (megabytes)
         * and resets the connection, instead of trickling it out first. */
        if (atomic_exchange(&c->cut, true))
            continue; /* ended mid-answer meanwhile, and counted there */
        if (phase == SRV_CONN_SEND)
            no_linger(c->fd);
        shutdown(c->fd, SHUT_RDWR);
        n++;
        if (cut != NULL && phase < SRV_CONN_CUT_PHASES)
            cut[phase]++;
    }
    pthread_mutex_unlock(&d->lock);
    atomic_fetch_add(&d->cut_total, n);
    return n;
}

size_t srv_deadlines_open_count(srv_deadlines *d)
{
    size_t n;
    pthread_mutex_lock(&d->lock);
    n = d->count;
    pthread_mutex_unlock(&d->lock);
    return n;
}

uint64_t srv_deadlines_cut_count(srv_deadlines *d)
{
    return atomic_load(&d->cut_total);
}

bool srv_conn_was_cut(srv_conn *c)
{
    return c != NULL && atomic_load(&c->cut);
}

void srv_conn_mark_served(srv_conn *c)
{
    if (c != NULL)
        atomic_store(&c->served, true);
}

bool srv_conn_served(srv_conn *c)
{
    return c != NULL && atomic_load(&c->served);
}

uint64_t srv_conn_since(srv_conn *c)
{
    return c != NULL ? (uint64_t)atomic_load(&c->since_ns) : 0;
}
