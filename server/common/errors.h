/* errors.h - the one table that maps every error the service can answer to
 * its machine-readable code and HTTP status. Library statuses (pa_status)
 * map through srv_error_from_pa().
 */
#ifndef SRV_ERRORS_H
#define SRV_ERRORS_H

#include "posattn.h"

/* X(name, http_status) - name is sent as error.code. */
#define SRV_ERROR_MAP(X)                                                                           \
    X(MALFORMED_JSON, 400)                                                                         \
    X(INVALID_ARGUMENT, 400)                                                                       \
    X(SHAPE_MISMATCH, 400)                                                                         \
    X(OUT_OF_RANGE, 400)                                                                           \
    X(UNSUPPORTED, 400)                                                                            \
    X(UNKNOWN_FIELD, 400)                                                                          \
    X(UNKNOWN_TENSOR, 400)                                                                         \
    X(UNKNOWN_MODEL, 400)                                                                          \
    X(UNAUTHORIZED, 401)                                                                           \
    X(NOT_FOUND, 404)                                                                              \
    X(SESSION_NOT_FOUND, 404)                                                                      \
    X(METHOD_NOT_ALLOWED, 405)                                                                     \
    X(SESSION_FULL, 409)                                                                           \
    X(SESSION_BUSY, 409)                                                                           \
    X(SESSION_EXISTS, 409)                                                                         \
    X(PAYLOAD_TOO_LARGE, 413)                                                                      \
    X(INTERNAL, 500)                                                                               \
    X(NOT_IMPLEMENTED, 501)                                                                        \
    X(OVERLOADED, 503)                                                                             \
    X(DRAINING, 503)                                                                               \
    X(TIMEOUT, 504)                                                                                \
    X(CACHE_FULL, 507)

typedef enum srv_error {
#define SRV__ERR_ENUM(name, http) SRV_ERR_##name,
    SRV_ERROR_MAP(SRV__ERR_ENUM)
#undef SRV__ERR_ENUM
        SRV_ERR_COUNT
} srv_error;

/* What sets each limit, as a 413 names it: the flag, and the variable. */
#define SRV_LIMIT_BODY "(set by --max-body-mb or POSATTN_MAX_BODY_MB)"
#define SRV_LIMIT_BATCH "(set by --max-batch-items or POSATTN_MAX_BATCH_ITEMS)"
#define SRV_LIMIT_TENSOR "(set by --max-tensor-elements or POSATTN_MAX_TENSOR_ELEMENTS)"
#define SRV_LIMIT_MEMORY "(set by --max-request-mb or POSATTN_MAX_REQUEST_MB)"
#define SRV_LIMIT_COMPUTE "(set by --max-request-gflop or POSATTN_MAX_REQUEST_GFLOP)"

const char *srv_error_code(srv_error e);
int srv_error_http_status(srv_error e);
/* PA_STATUS_SHAPE_MISMATCH -> SRV_ERR_SHAPE_MISMATCH, TOO_LARGE -> PAYLOAD_TOO_LARGE,
 * WORKSPACE_TOO_SMALL -> INTERNAL (our bug), others by name. */
srv_error srv_error_from_pa(pa_status st);

#endif
