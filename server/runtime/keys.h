/* keys.h - the API keys posattnd accepts: --api-key (one, for development)
 * and --api-key-file (one per line, any of them accepted, so a new key can
 * be added before the old one is removed). Read once, before the server
 * listens; a key is never logged, only its number (keys_match).
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

#endif
