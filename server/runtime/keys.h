/* keys.h - the API keys posattnd accepts: --api-key (one, for development)
 * and --api-key-file (one per line, any of them accepted, so a new key can
 * be added before the old one is removed). Read before the server listens,
 * and again on SIGHUP or when the file changes (main.c): the set in force
 * lives in a keyring that swaps sets atomically. A key is never logged,
 * only its number (keys_match).
 */
#ifndef SRV_KEYS_H
#define SRV_KEYS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

enum { SRV_MAX_KEYS = 64, SRV_KEY_MAX = 255 };

typedef struct srv_keys {
    size_t n;
    size_t len[SRV_MAX_KEYS];
    char key[SRV_MAX_KEYS][SRV_KEY_MAX + 1];
    int line[SRV_MAX_KEYS]; /* the line of the file, 0 for --api-key */
} srv_keys;

/* Fills *k from inline_key (may be "" or NULL) and the file at path (may be
 * "" or NULL): one key per line, surrounding blanks trimmed, blank lines and
 * lines starting with '#' ignored; a key is 1 to 255 visible ASCII
 * characters (RFC 6750's token68 and more). A file others than its owner can
 * read (o+r, or g+r for a group not this process's) is loaded with a
 * warning on warn. False with a message naming the
 * file and the line in err on any other problem (unreadable, a bad line, no
 * key in it, more than SRV_MAX_KEYS). */
bool srv_keys_load(srv_keys *k, const char *inline_key, const char *path, FILE *warn, char *err,
                   size_t cap);

/* The index of the key equal to cand[0..len) (compared in time independent
 * of where they differ, over every key), or -1. */
int srv_keys_match(const srv_keys *k, const char *cand, size_t len);

/* How the access log names key i: "flag" or "line N". */
void srv_keys_name(const srv_keys *k, int i, char *buf, size_t cap);

/* The set of keys in force, read by the HTTP threads while one thread (the
 * main thread, on SIGHUP or a changed file) replaces it. A request sees
 * either the old set or the new one, never neither: readers take the set
 * with one atomic load, and a replaced set is freed only once no reader
 * holds it. */
typedef struct srv_keyring srv_keyring;

/* A keyring holding a copy of *initial; NULL on allocation failure. */
srv_keyring *srv_keyring_new(const srv_keys *initial);
/* Frees it and its set; no reader may hold it. NULL is a no-op. */
void srv_keyring_free(srv_keyring *r);
/* The set in force, valid until the matching srv_keyring_release; keep the
 * hold short (a lookup). Lock-free; any thread. */
const srv_keys *srv_keyring_acquire(srv_keyring *r);
void srv_keyring_release(srv_keyring *r);
/* Puts a copy of *keys in force and frees the set it replaces once no
 * reader holds it (waiting for those that do: each holds it for a lookup).
 * One writer at a time. False (the old set stays) on allocation failure. */
bool srv_keyring_swap(srv_keyring *r, const srv_keys *keys);

#endif
