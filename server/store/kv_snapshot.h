/* kv_snapshot.h - sessions on disk (--cache-dir): one safetensors file per
 * session, ID.safetensors, holding its keys as kept ("k" F32 [n, Hkv, D]),
 * values ("v" F32 [n, Hkv, Dv]), each slot's position ("positions" I32
 * [n]) and, when it re-rotates sinks, their raw keys ("sink_raw" F32
 * [sinks, Hkv, D]); the rest of its state and its scheme (the request's
 * JSON; for a session made from a served model, the scheme its layer
 * derived, with "model" and "layer") as string metadata under
 * "__metadata__" (format "posattn-session-1"). A file is written to a temporary name, fsynced,
 * renamed over the old one and the directory fsynced: a crash leaves the
 * old file or the new one, never half of one.
 */
#ifndef SRV_KV_SNAPSHOT_H
#define SRV_KV_SNAPSHOT_H

#include "store/kv_cache.h"

#include <stdbool.h>
#include <stddef.h>

/* Makes a session's scheme from the JSON a snapshot kept: fills
 * spec->scheme, scheme_owner and scheme_free (the owner freed by the
 * cache), or returns false with the reason in err. spec->model and
 * spec->layer are the file's (NULL: none), and its dims, for a check. */
typedef bool (*srv_kv_scheme_fn)(void *arg, const char *scheme_json, srv_kv_spec *spec, char *err,
                                 size_t cap);

/* Writes session id to dir/ID.safetensors. A session without its
 * scheme's JSON (spec.scheme_json NULL) is refused (INTERNAL); one deleted
 * while it was written is SESSION_NOT_FOUND and its file is removed again,
 * so that a save racing a delete (and its srv_kv_unlink) never leaves the
 * deleted session on disk. */
bool srv_kv_save(srv_kv_cache *c, const char *id, const char *dir, srv_kv_err *e);
/* Writes every session, then removes the files of sessions no longer
 * there; returns how many were written, *failed how many were not (the
 * first reason in err). */
size_t srv_kv_save_all(srv_kv_cache *c, const char *dir, size_t *failed, char *err, size_t cap);
/* Loads every ID.safetensors of dir into c. A file that cannot be
 * restored (truncated, corrupt, another format, a state that does not
 * hold together, no room) is reported through skip and left where it is;
 * nothing it holds is loaded. Returns how many were loaded. */
size_t srv_kv_load_dir(srv_kv_cache *c, const char *dir, srv_kv_scheme_fn mk, void *arg,
                       void (*skip)(void *arg, const char *path, const char *why));
/* Removes dir/ID.safetensors (after a delete); no error when absent. */
void srv_kv_unlink(const char *dir, const char *id);

#endif
