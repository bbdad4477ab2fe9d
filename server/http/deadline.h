/* deadline.h - absolute deadlines for posattnd's connections: a client must
 * deliver a request's complete headers, and then its body, within a bound,
 * however slowly it trickles bytes (libmicrohttpd's own timeout is an idle
 * timeout that every byte resets). A periodic sweep shuts down the socket of
 * each connection past its deadline, so that libmicrohttpd sees the end of
 * the stream and closes the connection itself, on its own thread.
 */
#ifndef SRV_DEADLINE_H
#define SRV_DEADLINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct srv_deadlines srv_deadlines;
typedef struct srv_conn srv_conn;

/* What a connection is waiting for. */
typedef enum srv_conn_phase {
    SRV_CONN_HEADERS, /* a request's headers (the connection's first, or the next on keep-alive) */
    SRV_CONN_BODY,    /* the rest of a request whose headers have arrived */
    SRV_CONN_SEND,    /* the client to read the answer, queued in full */
    SRV_CONN_BUSY     /* nothing: the request is being computed (never cut) */
} srv_conn_phase;

/* The phases a connection can be cut in: headers, body, send. */
enum { SRV_CONN_CUT_PHASES = 3 };

/* A set of connections whose headers, body and send phases each last at
 * most limit_ns (0: no limit, the sweep cuts nothing). NULL when out of memory.
 * srv_deadlines_free(NULL) is a no-op; free only once every connection is
 * closed. */
srv_deadlines *srv_deadlines_new(uint64_t limit_ns);
void srv_deadlines_free(srv_deadlines *d);

/* Registers connection socket fd, in the headers phase since now_ns. The
 * record is the set's until srv_deadlines_close, which must come before fd
 * is closed (libmicrohttpd's MHD_CONNECTION_NOTIFY_CLOSED does). NULL when
 * out of memory (the connection then has no deadline). Thread-safe. */
srv_conn *srv_deadlines_open(srv_deadlines *d, int fd, uint64_t now_ns);
void srv_deadlines_close(srv_deadlines *d, srv_conn *c);

/* A connection ending before its answer was sent (libmicrohttpd's own
 * idle timeout, or the client gone): when c was in the send phase, its
 * socket is set not to linger, so that the close resets it and drops the
 * rest of the answer, and true is returned unless the sweep had already
 * cut it (so that the caller counts each cut once). */
bool srv_conn_abort_send(srv_conn *c);

/* Whether the sweep (or srv_conn_abort_send) has cut c. */
bool srv_conn_was_cut(srv_conn *c);

/* Records that c carried a request; srv_conn_served says whether one did,
 * srv_conn_since when its current phase began (the open, before any). */
void srv_conn_mark_served(srv_conn *c);
bool srv_conn_served(srv_conn *c);
uint64_t srv_conn_since(srv_conn *c);

/* Moves c (NULL: no-op) into phase since since_ns. Called by the thread that
 * serves the connection; safe against a concurrent sweep. */
void srv_conn_set_phase(srv_conn *c, srv_conn_phase phase, uint64_t since_ns);

/* Shuts down (SHUT_RDWR) the socket of every connection in the headers,
 * body or send phase for longer than the limit at now_ns, once each (a
 * client that reads its answer a byte at a time would otherwise hold the
 * connection and the answer's memory as long as it likes). Returns how many
 * it cut now; cut[phase] (may be NULL) gets how many of them in each phase.
 * Thread-safe. */
size_t srv_deadlines_sweep(srv_deadlines *d, uint64_t now_ns, size_t cut[SRV_CONN_CUT_PHASES]);

/* Connections registered and not closed; connections cut since creation. */
size_t srv_deadlines_open_count(srv_deadlines *d);
uint64_t srv_deadlines_cut_count(srv_deadlines *d);

#endif
