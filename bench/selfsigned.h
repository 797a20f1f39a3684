/* A throwaway TLS identity for `remora bench --transport tls`: a self-signed P-256
 * certificate for 127.0.0.1, made with OpenSSL's API (a GPU host may lack the openssl
 * command), used as the daemon's certificate and as the clients' CA. */
#ifndef REMORA_BENCH_SELFSIGNED_H
#define REMORA_BENCH_SELFSIGNED_H

#include <stddef.h>

/* Writes dir/cert.pem and dir/key.pem (mode 0600; dir should be private), valid for a
 * day. 0, or -1 with why filled. */
int bench_selfsigned_write(const char *dir, char *why, size_t whylen);

#endif
