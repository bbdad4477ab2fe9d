/* base64.c - see base64.h. A scalar codec, and AVX-512 VBMI or AVX2 kernels
 * for the bulk of long inputs after Wojciech Mula and Daniel
 * Lemire, "Base64 encoding and decoding at almost the speed of a memory
 * copy", Software: Practice and Experience 50(2), 2020 (arXiv:1910.05109).
 * The kernels take whole 64-byte (AVX2: 32-byte) blocks of text; the scalar
 * code does the rest, the final (padded) quad and every error message, so
 * all paths answer alike.
 */
#include "codec/base64.h"

#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#define SRV_B64_X86 1
#include <immintrin.h>
#endif

static const char b64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

#define BAD 0xFF
/* Character -> 6-bit value; BAD (high bit set) for anything else, '=' too.
 * The vector decoder uses its first 128 entries as its lookup table. */
/* clang-format off */
static const unsigned char b64_value[256] = {
    BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD,
    BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD,
    BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, 62,  BAD, BAD, BAD, 63,
    52,  53,  54,  55,  56,  57,  58,  59,  60,  61,  BAD, BAD, BAD, BAD, BAD, BAD,
    BAD, 0,   1,   2,   3,   4,   5,   6,   7,   8,   9,   10,  11,  12,  13,  14,
    15,  16,  17,  18,  19,  20,  21,  22,  23,  24,  25,  BAD, BAD, BAD, BAD, BAD,
    BAD, 26,  27,  28,  29,  30,  31,  32,  33,  34,  35,  36,  37,  38,  39,  40,
    41,  42,  43,  44,  45,  46,  47,  48,  49,  50,  51,  BAD, BAD, BAD, BAD, BAD,
    BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD,
    BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD,
    BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD,
    BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD,
    BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD,
    BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD,
    BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD,
    BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD,
};
/* clang-format on */

/* ------------------------------------------------------------------------- */
/* Scalar                                                                    */
/* ------------------------------------------------------------------------- */

/* Encodes n bytes, padding the last quad, and writes the NUL. */
static void encode_scalar(const unsigned char *s, size_t n, char *d)
{
    size_t full = n / 3;
    for (size_t i = 0; i < full; i++) {
        uint32_t x = (uint32_t)s[0] << 16 | (uint32_t)s[1] << 8 | s[2];
        d[0] = b64_alphabet[x >> 18];
        d[1] = b64_alphabet[(x >> 12) & 63];
        d[2] = b64_alphabet[(x >> 6) & 63];
        d[3] = b64_alphabet[x & 63];
        s += 3;
        d += 4;
    }
    size_t rest = n - full * 3;
    if (rest) {
        uint32_t x = (uint32_t)s[0] << 16 | (rest == 2 ? (uint32_t)s[1] << 8 : 0);
        d[0] = b64_alphabet[x >> 18];
        d[1] = b64_alphabet[(x >> 12) & 63];
        d[2] = rest == 2 ? b64_alphabet[(x >> 6) & 63] : '=';
        d[3] = '=';
        d += 4;
    }
    *d = '\0';
}

/* Decodes `quads` unpadded quads, branch-free: invalid characters have the
 * high bit set, which the returned OR of all values collects (the caller
 * checks it once and rescans to say where). */
static uint32_t decode_quads(const unsigned char *s, unsigned char *d, size_t quads)
{
    uint32_t bad = 0;
    for (size_t i = 0; i < quads; i++) {
        uint32_t a = b64_value[s[0]], b = b64_value[s[1]], c = b64_value[s[2]], e = b64_value[s[3]];
        bad |= a | b | c | e;
        uint32_t x = a << 18 | b << 12 | c << 6 | e;
        d[0] = (unsigned char)(x >> 16);
        d[1] = (unsigned char)(x >> 8);
        d[2] = (unsigned char)x;
        s += 4;
        d += 3;
    }
    return bad;
}

/* Offset of the first character that is not in the alphabet, or len. */
static size_t first_bad(const char *src, size_t len)
{
    size_t i = 0;
    while (i < len && b64_value[(unsigned char)src[i]] != BAD)
        i++;
    return i;
}

/* ------------------------------------------------------------------------- */
/* AVX-512 VBMI (Mula and Lemire 2020)                                       */
/* ------------------------------------------------------------------------- */

#if SRV_B64_X86

#define SRV_VBMI __attribute__((target("avx512f,avx512bw,avx512vbmi")))

/* Decoder: output byte j of a block comes from byte 2 - j % 3 of 32-bit
 * lane j / 3 (each lane holds one quad's 24 bits, most significant first
 * on the wire). The last 16 indices are unused. */
/* clang-format off */
static const unsigned char decode_pack[64] = {
     2,  1,  0,  6,  5,  4, 10,  9,  8, 14, 13, 12, 18, 17, 16, 22,
    21, 20, 26, 25, 24, 30, 29, 28, 34, 33, 32, 38, 37, 36, 42, 41,
    40, 46, 45, 44, 50, 49, 48, 54, 53, 52, 58, 57, 56, 62, 61, 60,
     0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,
};
/* Encoder: 32-bit lane i gets the bytes s1 s0 s2 s1 of triple i, so that
 * each 6-bit field lies whole in one 64-bit word for vpmultishiftqb. */
static const unsigned char encode_spread[64] = {
     1,  0,  2,  1,  4,  3,  5,  4,  7,  6,  8,  7, 10,  9, 11, 10,
    13, 12, 14, 13, 16, 15, 17, 16, 19, 18, 20, 19, 22, 21, 23, 22,
    25, 24, 26, 25, 28, 27, 29, 28, 31, 30, 32, 31, 34, 33, 35, 34,
    37, 36, 38, 37, 40, 39, 41, 40, 43, 42, 44, 43, 46, 45, 47, 46,
};
/* clang-format on */

/* Bit offsets of the four characters in each lane s1 | s0 << 8 | s2 << 16 |
 * s1 << 24: s0 >> 2 at 10, (s0 & 3) << 4 | s1 >> 4 at 4, (s1 & 15) << 2 |
 * s2 >> 6 at 22, s2 & 63 at 16; and the same 32 bits higher. */
#define ENCODE_SHIFTS 0x3036242a1016040aull

/* Decodes `blocks` blocks of 64 characters at s into 48 bytes each at d,
 * where room bytes may be written. Returns whether any character was
 * outside the alphabet ('=' included). */
SRV_VBMI static bool decode_vbmi(const unsigned char *s, size_t blocks, unsigned char *d,
                                 size_t room)
{
    /* vpermi2b looks up the low 7 bits of each character in the 128-entry
     * table; a character >= 0x80 has its own high bit, the others' BAD
     * values theirs, so one OR of both collects every error. */
    const __m512i lo = _mm512_loadu_si512(b64_value);
    const __m512i hi = _mm512_loadu_si512(b64_value + 64);
    const __m512i pack = _mm512_loadu_si512(decode_pack);
    const __m512i pairs = _mm512_set1_epi32(0x01400140); /* a << 6 | b per 16 bits */
    const __m512i quads = _mm512_set1_epi32(0x00011000); /* ab << 12 | cd per 32 bits */
    __m512i bad = _mm512_setzero_si512();
    for (size_t i = 0; i < blocks; i++) {
        const __m512i in = _mm512_loadu_si512(s + 64 * i);
        const __m512i v = _mm512_permutex2var_epi8(lo, in, hi);
        bad = _mm512_ternarylogic_epi32(bad, in, v, 0xFE); /* bad | in | v */
        const __m512i x = _mm512_madd_epi16(_mm512_maddubs_epi16(v, pairs), quads);
        const __m512i out = _mm512_permutexvar_epi8(pack, x);
        /* A whole 64-byte store while 16 bytes more of the output follow;
         * the last blocks store their 48 bytes only. */
        if (room - 48 * i >= 64)
            _mm512_storeu_si512(d + 48 * i, out);
        else
            _mm512_mask_storeu_epi8(d + 48 * i, (__mmask64)0xFFFFFFFFFFFFull, out);
    }
    return _mm512_movepi8_mask(bad) != 0;
}

/* Encodes the whole 48-byte blocks of the n bytes at src into 64
 * characters each at dst (no NUL); returns the bytes consumed. */
SRV_VBMI static size_t encode_vbmi(const unsigned char *src, size_t n, char *dst)
{
    const __m512i spread = _mm512_loadu_si512(encode_spread);
    const __m512i shifts = _mm512_set1_epi64((long long)ENCODE_SHIFTS);
    const __m512i alphabet = _mm512_loadu_si512(b64_alphabet);
    const size_t blocks = n / 48;
    for (size_t i = 0; i < blocks; i++) {
        const unsigned char *s = src + 48 * i;
        /* A whole 64-byte load while 16 bytes more of the input follow. */
        const __m512i in = n - 48 * i >= 64
                               ? _mm512_loadu_si512(s)
                               : _mm512_maskz_loadu_epi8((__mmask64)0xFFFFFFFFFFFFull, s);
        const __m512i fields =
            _mm512_multishift_epi64_epi8(shifts, _mm512_permutexvar_epi8(spread, in));
        /* vpermb uses the low 6 bits of each field: the alphabet lookup. */
        _mm512_storeu_si512(dst + 64 * i, _mm512_permutexvar_epi8(fields, alphabet));
    }
    return blocks * 48;
}


/* ------------------------------------------------------------------------- */
/* AVX2 encoder (Mula and Lemire 2020, section 2.2: Mula's SSE code widened) */
/* ------------------------------------------------------------------------- */

#define SRV_AVX2 __attribute__((target("avx2")))

/* Encodes the whole 24-byte blocks of the n bytes at src into 32
 * characters each at dst (no NUL), while 32 bytes can be loaded; returns
 * the bytes consumed. */
SRV_AVX2 static size_t encode_avx2(const unsigned char *src, size_t n, char *dst)
{
    /* Bytes 0-11 of a block to the low half, 12-23 to the high one; then
     * each triple s0 s1 s2 to a 32-bit lane s1 s0 s2 s1. */
    const __m256i halves = _mm256_setr_epi32(0, 1, 2, 2, 3, 4, 5, 5);
    /* clang-format off */
    const __m256i spread = _mm256_setr_epi8(
        1, 0, 2, 1, 4, 3, 5, 4, 7, 6, 8, 7, 10, 9, 11, 10,
        1, 0, 2, 1, 4, 3, 5, 4, 7, 6, 8, 7, 10, 9, 11, 10);
    /* An index's offset to its character, by class: 0-25 (class 13), 26-51
     * (0), 52-61 (1-10), 62 (11) and 63 (12). */
    const __m256i offsets = _mm256_setr_epi8(
        'a' - 26, '0' - 52, '0' - 52, '0' - 52, '0' - 52, '0' - 52, '0' - 52, '0' - 52,
        '0' - 52, '0' - 52, '0' - 52, '+' - 62, '/' - 63, 'A', 0, 0,
        'a' - 26, '0' - 52, '0' - 52, '0' - 52, '0' - 52, '0' - 52, '0' - 52, '0' - 52,
        '0' - 52, '0' - 52, '0' - 52, '+' - 62, '/' - 63, 'A', 0, 0);
    /* clang-format on */
    size_t i = 0;
    for (; n - i >= 32; i += 24) {
        __m256i in = _mm256_loadu_si256((const __m256i *)(const void *)(src + i));
        in = _mm256_shuffle_epi8(_mm256_permutevar8x32_epi32(in, halves), spread);
        /* The four 6-bit fields of each lane to its four bytes. */
        const __m256i a = _mm256_mulhi_epu16(_mm256_and_si256(in, _mm256_set1_epi32(0x0FC0FC00)),
                                             _mm256_set1_epi32(0x04000040));
        const __m256i b = _mm256_mullo_epi16(_mm256_and_si256(in, _mm256_set1_epi32(0x003F03F0)),
                                             _mm256_set1_epi32(0x01000010));
        const __m256i idx = _mm256_or_si256(a, b);
        __m256i cls = _mm256_subs_epu8(idx, _mm256_set1_epi8(51));
        cls = _mm256_or_si256(cls, _mm256_and_si256(_mm256_cmpgt_epi8(_mm256_set1_epi8(26), idx),
                                                    _mm256_set1_epi8(13)));
        const __m256i out = _mm256_add_epi8(idx, _mm256_shuffle_epi8(offsets, cls));
        _mm256_storeu_si256((__m256i *)(void *)(dst + i / 3 * 4), out);
    }
    return i;
}

/* ------------------------------------------------------------------------- */
/* AVX2 decoder (Mula and Lemire 2020, section 3.1 and their AVX2 code)      */
/* ------------------------------------------------------------------------- */

/* Decodes `blocks` blocks of 32 characters at s into 24 bytes each at d,
 * where room bytes may be written. Returns whether any character was
 * outside the alphabet ('=' included). A character's high nibble picks a
 * class bit (lut_hi) and its low nibble the classes in which it is valid
 * there (lut_lo): an AND that is non-zero marks it invalid; its value is
 * the character plus an offset per high nibble ('/' set apart). */
SRV_AVX2 static bool decode_avx2(const unsigned char *s, size_t blocks, unsigned char *d,
                                 size_t room)
{
    /* clang-format off */
    const __m256i lut_lo = _mm256_setr_epi8(
        0x15, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x13, 0x1A, 0x1B, 0x1B, 0x1B, 0x1A,
        0x15, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x13, 0x1A, 0x1B, 0x1B, 0x1B, 0x1A);
    const __m256i lut_hi = _mm256_setr_epi8(
        0x10, 0x10, 0x01, 0x02, 0x04, 0x08, 0x04, 0x08, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10,
        0x10, 0x10, 0x01, 0x02, 0x04, 0x08, 0x04, 0x08, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10);
    const __m256i lut_roll = _mm256_setr_epi8(
        0, 16, 19, 4, -65, -65, -71, -71, 0, 0, 0, 0, 0, 0, 0, 0,
        0, 16, 19, 4, -65, -65, -71, -71, 0, 0, 0, 0, 0, 0, 0, 0);
    /* Each lane's three bytes, most significant first, to the front of its
     * 128-bit half; then the halves' 12 bytes side by side. */
    const __m256i pack = _mm256_setr_epi8(
        2, 1, 0, 6, 5, 4, 10, 9, 8, 14, 13, 12, -1, -1, -1, -1,
        2, 1, 0, 6, 5, 4, 10, 9, 8, 14, 13, 12, -1, -1, -1, -1);
    /* clang-format on */
    const __m256i halves = _mm256_setr_epi32(0, 1, 2, 4, 5, 6, 7, 7);
    const __m256i slash = _mm256_set1_epi8(0x2F); /* '/', and the nibble mask */
    const __m256i pairs = _mm256_set1_epi32(0x01400140); /* a << 6 | b per 16 bits */
    const __m256i quads = _mm256_set1_epi32(0x00011000); /* ab << 12 | cd per 32 bits */
    __m256i bad = _mm256_setzero_si256();
    for (size_t i = 0; i < blocks; i++) {
        const __m256i in = _mm256_loadu_si256((const __m256i *)(const void *)(s + 32 * i));
        /* Masking with 0x2F keeps the nibble and bit 5, which vpshufb
         * ignores, and clears bit 7, which would zero the lookup. */
        const __m256i hi_nib = _mm256_and_si256(_mm256_srli_epi32(in, 4), slash);
        const __m256i lo_nib = _mm256_and_si256(in, slash);
        const __m256i hi = _mm256_shuffle_epi8(lut_hi, hi_nib);
        const __m256i lo = _mm256_shuffle_epi8(lut_lo, lo_nib);
        bad = _mm256_or_si256(bad, _mm256_and_si256(lo, hi));
        const __m256i roll =
            _mm256_shuffle_epi8(lut_roll, _mm256_add_epi8(_mm256_cmpeq_epi8(in, slash), hi_nib));
        const __m256i v = _mm256_add_epi8(in, roll);
        const __m256i x = _mm256_madd_epi16(_mm256_maddubs_epi16(v, pairs), quads);
        const __m256i out = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(x, pack), halves);
        /* A whole 32-byte store while 8 bytes more of the output follow;
         * else its 24 bytes only. */
        if (room - 24 * i >= 32) {
            _mm256_storeu_si256((__m256i *)(void *)(d + 24 * i), out);
        } else {
            unsigned char tmp[32];
            _mm256_storeu_si256((__m256i *)(void *)tmp, out);
            memcpy(d + 24 * i, tmp, 24);
        }
    }
    return !_mm256_testz_si256(bad, bad);
}

#endif

/* ------------------------------------------------------------------------- */
/* Dispatch                                                                  */
/* ------------------------------------------------------------------------- */

static bool forced_scalar;

void srv_b64_force_scalar(bool on)
{
    forced_scalar = on;
}

bool srv_b64_vector(void)
{
#if SRV_B64_X86
    /* Valgrind reports no AVX-512 here, so it runs the scalar code. */
    return !forced_scalar && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vbmi");
#else
    return false;
#endif
}

bool srv_b64_avx2(void)
{
#if SRV_B64_X86
    return !forced_scalar && !srv_b64_vector() && __builtin_cpu_supports("avx2");
#else
    return false;
#endif
}

size_t srv_b64_encoded_len(size_t n)
{
    return (n + 2) / 3 * 4;
}

void srv_b64_encode(const unsigned char *src, size_t n, char *dst)
{
    size_t done = 0;
#if SRV_B64_X86
    if (srv_b64_vector())
        done = encode_vbmi(src, n, dst);
    else if (srv_b64_avx2())
        done = encode_avx2(src, n, dst);
#endif
    encode_scalar(src + done, n - done, dst + done / 3 * 4);
}

srv_b64_fault srv_b64_decode_detail(const char *src, size_t len, unsigned char *dst, size_t dst_cap,
                                    size_t *out_len, size_t *bad_at)
{
    *bad_at = 0;
    if (len % 4 != 0)
        return SRV_B64_FAULT_LENGTH;
    if (len == 0) {
        *out_len = 0;
        return SRV_B64_FAULT_NONE;
    }
    size_t pad = src[len - 1] == '=' ? (src[len - 2] == '=' ? 2 : 1) : 0;
    size_t n = len / 4 * 3 - pad;
    if (n > dst_cap)
        return SRV_B64_FAULT_TOO_BIG;

    /* Every quad but the last: 64-character blocks in the vector kernel,
     * then the rest here. */
    const unsigned char *s = (const unsigned char *)src;
    unsigned char *d = dst;
    size_t quads = len / 4 - 1;
    bool bad = false;
#if SRV_B64_X86
    if (quads >= 16 && srv_b64_vector()) {
        size_t blocks = quads / 16;
        bad = decode_vbmi(s, blocks, d, n);
        s += 64 * blocks;
        d += 48 * blocks;
        quads -= 16 * blocks;
    } else if (quads >= 8 && srv_b64_avx2()) {
        size_t blocks = quads / 8;
        bad = decode_avx2(s, blocks, d, n);
        s += 32 * blocks;
        d += 24 * blocks;
        quads -= 8 * blocks;
    }
#endif
    if (bad || (decode_quads(s, d, quads) & 0x80)) {
        *bad_at = first_bad(src, len);
        return SRV_B64_FAULT_CHAR;
    }
    s += 4 * quads;
    d += 3 * quads;

    /* The last quad: 4 - pad significant characters. */
    uint32_t v[4] = {0, 0, 0, 0};
    for (size_t k = 0; k < 4 - pad; k++) {
        v[k] = b64_value[s[k]];
        if (v[k] == BAD) {
            *bad_at = (size_t)((const char *)s - src) + k;
            return SRV_B64_FAULT_CHAR;
        }
    }
    uint32_t x = v[0] << 18 | v[1] << 12 | v[2] << 6 | v[3];
    /* RFC 4648 3.5: the bits under the padding must be zero, so that every
     * byte string has exactly one encoding. */
    if ((pad == 1 && (x & 0xFF)) || (pad == 2 && (x & 0xFFFF))) {
        *bad_at = len - pad - 1;
        return SRV_B64_FAULT_PADDING;
    }
    d[0] = (unsigned char)(x >> 16);
    if (pad < 2)
        d[1] = (unsigned char)(x >> 8);
    if (pad < 1)
        d[2] = (unsigned char)x;
    *out_len = n;
    return SRV_B64_FAULT_NONE;
}

bool srv_b64_decode(const char *src, size_t len, unsigned char *dst, size_t dst_cap,
                    size_t *out_len)
{
    size_t bad_at, n = 0;
    if (srv_b64_decode_detail(src, len, dst, dst_cap, &n, &bad_at) != SRV_B64_FAULT_NONE)
        return false;
    *out_len = n;
    return true;
}
