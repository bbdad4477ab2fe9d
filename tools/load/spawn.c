/* spawn.c - posattn-load --spawn: starts posattnd on a free loopback port
 * (--port 0), learns the port from its "listening on http://HOST:PORT" line,
 * and at the end sends SIGTERM and waits for the drain.
 */
#define _DEFAULT_SOURCE /* prctl, kill with pgid */
#include "load.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

static pid_t child = -1;
static int child_out = -1;
static pthread_t drainer;
static int drainer_started;

/* Keeps reading the server's stdout so that it can never block on a full
 * pipe; whatever it prints after the listening line goes to our stderr. */
static void *drain_stdout(void *arg)
{
    char buf[4096];
    ssize_t n;
    (void)arg;
    while ((n = read(child_out, buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR))
        if (n > 0)
            fwrite(buf, 1, (size_t)n, stderr);
    return NULL;
}

int load_spawn_start(const load_config *c, char *url, size_t urllen)
{
    int fds[2];
    const char *argv[LOAD_MAX_SERVER_ARGS + 16];
    int n = 0;

    argv[n++] = c->spawn;
    argv[n++] = "--host";
    argv[n++] = "127.0.0.1";
    argv[n++] = "--port";
    argv[n++] = "0";
    argv[n++] = "--log-format";
    argv[n++] = "off";
    for (int i = 0; i < c->n_server_args; i++) /* later flags win */
        argv[n++] = c->server_args[i];
    argv[n] = NULL;

    if (pipe(fds) != 0) {
        perror("posattn-load: pipe");
        return -1;
    }
    fflush(NULL);
    child = fork();
    if (child < 0) {
        perror("posattn-load: fork");
        return -1;
    }
    if (child == 0) {
        /* Its own process group, so Ctrl-C reaches only us and we stop it in
         * order; and it dies with us if we are killed. */
        setpgid(0, 0);
#ifdef __linux__
        prctl(PR_SET_PDEATHSIG, SIGTERM);
#endif
        dup2(fds[1], STDOUT_FILENO);
        close(fds[0]);
        close(fds[1]);
        execv(c->spawn, (char *const *)argv);
        fprintf(stderr, "posattn-load: cannot run %s: %s\n", c->spawn, strerror(errno));
        _exit(127);
    }
    close(fds[1]);
    child_out = fds[0];

    /* Read until the listening line, for at most 15 s. */
    char line[1024];
    size_t len = 0;
    double deadline = load_now_s() + 15.0;
    for (;;) {
        double left = deadline - load_now_s();
        struct pollfd p = {child_out, POLLIN, 0};
        if (left <= 0 || poll(&p, 1, (int)(left * 1000) + 1) <= 0) {
            fprintf(stderr, "posattn-load: %s did not say where it listens within 15 s\n",
                    c->spawn);
            goto fail;
        }
        ssize_t r = read(child_out, line + len, sizeof line - 1 - len);
        if (r <= 0) {
            fprintf(stderr, "posattn-load: %s exited before listening\n", c->spawn);
            goto fail;
        }
        len += (size_t)r;
        line[len] = 0;
        const char *at = strstr(line, "listening on http://");
        if (at && strchr(at, '\n')) {
            at += strlen("listening on ");
            size_t ulen = strcspn(at, " \n");
            if (ulen + 1 > urllen)
                goto fail;
            memcpy(url, at, ulen);
            url[ulen] = 0;
            break;
        }
        if (len == sizeof line - 1)
            len = 0; /* a long line that is not ours: drop it */
    }
    drainer_started = pthread_create(&drainer, NULL, drain_stdout, NULL) == 0;
    return 0;
fail:
    load_spawn_stop();
    return -1;
}

int load_spawn_stop(void)
{
    int status = 0, rc = -1;
    if (child <= 0)
        return -1;
    kill(child, SIGTERM);
    /* posattnd drains (default --drain-timeout 20 s); give it a little more. */
    double deadline = load_now_s() + 30.0;
    for (;;) {
        pid_t w = waitpid(child, &status, WNOHANG);
        if (w == child) {
            rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
            break;
        }
        if (w < 0 && errno != EINTR)
            break;
        if (load_now_s() > deadline) {
            fprintf(stderr, "posattn-load: the spawned server did not stop; SIGKILL\n");
            kill(child, SIGKILL);
            waitpid(child, &status, 0);
            break;
        }
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
    child = -1;
    if (drainer_started)
        pthread_join(drainer, NULL);
    drainer_started = 0;
    if (child_out >= 0)
        close(child_out);
    child_out = -1;
    return rc;
}
