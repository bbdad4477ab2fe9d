/* http.h - the HTTP front of posattnd (libmicrohttpd): routing, bodies,
 * authentication, suspend/resume around the worker pool, response headers,
 * access log and request metrics. HTTP threads never compute.
 */
#ifndef SRV_HTTP_H
#define SRV_HTTP_H

#include "runtime/config.h"
#include "runtime/metrics.h"
#include "runtime/pool.h"

#include <stdint.h>

typedef struct srv_http srv_http;

/* Starts listening on cfg->host:cfg->port (port 0: any free port; the bound
 * port is written to *bound_port). The config, pool and metrics must outlive
 * the server. NULL on failure, with the reason on stderr. */
srv_http *srv_http_start(const srv_config *cfg, srv_pool *pool, srv_metrics *metrics,
                         int *bound_port);

/* From now on /readyz answers 503 and new API requests get 503 DRAINING;
 * accepted requests still complete. */
void srv_http_drain(srv_http *h);

/* Stops accepting connections; open ones go on being served. */
void srv_http_quiesce(srv_http *h);

/* API requests accepted (handed to the pool) and not yet answered. */
int64_t srv_http_in_flight(const srv_http *h);

/* Requests being received, computed or answered: from the first byte of a
 * request to its completion. Zero means no connection is mid-request (and
 * none is suspended), so stopping loses nothing. */
int64_t srv_http_open_requests(const srv_http *h);

/* Closes every connection and frees. Only with no request open: a suspended
 * connection would make libmicrohttpd abort. */
void srv_http_stop(srv_http *h);

#endif
