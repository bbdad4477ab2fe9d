/* reply.h - an HTTP-ready answer (status, content type, body) built by the
 * API layer and sent by the HTTP layer, and the JSON error body.
 */
#ifndef SRV_REPLY_H
#define SRV_REPLY_H

#include "common/errors.h"

#include <stddef.h>

typedef struct srv_reply {
    int http_status;
    const char *content_type; /* static string */
    char *body;               /* malloc'd, owned by the reply; may be NULL when empty */
    size_t body_len;
    srv_error error; /* meaningful when http_status >= 400 */
    /* A header whose value is a byte count framing the body (static name,
     * NULL for none): the protocol that rendered the answer says with it
     * where one part of the body ends (the Open Inference Protocol's
     * Inference-Header-Content-Length: a JSON header of len_value bytes,
     * then binary tensors). */
    const char *len_header;
    size_t len_value;
} srv_reply;

/* Sets a JSON body; takes ownership of body (malloc'd). */
void srv_reply_json(srv_reply *r, int http_status, char *body, size_t len);
/* {"error":{"code":"SHAPE_MISMATCH","message":"...","field":"inputs[2].k.shape"}};
 * field may be NULL or "" (then omitted). Overwrites *r without freeing it
 * (call srv_reply_free first when reusing one). On allocation failure the body
 * is a malloc'd fixed text, or empty with status 500 if even that fails. */
void srv_reply_error(srv_reply *r, srv_error e, const char *field, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
void srv_reply_free(srv_reply *r);

/* Copies at most cap-1 bytes of src (NUL-terminated) into dst (cap >= 1),
 * replacing every byte that is not part of a well-formed UTF-8 sequence by
 * '?' and stopping before a sequence that does not fit: text that quotes a
 * request (cut at a byte limit, perhaps inside a character) stays valid in
 * a JSON answer. */
void srv_utf8_copy(char *dst, size_t cap, const char *src);

#endif
