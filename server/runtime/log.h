/* log.h - posattnd's event lines on stderr (start-up, drain, snapshots,
 * libmicrohttpd's own messages), beside the access log of http/: one line
 * each, JSON with --log-format json ({"ts","level","event","message"}),
 * else text ("posattnd: ..."). Every line posattnd writes on stderr after
 * its options are read goes through here or the access log, so that with
 * json each one is a JSON object.
 */
#ifndef SRV_LOG_H
#define SRV_LOG_H

#include "runtime/config.h"

#include <stdarg.h>

/* Writes one line (fmt as printf) for event (a short word: "session_load")
 * at level ("info", "warn", "error"); --log-format off still writes it as
 * text: these lines are rare and an operator needs them. Thread safe (one
 * fprintf per line). */
void srv_log_event(srv_log_format f, const char *level, const char *event, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The same with the arguments in ap. */
void srv_log_eventv(srv_log_format f, const char *level, const char *event, const char *fmt,
                    va_list ap) __attribute__((format(printf, 4, 0)));

#endif
