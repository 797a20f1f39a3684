/* The TLS transport (tls://HOST:PORT): TLS 1.3 over the TCP transport.
 *
 * OpenSSL performs the handshake; after it the connection's records are written and
 * read by this transport itself (AES-GCM through EVP, RFC 8446 section 5), or by the
 * kernel where it has TLS offload (kTLS: the "tls" upper-layer protocol). Owning the
 * record state is what lets remorad's accepting process hand a connection to a worker
 * process: export_fd gives the descriptor and the record state (keys, sequence numbers),
 * adopt_fd takes both (transport.h, RM_TRANSPORT_STATE_MAX).
 *
 * Each process configures its side once, before the first dial or listen. Handshake
 * failures are described by rm_transport_why() (transport.h) in one line. */
#ifndef REMORA_TLS_H
#define REMORA_TLS_H

#include <stddef.h>

/* The daemon's side: its certificate chain and key (PEM); client_ca, when not NULL,
 * makes a client certificate signed by it required. 0, or -1 with why filled; on 0, why
 * holds a warning to log (a certificate expired or expiring within 30 days) or "". */
int rm_tls_server_configure(const char *cert, const char *key, const char *client_ca, char *why, size_t whylen);

/* The client's side: the CA that signed the daemon's certificate (NULL: the system's
 * store), and an optional client certificate and key. 0, or -1 with why filled. */
int rm_tls_client_configure(const char *ca, const char *cert, const char *key, char *why, size_t whylen);

/* The client's side from REMORA_TLS_CA, REMORA_TLS_CERT and REMORA_TLS_KEY (once per
 * process; later calls return the first one's result). */
int rm_tls_client_configure_env(char *why, size_t whylen);

/* Whether kernel TLS offload carried this process's last connection (for logs and tests):
 * bit 0 sending, bit 1 receiving. */
int rm_tls_last_ktls(void);
/* Whether this host's kernel takes TLS records (the "tls" upper-layer protocol: `modprobe
 * tls`), tried once on a loopback connection: 1 or 0. */
int rm_tls_kernel_available(void);

#endif
