/* batch_status.c - the HTTP status a /v1/attention answer must have, from
 * its body (batch_status.h). */
#include "batch_status.h"

#include <string.h>

/* Item statuses from their codes, written out here on their own (not
 * server/common/errors.h), so that the rule is checked, not restated. */
static int item_code_status(const char *code)
{
    static const struct {
        const char *code;
        int status;
    } t[] = {{"PAYLOAD_TOO_LARGE", 413}, {"TIMEOUT", 504},        {"OVERLOADED", 503},
             {"DRAINING", 503},          {"INTERNAL", 500},       {"NOT_FOUND", 404},
             {"UNAUTHORIZED", 401},      {"NOT_IMPLEMENTED", 501}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (strcmp(code, t[i].code) == 0)
            return t[i].status;
    return 400;
}

int batch_status_of(const cJSON *ans)
{
    const cJSON *o;
    int st = -1;
    cJSON_ArrayForEach(o, cJSON_GetObjectItemCaseSensitive(ans, "outputs"))
    {
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(o, "error");
        const char *code = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "code"));
        int s = code != NULL ? item_code_status(code) : 200;
        st = st == -1 || st == s ? s : (st == 200 || s == 200 ? 200 : 400);
    }
    return st == -1 ? 200 : st;
}
