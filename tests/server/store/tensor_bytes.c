/* tensor_bytes.c - see tensor_bytes.h. */
#include "tensor_bytes.h"

#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void put(buf *b, const void *src, size_t n)
{
    b->p = realloc(b->p, b->n + n + 1);
    assert_non_null(b->p);
    memcpy(b->p + b->n, src, n);
    b->n += n;
}

/* safetensors bytes: the header as given (length hlen, or strlen(header)
 * when hlen is 0), then data. */
buf st(const char *header, uint64_t hlen, const void *data, size_t n)
{
    buf b = {NULL, 0};
    unsigned char len[8];
    uint64_t h = hlen ? hlen : strlen(header);
    for (int i = 0; i < 8; i++)
        len[i] = (unsigned char)(h >> (8 * i));
    put(&b, len, 8);
    put(&b, header, strlen(header));
    if (n > 0)
        put(&b, data, n);
    return b;
}

/* .npy bytes, version 1 (or 2), with the dict text as given, padded so the
 * data starts 64-byte aligned, then data. */
buf npy(int version, const char *dict, const void *data, size_t n)
{
    buf b = {NULL, 0};
    unsigned char pre[12] = {0x93, 'N', 'U', 'M', 'P', 'Y', (unsigned char)version, 0};
    size_t pre_n = version == 1 ? 10 : 12, hl = strlen(dict) + 1;
    char hdr[512];
    hl += (64 - (pre_n + hl) % 64) % 64;
    snprintf(hdr, sizeof hdr, "%-*s", (int)hl - 1, dict);
    hdr[hl - 1] = '\n';
    hdr[hl] = '\0';
    for (size_t i = 0; i < pre_n - 8; i++)
        pre[8 + i] = (unsigned char)(hl >> (8 * i));
    put(&b, pre, pre_n);
    put(&b, hdr, hl);
    if (n > 0)
        put(&b, data, n);
    return b;
}

const float six[6] = {0.5f, -1.0f, 2.25f, 3.0f, -4.5f, 1e-3f};
