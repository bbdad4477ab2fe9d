/* respond.h - private to http/: a request's answer as libmicrohttpd sends
 * it (http/respond.c), and the routes that need no job.
 */
#ifndef SRV_HTTP_RESPOND_H
#define SRV_HTTP_RESPOND_H

#include "http/request.h"

#include <microhttpd.h>

/* Queues q->reply as the response (headers: content type, Server-Timing,
 * Retry-After, Allow, the protocol's error shape and length header, ...),
 * counting the request as answered. */
enum MHD_Result http_send_reply(request *q);
/* Replaces q->reply with the error e and sends it. */
enum MHD_Result http_send_error(request *q, srv_error e, const char *field, const char *msg);
/* A static text answer (copied). */
void http_set_text(srv_reply *r, int status, const char *type, const char *text);
/* Counts the request in the metrics, once: when its answer is queued, or
 * at completion for one that never got an answer. */
void http_record_answer(request *q);
/* A route without a job: health, metrics, the page, GET endpoints of the
 * API, a protocol's GET routes. */
enum MHD_Result http_serve_simple(request *q);
/* What an API endpoint sees of q besides its body: the path's parameters
 * and the query string (valid while q is). */
void http_endpoint_args(request *q, srv_endpoint_args *a);
/* What the route's protocol sees of q and the server. */
void http_protocol_ctx(request *q, srv_protocol_ctx *pc);

#endif
