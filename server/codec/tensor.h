/* tensor.h - tensors in requests and responses.
 *
 * A tensor is {"shape":[...], "data":[...]} with data flat or nested,
 * row-major float32, or {"shape":[...], "b64":"..."} with little-endian
 * float32 bytes in base64 (the fast path). "datatype":"FP32" is accepted (the
 * Open Inference Protocol's name); any other datatype is an error.
 */
#ifndef SRV_TENSOR_H
#define SRV_TENSOR_H

#include "codec/base64.h"  /* srv_b64_*: the codec of the "b64" field */
#include "codec/float32.h" /* SRV_MAX_DIMS */
#include "common/reply.h"

struct srv_lift; /* codec/json_lift.h */

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct srv_tensor {
    int ndim;
    int64_t shape[SRV_MAX_DIMS];
    size_t count;  /* product of shape */
    float *data;   /* count floats: malloc'd and owned, unless borrowed */
    bool borrowed; /* data belongs to someone else (a loaded named tensor,
                      a request's binary segment): never written or freed */
    /* The same values in 16 bits where a named tensor lends its file's
     * (store/tensor_store.h), else NULL: borrowed, never written.
     * bits16_type is a pa_dtype, PA_DTYPE_BF16 or PA_DTYPE_F16. */
    const uint16_t *bits16;
    int bits16_type;
} srv_tensor;

/* Parses the tensor object `node`. `field` is its path for errors
 * ("inputs[2].q"); errors name sub-fields ("inputs[2].q.shape[1]",
 * "inputs[2].q.data"). Checks: object with shape (array of 1..8 positive
 * integers), exactly one of data/b64, element count == product of shape,
 * count <= max_elements (413 PAYLOAD_TOO_LARGE otherwise), every value a
 * finite number within float range, b64 valid and of exactly count*4 bytes.
 * want_ndim > 0 also requires that rank. On failure fills *err and returns
 * false with *out untouched. */
bool srv_tensor_parse(const cJSON *node, const char *field, int want_ndim, size_t max_elements,
                      srv_tensor *out, srv_reply *err);

/* The values a tensor may hold. */
typedef enum srv_elem {
    SRV_ELEM_FLOAT = 0,     /* finite float32 (srv_tensor_parse) */
    SRV_ELEM_FLOAT_NEG_INF, /* finite or -inf (b64 only: JSON has no infinity): a bias */
    SRV_ELEM_BOOL,          /* a mask: data of true/false or 0/1, b64 of one byte (0 or 1)
                               per element, "datatype":"BOOL"; parsed to floats 0 and 1 */
} srv_elem;
/* How a tensor's values travel (its "dtype"): the bytes of b64, or the type
 * JSON numbers are rounded to. Computed in float32 after one conversion. */
typedef enum srv_wire {
    SRV_WIRE_F32 = 0, /* "f32", "datatype":"FP32" (the default) */
    SRV_WIRE_F16,     /* "f16", FP16: IEEE binary16 */
    SRV_WIRE_BF16,    /* "bf16", BF16: bfloat16 */
    SRV_WIRE_F64,     /* "f64", FP64: the values must fit float32 */
} srv_wire;
/* "f16" (or "FP16") -> SRV_WIRE_F16 ...; false for another name. */
bool srv_wire_from_name(const char *name, srv_wire *out);
/* Bytes per element on the wire: 4, 2, 2, 8. */
size_t srv_wire_size(srv_wire w);

/* srv_tensor_parse for values of kind `kind`. A tensor may name its wire
 * type with "dtype" ("f32", "f16", "bf16", "f64") or "datatype" ("FP32",
 * "FP16", "BF16", "FP64"; the two must agree when both are given); a mask
 * is "BOOL" (or "bool"). lift, when not NULL, is the lift of the body node
 * was parsed from (codec/json_lift.h): a marker in data or b64 takes its
 * floats from there. */
bool srv_tensor_parse_as(const cJSON *node, const char *field, int want_ndim, size_t max_elements,
                         srv_elem kind, const struct srv_lift *lift, srv_tensor *out,
                         srv_reply *err);

/* Frees data unless borrowed; leaves t empty. */
void srv_tensor_free(srv_tensor *t);

typedef enum srv_encoding { SRV_ENCODING_JSON = 0, SRV_ENCODING_B64 } srv_encoding;

/* srv_tensor_render with the values rounded to wire (F32, F16 or BF16; to
 * nearest even) and "datatype" FP16 / BF16: the b64 bytes are that type's,
 * JSON numbers the rounded values. Non-finite values stay what they are
 * (masked logits -inf); check srv_wire_overflow first for finite ones that
 * the type cannot hold. */
bool srv_tensor_render_as(cJSON *parent, const char *name, const float *data, int ndim,
                          const int64_t *shape, srv_encoding enc, srv_wire wire);
/* True when some finite value of data [n] rounds past the largest finite
 * value of wire (65504 for f16); *at is its index. False for F32. */
bool srv_wire_overflow(const float *data, size_t n, srv_wire wire, size_t *at);

/* Adds name: {"shape":[...], "datatype":"FP32", "data":[...]} (flat) or
 * {..., "b64":"..."} to the object parent. In JSON, non-finite values
 * (masked logits are -inf) are written as null. Returns false on allocation
 * failure. */
bool srv_tensor_render(cJSON *parent, const char *name, const float *data, int ndim,
                       const int64_t *shape, srv_encoding enc);

/* Float32 tensors' text written straight into the answer's final text.
 * While a srv_defer is current on this thread, srv_tensor_render leaves a
 * placeholder where the base64 (little-endian hosts only) or the JSON
 * numbers of a float32 tensor would go and keeps a pointer to its data,
 * which must then outlive srv_defer_apply. srv_defer_apply expands the
 * printed tree into one new buffer, writing each tensor in its place: the
 * text is not copied by cJSON's printer nor measured by strlen (for a 4 MB
 * output, 5.6 MB each; for a small answer, most of its printing). The text
 * is the same as srv_tensor_render writes into the tree. Placeholders are
 * a byte 0x02, the index, a byte 0x03: cJSON prints those bytes inside
 * strings as \u0002 and \u0003, so no string can pose as one. */
typedef struct srv_defer {
    const float **data;
    size_t *count;
    unsigned char *json; /* 1: JSON numbers, 0: base64 */
    size_t n, cap;
} srv_defer;
void srv_defer_set_current(srv_defer *d); /* NULL: none */
/* Whether the current defer holds p (its data may not be freed yet). */
bool srv_defer_uses(const float *p);
/* The text with each placeholder expanded (malloc'd, NUL-terminated; its
 * length in *out_len), or NULL when memory ran out. */
char *srv_defer_apply(const srv_defer *d, const char *printed, size_t printed_len, size_t *out_len);
void srv_defer_free(srv_defer *d);

/* A JSON integer as a raw cJSON node (NULL on allocation failure): printed
 * as its digits, without cJSON's sprintf("%1.15g") and sscanf round trip,
 * which cost more than a small tensor's whole answer. */
cJSON *srv_json_int(int64_t v);

#endif
