/* tls.h - HTTPS for posattnd (--tls-cert, --tls-key): the certificate and
 * key, read and checked with GnuTLS (the library libmicrohttpd does TLS
 * with) before the server listens, and the protocol and cipher priorities.
 */
#ifndef SRV_TLS_H
#define SRV_TLS_H

#include <stdbool.h>
#include <stddef.h>

/* TLS 1.3 and 1.2 only; AEAD ciphers only (AES-GCM, ChaCha20-Poly1305);
 * forward-secret key exchange only (ECDHE; TLS 1.3's own groups); the
 * server's order. GnuTLS's SECURE128 base keeps keys and curves of at
 * least 128-bit security. */
extern const char srv_tls_priorities[];

typedef struct srv_tls {
    char *cert_pem; /* the certificate chain, PEM, NUL-terminated */
    char *key_pem;  /* its private key, PEM */
} srv_tls;

/* Reads and checks the pair: each file readable and PEM of its kind, the
 * key the certificate's, the certificate valid now (not expired, not yet
 * to come), the priorities accepted by GnuTLS. False with a message naming
 * the file in err. */
bool srv_tls_load(const char *cert_path, const char *key_path, srv_tls *out, char *err, size_t cap);

void srv_tls_free(srv_tls *t);

#endif
