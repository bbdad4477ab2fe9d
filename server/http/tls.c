/* tls.c - see tls.h. */
#include "http/tls.h"

#include <errno.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char srv_tls_priorities[] =
    "SECURE128:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2:-CIPHER-ALL:+AES-256-GCM:+AES-128-GCM:"
    "+CHACHA20-POLY1305:-MAC-ALL:+AEAD:-KX-ALL:+ECDHE-ECDSA:+ECDHE-RSA:%SERVER_PRECEDENCE";

/* The whole file, NUL-terminated (PEM is text); at most 1 MB. */
static char *read_file(const char *path, const char *what, size_t *len, char *err, size_t cap)
{
    FILE *f = fopen(path, "rb");
    char *buf;
    long n;
    if (f == NULL) {
        snprintf(err, cap, "%s: cannot open the TLS %s: %s", path, what, strerror(errno));
        return NULL;
    }
    if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || n > (1 << 20) ||
        fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        snprintf(err, cap, "%s: the TLS %s is not a readable file of at most 1 MB", path, what);
        return NULL;
    }
    buf = malloc((size_t)n + 1);
    if (buf == NULL || fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        fclose(f);
        snprintf(err, cap, "%s: cannot read the TLS %s", path, what);
        return NULL;
    }
    fclose(f);
    buf[n] = '\0';
    *len = (size_t)n;
    return buf;
}

static void date_of(time_t t, char *buf, size_t cap)
{
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, cap, "%Y-%m-%d %H:%M:%S UTC", &tm);
}

bool srv_tls_load(const char *cert_path, const char *key_path, srv_tls *out, char *err, size_t cap)
{
    size_t cl = 0, kl = 0;
    char *cert = NULL, *key = NULL, when[40];
    gnutls_x509_crt_t crt = NULL;
    gnutls_x509_privkey_t pk = NULL;
    gnutls_certificate_credentials_t cred = NULL;
    gnutls_priority_t prio = NULL;
    gnutls_datum_t cd, kd;
    const char *at = NULL;
    time_t now = time(NULL), t;
    int rc;
    bool ok = false;

    memset(out, 0, sizeof *out);
    if ((cert = read_file(cert_path, "certificate", &cl, err, cap)) == NULL ||
        (key = read_file(key_path, "key", &kl, err, cap)) == NULL)
        goto done;
    cd = (gnutls_datum_t){(unsigned char *)cert, (unsigned)cl};
    kd = (gnutls_datum_t){(unsigned char *)key, (unsigned)kl};
    if (gnutls_x509_crt_init(&crt) < 0 || gnutls_x509_privkey_init(&pk) < 0 ||
        gnutls_certificate_allocate_credentials(&cred) < 0) {
        snprintf(err, cap, "out of memory checking the TLS pair");
        goto done;
    }
    if ((rc = gnutls_x509_crt_import(crt, &cd, GNUTLS_X509_FMT_PEM)) < 0) {
        snprintf(err, cap, "%s: not a PEM certificate (%s)", cert_path, gnutls_strerror(rc));
        goto done;
    }
    if ((rc = gnutls_x509_privkey_import2(pk, &kd, GNUTLS_X509_FMT_PEM, NULL, 0)) < 0) {
        snprintf(err, cap, "%s: not a PEM private key without a passphrase (%s)", key_path,
                 gnutls_strerror(rc));
        goto done;
    }
    if ((t = gnutls_x509_crt_get_expiration_time(crt)) != (time_t)-1 && t < now) {
        date_of(t, when, sizeof when);
        snprintf(err, cap, "%s: the certificate expired on %s", cert_path, when);
        goto done;
    }
    if ((t = gnutls_x509_crt_get_activation_time(crt)) != (time_t)-1 && t > now) {
        date_of(t, when, sizeof when);
        snprintf(err, cap, "%s: the certificate is not valid before %s", cert_path, when);
        goto done;
    }
    rc = gnutls_certificate_set_x509_key_mem2(cred, &cd, &kd, GNUTLS_X509_FMT_PEM, NULL, 0);
    if (rc == GNUTLS_E_CERTIFICATE_KEY_MISMATCH) {
        snprintf(err, cap, "%s: the key does not belong to the certificate %s", key_path,
                 cert_path);
        goto done;
    }
    if (rc < 0) {
        snprintf(err, cap, "%s, %s: %s", cert_path, key_path, gnutls_strerror(rc));
        goto done;
    }
    if ((rc = gnutls_priority_init(&prio, srv_tls_priorities, &at)) < 0) {
        snprintf(err, cap, "GnuTLS refuses the priorities at '%.24s' (%s)", at ? at : "",
                 gnutls_strerror(rc));
        goto done;
    }
    out->cert_pem = cert;
    out->key_pem = key;
    cert = key = NULL;
    ok = true;
done:
    if (prio != NULL)
        gnutls_priority_deinit(prio);
    if (cred != NULL)
        gnutls_certificate_free_credentials(cred);
    if (pk != NULL)
        gnutls_x509_privkey_deinit(pk);
    if (crt != NULL)
        gnutls_x509_crt_deinit(crt);
    free(cert);
    if (key != NULL) {
        memset(key, 0, kl); /* the private key: not left in freed memory */
        free(key);
    }
    return ok;
}

void srv_tls_free(srv_tls *t)
{
    if (t == NULL)
        return;
    free(t->cert_pem);
    if (t->key_pem != NULL) {
        memset(t->key_pem, 0, strlen(t->key_pem));
        free(t->key_pem);
    }
    t->cert_pem = t->key_pem = NULL;
}
