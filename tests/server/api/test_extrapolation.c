/* test_extrapolation.c - POST /v1/analyze, analysis "extrapolation"
 * (server/api/extrapolation.c), without HTTP: the bands' means of entropy,
 * distance and far share against the double reference (tests/ref_attention.c)
 * on the documented gaussian inputs, written out again here, and sent as
 * tensors; the errors and the size bound. Requests go through tests/api_harness.c.
 */
#include "api_harness.h"
#include "api/api.h"
#include "ref_attention.h"
#include "testutil.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>

/* The generator README documents for "inputs": "gaussian", written out
 * again: splitmix64, then Box-Muller pairs (cos, then sin). */
static uint64_t ref_splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void ref_gaussian(uint64_t *st, float *out, size_t n)
{
    for (size_t i = 0; i < n; i += 2) {
        double u1 = ((double)(ref_splitmix64(st) >> 11) + 1.0) / 9007199254740992.0;
        double u2 = ((double)(ref_splitmix64(st) >> 11) + 1.0) / 9007199254740992.0;
        double r = sqrt(-2.0 * log(u1)), t = 2.0 * 3.14159265358979323846 * u2;
        out[i] = (float)(r * cos(t));
        if (i + 1 < n)
            out[i + 1] = (float)(r * sin(t));
    }
}

/* Per head, the mean of want[h, r] over rows [r0, r1) of length L. */
static double band_mean(const double *want, int32_t L, int h, int32_t r0, int32_t r1)
{
    double s = 0.0;
    for (int32_t r = r0; r < r1; r++)
        s += want[(size_t)h * L + r];
    return s / (r1 - r0);
}

/* extrapolation: the bands' means of entropy, distance and far share
 * against the double reference at each length (ALiBi, causal, inputs the
 * documented gaussian ones, also sent as tensors: the same answer); the
 * errors. */
static void test_analyze_extrapolation(void **state)
{
    (void)state;
    enum { LMAX = 40, H = 2, D = 8, T = 16 };
    srv_limits lim = limits();
    int status;
    float q[LMAX * H * D], k[LMAX * H * D], v[LMAX * H * D];
    uint64_t st = 7;
    ref_gaussian(&st, q, sizeof q / sizeof q[0]);
    ref_gaussian(&st, k, sizeof k / sizeof k[0]);
    ref_gaussian(&st, v, sizeof v / sizeof v[0]);

    cJSON *ans = call(&srv_ep_analyze,
                      "{\"analysis\":\"extrapolation\",\"scheme\":{\"type\":\"alibi\"},"
                      "\"train_length\":16,\"lengths\":[16,40],\"inputs\":\"gaussian\","
                      "\"num_heads\":2,\"head_dim\":8,\"seed\":7,\"id\":\"x\"}",
                      &lim, &status);
    expect_ok(ans, status);
    /* The same inputs as tensors give the same answer. */
    cJSON *req = cJSON_CreateObject();
    cJSON_AddStringToObject(req, "analysis", "extrapolation");
    cJSON_AddItemToObject(req, "scheme", cJSON_Parse("{\"type\":\"alibi\"}"));
    cJSON_AddNumberToObject(req, "train_length", T);
    cJSON_AddItemToObject(req, "lengths", cJSON_Parse("[16,40]"));
    cJSON_AddItemToObject(req, "q", jtensor(q, 3, LMAX, H, D));
    cJSON_AddItemToObject(req, "k", jtensor(k, 3, LMAX, H, D));
    cJSON_AddItemToObject(req, "v", jtensor(v, 3, LMAX, H, D));
    cJSON_AddTrueToObject(req, "causal");
    cJSON_AddStringToObject(req, "id", "x");
    cJSON *ans2 = call_json(&srv_ep_analyze, req, &lim, &status);
    expect_ok(ans2, status);
    cJSON_DeleteItemFromObject(ans, "timing");
    cJSON_DeleteItemFromObject(ans2, "timing");
    assert_true(cJSON_Compare(ans, ans2, true));
    cJSON_Delete(ans2);

    pa_scheme s;
    pa_attention a;
    pa_scheme_init(&s, PA_SCHEME_ALIBI);
    pa_attention_init(&a, &s);
    a.num_heads = H;
    a.head_dim = D;
    a.q = q;
    a.k = k;
    a.v = v;
    a.causal = true;
    const cJSON *lens = cJSON_GetObjectItemCaseSensitive(ans, "lengths");
    assert_int_equal(cJSON_GetArraySize(lens), 2);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(ans, "id")->valuestring, "x");
    for (int li = 0; li < 2; li++) {
        const int32_t L = li == 0 ? 16 : 40;
        double ent[H * LMAX], dist[H * LMAX], far[H * LMAX];
        const cJSON *lo = cJSON_GetArrayItem(lens, li);
        const cJSON *bands = cJSON_GetObjectItemCaseSensitive(lo, "bands");
        a.q_len = a.k_len = L;
        ref_attention_stats(&a, ent, dist);
        ref_attention_far_share(&a, T, far);
        assert_int_equal((int)num(lo, "length"), L);
        assert_int_equal(cJSON_GetArraySize(bands), (L + T - 1) / T);
        for (int b = 0; b <= cJSON_GetArraySize(bands); b++) {
            /* b == count: the whole length */
            const bool all = b == cJSON_GetArraySize(bands);
            const cJSON *bo = all ? lo : cJSON_GetArrayItem(bands, b);
            const int32_t r0 = all ? 0 : b * T, r1 = all ? L : (r0 + T < L ? r0 + T : L);
            if (!all) {
                assert_int_equal((int)num(bo, "from"), r0);
                assert_int_equal((int)num(bo, "to"), r1);
            }
            for (int h = 0; h < H; h++) {
                const double *refs[3] = {ent, dist, far};
                const char *names[3] = {"entropy", "distance", "far_share"};
                for (int si = 0; si < 3; si++) {
                    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(bo, names[si]);
                    double got = cJSON_GetArrayItem(arr, h)->valuedouble;
                    double want = band_mean(refs[si], L, h, r0, r1);
                    if (fabs(got - want) > 1e-4 + 1e-4 * fabs(want))
                        fail_msg("length %d band %d head %d %s: got %.9g want %.9g", (int)L, b, h,
                                 names[si], got, want);
                }
            }
        }
    }
    /* Past the training length some weight is far (more than T back). */
    {
        const cJSON *last = cJSON_GetArrayItem(
            cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(lens, 1), "bands"), 2);
        assert_true(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(last, "far_share"), 1)
                        ->valuedouble > 0.0);
    }
    cJSON_Delete(ans);

    static const struct {
        const char *body, *code, *field;
    } bad[] = {
        {"{\"analysis\":\"extrapolation\",\"scheme\":{\"type\":\"none\"},\"lengths\":[4],"
         "\"inputs\":\"gaussian\",\"num_heads\":1,\"head_dim\":4}",
         "INVALID_ARGUMENT", "train_length"},
        {"{\"analysis\":\"extrapolation\",\"scheme\":{\"type\":\"none\"},\"train_length\":4,"
         "\"inputs\":\"gaussian\",\"num_heads\":1,\"head_dim\":4}",
         "INVALID_ARGUMENT", "lengths"},
        {"{\"analysis\":\"extrapolation\",\"scheme\":{\"type\":\"none\"},\"train_length\":4,"
         "\"lengths\":[4,0],\"inputs\":\"gaussian\",\"num_heads\":1,\"head_dim\":4}",
         "INVALID_ARGUMENT", "lengths[1]"},
        {"{\"analysis\":\"extrapolation\",\"scheme\":{\"type\":\"none\"},\"train_length\":4,"
         "\"lengths\":[4],\"inputs\":\"uniform\",\"num_heads\":1,\"head_dim\":4}",
         "INVALID_ARGUMENT", "inputs"},
        {"{\"analysis\":\"extrapolation\",\"scheme\":{\"type\":\"none\"},\"train_length\":4,"
         "\"lengths\":[4],\"inputs\":\"gaussian\",\"head_dim\":4}",
         "INVALID_ARGUMENT", "num_heads"},
        {"{\"analysis\":\"extrapolation\",\"scheme\":{\"type\":\"none\"},\"train_length\":4,"
         "\"lengths\":[4],\"inputs\":\"gaussian\",\"num_heads\":1,\"head_dim\":4,"
         "\"q\":[1]}",
         "UNKNOWN_FIELD", "q"},
        {"{\"analysis\":\"extrapolation\",\"scheme\":{\"type\":\"none\"},\"train_length\":2,"
         "\"lengths\":[3],\"q\":{\"shape\":[2,1,2],\"data\":[1,2,3,4]},\"k\":{\"shape\":"
         "[2,1,2],\"data\":[1,2,3,4]},\"v\":{\"shape\":[2,1,2],\"data\":[1,2,3,4]}}",
         "OUT_OF_RANGE", "lengths"},
        {"{\"analysis\":\"extrapolation\",\"scheme\":{\"type\":\"none\"},\"train_length\":2,"
         "\"lengths\":[2],\"q\":{\"shape\":[2,1,2],\"data\":[1,2,3,4]},\"k\":{\"shape\":"
         "[2,1,2],\"data\":[1,2,3,4]},\"v\":{\"shape\":[2,1,2],\"data\":[1,2,3,4]},"
         "\"key_length\":1}",
         "UNSUPPORTED", "key_length"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ans = call(&srv_ep_analyze, bad[i].body, &lim, &status);
        expect_error(ans, status, 400, bad[i].code, bad[i].field);
        cJSON_Delete(ans);
    }
    /* Bounded like attention: refused before anything is generated. */
    ans = call(&srv_ep_analyze,
               "{\"analysis\":\"extrapolation\",\"scheme\":{\"type\":\"none\"},\"train_length\":4,"
               "\"lengths\":[4,2000000000],\"inputs\":\"gaussian\",\"num_heads\":8,"
               "\"head_dim\":64}",
               &lim, &status);
    expect_error(ans, status, 413, "PAYLOAD_TOO_LARGE", "lengths");
    cJSON_Delete(ans);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_analyze_extrapolation),
    };
    return cmocka_run_group_tests_name("api_extrapolation", tests, NULL, NULL);
}
