/* e2e_server.c - see e2e_server.h. */
#include "e2e_server.h"
#include "testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Child side of e2e_server_start: never returns. */
static void exec_server(const char *bin, int out_fd, const char *log, const char *const *flags)
{
    const char *argv[64];
    int n = 0, fd;
    size_t ne = 0, k = 0;
    char **envp;
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* dies with the test, whatever way that goes */
    dup2(out_fd, STDOUT_FILENO);
    fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0)
        dup2(fd, STDERR_FILENO);
    argv[n++] = bin;
    argv[n++] = "--host";
    argv[n++] = "127.0.0.1";
    argv[n++] = "--port";
    argv[n++] = "0";
    for (size_t i = 0; flags != NULL && flags[i] != NULL && n < 62; i++)
        argv[n++] = flags[i];
    argv[n] = NULL;
    while (environ[ne] != NULL)
        ne++;
    envp = calloc(ne + 1, sizeof *envp);
    if (envp == NULL)
        _exit(127);
    for (size_t i = 0; i < ne; i++)
        if (strncmp(environ[i], "POSATTN_", 8) != 0)
            envp[k++] = environ[i];
    envp[k] = NULL;
    execve(bin, (char *const *)argv, envp);
    fprintf(stderr, "exec %s: %s\n", bin, strerror(errno));
    _exit(127);
}

void e2e_server_dump_log(const e2e_server *s)
{
    FILE *f = s->log[0] ? fopen(s->log, "r") : NULL;
    char line[1024];
    long size;
    if (f == NULL)
        return;
    fseek(f, 0, SEEK_END);
    size = ftell(f);
    fseek(f, size > 4000 ? size - 4000 : 0, SEEK_SET);
    print_message("---- posattnd stderr (tail of %s) ----\n", s->log);
    while (fgets(line, sizeof line, f) != NULL)
        print_message("%s", line);
    print_message("---- end ----\n");
    fclose(f);
}

void e2e_server_start(e2e_server *s, const char *bin, const char *const *flags)
{
    int pfd[2];
    char line[512];
    size_t len = 0;
    double deadline;
    const char *p;
    static int counter;

    memset(s, 0, sizeof *s);
    s->pid = -1;
    s->out_fd = -1;
    snprintf(s->log, sizeof s->log, "/tmp/posattnd-e2e-%d-%d.log", (int)getpid(), ++counter);
    assert_int_equal(pipe(pfd), 0);
    s->pid = fork();
    assert_true(s->pid >= 0);
    if (s->pid == 0) {
        close(pfd[0]);
        exec_server(bin, pfd[1], s->log, flags);
    }
    close(pfd[1]);
    s->out_fd = pfd[0];

    /* The first line of stdout names the port. */
    deadline = now_s() + 10.0;
    while (memchr(line, '\n', len) == NULL) {
        struct pollfd pf = {s->out_fd, POLLIN, 0};
        int left_ms = (int)((deadline - now_s()) * 1000);
        ssize_t got;
        if (left_ms <= 0 || len + 1 >= sizeof line) {
            e2e_server_dump_log(s);
            fail_msg("posattnd printed no listening line within 10 s");
        }
        if (poll(&pf, 1, left_ms) <= 0)
            continue;
        got = read(s->out_fd, line + len, sizeof line - 1 - len);
        if (got <= 0) {
            e2e_server_dump_log(s);
            fail_msg("posattnd exited before listening (%s)", bin);
        }
        len += (size_t)got;
    }
    line[len] = '\0';
    p = strstr(line, "listening on http://127.0.0.1:");
    if (p == NULL || strncmp(line, "posattnd ", 9) != 0)
        fail_msg("unexpected first line from posattnd: %s", line);
    s->port = atoi(p + strlen("listening on http://127.0.0.1:"));
    assert_true(s->port > 0 && s->port < 65536);
    assert_non_null(strstr(line, "(workers "));
    assert_non_null(strstr(line, "queue depth "));
    snprintf(s->url, sizeof s->url, "http://127.0.0.1:%d", s->port);
}

bool e2e_server_wait(e2e_server *s, double timeout_s)
{
    double deadline = now_s() + timeout_s;
    for (;;) {
        int st;
        pid_t w = waitpid(s->pid, &st, WNOHANG);
        if (w == s->pid) {
            s->exit_status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            s->pid = -1;
            if (s->out_fd >= 0)
                close(s->out_fd);
            s->out_fd = -1;
            return true;
        }
        if (now_s() > deadline)
            return false;
        nanosleep(&(struct timespec){0, 10000000L}, NULL);
    }
}

void e2e_server_stop_ok(e2e_server *s, bool already_signalled)
{
    assert_true(s->pid > 0);
    if (!already_signalled)
        kill(s->pid, SIGTERM);
    if (!e2e_server_wait(s, 15.0)) {
        kill(s->pid, SIGKILL);
        e2e_server_wait(s, 5.0);
        e2e_server_dump_log(s);
        fail_msg("posattnd did not exit within 15 s of SIGTERM");
    }
    if (s->exit_status != 0) {
        e2e_server_dump_log(s);
        fail_msg("posattnd exited with status %d after SIGTERM, expected 0", s->exit_status);
    }
    unlink(s->log);
    s->log[0] = '\0';
}

void e2e_server_kill(e2e_server *s)
{
    if (s->pid > 0) {
        kill(s->pid, SIGKILL);
        e2e_server_wait(s, 5.0);
    }
    if (s->out_fd >= 0)
        close(s->out_fd);
    s->out_fd = -1;
    if (s->log[0])
        unlink(s->log);
    s->log[0] = '\0';
}
