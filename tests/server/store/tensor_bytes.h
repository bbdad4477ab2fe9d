/* tensor_bytes.h - safetensors and .npy files built byte by byte in memory,
 * for tests/server/store/test_tensor_file.c (the header parsers) and
 * test_tensor_store.c (the store, from files written with them).
 * Buffers are malloc'd; whoever takes one frees b.p.
 */
#ifndef TENSOR_BYTES_H
#define TENSOR_BYTES_H

#include <stddef.h>
#include <stdint.h>

typedef struct buf {
    unsigned char *p;
    size_t n;
} buf;

/* Appends n bytes of src to b (a failed allocation fails the test). */
void put(buf *b, const void *src, size_t n);
/* safetensors bytes: the header as given (length hlen, or strlen(header)
 * when hlen is 0), then data. */
buf st(const char *header, uint64_t hlen, const void *data, size_t n);
/* .npy bytes, version 1 (or 2), with the dict text as given, padded so the
 * data starts 64-byte aligned, then data. */
buf npy(int version, const char *dict, const void *data, size_t n);

/* Six float32 values, the data of most files. */
extern const float six[6];

/* A safetensors header entry "a": dtype, shape [2, 3], data_offsets [b, e]. */
#define T23(dtype, b, e)                                                                           \
    "\"a\":{\"dtype\":\"" dtype "\",\"shape\":[2,3],\"data_offsets\":[" #b "," #e "]}"

/* A .npy header dict. */
#define NPY(descr, order, shape)                                                                   \
    "{'descr': '" descr "', 'fortran_order': " order ", 'shape': " shape ", }"

#endif
