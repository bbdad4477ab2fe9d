/* test_base64.c - the base64 codec (server/codec/base64.c): RFC 4648 vectors, and
 * the vector kernels against the scalar code (forced with
 * srv_b64_force_scalar) over every length to 400, every source alignment in
 * a 64-byte line, large random sizes, every byte value at every position
 * around the 64-character block edges, padding and a short dst. Encodings
 * are also checked against a bit-by-bit reference written here. On a CPU
 * with AVX2 but not AVX-512 VBMI the vector runs take the AVX2 kernels;
 * with neither, both runs take the scalar code.
 */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include "testutil.h"

#include "codec/base64.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* Bytes beyond what a call may write are set to this and checked after. */
enum { GUARD = 0x5C, GUARD_LEN = 80 };

static bool in_alphabet(int c)
{
    return c != 0 && strchr(alphabet, c) != NULL;
}

/* Base64 one bit at a time, as RFC 4648 section 4 describes it. */
static void ref_encode(const unsigned char *src, size_t n, char *dst)
{
    size_t bits = 8 * n, o = 0;
    for (size_t b = 0; b < bits; b += 6) {
        unsigned v = 0;
        for (size_t k = b; k < b + 6; k++) {
            unsigned bit = k < bits ? (src[k / 8] >> (7 - k % 8)) & 1u : 0;
            v = v << 1 | bit;
        }
        dst[o++] = alphabet[v];
    }
    while (o % 4 != 0)
        dst[o++] = '=';
    dst[o] = '\0';
}

static void fill_bytes(tu_rng *rng, unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)tu_uniform(rng, 0, 256);
}

typedef struct decoded {
    srv_b64_fault fault;
    size_t out_len, bad_at;
} decoded;

/* One decode into dst[dst_cap] followed by GUARD_LEN guard bytes; checks
 * that nothing beyond the decoded length (or dst_cap) was written. */
static decoded decode_one(bool scalar, const char *src, size_t len, unsigned char *dst,
                          size_t dst_cap)
{
    decoded r = {SRV_B64_FAULT_NONE, 12345, 0};
    memset(dst, GUARD, dst_cap + GUARD_LEN);
    srv_b64_force_scalar(scalar);
    r.fault = srv_b64_decode_detail(src, len, dst, dst_cap, &r.out_len, &r.bad_at);
    srv_b64_force_scalar(false);
    /* What a decoder may write: the decoded bytes; on a bad character or
     * padding, at most as many as the text would decode to. */
    size_t limit = 0;
    if (r.fault == SRV_B64_FAULT_NONE)
        limit = r.out_len;
    else if (r.fault == SRV_B64_FAULT_CHAR || r.fault == SRV_B64_FAULT_PADDING)
        limit = len / 4 * 3 - (src[len - 1] != '=' ? 0 : src[len - 2] == '=' ? 2 : 1);
    if (r.fault != SRV_B64_FAULT_NONE)
        assert_int_equal(r.out_len, 12345);
    for (size_t i = limit; i < dst_cap + GUARD_LEN; i++)
        if (dst[i] != GUARD)
            fail_msg("%s decode of %zu characters (dst_cap %zu, fault %d) wrote byte %zu",
                     scalar ? "scalar" : "vector", len, dst_cap, (int)r.fault, i);
    return r;
}

/* Decodes with both paths and fails on any difference; returns the result. */
static decoded decode_both(const char *src, size_t len, size_t dst_cap)
{
    unsigned char *a = tu_alloc(dst_cap + GUARD_LEN, 1), *b = tu_alloc(dst_cap + GUARD_LEN, 1);
    decoded s = decode_one(true, src, len, a, dst_cap);
    decoded v = decode_one(false, src, len, b, dst_cap);
    if (s.fault != v.fault || s.bad_at != v.bad_at || s.out_len != v.out_len)
        fail_msg("%zu characters: scalar fault %d at %zu (len %zu), vector fault %d at %zu "
                 "(len %zu)",
                 len, (int)s.fault, s.bad_at, s.out_len, (int)v.fault, v.bad_at, v.out_len);
    if (s.fault == SRV_B64_FAULT_NONE)
        assert_memory_equal(a, b, s.out_len);
    free(a);
    free(b);
    return s;
}

/* Encodes n bytes with the path chosen, checking the length, the NUL and
 * that nothing past it was written; dst has encoded_len + 1 + GUARD_LEN. */
static void encode_one(bool scalar, const unsigned char *src, size_t n, char *dst)
{
    size_t want = srv_b64_encoded_len(n);
    memset(dst, GUARD, want + 1 + GUARD_LEN);
    srv_b64_force_scalar(scalar);
    srv_b64_encode(src, n, dst);
    srv_b64_force_scalar(false);
    assert_int_equal(strlen(dst), want);
    for (size_t i = want + 1; i < want + 1 + GUARD_LEN; i++)
        assert_int_equal((unsigned char)dst[i], GUARD);
}

/* Both encoders against ref_encode, then both decoders back to src. */
static void round_trip(const unsigned char *src, size_t n)
{
    size_t len = srv_b64_encoded_len(n);
    char *ref = tu_alloc(len + 1, 1), *enc = tu_alloc(len + 1 + GUARD_LEN, 1);
    unsigned char *dec = tu_alloc(n + 1 + GUARD_LEN, 1);
    ref_encode(src, n, ref);
    for (int scalar = 0; scalar <= 1; scalar++) {
        encode_one(scalar, src, n, enc);
        if (strcmp(enc, ref) != 0)
            fail_msg("%s encode of %zu bytes differs from the reference",
                     scalar ? "scalar" : "vector", n);
        decoded r = decode_one(scalar, enc, len, dec, n);
        assert_int_equal(r.fault, SRV_B64_FAULT_NONE);
        assert_int_equal(r.out_len, n);
        assert_memory_equal(dec, src, n);
    }
    free(ref);
    free(enc);
    free(dec);
}

static void test_dispatch(void **state)
{
    (void)state;
#if defined(__x86_64__) && defined(__GNUC__)
    bool cpu = __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vbmi");
#else
    bool cpu = false;
#endif
#if defined(__x86_64__) && defined(__GNUC__)
    bool avx2 = __builtin_cpu_supports("avx2");
#else
    bool avx2 = false;
#endif
    assert_int_equal(srv_b64_vector(), cpu);
    assert_int_equal(srv_b64_avx2(), !cpu && avx2);
    srv_b64_force_scalar(true);
    assert_false(srv_b64_vector());
    assert_false(srv_b64_avx2());
    srv_b64_force_scalar(false);
    assert_int_equal(srv_b64_vector(), cpu);
    print_message("base64: %s\n", cpu    ? "vector (AVX-512 VBMI) and scalar paths compared"
                                  : avx2 ? "AVX2 and scalar paths compared (no AVX-512 VBMI)"
                                         : "no AVX-512 VBMI or AVX2 here: scalar path only");
}

static void test_vectors(void **state)
{
    (void)state;
    /* RFC 4648 section 10. */
    static const char *const plain[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
    static const char *const coded[] = {"",         "Zg==",     "Zm8=",    "Zm9v",
                                        "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
    static const char *const bad[] = {
        "Zg=",      "Zg",   "Z===", "====",  "Zh==", "Zm9=", "Zm9v=",
        "Zm9v====", "=Zm9", "Zm=v", "Zm9\n", "Zm9_", "Zm9-", "Zg==Zg==",
    };
    for (int scalar = 0; scalar <= 1; scalar++) {
        srv_b64_force_scalar(scalar);
        for (int i = 0; i < 7; i++) {
            size_t n = strlen(plain[i]);
            char enc[16];
            unsigned char dec[16];
            size_t got = 99;
            assert_int_equal(srv_b64_encoded_len(n), strlen(coded[i]));
            srv_b64_encode((const unsigned char *)plain[i], n, enc);
            assert_string_equal(enc, coded[i]);
            assert_true(srv_b64_decode(coded[i], strlen(coded[i]), dec, sizeof dec, &got));
            assert_int_equal(got, n);
            assert_memory_equal(dec, plain[i], n);
        }
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            unsigned char dec[16];
            size_t got = 77;
            if (srv_b64_decode(bad[i], strlen(bad[i]), dec, sizeof dec, &got))
                fail_msg("decoded invalid base64 \"%s\"", bad[i]);
            assert_int_equal(got, 77);
        }
        /* Every byte value outside the alphabet, in every position of a
         * short text ('=' too: "QUJDREV=" has bits under the padding). */
        for (int c = 0; c < 256; c++) {
            for (int pos = 0; pos < 8 && !in_alphabet(c); pos++) {
                char s[9] = "QUJDREVG"; /* "ABCDEF" */
                unsigned char dec[8];
                size_t got;
                s[pos] = (char)c;
                if (srv_b64_decode(s, 8, dec, sizeof dec, &got))
                    fail_msg("accepted byte 0x%02x at %d", c, pos);
            }
        }
        /* dst_cap too small. */
        unsigned char small[5];
        size_t got;
        assert_false(srv_b64_decode("Zm9vYmFy", 8, small, sizeof small, &got));
        assert_true(srv_b64_decode("Zm9vYmE=", 8, small, sizeof small, &got));
        assert_int_equal(got, 5);
    }
    srv_b64_force_scalar(false);
    /* The faults and offsets tensor.c's messages use. */
    static const struct {
        const char *s;
        srv_b64_fault fault;
        size_t at;
    } why[] = {
        {"Zm9", SRV_B64_FAULT_LENGTH, 0},           {"Zm9vYm*y", SRV_B64_FAULT_CHAR, 6},
        {"Zm=vYmFy", SRV_B64_FAULT_CHAR, 2},        {"Zm9vY===", SRV_B64_FAULT_CHAR, 5},
        {"Zm9vYh==", SRV_B64_FAULT_PADDING, 5},     {"Zm9vYmF=", SRV_B64_FAULT_PADDING, 6},
        {"Zm9vYmFyZg==", SRV_B64_FAULT_TOO_BIG, 0},
    };
    for (size_t i = 0; i < sizeof why / sizeof why[0]; i++) {
        decoded r = decode_both(why[i].s, strlen(why[i].s), 6);
        if (r.fault != why[i].fault || r.bad_at != why[i].at)
            fail_msg("\"%s\": fault %d at %zu, expected %d at %zu", why[i].s, (int)r.fault,
                     r.bad_at, (int)why[i].fault, why[i].at);
    }
}

/* Every length 0..400 from every source alignment in a 64-byte line, both
 * directions. */
static void test_lengths_and_alignments(void **state)
{
    (void)state;
    enum { MAXN = 400, LINE = 64 };
    tu_rng rng;
    tu_rng_seed(&rng, 4648);
    unsigned char *src = tu_alloc(MAXN + LINE, 1);
    char *text = tu_alloc(srv_b64_encoded_len(MAXN) + 1 + LINE, 1);
    char *ref = tu_alloc(srv_b64_encoded_len(MAXN) + 1, 1);
    char *enc = tu_alloc(srv_b64_encoded_len(MAXN) + 1 + GUARD_LEN, 1);
    for (size_t n = 0; n <= MAXN; n++) {
        size_t len = srv_b64_encoded_len(n);
        for (size_t a = 0; a < LINE; a++) {
            fill_bytes(&rng, src + a, n);
            ref_encode(src + a, n, ref);
            for (int scalar = 0; scalar <= 1; scalar++) {
                encode_one(scalar, src + a, n, enc);
                if (strcmp(enc, ref) != 0)
                    fail_msg("%s encode of %zu bytes at alignment %zu differs from the reference",
                             scalar ? "scalar" : "vector", n, a);
            }
            memcpy(text + a, ref, len);
            decoded r = decode_both(text + a, len, n);
            assert_int_equal(r.fault, SRV_B64_FAULT_NONE);
            assert_int_equal(r.out_len, n);
        }
        fill_bytes(&rng, src, n);
        round_trip(src, n);
    }
    free(src);
    free(text);
    free(ref);
    free(enc);
}

/* Random sizes up to 1 MB, near multiples of the 48-byte block too. */
static void test_large(void **state)
{
    (void)state;
    enum { MAXN = 1 << 20 };
    static const size_t sizes[] = {47 * 48,   4096,          65536 + 1, 48 * 1000 - 1,
                                   48 * 1000, 48 * 1000 + 2, MAXN - 1,  MAXN};
    tu_rng rng;
    tu_rng_seed(&rng, 20);
    unsigned char *src = tu_alloc(MAXN, 1);
    fill_bytes(&rng, src, MAXN);
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        round_trip(src, sizes[i]);
    for (int i = 0; i < 8; i++) {
        size_t n = (size_t)tu_uniform(&rng, 1, MAXN);
        round_trip(src + (size_t)tu_uniform(&rng, 0, (double)(MAXN - n)), n);
    }
    free(src);
}

/* Every byte value at every position of texts around the 64-character
 * block edges, with 0, 1 and 2 padding characters: both paths give the same
 * fault and offset, and a byte outside the alphabet before the last quad is
 * reported where it is. */
static void test_every_bad_byte(void **state)
{
    (void)state;
    static const size_t lens[] = {64, 68, 72, 128, 132, 136, 196, 200};
    tu_rng rng;
    tu_rng_seed(&rng, 256);
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        const size_t len = lens[li], pad = li % 3, n = len / 4 * 3 - pad;
        unsigned char src[160];
        char text[256];
        fill_bytes(&rng, src, n);
        ref_encode(src, n, text);
        assert_int_equal(strlen(text), len);
        for (size_t p = 0; p < len; p++) {
            const char keep = text[p];
            for (int c = 0; c < 256; c++) {
                text[p] = (char)c;
                decoded r = decode_both(text, len, n);
                if (p < len - 4 && !in_alphabet(c) &&
                    (r.fault != SRV_B64_FAULT_CHAR || r.bad_at != p))
                    fail_msg("byte 0x%02x at %zu of %zu: fault %d at %zu", c, p, len, (int)r.fault,
                             r.bad_at);
                if (in_alphabet(c) && p < len - 4)
                    assert_int_equal(r.fault, SRV_B64_FAULT_NONE);
            }
            text[p] = keep;
        }
    }
}

/* Padding after long texts (the last quad follows the vector blocks): one
 * and two '=', non-zero bits under them, '=' misplaced in the last quad. */
static void test_padding(void **state)
{
    (void)state;
    static const size_t quads[] = {1, 2, 16, 17, 32, 33, 100};
    tu_rng rng;
    tu_rng_seed(&rng, 35);
    for (size_t qi = 0; qi < sizeof quads / sizeof quads[0]; qi++) {
        for (size_t pad = 1; pad <= 2; pad++) {
            const size_t len = 4 * quads[qi], n = len / 4 * 3 - pad;
            unsigned char src[300];
            char text[401];
            fill_bytes(&rng, src, n);
            ref_encode(src, n, text);
            assert_int_equal(text[len - pad], '=');
            decoded r = decode_both(text, len, n);
            assert_int_equal(r.fault, SRV_B64_FAULT_NONE);
            assert_int_equal(r.out_len, n);
            /* Each low bit of the last significant character is under the
             * padding (2 bits for one '=', 4 for two). */
            const char last = text[len - pad - 1];
            const unsigned v = (unsigned)(strchr(alphabet, last) - alphabet);
            for (unsigned bit = 0; bit < 2 * pad; bit++) {
                text[len - pad - 1] = alphabet[v ^ (1u << bit)];
                r = decode_both(text, len, n);
                assert_int_equal(r.fault, SRV_B64_FAULT_PADDING);
                assert_int_equal(r.bad_at, len - pad - 1);
            }
            text[len - pad - 1] = last;
            /* '=' before the padding: "xx=x" is a bad character. */
            text[len - 4] = '=';
            r = decode_both(text, len, n + 1);
            assert_int_equal(r.fault, SRV_B64_FAULT_CHAR);
            assert_int_equal(r.bad_at, len - 4);
        }
    }
}

/* A dst one byte short fails before writing anything; exactly enough works. */
static void test_dst_cap(void **state)
{
    (void)state;
    static const size_t sizes[] = {1, 2, 3, 47, 48, 49, 96, 1000, 4800};
    tu_rng rng;
    tu_rng_seed(&rng, 1);
    unsigned char *src = tu_alloc(4800, 1);
    char *text = tu_alloc(srv_b64_encoded_len(4800) + 1, 1);
    fill_bytes(&rng, src, 4800);
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        const size_t n = sizes[i], len = srv_b64_encoded_len(n);
        ref_encode(src, n, text);
        decoded r = decode_both(text, len, n - 1);
        assert_int_equal(r.fault, SRV_B64_FAULT_TOO_BIG);
        r = decode_both(text, len, 0);
        assert_int_equal(r.fault, SRV_B64_FAULT_TOO_BIG);
        r = decode_both(text, len, n);
        assert_int_equal(r.fault, SRV_B64_FAULT_NONE);
        r = decode_both(text, len, n + 100);
        assert_int_equal(r.out_len, n);
        /* A length that is not a multiple of 4 is refused first. */
        r = decode_both(text, len - 1, n + 100);
        assert_int_equal(r.fault, SRV_B64_FAULT_LENGTH);
    }
    free(src);
    free(text);
}

/* Input that ends at the edge of an unreadable page: a kernel that loads a
 * byte past its input faults here (AddressSanitizer does not see
 * 64-byte vector loads). */
static void test_page_edge(void **state)
{
    (void)state;
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const size_t maxn = page / 4 * 3 - 3; /* its text fits in the page */
    unsigned char *map =
        mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(map != MAP_FAILED);
    assert_int_equal(mprotect(map + page, page, PROT_NONE), 0);
    unsigned char *edge = map + page;
    char *ref = tu_alloc(page + 1, 1), *enc = tu_alloc(page + 1 + GUARD_LEN, 1);
    unsigned char *dec = tu_alloc(page, 1);
    tu_rng rng;
    tu_rng_seed(&rng, 9);
    for (size_t n = 0; n <= maxn; n += n < 300 ? 1 : 47) {
        const size_t len = srv_b64_encoded_len(n);
        fill_bytes(&rng, edge - n, n);
        ref_encode(edge - n, n, ref);
        for (int scalar = 0; scalar <= 1; scalar++) {
            encode_one(scalar, edge - n, n, enc);
            assert_string_equal(enc, ref);
        }
        memcpy(dec, edge - n, n);
        memcpy(edge - len, ref, len);
        decoded r = decode_both((const char *)edge - len, len, n);
        assert_int_equal(r.fault, SRV_B64_FAULT_NONE);
        /* Decoded (from ref, which still holds the text) into the page's
         * end too: no store past it either. */
        for (int scalar = 0; scalar <= 1; scalar++) {
            srv_b64_force_scalar(scalar);
            size_t got = 0;
            assert_true(srv_b64_decode(ref, len, edge - n, n, &got));
            srv_b64_force_scalar(false);
            assert_int_equal(got, n);
            assert_memory_equal(edge - n, dec, n);
        }
    }
    free(ref);
    free(enc);
    free(dec);
    munmap(map, 2 * page);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dispatch),
        cmocka_unit_test(test_vectors),
        cmocka_unit_test(test_lengths_and_alignments),
        cmocka_unit_test(test_large),
        cmocka_unit_test(test_every_bad_byte),
        cmocka_unit_test(test_padding),
        cmocka_unit_test(test_dst_cap),
        cmocka_unit_test(test_page_edge),
    };
    return cmocka_run_group_tests_name("base64", tests, NULL, NULL);
}
