/* test_tls.c - server/http/tls.c: the certificate pair read and checked
 * before posattnd listens. A valid pair loads; each refusal names the file
 * and why: a missing file, a file that is not PEM of its kind, a key of
 * another certificate, an expired certificate, one not valid yet. The
 * certificates are made with openssl in a temporary folder.
 */
#include "http/tls.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[64];

static void sh(const char *fmt, const char *arg)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, fmt, dir, arg != NULL ? arg : "");
    if (system(cmd) != 0)
        fail_msg("failed: %s", cmd);
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/posattn-tls-XXXXXX");
    if (mkdtemp(dir) == NULL)
        return -1;
    return 0;
}

static int teardown(void **state)
{
    char cmd[128];
    (void)state;
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* NAME.crt and NAME.key in dir: a self-signed EC certificate for
 * 127.0.0.1, valid as openssl's extra arguments say. */
static void make_pair(const char *name, const char *validity)
{
    char args[256];
    snprintf(args, sizeof args, "%s %s", name, validity);
    sh("cd %s && set -- %s && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 "
       "-nodes -subj /CN=127.0.0.1 -keyout $1.key -out $1.crt $2 $3 $4 $5 >/dev/null 2>&1",
       args);
}

/* NAME.crt and NAME.key in dir, valid from start to end (openssl's
 * YYYYMMDDHHMMSSZ): openssl ca signs the request with its own key, the
 * one way to set both dates that openssl 3.0 has. */
static void make_dated(const char *name, const char *start, const char *end)
{
    char args[256];
    snprintf(args, sizeof args, "%s %s %s", name, start, end);
    sh("cd %s && set -- %s && rm -rf db && mkdir db && touch db/index && echo 01 > db/serial && "
       "printf '[ca]\\ndefault_ca=c\\n[c]\\ndatabase=db/index\\nnew_certs_dir=db\\n"
       "serial=db/serial\\ndefault_md=sha256\\npolicy=p\\n[p]\\ncommonName=supplied\\n' "
       "> ca.cnf && openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes "
       "-subj /CN=127.0.0.1 -keyout $1.key -out $1.csr >/dev/null 2>&1 && openssl ca -batch "
       "-config ca.cnf -selfsign -keyfile $1.key -in $1.csr -out $1.crt -startdate $2 "
       "-enddate $3 >/dev/null 2>&1",
       args);
}

static char *path(const char *name)
{
    static char p[4][128];
    static int k;
    char *out = p[k++ % 4];
    snprintf(out, sizeof p[0], "%s/%s", dir, name);
    return out;
}

static void expect_refusal(const char *crt, const char *key, const char *want1, const char *want2)
{
    srv_tls t = {NULL, NULL};
    char err[512] = "";
    assert_false(srv_tls_load(path(crt), path(key), &t, err, sizeof err));
    assert_null(t.cert_pem);
    if (strstr(err, want1) == NULL || strstr(err, want2) == NULL)
        fail_msg("'%s' does not say '%s' and '%s'", err, want1, want2);
}

static void test_pair(void **state)
{
    (void)state;
    srv_tls t = {NULL, NULL};
    char err[512];
    make_pair("good", "-days 2");
    make_pair("other", "-days 2");
    assert_true(srv_tls_load(path("good.crt"), path("good.key"), &t, err, sizeof err));
    assert_non_null(strstr(t.cert_pem, "BEGIN CERTIFICATE"));
    assert_non_null(strstr(t.key_pem, "PRIVATE KEY"));
    srv_tls_free(&t);
    srv_tls_free(&t); /* twice is harmless */

    expect_refusal("nothing.crt", "good.key", "nothing.crt", "cannot open the TLS certificate");
    expect_refusal("good.crt", "nothing.key", "nothing.key", "cannot open the TLS");
    expect_refusal("good.key", "good.key", "good.key", "not a PEM certificate");
    expect_refusal("good.crt", "good.crt", "good.crt", "not a PEM private key");
    expect_refusal("good.crt", "other.key", "other.key", "does not belong to the certificate");
}

static void test_validity(void **state)
{
    (void)state;
    make_dated("old", "20200101000000Z", "20200201000000Z");
    make_dated("new", "20990101000000Z", "20990201000000Z");
    expect_refusal("old.crt", "old.key", "old.crt", "expired on");
    expect_refusal("new.crt", "new.key", "new.crt", "not valid before");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pair),
        cmocka_unit_test(test_validity),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
