/* snapshot.h - the sessions' saves to --cache-dir while posattnd runs
 * (--cache-snapshot-s N): a thread of its own that sleeps N seconds on a
 * condition variable, saves every session (store/kv_snapshot.h's
 * srv_kv_save_all) and sleeps again, until stopped at drain. The load at
 * start and the last save at drain are main.c's.
 */
#ifndef SRV_SNAPSHOT_H
#define SRV_SNAPSHOT_H

#include "runtime/config.h"
#include "store/kv_cache.h"

typedef struct srv_snapshotter srv_snapshotter;

/* Starts saving c's sessions to dir (which must outlive it) every
 * period_s seconds (> 0); failures are logged (runtime/log.h, in format
 * f). NULL when the thread cannot start. */
srv_snapshotter *srv_snapshotter_start(srv_kv_cache *c, const char *dir, int period_s,
                                       srv_log_format f);
/* Wakes the thread, waits for a save under way to finish, joins it and
 * frees it. NULL: no-op. */
void srv_snapshotter_stop(srv_snapshotter *s);

#endif
