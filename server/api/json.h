/* json.h - private to api/: the readers of request JSON that only api/'s
 * endpoints use (tensors, arrays, lengths, encodings, limits), each error
 * naming the field and the value found; api/protocol.h has the error
 * record, the parser's context, the body reader and the readers protocols
 * use too. The lowest files of api/: they know no endpoint and no job.
 */
#ifndef SRV_API_JSON_H
#define SRV_API_JSON_H

#include "api/api.h"
#include "api/protocol.h"
#include "codec/tensor.h"
#include "common/errors.h"
#include "common/reply.h"
#include "posattn.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Same, from a core library error: its field gets the ctx prefix. */
bool api_fail_pa(api_err *e, const api_ctx *ctx, const pa_error *pe);
/* Copies the error of a failed srv_tensor_parse (whose reply holds it) into
 * *e and frees the reply. */
bool api_fail_reply(api_err *e, srv_reply *reply);
/* Joins ctx prefix and name into buf: "inputs[2].k" or "k". */
const char *api_path(char *buf, size_t cap, const api_ctx *ctx, const char *name);
/* "inputs[i]" into buf (at least 32 bytes), without printf: it is on every
 * item's path. */
const char *api_item_prefix(char *buf, size_t i);
/* A copy of a request's "id" to echo in the answer (NULL on allocation
 * failure): integers from 0 up to 10^15 as raw digits, the text cJSON's
 * printer would give them after its sprintf("%1.15g") and sscanf. */
cJSON *api_id_node(const cJSON *id);

/* Arrays of int32 / finite float values, 1 .. lim->max_tensor_elements long;
 * *out malloc'd (caller frees). */
bool api_get_int_array(const cJSON *v, const char *name, const api_ctx *ctx, int32_t **out,
                       int32_t *n, api_err *e);
/* Adds name: [v[0], ..., v[n-1]] to the object parent; false on allocation failure. */
bool api_add_int_array(cJSON *parent, const char *name, const int32_t *v, int32_t n);
bool api_get_float_array(const cJSON *v, const char *name, const api_ctx *ctx, float **out,
                         int32_t *n, api_err *e);
/* A length given as a count (len_name, >= 1) or as an explicit int array
 * (pos_name), or both when they agree. *n = 0 and *pos untouched when
 * neither is there; *pos is malloc'd when the array is given. */
bool api_get_length(const cJSON *obj, const char *len_name, const char *pos_name,
                    const api_ctx *ctx, int32_t *n, int32_t **pos, api_err *e);
/* Integer arrays (api_get_int_array, api_get_int_rows) also come as a
 * tensor {"shape":[n] or [rows, n], "dtype":"i32"|"i64", "b64":"..."} (or
 * "data"): the form of a client that holds them as int32/int64 arrays. The
 * rank such a value has: its shape's, or the depth of nested arrays (1 to
 * 3, by the first element). */
int api_int_rank(const cJSON *v);
/* A nested int array [rows, n] (M-RoPE positions [3, L]): every row an int
 * array of the same length *n >= 1; *out malloc'd, row-major. */
bool api_get_int_rows(const cJSON *v, const char *name, const api_ctx *ctx, int rows, int32_t **out,
                      int32_t *n, api_err *e);
/* first, first+1, ... (n values), malloc'd; NULL on allocation failure. */
int32_t *api_range_positions(int32_t first, int32_t n);
/* output_dtype: "f32", "f16" or "bf16" (the type results are rounded to). */
bool api_get_output_dtype(const cJSON *v, const api_ctx *ctx, srv_wire *out, api_err *e);
/* "json" or "b64". */
bool api_get_encoding(const cJSON *v, const api_ctx *ctx, srv_encoding *out, api_err *e);

/* Parses a tensor member: the ctx's source's when it owns v, a named tensor
 * for {"ref":"NAME"} (store/tensor_store.h), else srv_tensor_parse; checks
 * every dim fits int32. */
bool api_get_tensor(const cJSON *v, const char *name, const api_ctx *ctx, int want_ndim,
                    srv_tensor *out, api_err *e);
/* The same for values of another kind (a mask, a bias with -inf). Named
 * tensors are float32: a mask cannot be one. */
bool api_get_tensor_as(const cJSON *v, const char *name, const api_ctx *ctx, int want_ndim,
                       srv_elem kind, srv_tensor *out, api_err *e);

/* Element count of a result tensor against lim->max_tensor_elements:
 * PAYLOAD_TOO_LARGE naming the result when over. Shapes are non-negative. */
bool api_check_result_size(const char *name, int ndim, const int64_t *shape, const api_ctx *ctx,
                           api_err *e);

/* The 413 for a request that needs more than lim->max_request_memory. */
/* The answer's text for results of result_bytes (float32 bytes) in
 * encoding enc, at most: JSON numbers at their longest printed length, or
 * base64's 4/3. Counted in a request's memory before any work. */
size_t api_rendered_bytes(size_t result_bytes, srv_encoding enc);
bool api_check_memory(size_t need, const srv_limits *lim, api_err *e);

#endif
