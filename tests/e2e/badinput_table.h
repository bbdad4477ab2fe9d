/* badinput_table.h - how tests/e2e/test_badinput.c's table is run: one row
 * (bcase) is one request to one of two posattnd children, sent with libcurl
 * or as raw bytes on a fresh socket (both through tests/e2e/e2e_http.h), and
 * the status, error.code and error.field it must get back. Also /healthz and
 * a child's RSS.
 *
 * Every request has a timeout; a transport error fails the running cmocka
 * test. The rows themselves, and the test, are in tests/e2e/test_badinput.c.
 */
#ifndef TESTS_BADINPUT_TABLE_H
#define TESTS_BADINPUT_TABLE_H

#include "e2e_http.h" /* sbuf, server */

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

extern server servers[2]; /* [0] open, [1] with --api-key */

/* VmRSS of a running process, in kB. */
long rss_kb(pid_t pid);

/* One row of the table. */
typedef struct bcase {
    const char *name;
    int srv;            /* 0: open server, 1: --api-key server */
    const char *method; /* NULL with raw */
    const char *path;
    const char *hdr;  /* one extra header, or NULL */
    const char *body; /* NULL: no body (unless gen) */
    void (*gen)(sbuf *);
    bool raw; /* gen builds the whole HTTP request, sent on a socket */
    int status;
    const char *code;  /* error.code; NULL: a success answer; "*": any; "-": body not checked */
    const char *field; /* error.field; NULL: absent; "*": not checked */
    bool item;         /* the error is outputs[0].error of a 200 batch */
    double max_s;      /* answered within this many seconds (0: 10 s) */
} bcase;

/* Runs one row against servers[c->srv]; returns true, or prints why not and
 * returns false. verbose prints every row's answer; verbose_once prints the
 * timings of the rows with a max_s. */
bool run_case(const bcase *c, bool verbose, bool verbose_once);
/* The status of GET /healthz. */
long healthz_status(const server *s);

#endif
