/* json_lift.h - tensor number arrays parsed before cJSON sees the body.
 *
 * cJSON makes one 64-byte node per number and parses it with strtod (about
 * 5 M floats/s here); a JSON request is mostly the "data" arrays of its
 * tensors. srv_lift_scan finds each value of a "data" key that is a regular
 * array of numbers (flat, or nested with equal lengths at each depth, up to
 * SRV_MAX_DIMS deep), parses it straight into floats, and writes a copy of
 * the body in which each such array is replaced by a short marker string.
 * The value of a "b64" key is decoded from the body in place the same way
 * (cJSON would copy the string, byte by byte, before the decode). cJSON
 * then parses the small remainder, and srv_tensor_parse takes the floats of
 * a marker (srv_lift_take) instead of walking nodes.
 *
 * Nothing changes but speed:
 *  - a number is the same float either way (Clinger's exact fast path where
 *    it applies, strtod otherwise, then the same float conversion);
 *  - an array that is not plainly valid (a non-number, an empty or ragged
 *    array, a number outside float32, a token JSON does not allow) is left
 *    in the text for cJSON and the usual checks and messages;
 *  - a lifted array whose nesting does not fit the tensor's shape is parsed
 *    again from its original text by cJSON for the usual error;
 *  - markers are "\u0001" followed by the array's index, and nothing is
 *    lifted from a body with a "\u" escape or a control byte in a string,
 *    so no string of the client's can be taken for a marker.
 */
#ifndef SRV_JSON_LIFT_H
#define SRV_JSON_LIFT_H

#include "codec/float32.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct srv_lifted {
    float *data; /* n floats, row-major; malloc'd, owned by the lift until taken */
    size_t n;
    bool b64;  /* decoded base64 (little-endian float32 bytes), not numbers */
    int depth; /* numbers: 1 for a flat array */
    int64_t dims[SRV_MAX_DIMS];
    const char *text; /* the array's original text (in the caller's body) */
    size_t text_len;
} srv_lifted;

typedef struct srv_lift {
    srv_lifted *items;
    size_t count, cap;
    size_t bytes; /* of the floats and the text, for the request memory bound */
    char *text;   /* the body with markers; NUL-terminated; NULL when nothing was lifted */
    size_t len;
} srv_lift;

/* Scans body (len bytes; it must outlive the lift). Returns true with
 * lift->text set when at least one array was lifted; false (lift empty) when
 * none was or memory ran out, and the caller parses body as it is. */
bool srv_lift_scan(const char *body, size_t len, srv_lift *lift);
void srv_lift_free(srv_lift *lift);

/* The lifted value a marker node stands for in lift, or NULL when node is
 * not one of its markers (or lift is NULL). The lift travels with the
 * request being parsed (api/'s parser context), never in a global. */
const srv_lifted *srv_lift_find(const srv_lift *lift, const cJSON *node);
/* A marker node's original text as cJSON reads it (the caller deletes the
 * tree): for the readers the floats do not serve (integers, a nesting that
 * does not fit the shape, a 1-D list passed on as nodes), which then read
 * what the client sent. NULL with *failed false when node is not a marker
 * (or lift is NULL); NULL with *failed true when the text could not be
 * parsed, which can only be memory running out (it was valid JSON). */
cJSON *srv_lift_reparse(const srv_lift *lift, const cJSON *node, bool *failed);
/* The floats of a marker node when they fit the tensor: numbers flat with
 * count values or nested exactly as shape, or base64 of count floats (b64
 * says which the tensor holds). The caller owns them (malloc'd) from then
 * on: the lift gives them up, so the same marker is taken once. NULL when
 * node is not a marker or does not fit (srv_lift_find then gives its text,
 * for the usual checks and error). */
float *srv_lift_take(const srv_lift *lift, const cJSON *node, bool b64, int ndim,
                     const int64_t *shape, size_t count);

/* The bytes of a lifted base64 marker when they are nbytes long, given up
 * to the caller as srv_lift_take gives floats (for 16-bit tensors: the
 * lift decodes base64 as whole float32 words, so nbytes is a multiple of
 * 4, and has checked nothing but those words' finiteness). NULL when node
 * is not such a marker or the size differs. */
void *srv_lift_take_bytes(const srv_lift *lift, const cJSON *node, size_t nbytes);

/* Tests: true makes the lift parse numbers with its scalar code only, as on
 * a CPU without AVX-512 VBMI2 (the default, false, picks by CPU). */
void srv_lift_force_scalar(bool on);

#endif
