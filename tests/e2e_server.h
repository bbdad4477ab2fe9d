/* e2e_server.h - posattnd as a child process, for the end-to-end tests.
 *
 * Started on 127.0.0.1 with port 0 and the caller's flags, without the
 * caller's POSATTN_* environment (the flags say everything); its stdout's
 * first line names the port; its stderr (the access log) goes to a file
 * that is printed when a test fails; it dies with the test process. A test
 * that stops it requires exit 0 after SIGTERM.
 */
#ifndef E2E_SERVER_H
#define E2E_SERVER_H

#include <stdbool.h>
#include <sys/types.h>

typedef struct e2e_server {
    pid_t pid;
    int port;
    int out_fd;      /* read end of the child's stdout */
    char url[64];    /* http://127.0.0.1:PORT */
    char log[64];    /* the child's stderr */
    int exit_status; /* after it exited: exit code, or 128+signal */
} e2e_server;

/* Starts bin --host 127.0.0.1 --port 0 flags... (NULL-terminated) and
 * returns once its first line names the port; readiness is the caller's
 * to check. Fails the test with the log's tail otherwise. */
void e2e_server_start(e2e_server *s, const char *bin, const char *const *flags);
/* Waits up to timeout_s for the child; true when it exited (status kept). */
bool e2e_server_wait(e2e_server *s, double timeout_s);
/* Prints the last lines of the child's stderr, to explain a failure. */
void e2e_server_dump_log(const e2e_server *s);
/* Sends SIGTERM (unless already_signalled) and requires exit 0 within 15 s. */
void e2e_server_stop_ok(e2e_server *s, bool already_signalled);
/* Teardown: kills a server a failed test left running. */
void e2e_server_kill(e2e_server *s);

#endif
