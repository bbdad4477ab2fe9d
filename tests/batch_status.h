/* batch_status.h - the HTTP status a /v1/attention batch answer must have
 * (docs/api.md, "Routes"): 200 when any item succeeded (errors: true marks
 * the others); when every item failed, their status, or 400 when they
 * differ. Shared by the in-process and the HTTP test harnesses. */
#ifndef POSATTN_TESTS_BATCH_STATUS_H
#define POSATTN_TESTS_BATCH_STATUS_H

#include <cjson/cJSON.h>

/* The status the rule gives the answer ans ({"outputs":[...]}). */
int batch_status_of(const cJSON *ans);

#endif
