/* test_keys.c - server/runtime/keys.c: the key file's grammar, its errors
 * (naming the file and the line), the permission warning, and matching:
 * every key, and nothing else, is accepted. */
#include "runtime/keys.h"
#include "testutil.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char dir[64];

static const char *write_keys(const char *name, const char *text, mode_t mode)
{
    static char path[128];
    FILE *f;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    chmod(path, mode);
    return path;
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/test_keys.XXXXXX");
    return mkdtemp(dir) == NULL;
}

static int teardown(void **state)
{
    char cmd[96];
    (void)state;
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd);
}

static bool accepts(const srv_keys *k, const char *key)
{
    return srv_keys_match(k, key, strlen(key)) >= 0;
}

static void test_file_grammar(void **state)
{
    (void)state;
    srv_keys k;
    char err[256] = "", name[24];
    const char *p = write_keys("keys",
                               "# rotation: new key first\n\n  new-key-2026 \r\n"
                               "\told_key.1+/=\n# old_key.0 removed\n",
                               0600);
    assert_true(srv_keys_load(&k, "", p, stderr, err, sizeof err));
    assert_int_equal(k.n, 2);
    assert_true(accepts(&k, "new-key-2026"));
    assert_true(accepts(&k, "old_key.1+/="));
    assert_int_equal(srv_keys_match(&k, "old_key.1+/=", 12), 1);
    srv_keys_name(&k, 0, name, sizeof name);
    assert_string_equal(name, "line 3");
    srv_keys_name(&k, 1, name, sizeof name);
    assert_string_equal(name, "line 4");
    srv_keys_name(&k, -1, name, sizeof name);
    assert_string_equal(name, "-");
    /* Neither a prefix, an extension, the comment nor the blanks match. */
    assert_false(accepts(&k, "new-key-202"));
    assert_false(accepts(&k, "new-key-20266"));
    assert_false(accepts(&k, "old_key.0"));
    assert_false(accepts(&k, " new-key-2026"));
    assert_false(accepts(&k, ""));
    assert_int_equal(srv_keys_match(&k, "new-key-2026\0x", 14), -1);
    /* --api-key joins the file's keys. */
    assert_true(srv_keys_load(&k, "dev", p, stderr, err, sizeof err));
    assert_int_equal(k.n, 3);
    assert_true(accepts(&k, "dev") && accepts(&k, "new-key-2026"));
    srv_keys_name(&k, 0, name, sizeof name);
    assert_string_equal(name, "flag");
    /* Nothing at all: no key is required. */
    assert_true(srv_keys_load(&k, NULL, NULL, stderr, err, sizeof err));
    assert_int_equal(k.n, 0);
}

static void expect_error(const char *text, const char *want)
{
    srv_keys k;
    char err[256] = "";
    const char *p = write_keys("bad", text, 0600);
    if (srv_keys_load(&k, "", p, stderr, err, sizeof err))
        fail_msg("loaded, expected an error with '%s'", want);
    if (strstr(err, want) == NULL || strstr(err, p) == NULL)
        fail_msg("error '%s' lacks the file or '%s'", err, want);
}

static void test_errors(void **state)
{
    (void)state;
    char big[400], many[64 * 8 + 16] = "", err[256];
    srv_keys k;
    expect_error("# only a comment\n\n", "holds no key");
    expect_error("good\nhas space inside\n", "line 2: the key holds a character");
    expect_error("caf\xc3\xa9\n", "line 1: the key holds a character");
    memset(big, 'a', 300);
    big[300] = '\0';
    expect_error(big, "line 1: the key is longer than 255 characters");
    for (int i = 0; i < 65; i++)
        snprintf(many + strlen(many), sizeof many - strlen(many), "k%02d\n", i);
    expect_error(many, "line 65: more than 64 keys");
    assert_false(srv_keys_load(&k, "", "/nonexistent/keys", stderr, err, sizeof err));
    assert_non_null(strstr(err, "/nonexistent/keys: cannot open the API key file"));
}

static void test_permission_warning(void **state)
{
    (void)state;
    srv_keys k;
    char err[256], *text = NULL;
    size_t n = 0;
    FILE *warn = open_memstream(&text, &n);
    const char *p = write_keys("open", "k1\n", 0644);
    assert_true(srv_keys_load(&k, "", p, warn, err, sizeof err));
    fflush(warn);
    assert_non_null(strstr(text, "can be read by others than its owner (mode 644): chmod 600 it"));
    assert_null(strstr(text, "k1\n")); /* never the key */
    fclose(warn);
    free(text);
    text = NULL;
    warn = open_memstream(&text, &n);
    p = write_keys("closed", "k1\n", 0600);
    assert_true(srv_keys_load(&k, "", p, warn, err, sizeof err));
    /* Group-readable by this process's own group (a Kubernetes Secret with
     * fsGroup): only posattnd reads it, no warning. */
    p = write_keys("group", "k1\n", 0640);
    assert_true(srv_keys_load(&k, "", p, warn, err, sizeof err));
    fflush(warn);
    assert_int_equal(n, 0);
    fclose(warn);
    free(text);
}

/* The keyring: a reader holding the set in force keeps it alive through a
 * swap (the swap returns only after the release), readers after the swap
 * see the new set, and the swap copies what it is given. */
typedef struct swapper {
    srv_keyring *ring;
    srv_keys keys;
    atomic_bool done;
} swapper;

static void *swap_thread(void *arg)
{
    swapper *w = arg;
    assert_true(srv_keyring_swap(w->ring, &w->keys));
    atomic_store(&w->done, true);
    return NULL;
}

static void test_keyring(void **state)
{
    (void)state;
    srv_keys a, b;
    char err[256];
    swapper w;
    pthread_t t;
    assert_true(srv_keys_load(&a, "key-a", NULL, NULL, err, sizeof err));
    assert_true(srv_keys_load(&b, "key-b", NULL, NULL, err, sizeof err));
    w.ring = srv_keyring_new(&a);
    assert_non_null(w.ring);
    w.keys = b;
    atomic_init(&w.done, false);
    memset(&a, 0, sizeof a); /* the ring holds a copy */

    const srv_keys *held = srv_keyring_acquire(w.ring);
    assert_int_equal(srv_keys_match(held, "key-a", 5), 0);
    assert_int_equal(pthread_create(&t, NULL, swap_thread, &w), 0);
    nanosleep(&(struct timespec){0, 100 * 1000000}, NULL);
    /* The swap waits for this hold; the held set is still whole. */
    const bool done_while_held = atomic_load(&w.done);
    const int still_a = srv_keys_match(held, "key-a", 5);
    srv_keyring_release(w.ring);
    pthread_join(t, NULL);
    assert_false(done_while_held);
    assert_int_equal(still_a, 0);
    assert_true(atomic_load(&w.done));
    held = srv_keyring_acquire(w.ring);
    assert_int_equal(srv_keys_match(held, "key-b", 5), 0);
    assert_int_equal(srv_keys_match(held, "key-a", 5), -1);
    srv_keyring_release(w.ring);
    srv_keyring_free(w.ring);
    srv_keyring_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keyring),
        cmocka_unit_test(test_file_grammar),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_permission_warning),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
