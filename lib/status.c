/* status.c - status codes, their names and the error-reporting helper.
 *
 * The names and descriptions come from the one PA_STATUS_MAP table in
 * posattn.h, which the server also uses to map statuses to HTTP answers.
 */
#include "internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *pa_status_name(pa_status status)
{
    switch (status) {
#define PA__STATUS_NAME(name, value, desc)                                                 \
    case PA_STATUS_##name:                                                                 \
        return #name;
        PA_STATUS_MAP(PA__STATUS_NAME)
#undef PA__STATUS_NAME
    }
    return "UNKNOWN";
}

const char *pa_strerror(pa_status status)
{
    switch (status) {
#define PA__STATUS_DESC(name, value, desc)                                                 \
    case PA_STATUS_##name:                                                                 \
        return desc;
        PA_STATUS_MAP(PA__STATUS_DESC)
#undef PA__STATUS_DESC
    }
    return "unknown status";
}

pa_status pa__fail(pa_error *err, pa_status status, const char *field, const char *fmt, ...)
{
    if (err != NULL) {
        va_list ap;
        err->status = status;
        snprintf(err->field, sizeof err->field, "%s", field != NULL ? field : "");
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
    }
    return status;
}
