/* log.h - posattnd's event lines on stderr (start-up, drain, snapshots),
 * beside the access log of http/: one line each, JSON with --log-format
 * json ({"ts","level","event","message"}), else text ("posattnd: ...").
 */
#ifndef SRV_LOG_H
#define SRV_LOG_H

#include "runtime/config.h"

/* Writes one line (fmt as printf) for event (a short word: "session_load")
 * at level ("info", "warn", "error"); --log-format off still writes it as
 * text: these lines are rare and an operator needs them. Thread safe (one
 * fprintf per line). */
void srv_log_event(srv_log_format f, const char *level, const char *event, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
