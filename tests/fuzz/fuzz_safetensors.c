/* fuzz_safetensors.c - libFuzzer driver for the tensor file header parsers
 * (server/store/tensor_file.c): the input is a whole file, parsed as safetensors
 * and as .npy from memory. Whatever is accepted must lie inside the buffer
 * and is converted to float32 (ASan checks every byte read).
 *
 *   make fuzz / make fuzz-smoke (seeds: the files tests/fixtures/make_tensors.py
 *   writes, good and malformed, into the build folder)
 */
#include "store/tensor_file.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void convert(const uint8_t *data, size_t size, const srv_tensor_entry *e)
{
    float *out;
    size_t bad = 0;
    char err[320];
    if (e->offset > size || e->nbytes > size - e->offset || e->nbytes != e->count * e->elem_size ||
        e->elem_size == 0 || e->ndim < 0 || e->ndim > SRV_MAX_DIMS ||
        (e->dtype != SRV_DTYPE_OTHER && e->elem_size != srv_dtype_size(e->dtype)))
        abort(); /* the parser let through something outside the buffer */
    if (!srv_tensor_entry_servable(e, err, sizeof err)) {
        if (err[0] == '\0')
            abort();
        return;
    }
    out = malloc(e->count * sizeof *out);
    if (out == NULL)
        return;
    (void)srv_tensor_entry_to_f32(e, data, out, &bad); /* C or Fortran order, either byte order */
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    srv_tensor_entry *es = NULL, one;
    size_t n = 0;
    char err[512];

    /* The store maps files; a copy of exactly size bytes lets ASan see any
     * read past the end. */
    uint8_t *buf = malloc(size ? size : 1);
    if (buf == NULL)
        return 0;
    memcpy(buf, data, size);
    if (srv_safetensors_parse(buf, size, &es, &n, err, sizeof err)) {
        for (size_t i = 0; i < n; i++) {
            if (strlen(es[i].name) >= SRV_TENSOR_FILE_NAME_MAX)
                abort();
            convert(buf, size, &es[i]);
        }
        free(es);
    } else if (err[0] == '\0') {
        abort(); /* every failure explains itself */
    }
    err[0] = '\0';
    if (srv_npy_parse(buf, size, &one, err, sizeof err))
        convert(buf, size, &one);
    else if (err[0] == '\0')
        abort();
    free(buf);
    return 0;
}
