/* test_web.c - server/http/web.c: the embedded web page. Every file of
 * server/http/web/ is served byte for byte under /web/NAME (index.html at
 * / too) with the content type of its extension, and no other path finds
 * anything: no directory, no traversal, no prefix or suffix of a name.
 * Run from the repository's root (as make test does), which holds the
 * files the binary embedded.
 */
#include "http/web.h"
#include "testutil.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WEB_DIR "server/http/web"

static unsigned char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    unsigned char *buf = NULL;
    long n;
    if (f == NULL)
        fail_msg("cannot open %s (run from the repository's root)", path);
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return buf;
}

static const char *type_of(const char *name)
{
    const char *dot = strrchr(name, '.');
    if (strcmp(dot, ".html") == 0)
        return "text/html; charset=utf-8";
    if (strcmp(dot, ".js") == 0 || strcmp(dot, ".mjs") == 0)
        return "text/javascript; charset=utf-8";
    if (strcmp(dot, ".css") == 0)
        return "text/css; charset=utf-8";
    if (strcmp(dot, ".svg") == 0)
        return "image/svg+xml";
    return NULL;
}

static void test_every_file_served(void **state)
{
    (void)state;
    DIR *d = opendir(WEB_DIR);
    struct dirent *e;
    int files = 0;
    assert_non_null(d);
    while ((e = readdir(d)) != NULL) {
        char url[300], path[300];
        srv_web_file f;
        size_t len;
        unsigned char *want;
        if (e->d_name[0] == '.')
            continue;
        snprintf(url, sizeof url, "/web/%s", e->d_name);
        snprintf(path, sizeof path, WEB_DIR "/%s", e->d_name);
        if (!srv_web_find(url, &f))
            fail_msg("%s is not served", url);
        want = read_file(path, &len);
        assert_string_equal(f.name, e->d_name);
        assert_int_equal(f.len, len);
        assert_memory_equal(f.data, want, len);
        assert_int_equal(f.data[len], 0); /* a NUL follows, not counted */
        if (type_of(e->d_name) != NULL)
            assert_string_equal(f.content_type, type_of(e->d_name));
        free(want);
        files++;
    }
    closedir(d);
    assert_true(files >= 4);
}

static void test_index_at_root(void **state)
{
    (void)state;
    srv_web_file a, b;
    assert_true(srv_web_find("/", &a));
    assert_true(srv_web_find("/web/index.html", &b));
    assert_ptr_equal(a.data, b.data);
    assert_string_equal(a.content_type, "text/html; charset=utf-8");
}

static void test_nothing_else(void **state)
{
    (void)state;
    static const char *const urls[] = {
        "",
        "/web/",
        "/web",
        "/web//index.html",
        "/web/../main.c",
        "/web/./app.js",
        "/web/app.js/",
        "/web/app.j",
        "/webapp.js",
        "/index.html",
        "/web/APP.JS",
        "/web/app.js%00",
        "//",
        "/web/web.c",
        "/web/../web.h",
    };
    srv_web_file f = {"untouched", NULL, 0, NULL};
    for (size_t i = 0; i < sizeof urls / sizeof *urls; i++)
        if (srv_web_find(urls[i], &f))
            fail_msg("'%s' found %s", urls[i], f.name);
    assert_string_equal(f.name, "untouched"); /* *out left alone */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_file_served),
        cmocka_unit_test(test_index_at_root),
        cmocka_unit_test(test_nothing_else),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
