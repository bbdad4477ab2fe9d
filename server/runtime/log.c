/* log.c - see log.h. */
#include "runtime/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>

/* msg as a JSON string's characters into out (cap bytes, NUL-terminated). */
static void json_escape(char *out, size_t cap, const char *msg)
{
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)msg; *p != '\0' && o + 7 < cap; p++) {
        if (*p == '"' || *p == '\\') {
            out[o++] = '\\';
            out[o++] = (char)*p;
        } else if (*p < 0x20) {
            o += (size_t)snprintf(out + o, cap - o, "\\u%04x", *p);
        } else {
            out[o++] = (char)*p;
        }
    }
    out[o] = '\0';
}

void srv_log_event(srv_log_format f, const char *level, const char *event, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    srv_log_eventv(f, level, event, fmt, ap);
    va_end(ap);
}

void srv_log_eventv(srv_log_format f, const char *level, const char *event, const char *fmt,
                    va_list ap)
{
    char msg[2048], esc[4096], ts[32];
    time_t now = time(NULL);
    struct tm tm;

    vsnprintf(msg, sizeof msg, fmt, ap);
    if (f != SRV_LOG_JSON) {
        fprintf(stderr, "posattnd: %s\n", msg);
        return;
    }
    gmtime_r(&now, &tm);
    strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tm);
    json_escape(esc, sizeof esc, msg);
    fprintf(stderr, "{\"ts\":\"%s\",\"level\":\"%s\",\"event\":\"%s\",\"message\":\"%s\"}\n", ts,
            level, event, esc);
}
