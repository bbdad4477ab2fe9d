/* json_check.c - see json_check.h. */
#include "codec/json_check.h"

#include <stdint.h>
#include <string.h>

typedef struct scan {
    const unsigned char *s;
    size_t n, i;
    const char *why;
} scan;

static bool fail(scan *c, const char *why)
{
    c->why = why;
    return false;
}

static void skip_ws(scan *c)
{
    while (c->i < c->n) {
        const unsigned char ch = c->s[c->i];
        if (ch != ' ' && ch != '\t' && ch != '\n' && ch != '\r')
            break;
        c->i++;
    }
}

static bool is_digit(unsigned char ch)
{
    return ch >= '0' && ch <= '9';
}

static int hex_value(unsigned char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    ch |= 0x20;
    return ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
}

/* Four hex digits at c->i: their value, or -1. */
static long hex4(scan *c)
{
    long v = 0;
    if (c->n - c->i < 4)
        return -1;
    for (int k = 0; k < 4; k++) {
        const int h = hex_value(c->s[c->i + (size_t)k]);
        if (h < 0)
            return -1;
        v = v * 16 + h;
    }
    c->i += 4;
    return v;
}

/* Eight bytes with none that needs a look: no '"', '\\', control byte or
 * byte past ASCII (the classic has-zero-byte tests, bit by bit). */
static bool plain8(const unsigned char *p)
{
    uint64_t v, quote, slash, ctl;
    const uint64_t ones = 0x0101010101010101u, highs = 0x8080808080808080u;
    memcpy(&v, p, 8);
    quote = v ^ (ones * '"');
    slash = v ^ (ones * '\\');
    ctl = v & (ones * 0xE0); /* zero where the byte is below 0x20 */
    return (((quote - ones) & ~quote) | ((slash - ones) & ~slash) | ((ctl - ones) & ~ctl) | v) &
                   highs
               ? false
               : true;
}

/* A UTF-8 sequence starting at c->i whose lead byte is at least 0x80:
 * shortest form, no surrogates, at most U+10FFFF (RFC 3629). */
static bool utf8(scan *c)
{
    const unsigned char b0 = c->s[c->i];
    unsigned long cp;
    size_t need;
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        need = 1;
        cp = b0 & 0x1F;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
        need = 2;
        cp = b0 & 0x0F;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        need = 3;
        cp = b0 & 0x07;
    } else {
        return fail(c, "a string holds a byte that is not UTF-8");
    }
    if (c->n - c->i <= need)
        return fail(c, "a string ends inside a UTF-8 sequence");
    for (size_t k = 1; k <= need; k++) {
        const unsigned char b = c->s[c->i + k];
        if ((b & 0xC0) != 0x80)
            return fail(c, "a string holds a byte that is not UTF-8");
        cp = (cp << 6) | (b & 0x3F);
    }
    if ((need == 2 && cp < 0x800) || (need == 3 && cp < 0x10000))
        return fail(c, "a string holds an overlong UTF-8 sequence");
    if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return fail(c, "a string holds a UTF-8 sequence that is no character");
    c->i += need + 1;
    return true;
}

static bool string(scan *c)
{
    c->i++; /* the opening quote */
    for (;;) {
        unsigned char ch;
        while (c->n - c->i >= 8 && plain8(c->s + c->i))
            c->i += 8;
        if (c->i >= c->n)
            return fail(c, "a string is not closed");
        ch = c->s[c->i];
        if (ch == '"') {
            c->i++;
            return true;
        }
        if (ch < 0x20)
            return fail(c, ch == 0 ? "a string holds a NUL byte"
                                   : "a string holds a control character (escape it)");
        if (ch >= 0x80) {
            if (!utf8(c))
                return false;
            continue;
        }
        if (ch != '\\') {
            c->i++;
            continue;
        }
        if (c->i + 1 >= c->n)
            return fail(c, "a string ends in an escape");
        ch = c->s[c->i + 1];
        if (ch == 'u') {
            const size_t at = c->i;
            long v;
            c->i += 2;
            if ((v = hex4(c)) < 0)
                return c->i = at, fail(c, "\\u takes four hex digits");
            if (v == 0)
                return c->i = at, fail(c, "a string holds U+0000 (\\u0000)");
            if (v >= 0xDC00 && v <= 0xDFFF)
                return c->i = at, fail(c, "a string holds a low surrogate with no high one");
            if (v >= 0xD800 && v <= 0xDBFF) {
                long lo;
                if (c->n - c->i < 6 || c->s[c->i] != '\\' || c->s[c->i + 1] != 'u')
                    return c->i = at, fail(c, "a string holds a high surrogate with no low one");
                c->i += 2;
                lo = hex4(c);
                if (lo < 0xDC00 || lo > 0xDFFF)
                    return c->i = at, fail(c, "a string holds a high surrogate with no low one");
            }
            continue;
        }
        if (strchr("\"\\/bfnrt", ch) == NULL || ch == 0)
            return fail(c, "a string holds an escape that JSON does not have");
        c->i += 2;
    }
}

/* -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?, then a delimiter. */
static bool number(scan *c)
{
    const size_t start = c->i;
    if (c->s[c->i] == '-')
        c->i++;
    if (c->i >= c->n || !is_digit(c->s[c->i]))
        return fail(c, "a number needs a digit");
    if (c->s[c->i] == '0') {
        c->i++;
        if (c->i < c->n && is_digit(c->s[c->i]))
            return c->i = start, fail(c, "a number has a leading zero");
    } else {
        while (c->i < c->n && is_digit(c->s[c->i]))
            c->i++;
    }
    if (c->i < c->n && c->s[c->i] == '.') {
        c->i++;
        if (c->i >= c->n || !is_digit(c->s[c->i]))
            return fail(c, "a number needs a digit after its point");
        while (c->i < c->n && is_digit(c->s[c->i]))
            c->i++;
    }
    if (c->i < c->n && (c->s[c->i] | 0x20) == 'e') {
        c->i++;
        if (c->i < c->n && (c->s[c->i] == '+' || c->s[c->i] == '-'))
            c->i++;
        if (c->i >= c->n || !is_digit(c->s[c->i]))
            return fail(c, "a number needs a digit in its exponent");
        while (c->i < c->n && is_digit(c->s[c->i]))
            c->i++;
    }
    return true;
}

static bool literal(scan *c, const char *word)
{
    const size_t k = strlen(word);
    if (c->n - c->i < k || memcmp(c->s + c->i, word, k) != 0)
        return fail(c, "not a JSON value (true, false, null, a number, a string, [ or {)");
    c->i += k;
    return true;
}

/* Values iteratively: the open containers in `open` ('[' or '{'). */
bool srv_json_check(const char *text, size_t len, size_t *at, const char **why, size_t *values)
{
    char open[SRV_JSON_MAX_DEPTH];
    int depth = 0;
    size_t count = 0;
    scan c = {(const unsigned char *)text, len, 0, NULL};
    bool ok = false;

    skip_ws(&c);
    for (;;) {
        /* A value. */
        if (c.i >= c.n) {
            fail(&c, "the text ends where a value should be");
            break;
        }
        count++;
        switch (c.s[c.i]) {
        case '{':
        case '[':
            if (depth == SRV_JSON_MAX_DEPTH) {
                fail(&c, "nesting deeper than 1000 levels");
                goto out;
            }
            open[depth++] = (char)c.s[c.i++];
            skip_ws(&c);
            if (c.i < c.n && c.s[c.i] == (open[depth - 1] == '{' ? '}' : ']')) {
                c.i++;
                depth--;
                goto after_value;
            }
            if (open[depth - 1] == '{')
                goto member;
            continue;
        case '"':
            if (!string(&c))
                goto out;
            break;
        case 't':
            if (!literal(&c, "true"))
                goto out;
            break;
        case 'f':
            if (!literal(&c, "false"))
                goto out;
            break;
        case 'n':
            if (!literal(&c, "null"))
                goto out;
            break;
        default:
            if (c.s[c.i] != '-' && !is_digit(c.s[c.i])) {
                fail(&c, "not a JSON value (true, false, null, a number, a string, [ or {)");
                goto out;
            }
            if (!number(&c))
                goto out;
            break;
        }
    after_value:
        skip_ws(&c);
        if (depth == 0) {
            if (c.i != c.n) {
                fail(&c, "text after the JSON value");
                break;
            }
            ok = true;
            break;
        }
        if (c.i >= c.n) {
            fail(&c, open[depth - 1] == '{' ? "an object is not closed" : "an array is not closed");
            break;
        }
        if (c.s[c.i] == ',') {
            c.i++;
            skip_ws(&c);
            if (open[depth - 1] == '[')
                continue;
            goto member;
        }
        if (c.s[c.i] == (open[depth - 1] == '{' ? '}' : ']')) {
            c.i++;
            depth--;
            goto after_value;
        }
        fail(&c, open[depth - 1] == '{' ? "expected , or } in an object"
                                        : "expected , or ] in an array");
        break;
    member:
        /* "name" : then the value. */
        if (c.i >= c.n || c.s[c.i] != '"') {
            fail(&c, "an object's member needs a string name");
            break;
        }
        if (!string(&c))
            break;
        skip_ws(&c);
        if (c.i >= c.n || c.s[c.i] != ':') {
            fail(&c, "expected : after a member's name");
            break;
        }
        c.i++;
        skip_ws(&c);
    }
out:
    if (!ok) {
        *at = c.i;
        *why = c.why;
    } else if (values != NULL) {
        *values = count;
    }
    return ok;
}
