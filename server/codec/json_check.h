/* json_check.h - strict JSON (RFC 8259) before any parser sees a body.
 *
 * cJSON and the tensor lifter (json_lift.h) are lenient where a service
 * must not be: cJSON reads numbers with strtod ("007" is 7), stops a string
 * at an escaped NUL ("none\u0000junk" is "none") and passes invalid UTF-8
 * through to the answer. This pass accepts exactly the grammar of RFC 8259,
 * strings that are valid UTF-8 without U+0000 (escaped or not) and without
 * unpaired surrogates, and nesting up to SRV_JSON_MAX_DEPTH, in one pass
 * over the text (ASCII string bytes eight at a time).
 */
#ifndef SRV_JSON_CHECK_H
#define SRV_JSON_CHECK_H

#include <stdbool.h>
#include <stddef.h>

/* cJSON's own nesting limit. */
#define SRV_JSON_MAX_DEPTH 1000

/* True when text [len] is one JSON value with optional white space around
 * it; then *values (when values is not NULL) is how many JSON values it
 * holds, containers and members' values included: the nodes a parser makes
 * of it. Otherwise *at is the offset of the first byte that is wrong and
 * *why says what is wrong there (a static string). */
bool srv_json_check(const char *text, size_t len, size_t *at, const char **why, size_t *values);

#endif
