/* The TLS transport's private parts (tls.c, tls_config.c, tls_records.c): a connection's
 * state, the record layer's sizes, and what the three files share. */
#ifndef REMORA_TLS_CONN_H
#define REMORA_TLS_CONN_H

#include "tls.h"

#include <errno.h>
#include <linux/tls.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <arpa/inet.h>

#include "transport.h"

#define REC_TYPE_ALERT 0x15
#define REC_TYPE_HANDSHAKE 0x16
#define REC_TYPE_DATA 0x17
#define REC_HDR 5
#define REC_TAG 16
#define REC_PLAIN_MAX 16384                        /* 2^14 bytes of data a record */
#define REC_CIPHER_MAX (REC_PLAIN_MAX + 256)      /* what a peer may send (RFC 8446 5.2) */
#define REC_OUT (REC_HDR + REC_PLAIN_MAX + 1 + REC_TAG) /* the largest record we write */
#define WBUF_RECORDS 8                            /* records gathered into one send: 128 KiB */
#define RBUF_CAP (16 * (REC_HDR + REC_CIPHER_MAX)) /* read ahead: several records a recv */
#define SECRET_MAX 48

#ifndef SOL_TLS
#define SOL_TLS 282
#endif
#ifndef TCP_ULP
#define TCP_ULP 31
#endif

enum suite { SUITE_NONE, SUITE_AES128, SUITE_AES256 };

/* One direction's record state. */
struct direction {
	EVP_CIPHER_CTX *ctx;
	uint8_t key[32];
	uint8_t iv[12];
	uint64_t seq;
	int ktls; /* the kernel frames this direction */
};

struct tls_conn {
	struct rm_conn base;
	struct rm_conn *raw; /* the TCP connection underneath */
	int fd;
	SSL *ssl;            /* during the handshake only */
	int server;
	int err;             /* the handshake's failure, kept for every later call */
	enum suite suite;
	uint8_t secret_tx[SECRET_MAX], secret_rx[SECRET_MAX];
	size_t secret_len;
	int secrets;         /* bit 0: tx secret seen, bit 1: rx secret seen */
	int cert_requested;  /* the server asked for a client certificate this end has not */
	struct direction tx, rx;
	uint8_t *wbuf;
	uint8_t *rbuf;
	size_t rstart, rend;  /* raw bytes not yet taken as a record */
	size_t pstart, pend;  /* the current record's data not yet given out */
	char identity[64];    /* the verified certificate's common name; "" for none */
};

static inline struct tls_conn *tls(struct rm_conn *c)
{
	return (struct tls_conn *)c;
}

/* The handed-over state: fixed layout, both ends are the same program. */
struct handover {
	uint8_t version, suite, ktls_tx, ktls_rx;
	uint8_t tx_key[32], tx_iv[12];
	uint8_t rx_key[32], rx_iv[12];
	uint64_t tx_seq, rx_seq;
};
_Static_assert(sizeof(struct handover) <= RM_TRANSPORT_STATE_MAX, "state fits a handoff");

/* tls_config.c: the contexts of this process's two sides (NULL until configured), and
 * whether the server asks every client for a certificate. */
extern SSL_CTX *tls_server_ctx, *tls_client_ctx;
extern int tls_clients_verified;

/* tls_records.c: the record keys from the handshake's secrets (or a handed-over state),
 * offered to the kernel where try_ktls; the last connection's kTLS bits (rm_tls_last_ktls). */
int tls_records_start(struct tls_conn *c, int try_ktls);
/* The record keys and ivs from the handshake's traffic secrets, which are then wiped. */
int tls_keys_from_secrets(struct tls_conn *c);
/* The connection ops the record layer serves (transport.h). */
int tls_sendv(struct rm_conn *conn, const struct iovec *iov, int iovcnt);
ssize_t tls_recv_some(struct rm_conn *conn, void *buf, size_t len);
int tls_readable(struct rm_conn *conn);
int tls_writable(struct rm_conn *conn, size_t len);
extern int tls_last_ktls_bits;

/* tls.c: an accepted connection's handshake, at its first read or write; a connection
 * freed, with what it holds. */
int tls_server_handshake(struct tls_conn *c);
void tls_conn_free(struct tls_conn *c);

/* Runs an accepted connection's handshake where it is pending; returns its failure. */
#define READY(c)                                                            \
	do {                                                                \
		if (__builtin_expect((c)->ssl != NULL || (c)->err, 0)) {    \
			int e_ = (c)->ssl ? tls_server_handshake(c) : (c)->err; \
			if (e_)                                             \
				return e_;                                  \
		}                                                           \
	} while (0)

#endif
