/* cors.h - Cross-Origin Resource Sharing (the Fetch standard's CORS
 * protocol) for --cors-origin: which requests come from a web page of an
 * allowed origin, and the headers that let the browser hand it the answer.
 * Off (no headers at all) when no origin is configured.
 */
#ifndef SRV_CORS_H
#define SRV_CORS_H

#include "runtime/config.h"

#include <microhttpd.h>
#include <stdbool.h>

/* The value of Access-Control-Allow-Origin for a request whose Origin
 * header is origin (NULL: none): "*" when cfg allows any origin, else the
 * configured origin equal to it (ASCII case-insensitively), else NULL (no
 * CORS headers: the browser keeps the answer from the page). Points into
 * cfg or is static: valid as long as cfg. */
const char *srv_cors_allow(const srv_config *cfg, const char *origin);

/* Adds the headers of an answer to a request whose allowed origin is
 * allow (srv_cors_allow; NULL adds Vary: Origin alone when cfg names
 * origins, so that a cache keeps answers to different origins apart):
 * Access-Control-Allow-Origin, Vary: Origin, and
 * Access-Control-Expose-Headers naming the headers a client reads
 * (Server-Timing, X-Posattn-Replica, Retry-After,
 * Inference-Header-Content-Length, WWW-Authenticate, Allow). With
 * preflight, the answer to a preflight OPTIONS instead: the methods of the
 * route (allow_methods, as an Allow header lists them), the request headers
 * a client sends (Authorization, Content-Type,
 * Inference-Header-Content-Length, ...) and Access-Control-Max-Age. */
void srv_cors_headers(const srv_config *cfg, struct MHD_Response *resp, const char *allow,
                      bool preflight, const char *allow_methods);

/* Seconds a browser may keep a preflight's answer (Chromium keeps at most
 * 7200). */
#define SRV_CORS_MAX_AGE "600"

#endif
