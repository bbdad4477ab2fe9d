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
/* A --cache-dir shared by replicas (--cache-shared; docs/sessions.md,
 * "A shared --cache-dir"). Each replica keeps its files in root/REPLICA/
 * and holds root/REPLICA/.lock (flock) for as long as it runs. The rule:
 * a replica writes, sweeps and loads at start only its own folder; it may
 * take over another replica's file only while it holds that replica's
 * lock, which it gets only when that replica is not running; it takes the
 * file by renaming it into its own folder (atomic: one taker wins), so
 * the old owner, started again, neither loads nor overwrites it.
 *
 * srv_kv_dir_own makes root/replica (replica: srv_kv_id_valid's charset),
 * takes its lock (waiting up to wait_s seconds: another replica may be
 * taking over a file) and writes the folder into dir and the lock's fd
 * into *lock_fd (the caller keeps it open while it runs). False with the
 * reason in err: a bad name, a folder that cannot be made, or the lock
 * held for longer (another process runs as that replica). It removes
 * the folder's draining mark.
 *
 * srv_kv_dir_draining marks this replica's folder dir (dir/.draining) as
 * draining: its sessions are not yet in files, but will be once it has
 * answered its last requests and saved them. */
void srv_kv_dir_draining(const char *dir);
bool srv_kv_dir_own(const char *root, const char *replica, double wait_s, char *dir, size_t cap,
                    int *lock_fd, char *err, size_t ecap);
/* Loads session id, which c does not hold, from another replica's folder
 * under root into c, taking the file over as above (self: this replica).
 * SESSION_NOT_FOUND when no folder holds it, or when the one that does
 * belongs to a running replica (the message names it: "replica A holds
 * it and is running"); when no folder holds it while a replica drains
 * (srv_kv_dir_draining, and that replica runs), the message says so
 * ("replica A is draining and may hold it: retry"); a file that does
 * not load is kept in self's folder for an operator (INTERNAL, or the
 * import's CACHE_FULL). True once c holds the session. Thread safe. */
bool srv_kv_adopt(srv_kv_cache *c, const char *root, const char *self, const char *id,
                  srv_kv_scheme_fn mk, void *arg, srv_kv_err *e);
/* Removes dir/ID.safetensors (after a delete); no error when absent. */
void srv_kv_unlink(const char *dir, const char *id);

#endif
