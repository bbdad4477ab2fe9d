/* tensor_store.h - named tensors loaded at start-up from .safetensors and
 * .npy files (posattnd --tensor NAME=PATH[:TENSOR]), and the {"ref":"NAME"}
 * form of a request tensor that borrows them.
 *
 * The store is built once by main.c before the server listens, is read-only
 * from then on and is shared by every HTTP thread and worker without locks.
 * F32 data is used in place from a read-only mapping of the file (when
 * 4-byte aligned); F16, BF16, F64 and unaligned F32 are converted into a
 * malloc'd float32 buffer at load. Every value must be finite. F16 and
 * BF16 data keep their file's bits beside that buffer (data16: the mapping,
 * 4-byte aligned, little-endian, C order), which an attention item reads
 * as its k and v (pa_attention.kv_dtype): half the bytes a decode reads.
 */
#ifndef SRV_TENSOR_STORE_H
#define SRV_TENSOR_STORE_H

#include "codec/tensor.h"
#include "common/reply.h"
#include "store/tensor_file.h"
#include "store/tensor_spec.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct srv_tensor_store srv_tensor_store;

/* One loaded tensor. Owned by the store; valid until srv_tensor_store_free. */
typedef struct srv_named_tensor {
    char name[SRV_TENSOR_NAME_MAX];        /* the NAME of --tensor */
    char file[SRV_TENSOR_PATH_MAX];        /* the PATH */
    char tensor[SRV_TENSOR_FILE_NAME_MAX]; /* the tensor's name in the file; "" for .npy */
    srv_dtype dtype;                       /* in the file */
    int ndim;
    int64_t shape[SRV_MAX_DIMS];
    size_t count;
    size_t file_bytes; /* bytes in the file (count * dtype size) */
    const float *data; /* count float32 values, never written */
    bool mapped;       /* data points into the file mapping (no copy) */
    /* F16 or BF16 (dtype) as stored: count elements in the file mapping,
     * 4-byte aligned, little-endian, C order; else NULL. The same values
     * as data, never written. */
    const uint16_t *data16;
} srv_named_tensor;

/* Loads every spec (n may be 0: then *out is NULL and true is returned).
 * A PATH ending in .safetensors or .npy picks the parser; a spec without a
 * tensor name takes the only tensor of the file (an error listing them when
 * there are several). On any failure nothing is loaded: err[0..cap) holds a
 * message naming the file, the tensor and the values, and false is
 * returned. */
bool srv_tensor_store_load(const srv_tensor_spec *specs, size_t n, srv_tensor_store **out,
                           char *err, size_t cap);
/* Unmaps and frees everything; NULL is a no-op. */
void srv_tensor_store_free(srv_tensor_store *s);

/* Number of tensors (0 for NULL) and the i-th, in load order. */
size_t srv_tensor_store_count(const srv_tensor_store *s);
const srv_named_tensor *srv_tensor_store_at(const srv_tensor_store *s, size_t i);
/* The tensor called name, or NULL (also when s is NULL). */
const srv_named_tensor *srv_tensor_store_find(const srv_tensor_store *s, const char *name);

/* True when node is a reference: a JSON object with a "ref" member. */
bool srv_tensor_is_ref(const cJSON *node);
/* Resolves the reference node (field is its path for errors: "scheme.table")
 * into *out, which borrows the store's data (out->borrowed; no copy). Checks
 * that "ref" is the only member and a string naming a loaded tensor
 * (UNKNOWN_TENSOR otherwise, listing the loaded names) and, when
 * want_ndim > 0, the rank, as srv_tensor_parse does for inline tensors.
 * Loaded tensors are not request memory: max_tensor_elements does not apply.
 * A tensor with data16 lends it too (out->bits16, out->bits16_type).
 * On failure fills *err and leaves *out untouched. s may be NULL. */
bool srv_tensor_store_ref(const srv_tensor_store *s, const cJSON *node, const char *field,
                          int want_ndim, srv_tensor *out, srv_reply *err);

#endif
