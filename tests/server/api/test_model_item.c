/* test_model_item.c - an item's "model" (server/api/model_item.c): the
 * layer's options merged into the item (objects member by member), the
 * refusals that name the config key, "override", layer mode's counts, and
 * a model item through the whole attention job (under ASan in make asan).
 */
#include "api_harness.h"

#include "api/request.h"
#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static srv_model_set *models;
static srv_limits lim;

static int setup(void **state)
{
    (void)state;
    srv_model_spec specs[] = {{"g2", "tests/fixtures/models/gemma2.json"},
                              {"t5", "tests/fixtures/models/t5.json"},
                              {"oss", "tests/fixtures/models/gpt_oss.json"},
                              {"gpt2", "tests/fixtures/models/gpt2.json"},
                              {"dl", "tests/fixtures/models/diffllama.json"},
                              {"vl", "tests/fixtures/models/qwen2_vl.json"},
                              {"vl5", "tests/fixtures/models/qwen2_5_vl.json"}};
    char err[512];
    if (!srv_model_set_load(specs, sizeof specs / sizeof specs[0], &models, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    lim = limits();
    lim.models = models;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    srv_model_set_free(models);
    return 0;
}

static bool merge(const char *item_json, api_model_use *u, api_err *e, cJSON **item)
{
    api_ctx ctx = {&lim, "inputs[0]", NULL, NULL};
    *item = json_of(item_json);
    return api_model_merge(*item, &ctx, u, e);
}

static void test_derived_options_are_merged(void **state)
{
    (void)state;
    api_model_use u;
    api_err e;
    cJSON *item;
    assert_true(merge("{\"model\":\"g2\",\"layer\":2,\"q\":{\"shape\":[1,4,16],\"data\":[0]},"
                      "\"id\":7}",
                      &u, &e, &item));
    assert_non_null(u.merged);
    assert_int_equal(u.layer->layer, 2);
    /* the derived ones, and the item's own by reference */
    assert_true(cJSON_GetObjectItem(u.merged, "window")->valuedouble == 4096);
    assert_true(cJSON_GetObjectItem(u.merged, "softcap")->valuedouble == 50);
    assert_true(cJSON_GetObjectItem(u.merged, "scale")->valuedouble == 0.0625);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(u.merged, "causal")));
    const cJSON *q = cJSON_GetObjectItem(u.merged, "q");
    assert_true((q->type & cJSON_IsReference) != 0);
    assert_ptr_equal(q->child, cJSON_GetObjectItem(item, "q")->child); /* not copied */
    assert_null(cJSON_GetObjectItem(u.merged, "model"));
    assert_null(cJSON_GetObjectItem(u.merged, "layer"));
    api_model_use_free(&u);
    cJSON_Delete(item);

    /* layer 1 is global: no window */
    assert_true(merge("{\"model\":\"g2\",\"layer\":1}", &u, &e, &item));
    assert_null(cJSON_GetObjectItem(u.merged, "window"));
    api_model_use_free(&u);
    cJSON_Delete(item);

    /* causal is a default the item may change */
    assert_true(merge("{\"model\":\"g2\",\"causal\":false}", &u, &e, &item));
    assert_true(cJSON_IsFalse(cJSON_GetObjectItem(u.merged, "causal")));
    api_model_use_free(&u);
    cJSON_Delete(item);
}

static void test_objects_merge_member_by_member(void **state)
{
    (void)state;
    api_model_use u;
    api_err e;
    cJSON *item;
    assert_true(merge("{\"model\":\"t5\",\"stack\":\"decoder\",\"layer\":1,"
                      "\"scheme\":{\"table\":{\"ref\":\"x\"}}}",
                      &u, &e, &item));
    const cJSON *s = cJSON_GetObjectItem(u.merged, "scheme");
    assert_string_equal(cJSON_GetObjectItem(s, "type")->valuestring, "t5");
    assert_true(cJSON_IsFalse(cJSON_GetObjectItem(s, "bidirectional"))); /* the decoder's */
    assert_non_null(cJSON_GetObjectItem(s, "table"));
    api_model_use_free(&u);
    cJSON_Delete(item);

    assert_false(merge("{\"model\":\"t5\",\"scheme\":{\"table\":{\"ref\":\"x\"},"
                       "\"num_buckets\":16}}",
                       &u, &e, &item));
    ERR_IS(&e, SRV_ERR_INVALID_ARGUMENT, "inputs[0].scheme.num_buckets",
           "relative_attention_num_buckets", "override");
    assert_null(u.merged);
    cJSON_Delete(item);

    /* override: the item's member wins, the rest stays derived */
    assert_true(merge("{\"model\":\"t5\",\"override\":true,\"scheme\":{\"table\":{\"ref\":\"x\"},"
                      "\"num_buckets\":16}}",
                      &u, &e, &item));
    s = cJSON_GetObjectItem(u.merged, "scheme");
    assert_true(cJSON_GetObjectItem(s, "num_buckets")->valuedouble == 16);
    assert_true(cJSON_GetObjectItem(s, "max_distance")->valuedouble == 128);
    api_model_use_free(&u);
    cJSON_Delete(item);

    /* override with a scheme of another type replaces it whole */
    assert_true(merge("{\"model\":\"g2\",\"override\":true,\"scheme\":{\"type\":\"alibi\"}}", &u,
                      &e, &item));
    s = cJSON_GetObjectItem(u.merged, "scheme");
    assert_int_equal(cJSON_GetArraySize(s), 1);
    assert_string_equal(cJSON_GetObjectItem(s, "type")->valuestring, "alibi");
    api_model_use_free(&u);
    cJSON_Delete(item);
}

static void test_refusals(void **state)
{
    (void)state;
    static const struct {
        const char *item, *code_field, *words[3];
        srv_error code;
    } cases[] = {
        {"{\"model\":\"g2\",\"scale\":1}", "inputs[0].scale",
         {"\"query_pre_attn_scalar\": 256", "0.0625", "override"}, SRV_ERR_INVALID_ARGUMENT},
        {"{\"model\":\"g2\",\"layer\":0,\"window\":8}", "inputs[0].window",
         {"\"sliding_window\": 4096", "layer 0", NULL}, SRV_ERR_INVALID_ARGUMENT},
        {"{\"model\":\"oss\",\"layer\":3}", "inputs[0].sinks",
         {"model \"oss\" (gpt_oss) layer 3 has attention sinks", "\"model_type\": \"gpt_oss\"",
          "give \"sinks\" [4]"},
         SRV_ERR_INVALID_ARGUMENT},
        {"{\"model\":\"t5\",\"stack\":\"decoder\",\"layer\":0}", "inputs[0].scheme.table",
         {"t5) decoder layer 0", "relative_attention_num_buckets", "[32, 4]"},
         SRV_ERR_INVALID_ARGUMENT},
        {"{\"model\":\"nope\"}", "inputs[0].model", {"\"nope\" is not loaded", "g2, t5", NULL},
         SRV_ERR_UNKNOWN_MODEL},
        {"{\"model\":3}", "inputs[0].model", {"found number", NULL, NULL},
         SRV_ERR_INVALID_ARGUMENT},
        {"{\"model\":\"g2\",\"layer\":4}", "inputs[0].layer", {"layer=4", "0 to 3", NULL},
         SRV_ERR_OUT_OF_RANGE},
        {"{\"model\":\"g2\",\"layer\":-1}", "inputs[0].layer", {"layer=-1", NULL, NULL},
         SRV_ERR_OUT_OF_RANGE},
        {"{\"model\":\"g2\",\"stack\":\"decoder\"}", "inputs[0].stack", {"one stack", NULL, NULL},
         SRV_ERR_INVALID_ARGUMENT},
        {"{\"model\":\"t5\",\"stack\":\"middle\"}", "inputs[0].stack",
         {"\"encoder\" or \"decoder\"", NULL, NULL}, SRV_ERR_INVALID_ARGUMENT},
        {"{\"model\":\"g2\",\"override\":1}", "inputs[0].override", {"override", NULL, NULL},
         SRV_ERR_INVALID_ARGUMENT},
        {"{\"layer\":1}", "inputs[0].layer", {"send \"model\"", NULL, NULL},
         SRV_ERR_INVALID_ARGUMENT},
        {"{\"override\":true}", "inputs[0].override", {"send \"model\"", NULL, NULL},
         SRV_ERR_INVALID_ARGUMENT},
        {"{\"model\":{\"model_type\":\"llama\",\"hidden_size\":64,\"num_attention_heads\":4,"
         "\"num_hidden_layers\":2,\"rope_scaling\":{\"rope_type\":\"su\"}}}",
         "inputs[0].model.rope_scaling", {"\"su\"", NULL, NULL}, SRV_ERR_INVALID_ARGUMENT},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        api_model_use u;
        api_err e;
        cJSON *item;
        if (merge(cases[i].item, &u, &e, &item))
            fail_msg("case %zu accepted: %s", i, cases[i].item);
        api_err_is(&e, cases[i].code, cases[i].code_field, cases[i].words[0], cases[i].words[1],
                   cases[i].words[2], (const char *)NULL);
        assert_null(u.merged);
        assert_null(u.owned);
        cJSON_Delete(item);
    }
}

static void test_layer_mode_takes_the_counts(void **state)
{
    (void)state;
    api_model_use u;
    api_err e;
    cJSON *item;
    assert_true(merge("{\"model\":\"gpt2\",\"x\":{\"shape\":[1,64],\"data\":[0]},"
                      "\"scheme\":{\"table\":{\"ref\":\"wpe\"}}}",
                      &u, &e, &item));
    assert_true(cJSON_GetObjectItem(u.merged, "num_heads")->valuedouble == 4);
    assert_true(cJSON_GetObjectItem(u.merged, "num_kv_heads")->valuedouble == 4);
    assert_true(cJSON_GetObjectItem(u.merged, "head_dim")->valuedouble == 16);
    assert_string_equal(
        cJSON_GetObjectItem(cJSON_GetObjectItem(u.merged, "scheme"), "type")->valuestring,
        "learned");
    api_model_use_free(&u);
    cJSON_Delete(item);
}

/* Through the whole job: the model item answers as the hand-written one,
 * and a head count off the config is refused with its key. */
static void test_through_the_attention_job(void **state)
{
    (void)state;
    qkv f;
    int st1, st2, st3;
    qkv_make(&f, 5, 5, 4, 2, 16, 16, 30);
    cJSON *a = qkv_item(&f, NULL), *b = qkv_item(&f, scheme_of("{\"type\":\"rope\",\"base\":10000,"
                                                               "\"rotary_dim\":16,\"layout\":"
                                                               "\"neox\"}"));
    cJSON_DeleteItemFromObject(a, "scheme");
    cJSON_AddStringToObject(a, "model", "g2");
    cJSON_AddNumberToObject(a, "layer", 0);
    cJSON_AddNumberToObject(b, "scale", 0.0625);
    cJSON_AddNumberToObject(b, "softcap", 50);
    cJSON_AddNumberToObject(b, "window", 4096);
    cJSON_AddTrueToObject(b, "causal");
    cJSON *items1[] = {a}, *items2[] = {b};
    cJSON *ra = call_json(&srv_ep_attention, batch(items1, 1), &lim, &st1);
    cJSON *rb = call_json(&srv_ep_attention, batch(items2, 1), &lim, &st2);
    expect_ok(ra, st1);
    expect_ok(rb, st2);
    assert_true(cJSON_Compare(cJSON_GetObjectItem(output_at(ra, 0), "output"),
                              cJSON_GetObjectItem(output_at(rb, 0), "output"), true));
    cJSON_Delete(ra);
    cJSON_Delete(rb);
    qkv_free(&f);

    qkv_make(&f, 3, 3, 8, 2, 16, 16, 31);
    cJSON *c = qkv_item(&f, NULL), *items3[] = {c};
    cJSON_DeleteItemFromObject(c, "scheme");
    cJSON_AddStringToObject(c, "model", "g2");
    cJSON *rc = call_json(&srv_ep_attention, batch(items3, 1), &lim, &st3);
    expect_item_error(rc, 0, "SHAPE_MISMATCH", "inputs[0].q.shape");
    assert_non_null(strstr(str_at(output_at(rc, 0), "error", "message"), "num_attention_heads"));
    cJSON_Delete(rc);
    qkv_free(&f);
}

/* DiffLlama: the model item derives differential (halves, lambda_init of
 * the layer, the weightless group norm with rms_norm_eps) and the rope
 * scheme; q's 4 heads are the config's num_attention_heads (2H), and the
 * answer is the hand-written item's bit for bit. */
static void test_diffllama_is_the_handwritten_differential_item(void **state)
{
    (void)state;
    static const char *const vecs[] = {"lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2"};
    tu_rng r;
    float *lam[4];
    qkv f;
    int st1, st2, st3;
    tu_rng_seed(&r, 32);
    qkv_make(&f, 6, 6, 4, 2, 16, 16, 32);
    for (int i = 0; i < 4; i++)
        lam[i] = rnd(&r, 16, -0.3, 0.3);
    cJSON *a = qkv_item(&f, NULL), *b = qkv_item(&f, scheme_of("{\"type\":\"rope\",\"base\":10000,"
                                                               "\"rotary_dim\":16,\"layout\":"
                                                               "\"neox\"}"));
    cJSON_DeleteItemFromObject(a, "scheme");
    cJSON_AddStringToObject(a, "model", "dl");
    cJSON_AddNumberToObject(a, "layer", 2);
    cJSON *da = cJSON_AddObjectToObject(a, "differential"),
          *db = cJSON_AddObjectToObject(b, "differential");
    for (int i = 0; i < 4; i++) {
        cJSON_AddItemToObject(da, vecs[i], jtensor(lam[i], 1, 16));
        cJSON_AddItemToObject(db, vecs[i], jtensor(lam[i], 1, 16));
    }
    cJSON_AddStringToObject(db, "pairs", "halves");
    cJSON_AddNumberToObject(db, "depth", 2); /* 0.8 - 0.6 exp(-0.3 * 2) */
    cJSON_AddTrueToObject(db, "subln");
    cJSON_AddNumberToObject(db, "subln_eps", 1e-5);
    cJSON_AddNumberToObject(b, "scale", 0.25);
    cJSON_AddTrueToObject(b, "causal");
    cJSON *ret = json_of("[\"output\",\"weights\"]");
    cJSON_AddItemToObject(a, "return", cJSON_Duplicate(ret, true));
    cJSON_AddItemToObject(b, "return", ret);
    cJSON *items1[] = {a}, *items2[] = {b};
    cJSON *ra = call_json(&srv_ep_attention, batch(items1, 1), &lim, &st1);
    cJSON *rb = call_json(&srv_ep_attention, batch(items2, 1), &lim, &st2);
    expect_ok(ra, st1);
    expect_ok(rb, st2);
    shape_is(output_at(ra, 0), "output", 3, 6, 2, 32);
    for (int k = 0; k < 2; k++) {
        const char *res = k == 0 ? "output" : "weights";
        assert_true(cJSON_Compare(cJSON_GetObjectItem(output_at(ra, 0), res),
                                  cJSON_GetObjectItem(output_at(rb, 0), res), true));
    }
    cJSON_Delete(ra);
    cJSON_Delete(rb);

    /* Without the vectors: refused, naming them and their shape. */
    cJSON *c = qkv_item(&f, NULL), *items3[] = {c};
    cJSON_DeleteItemFromObject(c, "scheme");
    cJSON_AddStringToObject(c, "model", "dl");
    cJSON *rc = call_json(&srv_ep_attention, batch(items3, 1), &lim, &st3);
    expect_item_error(rc, 0, "INVALID_ARGUMENT", "inputs[0].differential.lambda_q1");
    assert_non_null(strstr(str_at(output_at(rc, 0), "error", "message"),
                           "give \"differential.lambda_q1\" [16]"));
    cJSON_Delete(rc);
    qkv_free(&f);
    for (int i = 0; i < 4; i++)
        free(lam[i]);

    /* A member the config decides names its own key. */
    api_model_use u;
    api_err e;
    cJSON *item;
    assert_false(merge("{\"model\":\"dl\",\"differential\":{\"subln_eps\":1e-6}}", &u, &e, &item));
    ERR_IS(&e, SRV_ERR_INVALID_ARGUMENT, "inputs[0].differential.subln_eps", "\"rms_norm_eps\"",
           "override");
    cJSON_Delete(item);
    assert_false(merge("{\"model\":\"dl\",\"layer\":1,\"differential\":{\"lambda_init\":0.5}}",
                       &u, &e, &item));
    ERR_IS(&e, SRV_ERR_INVALID_ARGUMENT, "inputs[0].differential.lambda_init", "layer 1",
           "0.8 - 0.6 exp(-0.3 * 1)");
    cJSON_Delete(item);
}

/* A differential item on a model whose config counts q's 2H heads (the
 * Llama layout DiffLlama keeps): the head check counts q's heads, not the
 * output's H. */
static void test_differential_heads_are_q_heads(void **state)
{
    (void)state;
    qkv f;
    int st;
    qkv_make(&f, 4, 4, 4, 2, 16, 16, 33);
    cJSON *a = qkv_item(&f, NULL), *items[] = {a};
    cJSON_DeleteItemFromObject(a, "scheme");
    cJSON_AddStringToObject(a, "model", "g2");
    cJSON_AddNumberToObject(a, "layer", 1);
    cJSON *d = cJSON_AddObjectToObject(a, "differential");
    cJSON_AddStringToObject(d, "pairs", "halves");
    cJSON_AddNumberToObject(d, "lambda", 0.5);
    cJSON_AddNumberToObject(d, "depth", 1);
    cJSON *r = call_json(&srv_ep_attention, batch(items, 1), &lim, &st);
    expect_ok(r, st);
    shape_is(output_at(r, 0), "output", 3, 4, 2, 32);
    cJSON_Delete(r);
    qkv_free(&f);
}

/* Qwen2-VL's vision tower, "stack": "vision": rope2d axial neox with the
 * config's merge size, the tower's heads and scale, not causal; the caller
 * sends the grid. Bit for bit the hand-written item. */
static void test_vision_tower_is_the_handwritten_rope2d_item(void **state)
{
    (void)state;
    qkv f;
    int st1, st2;
    qkv_make(&f, 8, 8, 4, 4, 16, 16, 34);
    cJSON *a = qkv_item(&f, scheme_of("{\"grid\":[2,4]}")),
          *b = qkv_item(&f, scheme_of("{\"type\":\"rope2d\",\"variant\":\"axial\",\"base\":10000,"
                                      "\"layout\":\"neox\",\"merge_size\":2,\"grid\":[2,4]}"));
    cJSON_AddStringToObject(a, "model", "vl");
    cJSON_AddStringToObject(a, "stack", "vision");
    cJSON_AddNumberToObject(a, "layer", 1);
    cJSON_AddNumberToObject(b, "scale", 0.25);
    cJSON_AddFalseToObject(b, "causal");
    cJSON *ret = json_of("[\"output\",\"weights\",\"logits\"]");
    cJSON_AddItemToObject(a, "return", cJSON_Duplicate(ret, true));
    cJSON_AddItemToObject(b, "return", ret);
    cJSON *items1[] = {a}, *items2[] = {b};
    cJSON *ra = call_json(&srv_ep_attention, batch(items1, 1), &lim, &st1);
    cJSON *rb = call_json(&srv_ep_attention, batch(items2, 1), &lim, &st2);
    expect_ok(ra, st1);
    expect_ok(rb, st2);
    for (int k = 0; k < 3; k++) {
        const char *res = k == 0 ? "output" : k == 1 ? "weights" : "logits";
        assert_true(cJSON_Compare(cJSON_GetObjectItem(output_at(ra, 0), res),
                                  cJSON_GetObjectItem(output_at(rb, 0), res), true));
    }
    cJSON_Delete(ra);
    cJSON_Delete(rb);
    qkv_free(&f);

    /* The text model stays the default, and "text" names it. */
    api_model_use u;
    api_err e;
    cJSON *item;
    assert_true(merge("{\"model\":\"vl\",\"stack\":\"text\",\"layer\":1}", &u, &e, &item));
    assert_null(u.layer->stack);
    assert_int_equal(u.layer->num_heads, 2);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(u.merged, "causal")));
    api_model_use_free(&u);
    cJSON_Delete(item);
    assert_true(merge("{\"model\":\"vl\",\"stack\":\"vision\"}", &u, &e, &item));
    assert_string_equal(u.layer->stack, "vision");
    assert_true(cJSON_IsFalse(cJSON_GetObjectItem(u.merged, "causal")));
    api_model_use_free(&u);
    cJSON_Delete(item);
}

static void test_vision_refusals(void **state)
{
    (void)state;
    static const struct {
        const char *item, *code_field, *words[3];
        srv_error code;
    } cases[] = {
        {"{\"model\":\"vl5\",\"stack\":\"vision\"}",
         "inputs[0].stack",
         {"windows", "fullatt_block_indexes", "\"vision_config.fullatt_block_indexes\""},
         SRV_ERR_UNSUPPORTED},
        {"{\"model\":\"vl\",\"stack\":\"vision\",\"layer\":2}",
         "inputs[0].layer",
         {"layer=2", "vision's 2 layers", "0 to 1"},
         SRV_ERR_OUT_OF_RANGE},
        {"{\"model\":\"vl\",\"stack\":\"decoder\"}",
         "inputs[0].stack",
         {"\"text\" or \"vision\"", NULL, NULL},
         SRV_ERR_INVALID_ARGUMENT},
        {"{\"model\":\"t5\",\"stack\":\"vision\"}",
         "inputs[0].stack",
         {"\"encoder\" or \"decoder\"", NULL, NULL},
         SRV_ERR_INVALID_ARGUMENT},
        {"{\"model\":\"dl\",\"stack\":\"vision\"}",
         "inputs[0].stack",
         {"one stack", "\"vision\"", NULL},
         SRV_ERR_INVALID_ARGUMENT},
        {"{\"model\":\"vl\",\"stack\":\"vision\",\"scheme\":{\"merge_size\":1}}",
         "inputs[0].scheme.merge_size",
         {"\"vision_config.spatial_merge_size\": 2", NULL, NULL},
         SRV_ERR_INVALID_ARGUMENT},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        api_model_use u;
        api_err e;
        cJSON *item;
        if (merge(cases[i].item, &u, &e, &item))
            fail_msg("case %zu accepted: %s", i, cases[i].item);
        api_err_is(&e, cases[i].code, cases[i].code_field, cases[i].words[0], cases[i].words[1],
                   cases[i].words[2], (const char *)NULL);
        assert_null(u.merged);
        cJSON_Delete(item);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_derived_options_are_merged),
        cmocka_unit_test(test_objects_merge_member_by_member),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_layer_mode_takes_the_counts),
        cmocka_unit_test(test_through_the_attention_job),
        cmocka_unit_test(test_diffllama_is_the_handwritten_differential_item),
        cmocka_unit_test(test_differential_heads_are_q_heads),
        cmocka_unit_test(test_vision_tower_is_the_handwritten_rope2d_item),
        cmocka_unit_test(test_vision_refusals),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
