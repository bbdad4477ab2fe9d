/* fuzz_base64.c - libFuzzer differential driver for server/codec/base64.c.
 *
 * The first input byte picks a source alignment (low 6 bits) and how much
 * room dst has relative to the decoded length (top 2 bits: 2 short, 1
 * short, exact, 16 spare); the rest is decoded by the vector and the scalar
 * code (srv_b64_force_scalar), which must agree on the fault, its offset,
 * the length and the bytes, and write nothing past what they decode. The
 * same bytes are then encoded both ways and must give the same text, which
 * must decode back to them. A difference aborts. On a CPU without AVX-512
 * VBMI both sides are scalar. Seeds: tests/fuzz/corpus-b64.
 */
#include "codec/base64.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c))                                                                                  \
            __builtin_trap();                                                                      \
    } while (0)

enum { LINE = 64, SPARE = 16, GUARD = 0xA5 };

typedef struct result {
    srv_b64_fault fault;
    size_t out_len, bad_at;
} result;

/* Decodes into dst[cap] (plus SPARE guard bytes) with the path chosen. */
static result decode(bool scalar, const char *src, size_t len, unsigned char *dst, size_t cap)
{
    result r = {SRV_B64_FAULT_NONE, 0, 0};
    memset(dst, GUARD, cap + SPARE);
    srv_b64_force_scalar(scalar);
    r.fault = srv_b64_decode_detail(src, len, dst, cap, &r.out_len, &r.bad_at);
    srv_b64_force_scalar(false);
    size_t limit = r.fault == SRV_B64_FAULT_NONE ? r.out_len : len / 4 * 3;
    if (r.fault == SRV_B64_FAULT_TOO_BIG || r.fault == SRV_B64_FAULT_LENGTH)
        limit = 0;
    for (size_t i = limit < cap ? limit : cap; i < cap + SPARE; i++)
        CHECK(dst[i] == GUARD);
    return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    const size_t align = data[0] % LINE, room = data[0] >> 6;
    const size_t len = size - 1;
    const size_t want = len / 4 * 3;
    const size_t cap = room == 3 ? want + SPARE : (want + room >= 2 ? want + room - 2 : 0);
    char *text = malloc(len + LINE);
    unsigned char *a = malloc(cap + SPARE), *b = malloc(cap + SPARE);
    char *enc_s = malloc(srv_b64_encoded_len(len) + 1),
         *enc_v = malloc(srv_b64_encoded_len(len) + 1);
    CHECK(text && a && b && enc_s && enc_v);
    memcpy(text + align, data + 1, len);

    result s = decode(true, text + align, len, a, cap);
    result v = decode(false, text + align, len, b, cap);
    CHECK(s.fault == v.fault && s.bad_at == v.bad_at);
    if (s.fault == SRV_B64_FAULT_NONE) {
        CHECK(s.out_len == v.out_len);
        CHECK(memcmp(a, b, s.out_len) == 0);
    }

    /* The same bytes encoded both ways, and back. */
    srv_b64_force_scalar(true);
    srv_b64_encode(data + 1, len, enc_s);
    srv_b64_force_scalar(false);
    srv_b64_encode(data + 1, len, enc_v);
    CHECK(strlen(enc_v) == srv_b64_encoded_len(len));
    CHECK(strcmp(enc_s, enc_v) == 0);
    free(a);
    a = malloc(len + 1);
    size_t got = 0;
    CHECK(a && srv_b64_decode(enc_v, strlen(enc_v), a, len, &got) && got == len);
    CHECK(memcmp(a, data + 1, len) == 0);

    free(text);
    free(a);
    free(b);
    free(enc_s);
    free(enc_v);
    return 0;
}
