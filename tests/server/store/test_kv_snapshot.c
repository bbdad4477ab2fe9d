/* test_kv_snapshot.c - store/kv_snapshot.c: sessions written to a
 * directory and read back into another cache answer attention exactly as
 * before (every retained row, position and window state, the sinks' raw
 * keys, a fork, the model and layer a session was made from), and then
 * keep going alike (the same appends give the
 * same bits); files of deleted sessions go at the next save; a truncated
 * file, a corrupt one, a renamed one and a stray file are reported and
 * skipped, never loaded, never a crash; an export outlives its session.
 */
#include "store/kv_snapshot.h"
#include "testutil.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { HKV = 2, D = 16, DV = 8, H = 4 };

/* The test's schemes, named by the JSON a session keeps. */
static pa_scheme schemes[2];

static bool mk(void *arg, const char *json, srv_kv_spec *spec, char *err, size_t cap)
{
    (void)arg;
    if (strcmp(json, "\"rope\"") == 0)
        spec->scheme = &schemes[0];
    else if (strcmp(json, "\"alibi\"") == 0)
        spec->scheme = &schemes[1];
    else
        return snprintf(err, cap, "unknown scheme %s", json), false;
    spec->scheme_owner = NULL;
    spec->scheme_free = NULL;
    return true;
}

typedef struct skips {
    int n;
    char why[8][256];
} skips;

static void on_skip(void *arg, const char *path, const char *why)
{
    skips *s = arg;
    (void)path;
    if (s->n < 8)
        snprintf(s->why[s->n], sizeof s->why[0], "%s", why);
    s->n++;
}

static srv_kv_cache *cache(void)
{
    srv_kv_config cfg = {(size_t)32 << 20, 16, 0};
    srv_kv_cache *c = srv_kv_cache_new(&cfg);
    assert_non_null(c);
    return c;
}

static void append(srv_kv_cache *c, const char *id, tu_rng *r, int32_t n)
{
    float *k = tu_alloc((size_t)n * HKV * D, sizeof(float));
    float *v = tu_alloc((size_t)n * HKV * DV, sizeof(float));
    srv_kv_err e;
    tu_fill(r, k, (size_t)n * HKV * D, -1, 1);
    tu_fill(r, v, (size_t)n * HKV * DV, -1, 1);
    if (!srv_kv_append(c, id, k, v, n, NULL, &e))
        fail_msg("append: %s", e.message);
    free(k);
    free(v);
}

/* A decode step's output over session id (q fixed by seed). */
static float *step(srv_kv_cache *c, const char *id, uint64_t seed)
{
    srv_kv_view v;
    srv_kv_err e;
    pa_attention a;
    pa_attention_out o = {0};
    pa_error pe;
    float q[H * D];
    tu_rng r;
    size_t wsz;
    void *ws;
    float *out = tu_alloc((size_t)H * DV, sizeof(float));
    tu_rng_seed(&r, seed);
    tu_fill(&r, q, H * D, -1, 1);
    if (!srv_kv_view_take(c, id, &v, &e))
        fail_msg("view %s: %s", id, e.message);
    pa_attention_init(&a, v.spec.scheme);
    a.num_heads = H;
    a.num_kv_heads = HKV;
    a.head_dim = D;
    a.v_head_dim = DV;
    a.q_len = 1;
    a.k_len = v.length;
    a.q = q;
    a.k_pages = v.k_pages;
    a.v_pages = v.v_pages;
    a.page_tokens = v.page_tokens;
    a.k_positions = v.positions;
    a.q_positions = &v.next_position;
    a.k_prerotated = v.prerotated;
    a.causal = true;
    o.output = out;
    wsz = pa_attention_workspace_size(&a);
    ws = tu_alloc(wsz, 1);
    TU_ASSERT_STATUS(pa_attention_run(&a, &o, ws, wsz, &pe), PA_STATUS_OK, &pe);
    free(ws);
    srv_kv_view_release(c, &v);
    return out;
}

static void same(srv_kv_cache *a, srv_kv_cache *b, const char *id, uint64_t seed)
{
    float *x = step(a, id, seed), *y = step(b, id, seed);
    srv_kv_info ia, ib;
    assert_true(srv_kv_info_get(a, id, &ia, NULL));
    assert_true(srv_kv_info_get(b, id, &ib, NULL));
    assert_int_equal(ia.length, ib.length);
    assert_int_equal(ia.appended, ib.appended);
    assert_int_equal(ia.next_position, ib.next_position);
    assert_int_equal(ia.evicted, ib.evicted);
    assert_string_equal(ia.model, ib.model);
    assert_int_equal(ia.layer, ib.layer);
    assert_memory_equal(x, y, (size_t)H * DV * sizeof(float));
    free(x);
    free(y);
}

static srv_kv_spec spec(int which, srv_kv_evict ev, int32_t window, int32_t sinks, bool repos)
{
    srv_kv_spec sp;
    memset(&sp, 0, sizeof sp);
    sp.scheme = &schemes[which];
    sp.scheme_json = which == 0 ? "\"rope\"" : "\"alibi\"";
    sp.num_kv_heads = HKV;
    sp.head_dim = D;
    sp.v_head_dim = DV;
    sp.max_tokens = 300;
    sp.eviction = ev;
    sp.window = window;
    sp.sinks = sinks;
    sp.reposition = repos;
    return sp;
}

static void write_bytes(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(p, 1, n, f), n);
    fclose(f);
}

static void test_round_trip(void **state)
{
    (void)state;
    char dir[] = "/tmp/posattn-kvsnap-XXXXXX", ids[5][SRV_KV_ID_LEN], gone[SRV_KV_ID_LEN];
    srv_kv_cache *a = cache(), *b = cache();
    srv_kv_spec sp[4];
    srv_kv_err e;
    skips sk = {0};
    size_t failed;
    char err[256];
    tu_rng r;
    tu_rng_seed(&r, 900);
    pa_scheme_init(&schemes[0], PA_SCHEME_ROPE);
    schemes[0].rope.layout = PA_ROPE_LAYOUT_GPTJ;
    pa_scheme_init(&schemes[1], PA_SCHEME_ALIBI);
    assert_non_null(mkdtemp(dir));
    sp[0] = spec(0, SRV_KV_EVICT_WINDOW, 20, 4, true); /* sinks re-rotated: raw keys saved */
    sp[1] = spec(1, SRV_KV_EVICT_NONE, 0, 0, false);
    sp[2] = spec(0, SRV_KV_EVICT_WINDOW, 7, 0, false);
    sp[3] = spec(1, SRV_KV_EVICT_WINDOW, 9, 2, true); /* alibi: the shift is in the positions */
    sp[1].model = "g2"; /* made from a served model's layer: kept by the fork and the file */
    sp[1].layer = 3;
    for (int i = 0; i < 4; i++) {
        assert_true(srv_kv_create(a, &sp[i], ids[i], &e));
        append(a, ids[i], &r, 50);
    }
    assert_true(srv_kv_fork(a, ids[1], ids[4], &e));
    append(a, ids[4], &r, 3);
    assert_true(srv_kv_create(a, &sp[1], gone, &e));
    append(a, gone, &r, 5);
    assert_int_equal(srv_kv_save_all(a, dir, &failed, err, sizeof err), 6);
    assert_int_equal(failed, 0);
    assert_true(srv_kv_delete(a, gone, &e));
    assert_int_equal(srv_kv_save_all(a, dir, &failed, err, sizeof err), 5); /* gone's file goes */
    assert_int_equal(srv_kv_load_dir(b, dir, mk, &sk, on_skip), 5);
    assert_int_equal(sk.n, 0);
    {
        srv_kv_info in;
        assert_true(srv_kv_info_get(b, ids[4], &in, NULL)); /* the fork of ids[1] */
        assert_string_equal(in.model, "g2");
        assert_int_equal(in.layer, 3);
        assert_true(srv_kv_info_get(b, ids[0], &in, NULL));
        assert_string_equal(in.model, "");
    }
    for (int i = 0; i < 5; i++) {
        same(a, b, ids[i], 10 + (uint64_t)i);
        /* and they keep going alike: the window slides, sinks re-rotate */
        for (int s = 0; s < 3; s++) {
            tu_rng r1, r2;
            tu_rng_seed(&r1, 77 + (uint64_t)s);
            tu_rng_seed(&r2, 77 + (uint64_t)s);
            append(a, ids[i], &r1, 2);
            append(b, ids[i], &r2, 2);
        }
        same(a, b, ids[i], 20 + (uint64_t)i);
    }
    /* Loading again: each id exists already (reported, skipped). */
    assert_int_equal(srv_kv_load_dir(b, dir, mk, &sk, on_skip), 0);
    assert_int_equal(sk.n, 5);
    assert_non_null(strstr(sk.why[0], "exists already"));
    srv_kv_cache_free(a);
    srv_kv_cache_free(b);
    {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        assert_int_equal(system(cmd), 0);
    }
}

/* Damaged files are reported and skipped; good ones beside them load. */
static void test_damaged_files(void **state)
{
    (void)state;
    char dir[] = "/tmp/posattn-kvsnap-XXXXXX", id[SRV_KV_ID_LEN], id2[SRV_KV_ID_LEN], path[256],
         bad[256];
    srv_kv_cache *a = cache(), *b = cache();
    srv_kv_spec sp;
    srv_kv_err e;
    skips sk = {0};
    size_t failed, len;
    char err[256];
    unsigned char *buf;
    FILE *f;
    tu_rng r;
    tu_rng_seed(&r, 901);
    pa_scheme_init(&schemes[0], PA_SCHEME_ROPE);
    assert_non_null(mkdtemp(dir));
    sp = spec(0, SRV_KV_EVICT_NONE, 0, 0, false);
    assert_true(srv_kv_create(a, &sp, id, &e));
    append(a, id, &r, 40);
    assert_true(srv_kv_create(a, &sp, id2, &e));
    append(a, id2, &r, 40);
    assert_int_equal(srv_kv_save_all(a, dir, &failed, err, sizeof err), 2);
    snprintf(path, sizeof path, "%s/%s.safetensors", dir, id);
    f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = tu_alloc(len, 1);
    assert_int_equal(fread(buf, 1, len, f), len);
    fclose(f);
    /* truncated */
    snprintf(bad, sizeof bad, "%s/%032x.safetensors", dir, 1u);
    write_bytes(bad, buf, len - 100);
    /* id2's file with a value turned into NaN (its last key float; id2's
     * header has the same length as id's) */
    {
        unsigned char *c2 = tu_alloc(len, 1);
        snprintf(bad, sizeof bad, "%s/%s.safetensors", dir, id2);
        f = fopen(bad, "rb");
        assert_non_null(f);
        assert_int_equal(fread(c2, 1, len, f), len);
        fclose(f);
        memset(c2 + len - 4 * (40 + 40 * HKV * DV) - 4, 0xff, 4);
        write_bytes(bad, c2, len);
        free(c2);
    }
    /* the good file under another session's name */
    snprintf(bad, sizeof bad, "%s/%032x.safetensors", dir, 3u);
    write_bytes(bad, buf, len);
    /* garbage, and a stray file that is not a session's */
    snprintf(bad, sizeof bad, "%s/%032x.safetensors", dir, 4u);
    write_bytes(bad, "not a safetensors file at all", 29);
    snprintf(bad, sizeof bad, "%s/notes.txt", dir);
    write_bytes(bad, "hello", 5);
    assert_int_equal(srv_kv_load_dir(b, dir, mk, &sk, on_skip), 1);
    assert_int_equal(sk.n, 4);
    {
        /* each for its own reason (in directory order) */
        int trunc = 0, nan = 0, name = 0, junk = 0;
        for (int i = 0; i < 4; i++) {
            trunc += strstr(sk.why[i], "data") != NULL || strstr(sk.why[i], "bytes") != NULL;
            nan += strstr(sk.why[i], "not finite") != NULL;
            name += strstr(sk.why[i], "file name") != NULL;
            junk += strstr(sk.why[i], "header") != NULL;
        }
        if (nan != 1 || name != 1 || trunc + junk < 2)
            fail_msg("reasons: %s | %s | %s | %s", sk.why[0], sk.why[1], sk.why[2], sk.why[3]);
    }
    same(a, b, id, 5);
    /* A save leaves the files that did not load where they are (for an
     * operator), as it does the stray file: id's, id2's (NaN), the
     * truncated, renamed and garbage ones, notes.txt. */
    assert_int_equal(srv_kv_save_all(b, dir, &failed, err, sizeof err), 1);
    {
        int n = 0;
        DIR *d = opendir(dir);
        struct dirent *de;
        assert_non_null(d);
        while ((de = readdir(d)) != NULL)
            n += de->d_name[0] != '.';
        closedir(d);
        assert_int_equal(n, 6);
        snprintf(bad, sizeof bad, "%s/%s.safetensors", dir, id2);
        assert_int_equal(access(bad, F_OK), 0);
    }
    free(buf);
    srv_kv_cache_free(a);
    srv_kv_cache_free(b);
    {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        assert_int_equal(system(cmd), 0);
    }
}

/* Ids the client chose (srv_kv_create_as): any of the charset, up to 64
 * characters, name their files and load back; a file whose name is not an
 * id (a leading dot, another character, too long) is not a session's and
 * is passed over without a word. */
static void test_chosen_ids(void **state)
{
    (void)state;
    char dir[] = "/tmp/posattn-kvsnap-XXXXXX", ids[3][SRV_KV_ID_LEN], path[512];
    srv_kv_cache *a = cache(), *b = cache();
    srv_kv_spec sp;
    srv_kv_err e;
    skips sk = {0};
    size_t failed;
    char err[256], longest[SRV_KV_ID_LEN];
    tu_rng r;
    tu_rng_seed(&r, 902);
    pa_scheme_init(&schemes[0], PA_SCHEME_ROPE);
    pa_scheme_init(&schemes[1], PA_SCHEME_ALIBI);
    assert_non_null(mkdtemp(dir));
    memset(longest, 'Z', SRV_KV_ID_LEN - 1);
    longest[SRV_KV_ID_LEN - 1] = '\0';
    sp = spec(0, SRV_KV_EVICT_WINDOW, 10, 2, true);
    assert_true(srv_kv_create_as(a, &sp, "chat-7.turn_2", ids[0], &e));
    sp = spec(1, SRV_KV_EVICT_NONE, 0, 0, false);
    assert_true(srv_kv_create_as(a, &sp, longest, ids[1], &e));
    assert_true(srv_kv_fork(a, longest, ids[2], &e));
    for (int i = 0; i < 3; i++)
        append(a, ids[i], &r, 20);
    assert_int_equal(srv_kv_save_all(a, dir, &failed, err, sizeof err), 3);
    snprintf(path, sizeof path, "%s/chat-7.turn_2.safetensors", dir);
    assert_int_equal(access(path, F_OK), 0);
    snprintf(path, sizeof path, "%s/%s.safetensors", dir, longest);
    assert_int_equal(access(path, F_OK), 0);
    /* Not a session's: passed over, not reported. */
    snprintf(path, sizeof path, "%s/.hidden.safetensors", dir);
    write_bytes(path, "x", 1);
    snprintf(path, sizeof path, "%s/a b.safetensors", dir);
    write_bytes(path, "x", 1);
    snprintf(path, sizeof path, "%s/%sZ.safetensors", dir, longest);
    write_bytes(path, "x", 1);
    assert_int_equal(srv_kv_load_dir(b, dir, mk, &sk, on_skip), 3);
    assert_int_equal(sk.n, 0);
    for (int i = 0; i < 3; i++)
        same(a, b, ids[i], 30 + (uint64_t)i);
    srv_kv_unlink(dir, "chat-7.turn_2");
    snprintf(path, sizeof path, "%s/chat-7.turn_2.safetensors", dir);
    assert_int_equal(access(path, F_OK), -1);
    srv_kv_cache_free(a);
    srv_kv_cache_free(b);
    {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        assert_int_equal(system(cmd), 0);
    }
}

/* An export is the caller's alone: the session may be deleted (or dropped
 * for room) as soon as srv_kv_export returns, and the snapshot writer
 * still reads the scheme's JSON after that (it read the session's own
 * copy, freed by the delete: make asan caught the use after free). */
static void test_export_outlives_session(void **state)
{
    (void)state;
    char id[SRV_KV_ID_LEN];
    srv_kv_cache *a = cache();
    srv_kv_spec sp;
    srv_kv_state st;
    srv_kv_err e;
    tu_rng r;
    tu_rng_seed(&r, 903);
    pa_scheme_init(&schemes[0], PA_SCHEME_ROPE);
    sp = spec(0, SRV_KV_EVICT_NONE, 0, 0, false);
    assert_true(srv_kv_create(a, &sp, id, &e));
    append(a, id, &r, 5);
    assert_true(srv_kv_export(a, id, &st, &e));
    assert_true(srv_kv_delete(a, id, &e));
    assert_non_null(st.spec.scheme_json);
    assert_string_equal(st.spec.scheme_json, "\"rope\"");
    assert_ptr_not_equal(st.spec.scheme_json, sp.scheme_json); /* a copy */
    assert_null(st.spec.scheme); /* the session's: not handed out */
    assert_int_equal(st.length, 5);
    srv_kv_state_free(&st);
    assert_null(st.scheme_copy);
    srv_kv_state_free(&st); /* twice is harmless */
    srv_kv_cache_free(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_damaged_files),
        cmocka_unit_test(test_chosen_ids),
        cmocka_unit_test(test_export_outlives_session),
    };
    return cmocka_run_group_tests_name("kv_snapshot", tests, NULL, NULL);
}
