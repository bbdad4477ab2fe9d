/* errors.c - see errors.h. */
#include "common/errors.h"

static const struct {
    const char *code;
    int http;
} table[SRV_ERR_COUNT] = {
#define SRV__ERR_ROW(name, http) [SRV_ERR_##name] = {#name, http},
    SRV_ERROR_MAP(SRV__ERR_ROW)
#undef SRV__ERR_ROW
};

const char *srv_error_code(srv_error e)
{
    return (unsigned)e < SRV_ERR_COUNT ? table[e].code : "INTERNAL";
}

int srv_error_http_status(srv_error e)
{
    return (unsigned)e < SRV_ERR_COUNT ? table[e].http : 500;
}

srv_error srv_error_from_pa(pa_status st)
{
    switch (st) {
    case PA_STATUS_INVALID_ARGUMENT:
        return SRV_ERR_INVALID_ARGUMENT;
    case PA_STATUS_SHAPE_MISMATCH:
        return SRV_ERR_SHAPE_MISMATCH;
    case PA_STATUS_OUT_OF_RANGE:
        return SRV_ERR_OUT_OF_RANGE;
    case PA_STATUS_UNSUPPORTED:
        return SRV_ERR_UNSUPPORTED;
    case PA_STATUS_TOO_LARGE:
        return SRV_ERR_PAYLOAD_TOO_LARGE;
    case PA_STATUS_OK:
    case PA_STATUS_WORKSPACE_TOO_SMALL:
        break;
    }
    return SRV_ERR_INTERNAL;
}
