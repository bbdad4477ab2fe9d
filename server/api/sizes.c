/* sizes.c - what a request would cost, checked before any work: the size
 * of a result tensor against --max-tensor-elements, and the request's whole
 * memory (inputs, results, workspaces, the answer's text) against
 * --max-request-mb (api/json.h).
 */
#include "api/json.h"

#include "codec/fmt_float.h"

#include <stdint.h>
#include <stdio.h>

bool api_check_result_size(const char *name, int ndim, const int64_t *shape, const api_ctx *ctx,
                           api_err *e)
{
    size_t n = 1;
    char dims[96];
    size_t used = 0;
    for (int d = 0; d < ndim; d++)
        n = api_mul_sat(n, (size_t)shape[d]);
    if (n <= ctx->lim->max_tensor_elements)
        return true;
    dims[0] = '\0';
    for (int d = 0; d < ndim; d++) {
        int w =
            snprintf(dims + used, sizeof dims - used, "%s%lld", d ? ", " : "", (long long)shape[d]);
        if (w > 0 && (size_t)w < sizeof dims - used)
            used += (size_t)w;
    }
    return api_fail(e, ctx, SRV_ERR_PAYLOAD_TOO_LARGE, name,
                    "%s [%s] would have %zu values; the limit per tensor is %zu " SRV_LIMIT_TENSOR,
                    name, dims, n, ctx->lim->max_tensor_elements);
}

size_t api_rendered_bytes(size_t result_bytes, srv_encoding enc)
{
    const size_t floats = result_bytes / sizeof(float);
    if (enc == SRV_ENCODING_B64) /* 4 bytes in 5 1/3 characters */
        return api_add_sat(api_mul_sat(floats / 3 + 1, 16), 64);
    return api_mul_sat(floats, SRV_FMT_FLOAT_MAX + 1); /* a number and its comma */
}

bool api_check_memory(size_t need, const srv_limits *lim, api_err *e)
{
    const size_t mb = (size_t)1 << 20;
    if (need <= lim->max_request_memory)
        return true;
    if (need == SIZE_MAX)
        return api_fail(
            e, NULL, SRV_ERR_PAYLOAD_TOO_LARGE, "",
            "request needs more memory than can be counted, limit %zu MB " SRV_LIMIT_MEMORY,
            lim->max_request_memory / mb);
    /* Rounded up, so the figure never equals the limit it exceeds. */
    return api_fail(e, NULL, SRV_ERR_PAYLOAD_TOO_LARGE, "",
                    "request needs %zu MB (inputs, results, workspaces and the answer's text), "
                    "limit %zu MB " SRV_LIMIT_MEMORY "; base64 answers take a third of JSON's",
                    need / mb + (need % mb != 0), lim->max_request_memory / mb);
}
