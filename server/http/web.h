/* web.h - the files of posattnd's web page (server/web/), compiled into the
 * binary by the Makefile (build/server/embed_web.c), and the headers they
 * are served with. Only these embedded files are ever served: a URL path is
 * looked up by exact name, so nothing outside server/web/ can be reached.
 */
#ifndef SRV_WEB_H
#define SRV_WEB_H

#include <stdbool.h>
#include <stddef.h>

/* A file of the page: static bytes, valid for the life of the process. */
typedef struct srv_web_file {
    const char *name;          /* "index.html", "app.js" */
    const unsigned char *data; /* len bytes (a NUL follows, not counted) */
    size_t len;
    const char *content_type; /* by extension, with charset for text */
} srv_web_file;

/* The page sets these on every answer of GET / and GET /web/<file>. */
#define SRV_WEB_CACHE_CONTROL "no-cache"
#define SRV_WEB_CSP                                                                                \
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "                    \
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; "                 \
    "frame-ancestors 'none'"

/* Finds the file for a URL path: "/" is index.html, "/web/NAME" is NAME.
 * Returns false (and leaves *out untouched) for any other path or an unknown
 * name. Thread-safe (reads static data only). */
bool srv_web_find(const char *url_path, srv_web_file *out);

#endif
