/* keys.c - see keys.h. */
#include "runtime/keys.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static bool fail(char *err, size_t cap, const char *msg, const char *path, int line)
{
    if (line > 0)
        snprintf(err, cap, "%s line %d: %s", path, line, msg);
    else
        snprintf(err, cap, "%s: %s", path, msg);
    return false;
}

static bool add(srv_keys *k, const char *s, size_t n, int line)
{
    if (k->n == SRV_MAX_KEYS)
        return false;
    memcpy(k->key[k->n], s, n);
    k->key[k->n][n] = '\0';
    k->len[k->n] = n;
    k->line[k->n] = line;
    k->n++;
    return true;
}

bool srv_keys_load(srv_keys *k, const char *inline_key, const char *path, FILE *warn, char *err,
                   size_t cap)
{
    char buf[1024];
    int line = 0;
    size_t from_file = 0;
    struct stat st;
    FILE *f;

    memset(k, 0, sizeof *k);
    if (inline_key != NULL && inline_key[0] != '\0')
        add(k, inline_key, strlen(inline_key), 0);
    if (path == NULL || path[0] == '\0')
        return true;
    if ((f = fopen(path, "r")) == NULL) {
        snprintf(err, cap, "%s: cannot open the API key file: %s", path, strerror(errno));
        return false;
    }
    /* Others than its owner: anyone (o+r), or a group that is not this
     * process's own (Kubernetes gives Secret files the pod's fsGroup). */
    if (fstat(fileno(f), &st) == 0 && warn != NULL &&
        ((st.st_mode & 004) != 0 || ((st.st_mode & 040) != 0 && st.st_gid != getegid())))
        fprintf(warn,
                "posattnd: warning: the API key file %s can be read by others than its owner "
                "(mode %03o): chmod 600 it\n",
                path, (unsigned)(st.st_mode & 0777));
    while (fgets(buf, sizeof buf, f) != NULL) {
        size_t n = strlen(buf);
        char *s = buf;
        line++;
        if (n == sizeof buf - 1 && buf[n - 1] != '\n') {
            fclose(f);
            return fail(err, cap, "the line is longer than any key can be", path, line);
        }
        while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ' ||
                         buf[n - 1] == '\t'))
            buf[--n] = '\0';
        while (*s == ' ' || *s == '\t')
            s++, n--;
        if (n == 0 || *s == '#')
            continue;
        if (n > SRV_KEY_MAX) {
            fclose(f);
            return fail(err, cap, "the key is longer than 255 characters", path, line);
        }
        for (size_t i = 0; i < n; i++) {
            if ((unsigned char)s[i] < 0x21 || (unsigned char)s[i] > 0x7e) {
                fclose(f);
                return fail(err, cap,
                            "the key holds a character that is not visible ASCII (a space "
                            "inside it, a control or a non-ASCII byte)",
                            path, line);
            }
        }
        if (!add(k, s, n, line)) {
            fclose(f);
            return fail(err, cap, "more than 64 keys", path, line);
        }
        from_file++;
    }
    if (ferror(f)) {
        fclose(f);
        return fail(err, cap, "read error", path, 0);
    }
    fclose(f);
    if (from_file == 0)
        return fail(err, cap, "the API key file holds no key (only blank lines and # comments)",
                    path, 0);
    return true;
}

/* Constant in time over each key's whole length and over every key. */
int srv_keys_match(const srv_keys *k, const char *cand, size_t len)
{
    int found = -1;
    for (size_t i = 0; i < k->n; i++) {
        unsigned char diff = (unsigned char)(k->len[i] != len);
        for (size_t j = 0; j < k->len[i]; j++)
            diff |= (unsigned char)(k->key[i][j] ^ (j < len ? cand[j] : 0));
        if (diff == 0 && found < 0)
            found = (int)i;
    }
    return found;
}

void srv_keys_name(const srv_keys *k, int i, char *buf, size_t cap)
{
    if (i < 0 || (size_t)i >= k->n)
        snprintf(buf, cap, "-");
    else if (k->line[i] == 0)
        snprintf(buf, cap, "flag");
    else
        snprintf(buf, cap, "line %d", k->line[i]);
}

/* ------------------------------------------------------------------------- */
/* The keyring                                                               */
/* ------------------------------------------------------------------------- */

struct srv_keyring {
    _Atomic(srv_keys *) current;
    atomic_int readers; /* holding a set from srv_keyring_acquire */
};

srv_keyring *srv_keyring_new(const srv_keys *initial)
{
    srv_keyring *r = calloc(1, sizeof *r);
    srv_keys *k = malloc(sizeof *k);
    if (r == NULL || k == NULL) {
        free(r);
        free(k);
        return NULL;
    }
    *k = *initial;
    atomic_init(&r->current, k);
    atomic_init(&r->readers, 0);
    return r;
}

void srv_keyring_free(srv_keyring *r)
{
    if (r == NULL)
        return;
    free(atomic_load(&r->current));
    free(r);
}

const srv_keys *srv_keyring_acquire(srv_keyring *r)
{
    /* Counted before the load: a writer that sees no readers after its
     * exchange knows no one can still hold the old set. */
    atomic_fetch_add(&r->readers, 1);
    return atomic_load(&r->current);
}

void srv_keyring_release(srv_keyring *r)
{
    atomic_fetch_sub(&r->readers, 1);
}

bool srv_keyring_swap(srv_keyring *r, const srv_keys *keys)
{
    srv_keys *k = malloc(sizeof *k), *old;
    if (k == NULL)
        return false;
    *k = *keys;
    old = atomic_exchange(&r->current, k);
    /* A reader counted now took the new set or is about to finish with the
     * old one: wait out the count once it drops to zero. Holds last a
     * lookup, so this is microseconds even under load. */
    while (atomic_load(&r->readers) != 0) {
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
    free(old);
    return true;
}
