/* test_api_scheme.c - server/api/scheme.c (tests/lib/test_scheme.c tests
 * lib/): api_scheme_parse of every scheme type and its tables, unknown and
 * repeated parameters, rope parameters of another scaling, each error's field
 * and values; and the parameter table api_params checked against pa_scheme.
 */
#include "api/json.h"
#include "api/protocol.h"
#include "api/request.h"
#include "api_harness.h" /* ERR_IS */
#include "testutil.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static srv_limits lim_of(void)
{
    srv_limits lim = {.max_batch_items = 4,
                      .max_tensor_elements = 1 << 16,
                      .max_request_memory = (size_t)64 << 20,
                      .parallel_parts = 1};
    return lim;
}

/* Parses text as the scheme of an item at prefix; the result of
 * api_scheme_parse. */
static bool parse(const char *text, const char *prefix, api_scheme *out, api_err *e)
{
    static srv_limits lim;
    lim = lim_of();
    api_ctx ctx = {&lim, prefix, NULL, NULL};
    cJSON *node = text != NULL ? cJSON_Parse(text) : NULL;
    if (text != NULL && node == NULL)
        fail_msg("the test's JSON does not parse: %s", text);
    bool ok = api_scheme_parse(node, &ctx, out, e);
    cJSON_Delete(node);
    return ok;
}

static void parse_ok(const char *text, api_scheme *out)
{
    api_err e;
    if (!parse(text, "", out, &e))
        fail_msg("%s: %s (%s)", text, e.message, e.field);
}

/* Parses text expecting failure, then checks the error. */
#define PARSE_FAILS(text, prefix, code, field, ...)                                                \
    do {                                                                                           \
        api_scheme s_;                                                                             \
        api_err e_;                                                                                \
        if (parse((text), (prefix), &s_, &e_))                                                     \
            fail_msg("%s was accepted", (text) != NULL ? (text) : "no scheme");                    \
        ERR_IS(&e_, (code), (field), __VA_ARGS__);                                                 \
    } while (0)

/* ------------------------------------------------------------------------- */
/* Every scheme type                                                         */
/* ------------------------------------------------------------------------- */

static void test_none_and_sinusoidal(void **state)
{
    (void)state;
    api_scheme s;
    pa_scheme def;
    parse_ok("{\"type\":\"none\"}", &s);
    assert_int_equal(s.s.type, PA_SCHEME_NONE);
    assert_int_equal(s.bytes, 0);
    api_scheme_free(&s);

    parse_ok("{\"type\":\"sinusoidal\"}", &s);
    pa_scheme_init(&def, PA_SCHEME_SINUSOIDAL);
    assert_memory_equal(&s.s, &def, sizeof def); /* every default kept */
    api_scheme_free(&s);
    parse_ok("{\"type\":\"sinusoidal\",\"base\":500.5,\"layout\":\"concat\"}", &s);
    assert_int_equal(s.s.type, PA_SCHEME_SINUSOIDAL);
    assert_true(s.s.sinusoidal.base == 500.5);
    assert_int_equal(s.s.sinusoidal.layout, PA_SINUSOIDAL_LAYOUT_CONCAT);
    api_scheme_free(&s);
}

static void test_learned_t5_shaw_tables(void **state)
{
    (void)state;
    api_scheme s;

    parse_ok("{\"type\":\"learned\",\"offset\":2,"
             "\"table\":{\"shape\":[4,3],\"data\":[0,1,2,3,4,5,6,7,8,9,10,11]}}",
             &s);
    assert_int_equal(s.s.type, PA_SCHEME_LEARNED);
    assert_int_equal(s.s.learned.offset, 2);
    assert_int_equal(s.s.learned.rows, 4);
    assert_int_equal(s.s.learned.cols, 3);
    assert_ptr_equal(s.s.learned.table, s.table.data);
    assert_true(s.s.learned.table[11] == 11.0f);
    assert_int_equal(s.bytes, 12 * sizeof(float));
    api_scheme_free(&s);
    assert_null(s.table.data);

    parse_ok("{\"type\":\"t5\",\"num_buckets\":8,\"max_distance\":20,\"bidirectional\":false,"
             "\"table\":{\"shape\":[8,2],\"data\":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]}}",
             &s);
    assert_int_equal(s.s.type, PA_SCHEME_T5);
    assert_int_equal(s.s.t5.num_buckets, 8);
    assert_int_equal(s.s.t5.max_distance, 20);
    assert_false(s.s.t5.bidirectional);
    assert_int_equal(s.s.t5.table_rows, 8);
    assert_int_equal(s.s.t5.table_cols, 2);
    assert_ptr_equal(s.s.t5.table, s.table.data);
    assert_int_equal(s.bytes, 16 * sizeof(float));
    api_scheme_free(&s);

    /* rel_k and rel_v each go to their own member. */
    parse_ok("{\"type\":\"shaw\",\"max_relative_position\":1,"
             "\"rel_v\":{\"shape\":[3,5],\"data\":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14]},"
             "\"rel_k\":{\"shape\":[3,2],\"data\":[-1,-2,-3,-4,-5,-6]}}",
             &s);
    assert_int_equal(s.s.type, PA_SCHEME_SHAW);
    assert_int_equal(s.s.shaw.max_relative_position, 1);
    assert_int_equal(s.s.shaw.rel_k_rows, 3);
    assert_int_equal(s.s.shaw.rel_k_cols, 2);
    assert_int_equal(s.s.shaw.rel_v_rows, 3);
    assert_int_equal(s.s.shaw.rel_v_cols, 5);
    assert_ptr_equal(s.s.shaw.rel_k, s.rel_k.data);
    assert_ptr_equal(s.s.shaw.rel_v, s.rel_v.data);
    assert_true(s.s.shaw.rel_k[5] == -6.0f && s.s.shaw.rel_v[14] == 14.0f);
    assert_int_equal(s.bytes, (6 + 15) * sizeof(float));
    api_scheme_free(&s);
    parse_ok("{\"type\":\"shaw\",\"rel_k\":{\"shape\":[1,2],\"data\":[1,2]}}", &s);
    assert_null(s.s.shaw.rel_v);
    assert_int_equal(s.s.shaw.max_relative_position, 0);
    /* Shaw's direction and no key term unless asked. */
    assert_int_equal(s.s.shaw.direction, PA_SHAW_DIRECTION_KEY_MINUS_QUERY);
    assert_false(s.s.shaw.key_term);
    api_scheme_free(&s);
    /* Hugging Face BERT's relative_key_query. */
    parse_ok("{\"type\":\"shaw\",\"max_relative_position\":1,\"direction\":\"query_minus_key\","
             "\"key_term\":true,\"rel_k\":{\"shape\":[3,1],\"data\":[1,2,3]}}",
             &s);
    assert_int_equal(s.s.shaw.direction, PA_SHAW_DIRECTION_QUERY_MINUS_KEY);
    assert_true(s.s.shaw.key_term);
    api_scheme_free(&s);
    parse_ok("{\"type\":\"shaw\",\"direction\":\"key_minus_query\",\"key_term\":false}", &s);
    assert_int_equal(s.s.shaw.direction, PA_SHAW_DIRECTION_KEY_MINUS_QUERY);
    assert_false(s.s.shaw.key_term);
    api_scheme_free(&s);
}

static void test_rope_every_parameter(void **state)
{
    (void)state;
    api_scheme s;
    pa_scheme def;

    parse_ok("{\"type\":\"rope\"}", &s);
    pa_scheme_init(&def, PA_SCHEME_ROPE);
    assert_memory_equal(&s.s, &def, sizeof def);
    api_scheme_free(&s);

    parse_ok("{\"type\":\"rope\",\"base\":500000,\"rotary_dim\":6,\"layout\":\"gptj\","
             "\"scaling\":\"yarn\",\"factor\":4,\"original_max_position\":2048,"
             "\"attention_factor\":1.5,\"beta_fast\":16,\"beta_slow\":2,\"truncate\":false,"
             "\"mscale\":0.5,\"mscale_all_dim\":0.25,\"mrope_section\":[1,1,1],"
             "\"mrope_interleaved\":true}",
             &s);
    const pa_rope *r = &s.s.rope;
    assert_int_equal(s.s.type, PA_SCHEME_ROPE);
    assert_true(r->base == 500000.0);
    assert_int_equal(r->rotary_dim, 6);
    assert_int_equal(r->layout, PA_ROPE_LAYOUT_GPTJ);
    assert_int_equal(r->scaling, PA_ROPE_SCALING_YARN);
    assert_true(r->factor == 4.0);
    assert_int_equal(r->original_max_position, 2048);
    assert_true(r->attention_factor == 1.5);
    assert_true(r->beta_fast == 16.0 && r->beta_slow == 2.0);
    assert_false(r->truncate);
    assert_true(r->mscale == 0.5 && r->mscale_all_dim == 0.25);
    assert_true(r->mrope_section[0] == 1 && r->mrope_section[1] == 1 && r->mrope_section[2] == 1);
    assert_true(r->mrope_interleaved);
    assert_true(r->low_freq_factor == 1.0 && r->high_freq_factor == 4.0); /* defaults */
    api_scheme_free(&s);

    parse_ok("{\"type\":\"rope\",\"scaling\":\"llama3\",\"low_freq_factor\":2,"
             "\"high_freq_factor\":8}",
             &s);
    assert_int_equal(s.s.rope.scaling, PA_ROPE_SCALING_LLAMA3);
    assert_true(s.s.rope.low_freq_factor == 2.0 && s.s.rope.high_freq_factor == 8.0);
    api_scheme_free(&s);

    parse_ok("{\"type\":\"rope\",\"scaling\":\"longrope\",\"original_max_position\":64,"
             "\"short_factor\":[1,1.5],\"long_factor\":[2,4,8]}",
             &s);
    assert_int_equal(s.s.rope.scaling, PA_ROPE_SCALING_LONGROPE);
    assert_int_equal(s.s.rope.short_factor_len, 2);
    assert_int_equal(s.s.rope.long_factor_len, 3);
    assert_ptr_equal(s.s.rope.short_factor, s.short_factor);
    assert_ptr_equal(s.s.rope.long_factor, s.long_factor);
    assert_true(s.short_factor[1] == 1.5f && s.long_factor[2] == 8.0f);
    assert_int_equal(s.bytes, 5 * sizeof(float));
    api_scheme_free(&s);
    assert_null(s.short_factor);
}

static void test_alibi(void **state)
{
    (void)state;
    api_scheme s;
    parse_ok("{\"type\":\"alibi\"}", &s);
    assert_true(s.s.alibi.max_bias == 8.0);
    assert_false(s.s.alibi.symmetric);
    assert_null(s.s.alibi.slopes);
    api_scheme_free(&s);
    parse_ok("{\"type\":\"alibi\",\"max_bias\":4,\"symmetric\":true,\"slopes\":[0.5,0.25]}", &s);
    assert_true(s.s.alibi.max_bias == 4.0);
    assert_true(s.s.alibi.symmetric);
    assert_int_equal(s.s.alibi.num_slopes, 2);
    assert_ptr_equal(s.s.alibi.slopes, s.slopes);
    assert_true(s.slopes[0] == 0.5f && s.slopes[1] == 0.25f);
    assert_int_equal(s.bytes, 2 * sizeof(float));
    api_scheme_free(&s);
    api_scheme_free(NULL);
}

/* ------------------------------------------------------------------------- */
/* Errors                                                                    */
/* ------------------------------------------------------------------------- */

static void test_scheme_missing_or_not_a_scheme(void **state)
{
    (void)state;
    PARSE_FAILS(NULL, "", SRV_ERR_INVALID_ARGUMENT, "scheme", "scheme is required",
                "none, sinusoidal, learned, shaw, t5, rope, alibi");
    PARSE_FAILS(NULL, "inputs[3]", SRV_ERR_INVALID_ARGUMENT, "inputs[3].scheme",
                "scheme is required");
    PARSE_FAILS("\"rope\"", "", SRV_ERR_INVALID_ARGUMENT, "scheme",
                "scheme must be an object with a 'type', found string");
    PARSE_FAILS("{}", "inputs[1]", SRV_ERR_INVALID_ARGUMENT, "inputs[1].scheme.type",
                "scheme.type is required");
    PARSE_FAILS("{\"type\":5}", "", SRV_ERR_INVALID_ARGUMENT, "scheme.type",
                "scheme.type must be a string, found number");
    PARSE_FAILS("{\"type\":\"cosine\"}", "inputs[0]", SRV_ERR_INVALID_ARGUMENT,
                "inputs[0].scheme.type", "scheme.type='cosine' is not a scheme");
    PARSE_FAILS("{\"type\":\"Rope\"}", "", SRV_ERR_INVALID_ARGUMENT, "scheme.type", "'Rope'");
}

/* Parameters of another scheme, or of none, are unknown fields. */
static void test_unknown_parameters(void **state)
{
    (void)state;
    PARSE_FAILS("{\"type\":\"rope\",\"max_bias\":8}", "inputs[2]", SRV_ERR_UNKNOWN_FIELD,
                "inputs[2].scheme.max_bias", "scheme 'rope' has no field 'max_bias'",
                "(known: type, base, rotary_dim, layout, scaling, factor");
    PARSE_FAILS("{\"type\":\"none\",\"base\":100}", "", SRV_ERR_UNKNOWN_FIELD, "scheme.base",
                "scheme 'none' has no field 'base' (known: type)");
    PARSE_FAILS("{\"type\":\"alibi\",\"slope\":[1]}", "", SRV_ERR_UNKNOWN_FIELD, "scheme.slope",
                "scheme 'alibi' has no field 'slope' (known: type, max_bias, symmetric, slopes)");
    PARSE_FAILS("{\"type\":\"sinusoidal\",\"rotary_dim\":4}", "", SRV_ERR_UNKNOWN_FIELD,
                "scheme.rotary_dim", "(known: type, base, layout)");
    PARSE_FAILS("{\"type\":\"t5\",\"rel_k\":{\"shape\":[1,1],\"data\":[1]}}", "",
                SRV_ERR_UNKNOWN_FIELD, "scheme.rel_k",
                "(known: type, num_buckets, max_distance, bidirectional, table)");
    PARSE_FAILS("{\"type\":\"learned\",\"base\":1}", "", SRV_ERR_UNKNOWN_FIELD, "scheme.base",
                "(known: type, table, offset)");
    PARSE_FAILS("{\"type\":\"shaw\",\"table\":{\"shape\":[1,1],\"data\":[1]}}", "",
                SRV_ERR_UNKNOWN_FIELD, "scheme.table",
                "(known: type, max_relative_position, direction, key_term, rel_k, rel_v)");
    PARSE_FAILS("{\"type\":\"t5\",\"direction\":\"query_minus_key\"}", "", SRV_ERR_UNKNOWN_FIELD,
                "scheme.direction", "scheme 't5' has no field 'direction'");
    /* A repeated parameter (or type) is refused, not silently overwritten. */
    PARSE_FAILS("{\"type\":\"rope\",\"base\":10,\"base\":20}", "inputs[1]",
                SRV_ERR_INVALID_ARGUMENT, "inputs[1].scheme.base",
                "field 'base' appears more than once in scheme 'rope'");
    PARSE_FAILS("{\"type\":\"alibi\",\"type\":\"rope\"}", "", SRV_ERR_INVALID_ARGUMENT,
                "scheme.type", "field 'type' appears more than once");
}

/* A rope parameter that the chosen scaling does not read is refused, wherever
 * it stands in the object; with the scaling that reads it, it passes. */
static void test_parameter_of_another_scaling(void **state)
{
    (void)state;
    PARSE_FAILS("{\"type\":\"rope\",\"factor\":2}", "inputs[4]", SRV_ERR_INVALID_ARGUMENT,
                "inputs[4].scheme.factor",
                "scheme.factor applies to rope scaling linear, ntk, dynamic, yarn, llama3, "
                "longrope, proportional only, but scheme.scaling is 'none'");
    PARSE_FAILS("{\"type\":\"rope\",\"scaling\":\"ntk_alpha\",\"alpha\":2,\"factor\":2}", "",
                SRV_ERR_INVALID_ARGUMENT, "scheme.factor", "'ntk_alpha'");
    PARSE_FAILS("{\"type\":\"rope\",\"scaling\":\"ntk\",\"factor\":2,\"alpha\":2}", "",
                SRV_ERR_INVALID_ARGUMENT, "scheme.alpha", "ntk_alpha only", "'ntk'");
    PARSE_FAILS("{\"type\":\"rope\",\"partial_rotary_factor\":0.5}", "", SRV_ERR_INVALID_ARGUMENT,
                "scheme.partial_rotary_factor", "proportional only", "'none'");
    PARSE_FAILS("{\"type\":\"rope\",\"beta_fast\":3,\"scaling\":\"linear\",\"factor\":2}", "",
                SRV_ERR_INVALID_ARGUMENT, "scheme.beta_fast",
                "scheme.beta_fast applies to rope scaling yarn only, but scheme.scaling is "
                "'linear'");
    PARSE_FAILS("{\"type\":\"rope\",\"scaling\":\"linear\",\"factor\":2,"
                "\"original_max_position\":16}",
                "", SRV_ERR_INVALID_ARGUMENT, "scheme.original_max_position",
                "applies to rope scaling dynamic, yarn, llama3, longrope only", "'linear'");
    PARSE_FAILS("{\"type\":\"rope\",\"scaling\":\"yarn\",\"factor\":2,\"low_freq_factor\":1}", "",
                SRV_ERR_INVALID_ARGUMENT, "scheme.low_freq_factor", "llama3 only", "'yarn'");
    PARSE_FAILS("{\"type\":\"rope\",\"scaling\":\"ntk\",\"factor\":2,\"short_factor\":[1]}", "",
                SRV_ERR_INVALID_ARGUMENT, "scheme.short_factor", "longrope only", "'ntk'");
    PARSE_FAILS("{\"type\":\"rope\",\"scaling\":\"llama3\",\"mscale\":1}", "",
                SRV_ERR_INVALID_ARGUMENT, "scheme.mscale", "yarn only", "'llama3'");

    /* factor with each scaling that reads it; parameters for all scalings
     * (attention_factor, mrope) with none. */
    static const char *const factor_ok[] = {"linear", "ntk",      "dynamic",     "yarn",
                                            "llama3", "longrope", "proportional"};
    char text[128];
    api_scheme s;
    for (size_t i = 0; i < sizeof factor_ok / sizeof factor_ok[0]; i++) {
        snprintf(text, sizeof text, "{\"type\":\"rope\",\"scaling\":\"%s\",\"factor\":3}",
                 factor_ok[i]);
        parse_ok(text, &s);
        assert_true(s.s.rope.factor == 3.0);
        api_scheme_free(&s);
    }
    parse_ok("{\"type\":\"rope\",\"attention_factor\":2,\"mrope_section\":[2,1,1],"
             "\"mrope_interleaved\":false,\"rotary_dim\":8}",
             &s);
    assert_true(s.s.rope.attention_factor == 2.0);
    api_scheme_free(&s);
}

static void test_parameter_errors(void **state)
{
    (void)state;
    PARSE_FAILS("{\"type\":\"rope\",\"base\":\"10000\"}", "inputs[1]", SRV_ERR_INVALID_ARGUMENT,
                "inputs[1].scheme.base", "scheme.base must be a number, found string");
    PARSE_FAILS("{\"type\":\"rope\",\"rotary_dim\":2.5}", "", SRV_ERR_INVALID_ARGUMENT,
                "scheme.rotary_dim", "scheme.rotary_dim must be an integer, found 2.5");
    PARSE_FAILS("{\"type\":\"rope\",\"rotary_dim\":4294967296}", "", SRV_ERR_OUT_OF_RANGE,
                "scheme.rotary_dim", "scheme.rotary_dim=4294967296 is outside the int32 range");
    PARSE_FAILS("{\"type\":\"rope\",\"layout\":\"interleaved\"}", "", SRV_ERR_INVALID_ARGUMENT,
                "scheme.layout", "scheme.layout='interleaved' is not 'neox' or 'gptj'");
    PARSE_FAILS("{\"type\":\"sinusoidal\",\"layout\":\"neox\"}", "", SRV_ERR_INVALID_ARGUMENT,
                "scheme.layout", "scheme.layout='neox' is not 'interleaved' or 'concat'");
    PARSE_FAILS("{\"type\":\"rope\",\"scaling\":\"quadratic\"}", "inputs[0]",
                SRV_ERR_INVALID_ARGUMENT, "inputs[0].scheme.scaling",
                "scheme.scaling='quadratic' is not a rope scaling (none, linear, ntk, dynamic, "
                "yarn, llama3, longrope, proportional, ntk_alpha)");
    PARSE_FAILS("{\"type\":\"rope\",\"scaling\":\"yarn\",\"truncate\":1}", "",
                SRV_ERR_INVALID_ARGUMENT, "scheme.truncate",
                "scheme.truncate must be true or false, found number");
    PARSE_FAILS("{\"type\":\"rope\",\"mrope_section\":[1,2]}", "inputs[2]", SRV_ERR_SHAPE_MISMATCH,
                "inputs[2].scheme.mrope_section",
                "scheme.mrope_section has 2 values; it needs 3 ([t, h, w])");
    PARSE_FAILS("{\"type\":\"rope\",\"mrope_section\":[1,2,3,4]}", "", SRV_ERR_SHAPE_MISMATCH,
                "scheme.mrope_section", "has 4 values");
    PARSE_FAILS("{\"type\":\"rope\",\"mrope_section\":[1,2.5,3]}", "", SRV_ERR_INVALID_ARGUMENT,
                "scheme.mrope_section[1]", "found 2.5");
    PARSE_FAILS("{\"type\":\"alibi\",\"slopes\":[]}", "", SRV_ERR_INVALID_ARGUMENT, "scheme.slopes",
                "scheme.slopes must not be empty");
    PARSE_FAILS("{\"type\":\"alibi\",\"slopes\":[1,1e40]}", "", SRV_ERR_OUT_OF_RANGE,
                "scheme.slopes[1]", "outside the float32 range");
    PARSE_FAILS("{\"type\":\"learned\",\"table\":{\"shape\":[3],\"data\":[1,2,3]}}", "inputs[5]",
                SRV_ERR_SHAPE_MISMATCH, "inputs[5].scheme.table.shape", "expected 2");
    PARSE_FAILS("{\"type\":\"t5\",\"bidirectional\":\"yes\"}", "", SRV_ERR_INVALID_ARGUMENT,
                "scheme.bidirectional", "found string");
    PARSE_FAILS("{\"type\":\"shaw\",\"max_relative_position\":null}", "", SRV_ERR_INVALID_ARGUMENT,
                "scheme.max_relative_position", "found null");
    PARSE_FAILS("{\"type\":\"shaw\",\"direction\":\"relative_key\"}", "inputs[3]",
                SRV_ERR_INVALID_ARGUMENT, "inputs[3].scheme.direction",
                "scheme.direction='relative_key' is not 'key_minus_query' or 'query_minus_key'");
    PARSE_FAILS("{\"type\":\"shaw\",\"direction\":\"Query_Minus_Key\"}", "",
                SRV_ERR_INVALID_ARGUMENT, "scheme.direction", "'Query_Minus_Key'");
    PARSE_FAILS("{\"type\":\"shaw\",\"direction\":1}", "", SRV_ERR_INVALID_ARGUMENT,
                "scheme.direction", "scheme.direction must be a string, found number");
    PARSE_FAILS("{\"type\":\"shaw\",\"key_term\":\"true\"}", "", SRV_ERR_INVALID_ARGUMENT,
                "scheme.key_term", "scheme.key_term must be true or false, found string");
    /* A failure after a table was read frees it (valgrind and ASan see). */
    PARSE_FAILS("{\"type\":\"shaw\",\"rel_k\":{\"shape\":[1,2],\"data\":[1,2]},"
                "\"rel_v\":{\"shape\":[1,2],\"data\":[1]}}",
                "", SRV_ERR_SHAPE_MISMATCH, "scheme.rel_v.data", "rel_v");
    PARSE_FAILS("{\"type\":\"rope\",\"scaling\":\"yarn\",\"factor\":2,\"short_factor\":[1,2]}", "",
                SRV_ERR_INVALID_ARGUMENT, "scheme.short_factor", "longrope only");
}

/* ------------------------------------------------------------------------- */
/* The parameter table                                                       */
/* ------------------------------------------------------------------------- */

/* Where each scalar parameter lives in pa_scheme, written out here from
 * posattn.h rather than taken from the table under test. */
static const struct {
    pa_scheme_type type;
    const char *name;
    size_t offset;
} where[] = {
    {PA_SCHEME_SINUSOIDAL, "base", offsetof(pa_scheme, sinusoidal.base)},
    {PA_SCHEME_SINUSOIDAL, "layout", offsetof(pa_scheme, sinusoidal.layout)},
    {PA_SCHEME_LEARNED, "offset", offsetof(pa_scheme, learned.offset)},
    {PA_SCHEME_SHAW, "max_relative_position", offsetof(pa_scheme, shaw.max_relative_position)},
    {PA_SCHEME_SHAW, "direction", offsetof(pa_scheme, shaw.direction)},
    {PA_SCHEME_SHAW, "key_term", offsetof(pa_scheme, shaw.key_term)},
    {PA_SCHEME_T5, "num_buckets", offsetof(pa_scheme, t5.num_buckets)},
    {PA_SCHEME_T5, "max_distance", offsetof(pa_scheme, t5.max_distance)},
    {PA_SCHEME_T5, "bidirectional", offsetof(pa_scheme, t5.bidirectional)},
    {PA_SCHEME_ROPE, "base", offsetof(pa_scheme, rope.base)},
    {PA_SCHEME_ROPE, "rotary_dim", offsetof(pa_scheme, rope.rotary_dim)},
    {PA_SCHEME_ROPE, "layout", offsetof(pa_scheme, rope.layout)},
    {PA_SCHEME_ROPE, "scaling", offsetof(pa_scheme, rope.scaling)},
    {PA_SCHEME_ROPE, "factor", offsetof(pa_scheme, rope.factor)},
    {PA_SCHEME_ROPE, "original_max_position", offsetof(pa_scheme, rope.original_max_position)},
    {PA_SCHEME_ROPE, "attention_factor", offsetof(pa_scheme, rope.attention_factor)},
    {PA_SCHEME_ROPE, "beta_fast", offsetof(pa_scheme, rope.beta_fast)},
    {PA_SCHEME_ROPE, "beta_slow", offsetof(pa_scheme, rope.beta_slow)},
    {PA_SCHEME_ROPE, "truncate", offsetof(pa_scheme, rope.truncate)},
    {PA_SCHEME_ROPE, "mscale", offsetof(pa_scheme, rope.mscale)},
    {PA_SCHEME_ROPE, "mscale_all_dim", offsetof(pa_scheme, rope.mscale_all_dim)},
    {PA_SCHEME_ROPE, "low_freq_factor", offsetof(pa_scheme, rope.low_freq_factor)},
    {PA_SCHEME_ROPE, "high_freq_factor", offsetof(pa_scheme, rope.high_freq_factor)},
    {PA_SCHEME_ROPE, "partial_rotary_factor", offsetof(pa_scheme, rope.partial_rotary_factor)},
    {PA_SCHEME_ROPE, "alpha", offsetof(pa_scheme, rope.alpha)},
    {PA_SCHEME_ROPE, "mrope_interleaved", offsetof(pa_scheme, rope.mrope_interleaved)},
    {PA_SCHEME_ALIBI, "max_bias", offsetof(pa_scheme, alibi.max_bias)},
    {PA_SCHEME_KERPLE, "form", offsetof(pa_scheme, kerple.form)},
    {PA_SCHEME_SANDWICH, "hidden_size", offsetof(pa_scheme, sandwich.hidden_size)},
    {PA_SCHEME_ALIBI, "symmetric", offsetof(pa_scheme, alibi.symmetric)},
    {PA_SCHEME_XPOS, "base", offsetof(pa_scheme, xpos.base)},
    {PA_SCHEME_XPOS, "scale_base", offsetof(pa_scheme, xpos.scale_base)},
    {PA_SCHEME_XPOS, "layout", offsetof(pa_scheme, xpos.layout)},
    {PA_SCHEME_ROPE2D, "variant", offsetof(pa_scheme, rope2d.variant)},
    {PA_SCHEME_ROPE2D, "base", offsetof(pa_scheme, rope2d.base)},
    {PA_SCHEME_ROPE2D, "layout", offsetof(pa_scheme, rope2d.layout)},
    {PA_SCHEME_ROPE2D, "grid_offset", offsetof(pa_scheme, rope2d.grid_offset)},
    {PA_SCHEME_ROPE2D, "in_pixels", offsetof(pa_scheme, rope2d.in_pixels)},
    {PA_SCHEME_ROPE2D, "max_res", offsetof(pa_scheme, rope2d.max_res)},
    {PA_SCHEME_ROPE2D, "linear_bands", offsetof(pa_scheme, rope2d.linear_bands)},
    {PA_SCHEME_ROPE2D, "prefix_tokens", offsetof(pa_scheme, rope2d.prefix_tokens)},
    {PA_SCHEME_ROPE2D, "merge_size", offsetof(pa_scheme, rope2d.merge_size)},
    {PA_SCHEME_ROPE2D, "normalize", offsetof(pa_scheme, rope2d.normalize)},
    {PA_SCHEME_FIRE, "c", offsetof(pa_scheme, fire.c)},
    {PA_SCHEME_FIRE, "L", offsetof(pa_scheme, fire.L)},
    {PA_SCHEME_FIRE, "eps", offsetof(pa_scheme, fire.eps)},
    {PA_SCHEME_COPE, "npos_max", offsetof(pa_scheme, cope.npos_max)},
    {PA_SCHEME_COPE, "nodiv", offsetof(pa_scheme, cope.nodiv)},
};

static void test_param_table(void **state)
{
    (void)state;
    size_t n, scalars = 0;
    const api_param *p = api_params(&n);
    assert_true(n > 0);
    for (size_t i = 0; i < n; i++) {
        const char *kind = api_param_kind_name(p[i].kind);
        assert_true(p[i].type > PA_SCHEME_NONE && p[i].type < PA_SCHEME_COUNT);
        assert_true(p[i].name != NULL && p[i].name[0] != '\0');
        assert_true(strcmp(p[i].name, "type") != 0);
        assert_string_not_equal(kind, "unknown");
        assert_true(p[i].need != NULL && p[i].need[0] != '\0');
        assert_true(p[i].doc != NULL && p[i].doc[0] != '\0');
        for (size_t j = 0; j < i; j++)
            if (p[j].type == p[i].type && strcmp(p[j].name, p[i].name) == 0)
                fail_msg("%s appears twice for scheme %s", p[i].name,
                         pa_scheme_type_name(p[i].type));
        /* Scalings only on rope, and only real ones. */
        assert_true(p[i].scalings < (1u << PA_ROPE_SCALING_COUNT));
        if (p[i].type != PA_SCHEME_ROPE)
            assert_int_equal(p[i].scalings, 0);
        /* Tensors and arrays say their shape; scalars have an offset. */
        bool table = p[i].kind == API_PARAM_TENSOR || p[i].kind == API_PARAM_NUMBER_ARRAY ||
                     p[i].kind == API_PARAM_INT_ARRAY;
        assert_true((p[i].shape != NULL) == table);
        if (table)
            continue;
        size_t k = 0;
        while (k < sizeof where / sizeof where[0] &&
               (where[k].type != p[i].type || strcmp(where[k].name, p[i].name) != 0))
            k++;
        if (k == sizeof where / sizeof where[0])
            fail_msg("scalar parameter %s.%s is new: add where it lives to this test",
                     pa_scheme_type_name(p[i].type), p[i].name);
        if (p[i].offset != where[k].offset)
            fail_msg("%s.%s: offset %zu, but it lives at %zu", pa_scheme_type_name(p[i].type),
                     p[i].name, p[i].offset, where[k].offset);
        scalars++;
    }
    assert_int_equal(scalars, sizeof where / sizeof where[0]); /* none lost */

    assert_string_equal(api_param_kind_name(API_PARAM_NUMBER), "number");
    assert_string_equal(api_param_kind_name(API_PARAM_INT), "integer");
    assert_string_equal(api_param_kind_name(API_PARAM_BOOL), "boolean");
    assert_string_equal(api_param_kind_name(API_PARAM_ENUM), "string");
    assert_string_equal(api_param_kind_name(API_PARAM_TENSOR), "tensor");
    assert_string_equal(api_param_kind_name(API_PARAM_NUMBER_ARRAY), "number[]");
    assert_string_equal(api_param_kind_name(API_PARAM_INT_ARRAY), "integer[]");
    assert_string_equal(api_param_kind_name((api_param_kind)99), "unknown");

    /* An enum's names: each parses back to its value, at the table's offset. */
    for (size_t i = 0; i < n; i++) {
        if (p[i].kind != API_PARAM_ENUM)
            continue;
        assert_null(api_param_enum_name(&p[i], -1));
        for (int v = 0; api_param_enum_name(&p[i], v) != NULL; v++) {
            char text[160];
            api_scheme sch;
            int got;
            snprintf(text, sizeof text, "{\"type\":\"%s\",\"%s\":\"%s\"}",
                     pa_scheme_type_name(p[i].type), p[i].name, api_param_enum_name(&p[i], v));
            parse_ok(text, &sch);
            memcpy(&got, (const char *)&sch.s + p[i].offset, sizeof got);
            assert_int_equal(got, v);
            api_scheme_free(&sch);
        }
    }
    for (size_t i = 0; i < n; i++)
        if (p[i].type == PA_SCHEME_SHAW && strcmp(p[i].name, "direction") == 0) {
            assert_string_equal(api_param_enum_name(&p[i], 0), "key_minus_query");
            assert_string_equal(api_param_enum_name(&p[i], 1), "query_minus_key");
            assert_null(api_param_enum_name(&p[i], 2));
        }
}

/* Every parameter in the table is accepted by the parser with a value of
 * its kind (and the scaling that reads it), and a scalar lands where the
 * table says. */
static void test_param_table_parses(void **state)
{
    (void)state;
    size_t n;
    const api_param *p = api_params(&n);
    for (size_t i = 0; i < n; i++) {
        char text[256], value[96], scaling[48] = "";
        api_scheme s;
        api_err e;
        switch (p[i].kind) {
        case API_PARAM_NUMBER:
            snprintf(value, sizeof value, "3.25");
            break;
        case API_PARAM_INT:
            snprintf(value, sizeof value, "6");
            break;
        case API_PARAM_BOOL: {
            pa_scheme def;
            bool b;
            pa_scheme_init(&def, p[i].type);
            memcpy(&b, (const char *)&def + p[i].offset, sizeof b);
            snprintf(value, sizeof value, "%s", b ? "false" : "true"); /* not the default */
            break;
        }
        case API_PARAM_ENUM:
            snprintf(value, sizeof value, "\"%s\"",
                     p[i].type == PA_SCHEME_SINUSOIDAL     ? "concat"
                     : p[i].type == PA_SCHEME_SHAW         ? "query_minus_key"
                     : p[i].type == PA_SCHEME_KERPLE       ? "power"
                     : strcmp(p[i].name, "variant") == 0   ? "pixtral"
                     : strcmp(p[i].name, "normalize") == 0 ? "max"
                     : strcmp(p[i].name, "layout") == 0    ? "gptj"
                                                           : "ntk");
            break;
        case API_PARAM_TENSOR: /* rope2d's freqs is [2, H, D/2] */
            snprintf(value, sizeof value, "%s",
                     p[i].type == PA_SCHEME_ROPE2D ? "{\"shape\":[2,1,3],\"data\":[1,2,3,4,5,6]}"
                                                   : "{\"shape\":[3,2],\"data\":[1,2,3,4,5,6]}");
            break;
        case API_PARAM_NUMBER_ARRAY:
            snprintf(value, sizeof value, "[1,2]");
            break;
        case API_PARAM_INT_ARRAY:
            snprintf(value, sizeof value, "%s",
                     p[i].type == PA_SCHEME_ROPE2D ? "[1,1]" : "[1,1,1]");
            break;
        }
        if (p[i].scalings != 0) {
            int sc = 0;
            while (!(p[i].scalings & (1u << sc)))
                sc++;
            snprintf(scaling, sizeof scaling, ",\"scaling\":\"%s\"",
                     pa_rope_scaling_name((pa_rope_scaling)sc));
        }
        snprintf(text, sizeof text, "{\"type\":\"%s\",\"%s\":%s%s}", pa_scheme_type_name(p[i].type),
                 p[i].name, value, scaling);
        if (!parse(text, "", &s, &e))
            fail_msg("%s: %s", text, e.message);
        const char *at = (const char *)&s.s + p[i].offset;
        switch (p[i].kind) {
        case API_PARAM_NUMBER: {
            double d;
            memcpy(&d, at, sizeof d);
            if (d != 3.25)
                fail_msg("%s: %g at the table's offset", text, d);
            break;
        }
        case API_PARAM_INT: {
            int32_t v;
            memcpy(&v, at, sizeof v);
            if (v != 6)
                fail_msg("%s: %d at the table's offset", text, (int)v);
            break;
        }
        case API_PARAM_BOOL: {
            pa_scheme def;
            bool b, d;
            pa_scheme_init(&def, p[i].type);
            memcpy(&b, at, sizeof b);
            memcpy(&d, (const char *)&def + p[i].offset, sizeof d);
            if (b == d)
                fail_msg("%s: the default is still at the table's offset", text);
            break;
        }
        case API_PARAM_ENUM: {
            int v;
            memcpy(&v, at, sizeof v);
            if (v != 1 && !(strcmp(p[i].name, "scaling") == 0 && v == PA_ROPE_SCALING_NTK))
                fail_msg("%s: %d at the table's offset", text, v);
            break;
        }
        default:
            assert_true(s.bytes > 0 || p[i].kind == API_PARAM_INT_ARRAY);
            break;
        }
        api_scheme_free(&s);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_none_and_sinusoidal),
        cmocka_unit_test(test_learned_t5_shaw_tables),
        cmocka_unit_test(test_rope_every_parameter),
        cmocka_unit_test(test_alibi),
        cmocka_unit_test(test_scheme_missing_or_not_a_scheme),
        cmocka_unit_test(test_unknown_parameters),
        cmocka_unit_test(test_parameter_of_another_scaling),
        cmocka_unit_test(test_parameter_errors),
        cmocka_unit_test(test_param_table),
        cmocka_unit_test(test_param_table_parses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
