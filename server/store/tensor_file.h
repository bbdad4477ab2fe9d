/* tensor_file.h - the two tensor file formats posattnd loads at start-up,
 * parsed from a memory buffer (the mapped file): safetensors (an 8-byte
 * little-endian header length, a JSON header, raw little-endian data) and
 * NumPy .npy (magic, version, a Python dict header, the data in C or
 * Fortran order, either byte order). Only the headers are read here, and
 * the conversion of one entry to float32; tensor_store.c maps files and
 * owns the data.
 */
#ifndef SRV_TENSOR_FILE_H
#define SRV_TENSOR_FILE_H

#include "codec/tensor.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Element types posattnd computes with; every one is served as float32. */
typedef enum srv_dtype {
    SRV_DTYPE_F32 = 0, /* used in place when 4-byte aligned, little-endian, C order */
    SRV_DTYPE_F16,     /* IEEE binary16, converted at load */
    SRV_DTYPE_BF16,    /* bfloat16, converted at load */
    SRV_DTYPE_F64,     /* converted at load; values must fit float32 */
    SRV_DTYPE_OTHER,   /* any other safetensors dtype (I64, BOOL, U8, ...): a
                          checkpoint may hold them; picking one is an error */
} srv_dtype;

/* "F32", "F16", "BF16", "F64" (the safetensors names); "?" for OTHER. */
const char *srv_dtype_name(srv_dtype d);
/* 4, 2, 2, 8; 0 for OTHER (the entry's elem_size has its size). */
size_t srv_dtype_size(srv_dtype d);

enum { SRV_TENSOR_FILE_NAME_MAX = 256 };

/* One tensor of a file: where its bytes are inside the buffer. */
typedef struct srv_tensor_entry {
    char name[SRV_TENSOR_FILE_NAME_MAX]; /* safetensors key; "" for .npy */
    srv_dtype dtype;
    char dtype_name[16];         /* as the file spells it: "I64", "BF16", ">f8" */
    size_t elem_size;            /* bytes per element */
    bool big_endian;             /* .npy '>f4', '>f2', '>f8' */
    bool fortran;                /* .npy fortran_order: column-major data */
    int ndim;                    /* 0..SRV_MAX_DIMS (safetensors allows 0: a scalar) */
    int64_t shape[SRV_MAX_DIMS]; /* dims >= 0 (safetensors allows 0: empty) */
    size_t count;                /* product of shape */
    size_t offset;               /* of the first byte, from the start of the buffer */
    size_t nbytes;               /* count * elem_size */
} srv_tensor_entry;

/* Whether posattnd can serve entry e: a dtype it computes with, 1 or more
 * dimensions, at least one element. If not, err says why (naming the
 * tensor as the file does and its dtype or shape). */
bool srv_tensor_entry_servable(const srv_tensor_entry *e, char *err, size_t cap);

/* Parses buf[0..len) as a safetensors file, by the format's rules
 * (huggingface/safetensors README, "Format"): the header length must leave
 * room in the buffer; the header begins with '{', is one JSON object,
 * padded after it with spaces only; "__metadata__", if there, maps strings
 * to strings; every other member is {"dtype","shape","data_offsets"} with a
 * safetensors dtype (any: those posattnd does not compute with are
 * SRV_DTYPE_OTHER), 0..8 dims >= 0, end - begin == count * element size,
 * no name twice; and the tensors cover the data area exactly: no
 * overlaps, no holes, no bytes after the last one. Values are not read.
 * On success *entries (malloc'd, the caller frees; NULL when n is 0) and
 * *n are set, in header order. On failure a message naming the tensor or
 * the rule and the values (not the file: the caller adds it) goes to
 * err[0..cap) and the outputs are untouched. Reads nothing outside buf. */
bool srv_safetensors_parse(const unsigned char *buf, size_t len, srv_tensor_entry **entries,
                           size_t *n, char *err, size_t cap);

/* Parses buf[0..len) as a .npy file (format version 1, 2 or 3): descr f4,
 * f2 or f8 in either byte order ('<', '>', '=' or '|' for native), either
 * fortran_order, a shape of 1..8 positive dims, and exactly count * dtype
 * size bytes of data after the header. Fills *out; on failure writes the
 * reason to err and leaves *out untouched. */
bool srv_npy_parse(const unsigned char *buf, size_t len, srv_tensor_entry *out, char *err,
                   size_t cap);

/* Converts count little-endian elements of type d at src (any alignment)
 * to float32 in dst. Returns false (dst partly written) at the first value
 * that is not finite in float32, with its index in *bad. */
bool srv_dtype_to_f32(srv_dtype d, const unsigned char *src, size_t count, float *dst, size_t *bad);

/* Converts servable entry e of buf to float32 in C order in dst
 * [e->count]: either byte order, Fortran order transposed. As
 * srv_dtype_to_f32 for values that are not finite (*bad is the index in
 * the file's order). */
bool srv_tensor_entry_to_f32(const srv_tensor_entry *e, const unsigned char *buf, float *dst,
                             size_t *bad);

#endif
