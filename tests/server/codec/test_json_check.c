/* test_json_check.c - server/codec/json_check.c: RFC 8259 exactly, strings
 * of valid UTF-8 without U+0000, against a table of documents on both sides
 * of each rule (each valid one also parses with cJSON, so the check never
 * refuses what the parser would read correctly), the offset and reason of
 * each refusal, and every byte value inside a string.
 */
#include "testutil.h"

#include "codec/json_check.h"

#include <cjson/cJSON.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool ok(const char *doc)
{
    size_t at;
    const char *why;
    return srv_json_check(doc, strlen(doc), &at, &why, NULL);
}

static void test_valid(void **state)
{
    (void)state;
    static const char *const docs[] = {"{}",
                                       " [ ] ",
                                       "0",
                                       "-0",
                                       "1",
                                       "-12.5e+3",
                                       "1E-7",
                                       "0.0",
                                       "1e5",
                                       "true",
                                       "false",
                                       "null",
                                       "\"\"",
                                       "\"plain\"",
                                       "\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"",
                                       "\"\\u00e9\\u20AC\"",
                                       "\"\\ud83d\\ude00\"",
                                       "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"", /* é € 😀 */
                                       "{\"a\":[1,2,{\"b\":null}],\"c\":\"d\"}",
                                       "[[[]]]",
                                       "\n\t{ \"k\" :\r\n 1 }\n",
                                       "[1.5,-0.25,3e10,4E-2,5]",
                                       "\"a long string of plain ascii text past eight bytes\"",
                                       "\"\x7f\"" /* DEL is not a control character in JSON */};
    for (size_t i = 0; i < sizeof docs / sizeof *docs; i++) {
        cJSON *tree = cJSON_Parse(docs[i]);
        if (!ok(docs[i]))
            fail_msg("refused valid JSON: %s", docs[i]);
        if (tree == NULL)
            fail_msg("cJSON does not read it: %s", docs[i]);
        cJSON_Delete(tree);
    }
}

typedef struct bad {
    const char *doc;
    size_t at;
    const char *why; /* a word of the reason */
} bad;

static void test_invalid(void **state)
{
    (void)state;
    static const bad docs[] = {
        {"", 0, "ends"},
        {"   ", 3, "ends"},
        {"007", 0, "leading zero"},
        {"[01.5]", 1, "leading zero"},
        {"-01", 0, "leading zero"},
        {"+1", 0, "not a JSON value"},
        {"1.", 2, "after its point"},
        {".5", 0, "not a JSON value"},
        {"1e", 2, "exponent"},
        {"1e+", 3, "exponent"},
        {"-", 1, "digit"},
        {"0x10", 1, "text after"},
        {"NaN", 0, "not a JSON value"},
        {"Infinity", 0, "not a JSON value"},
        {"tru", 0, "not a JSON value"},
        {"nul", 0, "not a JSON value"},
        {"{\"a\":1,}", 7, "member"},
        {"[1,]", 3, "not a JSON value"},
        {"[1 2]", 3, "expected ,"},
        {"{\"a\" 1}", 5, "expected :"},
        {"{1:2}", 1, "member"},
        {"{'a':1}", 1, "member"},
        {"[1", 2, "not closed"},
        {"{\"a\":1", 6, "not closed"},
        {"[1]]", 3, "text after"},
        {"\"abc", 4, "not closed"},
        {"\"a\\u0000b\"", 2, "U+0000"},
        {"\"\\u00\"", 1, "four hex"},
        {"\"\\x41\"", 1, "escape"},
        {"\"\\ud800\"", 1, "low one"},
        {"\"\\ud800\\u0041\"", 1, "low one"},
        {"\"\\udc00\"", 1, "no high one"},
        {"\"tab\there\"", 4, "control"},
        {"\"\xff\"", 1, "not UTF-8"},
        {"\"\xc3", 1, "ends inside"},
        {"\"\xc3\"", 1, "not UTF-8"},
        {"\"\xc3\x28\"", 1, "not UTF-8"},
        {"\"\xc0\xaf\"", 1, "not UTF-8"},            /* overlong '/' */
        {"\"\xe0\x80\xaf\"", 1, "overlong"},         /* overlong '/' */
        {"\"\xed\xa0\x80\"", 1, "no character"},     /* a surrogate in UTF-8 */
        {"\"\xf4\x90\x80\x80\"", 1, "no character"}, /* past U+10FFFF */
        {"\"\xf5\x80\x80\x80\"", 1, "not UTF-8"},
        {"\"12345678\xff\"", 9, "not UTF-8"}, /* after a plain run of eight */
    };
    for (size_t i = 0; i < sizeof docs / sizeof *docs; i++) {
        size_t at = 12345;
        const char *why = NULL;
        if (srv_json_check(docs[i].doc, strlen(docs[i].doc), &at, &why, NULL))
            fail_msg("accepted invalid JSON #%zu: %s", i, docs[i].doc);
        if (at != docs[i].at || why == NULL || strstr(why, docs[i].why) == NULL)
            fail_msg("#%zu %s: at %zu (%s), want at %zu (%s)", i, docs[i].doc, at, why ? why : "-",
                     docs[i].at, docs[i].why);
    }
    {
        /* A NUL byte itself, which strlen would hide. */
        static const char nul[] = "\"a\0b\"";
        size_t at;
        const char *why;
        assert_false(srv_json_check(nul, sizeof nul - 1, &at, &why, NULL));
        assert_int_equal(at, 2);
    }
}

/* Nesting: 1000 levels are JSON, 1001 are refused (cJSON's limit). */
static void test_depth(void **state)
{
    (void)state;
    char *doc = malloc(2 * 1001 + 1);
    size_t at;
    const char *why;
    assert_non_null(doc);
    for (int n = 1000; n <= 1001; n++) {
        memset(doc, '[', (size_t)n);
        memset(doc + n, ']', (size_t)n);
        doc[2 * n] = '\0';
        assert_int_equal(srv_json_check(doc, 2 * (size_t)n, &at, &why, NULL), n == 1000);
    }
    free(doc);
}

/* Every byte value inside a string, at every place of an eight-byte run:
 * control bytes and bytes that start no valid sequence alone are refused at
 * their own offset, the rest accepted. */
static void test_every_byte(void **state)
{
    (void)state;
    for (int b = 1; b < 256; b++) {
        for (int pos = 0; pos < 10; pos++) {
            char doc[16];
            size_t at;
            const char *why;
            bool want = b >= 0x20 && b < 0x80 && b != '"' && b != '\\';
            memset(doc, 'x', sizeof doc);
            doc[0] = '"';
            doc[1 + pos] = (char)b;
            doc[12] = '"';
            if (srv_json_check(doc, 13, &at, &why, NULL) != want)
                fail_msg("byte 0x%02x at %d: %s", b, pos, want ? "refused" : "accepted");
            if (!want && b != '"' && at != (size_t)(1 + pos))
                fail_msg("byte 0x%02x at %d: refused at %zu", b, pos, at);
        }
    }
}

/* Counts the nodes a parser makes: the count the request memory bound uses
 * for the parse tree before cJSON runs (api/body.c). Each document's count
 * is checked against cJSON's own tree, and commas and brackets inside
 * strings are not values. */
static size_t tree_nodes(const cJSON *n)
{
    size_t c = 1;
    for (const cJSON *k = n->child; k != NULL; k = k->next)
        c += tree_nodes(k);
    return c;
}

static void test_value_count(void **state)
{
    (void)state;
    static const struct {
        const char *doc;
        size_t values;
    } docs[] = {
        {"0", 1},
        {"[]", 1},
        {"{}", 1},
        {"[1,2,3]", 4},
        {"{\"a\":1,\"b\":[true,null]}", 5},
        {"[[1,2],[3,4],[]]", 8},
        {"{\"s\":\"a,b[c{d\"}", 2},
        {" { \"x\" : { \"y\" : [ 0 , -1.5e3 , \"\" ] } } ", 6},
    };
    for (size_t i = 0; i < sizeof docs / sizeof *docs; i++) {
        size_t at, values = 12345;
        const char *why;
        cJSON *tree = cJSON_Parse(docs[i].doc);
        assert_non_null(tree);
        assert_true(srv_json_check(docs[i].doc, strlen(docs[i].doc), &at, &why, &values));
        if (values != docs[i].values || values != tree_nodes(tree))
            fail_msg("%s: %zu values counted, %zu expected, cJSON made %zu nodes", docs[i].doc,
                     values, docs[i].values, tree_nodes(tree));
        cJSON_Delete(tree);
    }
    /* A refused document leaves the count alone. */
    size_t at, values = 7;
    const char *why;
    assert_false(srv_json_check("[1,", 3, &at, &why, &values));
    assert_int_equal(values, 7);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_value_count), cmocka_unit_test(test_valid),
        cmocka_unit_test(test_invalid),     cmocka_unit_test(test_depth),
        cmocka_unit_test(test_every_byte),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
