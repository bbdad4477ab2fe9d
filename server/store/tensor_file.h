/* tensor_file.h - the two tensor file formats posattnd loads at start-up,
 * parsed from a memory buffer (the mapped file): safetensors (an 8-byte
 * little-endian header length, a JSON header, raw little-endian data) and
 * NumPy .npy (magic, version, a Python dict header, C-order data). Only the
 * headers are read here; tensor_store.c maps files and owns the data.
 */
#ifndef SRV_TENSOR_FILE_H
#define SRV_TENSOR_FILE_H

#include "codec/tensor.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Element types a file may hold; every one is served as float32. */
typedef enum srv_dtype {
    SRV_DTYPE_F32 = 0, /* used in place when 4-byte aligned */
    SRV_DTYPE_F16,     /* IEEE binary16, converted at load */
    SRV_DTYPE_BF16,    /* bfloat16, converted at load */
    SRV_DTYPE_F64,     /* converted at load; values must fit float32 */
} srv_dtype;

/* "F32", "F16", "BF16", "F64" (the safetensors names). */
const char *srv_dtype_name(srv_dtype d);
/* 4, 2, 2, 8. */
size_t srv_dtype_size(srv_dtype d);

enum { SRV_TENSOR_FILE_NAME_MAX = 256 };

/* One tensor of a file: where its bytes are inside the buffer. */
typedef struct srv_tensor_entry {
    char name[SRV_TENSOR_FILE_NAME_MAX]; /* safetensors key; "" for .npy */
    srv_dtype dtype;
    int ndim;
    int64_t shape[SRV_MAX_DIMS]; /* 1..SRV_MAX_DIMS positive dims */
    size_t count;                /* product of shape */
    size_t offset;               /* of the first byte, from the start of the buffer */
    size_t nbytes;               /* count * srv_dtype_size(dtype) */
} srv_tensor_entry;

/* Parses buf[0..len) as a safetensors file: the header length must leave
 * room in the buffer, the header must be a JSON object whose members other
 * than "__metadata__" (ignored) are {"dtype","shape","data_offsets"} with a
 * supported dtype, 1..8 positive dims, offsets inside the data area with
 * end - begin == count * dtype size, no two tensors overlapping and no name
 * twice. On success *entries (malloc'd, the caller frees; NULL when n is 0)
 * and *n are set, in header order. On failure a message naming the tensor
 * and the values (not the file: the caller adds it) goes to err[0..cap) and
 * the outputs are untouched. Reads nothing outside buf. */
bool srv_safetensors_parse(const unsigned char *buf, size_t len, srv_tensor_entry **entries,
                           size_t *n, char *err, size_t cap);

/* Parses buf[0..len) as a .npy file (format version 1, 2 or 3): descr '<f4',
 * '<f2' or '<f8', fortran_order False, a shape of 1..8 positive dims, and
 * exactly count * dtype size bytes of data after the header. Fills *out; on
 * failure writes the reason to err and leaves *out untouched. */
bool srv_npy_parse(const unsigned char *buf, size_t len, srv_tensor_entry *out, char *err,
                   size_t cap);

/* Converts count little-endian elements of type d at src (any alignment)
 * to float32 in dst. Returns false (dst partly written) at the first value
 * that is not finite in float32, with its index in *bad. */
bool srv_dtype_to_f32(srv_dtype d, const unsigned char *src, size_t count, float *dst, size_t *bad);

#endif
