/* batch_fixture.c - see batch_fixture.h. */
#include "batch_fixture.h"

#include "codec/base64.h"
#include "testutil.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

const char *const RESULTS[] = {"output", "weights", "logits",  "q_rot",
                               "k_rot",  "entropy", "distance"};

/* Result obj.name (b64 float32) into a fresh buffer; *n its floats. */
float *decode(const cJSON *obj, const char *name, size_t *n)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(obj, name);
    const char *s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(t, "b64"));
    size_t len, cap, got = 0;
    float *f;
    if (s == NULL)
        fail_msg("%s has no b64", name);
    len = strlen(s);
    cap = len / 4 * 3 + 4;
    f = tu_alloc(cap / 4 + 1, sizeof(float));
    assert_true(srv_b64_decode(s, len, (unsigned char *)f, cap, &got));
    *n = got / sizeof(float);
    return f;
}

int64_t dim(const cJSON *obj, const char *name, int d)
{
    const cJSON *sh =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(obj, name), "shape");
    return (int64_t)cJSON_GetArrayItem(sh, d)->valuedouble;
}

void seqs_make(seqs *s, uint64_t seed)
{
    tu_rng r;
    tu_rng_seed(&r, seed);
    s->q = rnd(&r, (size_t)B * L * H * D, -1, 1);
    s->k = rnd(&r, (size_t)B * L * HKV * D, -1, 1);
    s->v = rnd(&r, (size_t)B * L * HKV * DV, -1, 1);
    for (int b = 0; b < B; b++) {
        s->key_length[b] = L - 2 * b; /* 6, 4, 2 */
        for (int i = 0; i < L; i++) {
            s->qpos[b][i] = 3 * b + i;     /* each sequence its own offset */
            s->kpos[b][i] = 3 * b + i + b; /* and k apart from q */
        }
    }
}

void seqs_free(seqs *s)
{
    free(s->q);
    free(s->k);
    free(s->v);
}

cJSON *ret_all(void)
{
    return cJSON_CreateStringArray(RESULTS, NRESULTS);
}

/* {"inputs":[items], "output_encoding":"b64"} through the endpoint, with
 * parts per item (1: the sequences are the only split). */
cJSON *run_parts(cJSON **items, int n, int parts, int *status)
{
    srv_limits lim = limits();
    cJSON *req = batch(items, n);
    lim.parallel_parts = parts;
    cJSON_AddStringToObject(req, "output_encoding", "b64");
    return call_json(&srv_ep_attention, req, &lim, status);
}

cJSON *run(cJSON **items, int n, int *status)
{
    return run_parts(items, n, 1, status);
}

/* Sequence b of the batched answer equals item b of the separate one, bit
 * for bit, for every result; and the batched shapes lead with B. */
void same_as_items(const cJSON *batched, const cJSON *sep, int n_seq, const char *what)
{
    for (int r = 0; r < NRESULTS; r++) {
        size_t nb, ns;
        float *fb = decode(batched, RESULTS[r], &nb);
        assert_int_equal(dim(batched, RESULTS[r], 0), n_seq);
        assert_int_equal(nb % (size_t)n_seq, 0);
        for (int b = 0; b < n_seq; b++) {
            const cJSON *o = output_at(sep, b);
            float *fs = decode(o, RESULTS[r], &ns);
            assert_int_equal(ns * (size_t)n_seq, nb);
            const cJSON *sh = cJSON_GetObjectItemCaseSensitive(
                cJSON_GetObjectItemCaseSensitive(o, RESULTS[r]), "shape");
            const cJSON *bsh = cJSON_GetObjectItemCaseSensitive(
                cJSON_GetObjectItemCaseSensitive(batched, RESULTS[r]), "shape");
            assert_int_equal(cJSON_GetArraySize(bsh), cJSON_GetArraySize(sh) + 1);
            for (int d = 0; d < cJSON_GetArraySize(sh); d++)
                assert_int_equal(dim(batched, RESULTS[r], d + 1), dim(o, RESULTS[r], d));
            if (memcmp(fb + (size_t)b * ns, fs, ns * sizeof(float)) != 0)
                fail_msg("%s: %s of sequence %d differs from the separate item", what, RESULTS[r],
                         b);
            free(fs);
        }
        free(fb);
    }
}

/* One batched item with a single change; the error expected. */
void batch_error(const char *key, cJSON *value, const char *code, const char *field,
                 const char *message_part)
{
    seqs s;
    int status;
    const int q4[] = {B, L, H, D}, k4[] = {B, L, HKV, D}, v4[] = {B, L, HKV, DV};
    seqs_make(&s, 9201);
    cJSON *item = cJSON_CreateObject();
    cJSON_AddItemToObject(item, "scheme", scheme_of("{\"type\":\"rope\"}"));
    cJSON_AddItemToObject(item, "q", jtensor_b64(s.q, 4, q4));
    cJSON_AddItemToObject(item, "k", jtensor_b64(s.k, 4, k4));
    cJSON_AddItemToObject(item, "v", jtensor_b64(s.v, 4, v4));
    if (cJSON_GetObjectItemCaseSensitive(item, key) != NULL)
        cJSON_ReplaceItemInObjectCaseSensitive(item, key, value);
    else
        cJSON_AddItemToObject(item, key, value);
    cJSON *ans = run(&item, 1, &status);
    expect_item_error(ans, 0, code, field);
    const char *msg = str_at(output_at(ans, 0), "error", "message");
    if (msg == NULL || strstr(msg, message_part) == NULL)
        fail_msg("message \"%s\" lacks \"%s\"", msg ? msg : "(none)", message_part);
    cJSON_Delete(ans);
    seqs_free(&s);
}
