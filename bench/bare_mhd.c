/* bare_mhd.c - the ceiling of the service path: libmicrohttpd configured as
 * posattnd configures it (internal polling thread, epoll where available,
 * a pool of 2 threads, keep-alive), reading the request body and answering a
 * fixed JSON body of the same size as posattnd's answer, with no JSON, no
 * worker pool and no compute. bench/service.sh drives it and posattnd with
 * the same wrk run.
 *
 *   bare_mhd ANSWER_FILE   prints "listening on http://127.0.0.1:PORT"
 */
#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *answer;
static size_t answer_len;

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url,
                               const char *method, const char *version, const char *data,
                               size_t *size, void **con_cls)
{
    struct MHD_Response *r;
    enum MHD_Result ret;
    (void)cls;
    (void)url;
    (void)method;
    (void)version;
    (void)data;
    if (*con_cls == NULL) { /* headers: wait for the body */
        *con_cls = c;
        return MHD_YES;
    }
    if (*size > 0) { /* body: read and dropped */
        *size = 0;
        return MHD_YES;
    }
    r = MHD_create_response_from_buffer(answer_len, answer, MHD_RESPMEM_PERSISTENT);
    if (r == NULL)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    ret = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ret;
}

int main(int argc, char **argv)
{
    FILE *f;
    long n;
    struct MHD_Daemon *d;
    const union MHD_DaemonInfo *info;
    sigset_t set;
    int sig;
    struct sockaddr_in sa;

    if (argc != 2 || (f = fopen(argv[1], "rb")) == NULL) {
        fprintf(stderr, "usage: bare_mhd ANSWER_FILE\n");
        return 2;
    }
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    rewind(f);
    answer = malloc(n > 0 ? (size_t)n : 1);
    if (answer == NULL || fread(answer, 1, (size_t)n, f) != (size_t)n)
        return 1;
    answer_len = (size_t)n;
    fclose(f);

    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    memset(&sa, 0, sizeof sa); /* 127.0.0.1 only, a port the kernel picks */
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    d = MHD_start_daemon(MHD_USE_AUTO | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, 0,
                         NULL, NULL, handler, NULL, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                         MHD_OPTION_THREAD_POOL_SIZE, 2u, MHD_OPTION_CONNECTION_TIMEOUT, 30u,
                         MHD_OPTION_CONNECTION_LIMIT, 4096u, MHD_OPTION_END);
    if (d == NULL)
        return 1;
    info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    printf("listening on http://127.0.0.1:%u\n", info ? info->port : 0);
    fflush(stdout);
    sigwait(&set, &sig);
    MHD_stop_daemon(d);
    free(answer);
    return 0;
}
