/* TLS transport (tls.h): TLS 1.3 over a TCP connection of the TCP transport.
 *
 * A connection goes through two stages. The handshake is OpenSSL's: on dial at once,
 * bounded by the dial's timeout; on accept at the connection's first read or write, so
 * that the accept loop never waits on a stranger (remorad's handshake deadline shuts a
 * slow one down, which ends it). The traffic secrets come from OpenSSL's key log
 * callback; once the handshake is over the SSL object is freed, and records are
 * written and read here (RFC 8446 5.2: AES-GCM, nonce = iv XOR sequence number, the
 * record header as additional data, the content type after the data), or by the
 * kernel when it takes them (kTLS). Session tickets are off and no post-handshake
 * message is expected: a record other than application data or an alert ends the
 * connection.
 *
 * Every record read is the peer's: its header is checked (type, version, a length of
 * at most 2^14 + 256) before anything is read into the buffer, and nothing of it is
 * used unless the tag verifies. */
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
#define WBUF_RECORDS 4                            /* records gathered into one send */
#define RBUF_CAP (8 * (REC_HDR + REC_CIPHER_MAX))  /* read ahead: several records a recv */
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

static struct tls_conn *tls(struct rm_conn *c)
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

static SSL_CTX *server_ctx, *client_ctx;
static int clients_verified; /* the server asks every client for a certificate */
static int last_ktls;

int rm_tls_last_ktls(void)
{
	return __atomic_load_n(&last_ktls, __ATOMIC_RELAXED);
}

/* ---- contexts ---- */

static void keylog(const SSL *ssl, const char *line);

static void ssl_why(char *why, size_t whylen, const char *what, const char *file)
{
	unsigned long e = ERR_get_error();
	char buf[200] = "";
	if (e)
		ERR_error_string_n(e, buf, sizeof(buf));
	snprintf(why, whylen, "%s %s: %s", what, file, e ? buf : "unusable");
	ERR_clear_error();
}

/* Called where the server asks for a client certificate and none is configured: noted, so
 * that the client says so instead of failing later on a closed connection. */
static int no_client_cert(SSL *ssl, X509 **x509, EVP_PKEY **pkey)
{
	struct tls_conn *c = SSL_get_app_data(ssl);
	if (c)
		c->cert_requested = 1;
	return 0;
}

static SSL_CTX *new_ctx(int server)
{
	SSL_CTX *ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
	if (!ctx)
		return NULL;
	SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
	SSL_CTX_set_max_proto_version(ctx, TLS1_3_VERSION);
	/* The suites whose records this transport (and the kernel) can take over. */
	SSL_CTX_set_ciphersuites(ctx, "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384");
	SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET);
	SSL_CTX_set_num_tickets(ctx, 0);
	SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
	SSL_CTX_set_keylog_callback(ctx, keylog);
	if (!server)
		SSL_CTX_set_client_cert_cb(ctx, no_client_cert);
	return ctx;
}

static int load_pair(SSL_CTX *ctx, const char *cert, const char *key, char *why, size_t whylen)
{
	if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1) {
		ssl_why(why, whylen, "cannot use the certificate", cert);
		return -1;
	}
	if (SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1) {
		ssl_why(why, whylen, "cannot use the private key", key);
		return -1;
	}
	if (SSL_CTX_check_private_key(ctx) != 1) {
		snprintf(why, whylen, "the key %s does not belong to the certificate %s", key, cert);
		ERR_clear_error();
		return -1;
	}
	return 0;
}

int rm_tls_server_configure(const char *cert, const char *key, const char *client_ca, char *why, size_t whylen)
{
	SSL_CTX *ctx = new_ctx(1);
	if (!ctx) {
		snprintf(why, whylen, "OpenSSL cannot make a TLS context");
		return -1;
	}
	if (load_pair(ctx, cert, key, why, whylen))
		goto fail;
	if (client_ca && *client_ca) {
		if (SSL_CTX_load_verify_locations(ctx, client_ca, NULL) != 1) {
			ssl_why(why, whylen, "cannot use the client CA", client_ca);
			goto fail;
		}
		STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(client_ca);
		if (names)
			SSL_CTX_set_client_CA_list(ctx, names);
		SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
	}
	if (server_ctx)
		SSL_CTX_free(server_ctx);
	server_ctx = ctx;
	clients_verified = client_ca && *client_ca;
	return 0;
fail:
	SSL_CTX_free(ctx);
	return -1;
}

int rm_tls_client_configure(const char *ca, const char *cert, const char *key, char *why, size_t whylen)
{
	SSL_CTX *ctx = new_ctx(0);
	if (!ctx) {
		snprintf(why, whylen, "OpenSSL cannot make a TLS context");
		return -1;
	}
	if (ca && *ca ? SSL_CTX_load_verify_locations(ctx, ca, NULL) != 1 : SSL_CTX_set_default_verify_paths(ctx) != 1) {
		ssl_why(why, whylen, "cannot use the CA", ca && *ca ? ca : "(the system's store)");
		goto fail;
	}
	if ((cert && *cert) != (key && *key)) {
		snprintf(why, whylen, "a client certificate needs both REMORA_TLS_CERT and REMORA_TLS_KEY");
		goto fail;
	}
	if (cert && *cert && load_pair(ctx, cert, key, why, whylen))
		goto fail;
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	if (client_ctx)
		SSL_CTX_free(client_ctx);
	client_ctx = ctx;
	return 0;
fail:
	SSL_CTX_free(ctx);
	return -1;
}

static pthread_once_t env_once = PTHREAD_ONCE_INIT;
static int env_result;
static char env_why[300];

static void configure_env(void)
{
	env_result = rm_tls_client_configure(getenv("REMORA_TLS_CA"), getenv("REMORA_TLS_CERT"),
					     getenv("REMORA_TLS_KEY"), env_why, sizeof(env_why));
}

int rm_tls_client_configure_env(char *why, size_t whylen)
{
	pthread_once(&env_once, configure_env);
	if (env_result)
		snprintf(why, whylen, "%s", env_why);
	return env_result;
}

/* ---- secrets and record keys ---- */

static int unhex(const char *s, uint8_t *out, size_t cap)
{
	size_t n = 0;
	for (; s[0] && s[1] && s[0] != ' ' && n < cap; s += 2) {
		unsigned v;
		if (sscanf(s, "%2x", &v) != 1)
			return -1;
		out[n++] = (uint8_t)v;
	}
	return *s && *s != ' ' ? -1 : (int)n;
}

/* OpenSSL's key log: the application traffic secrets are the ones kept. */
static void keylog(const SSL *ssl, const char *line)
{
	struct tls_conn *c = SSL_get_app_data(ssl);
	static const char client_label[] = "CLIENT_TRAFFIC_SECRET_0 ", server_label[] = "SERVER_TRAFFIC_SECRET_0 ";
	int is_client = !strncmp(line, client_label, sizeof(client_label) - 1);
	if (!c || (!is_client && strncmp(line, server_label, sizeof(server_label) - 1)))
		return;
	const char *p = strchr(line + sizeof(client_label) - 1, ' '); /* past the client random */
	if (!p)
		return;
	int tx = is_client != c->server;
	int n = unhex(p + 1, tx ? c->secret_tx : c->secret_rx, SECRET_MAX);
	if (n <= 0)
		return;
	c->secret_len = (size_t)n;
	c->secrets |= tx ? 1 : 2;
}

/* HKDF-Expand-Label(secret, label, "", len) of RFC 8446 7.1. */
static int expand_label(const EVP_MD *md, const uint8_t *secret, size_t slen, const char *label, uint8_t *out,
			size_t len)
{
	uint8_t info[32];
	size_t ll = strlen(label), n = 0;
	info[n++] = (uint8_t)(len >> 8);
	info[n++] = (uint8_t)len;
	info[n++] = (uint8_t)(6 + ll);
	memcpy(info + n, "tls13 ", 6);
	n += 6;
	memcpy(info + n, label, ll);
	n += ll;
	info[n++] = 0;
	EVP_PKEY_CTX *k = EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, NULL);
	size_t outlen = len;
	int ok = k && EVP_PKEY_derive_init(k) > 0 && EVP_PKEY_CTX_set_hkdf_mode(k, EVP_PKEY_HKDEF_MODE_EXPAND_ONLY) > 0 &&
		 EVP_PKEY_CTX_set_hkdf_md(k, md) > 0 && EVP_PKEY_CTX_set1_hkdf_key(k, secret, (int)slen) > 0 &&
		 EVP_PKEY_CTX_add1_hkdf_info(k, info, (int)n) > 0 && EVP_PKEY_derive(k, out, &outlen) > 0 &&
		 outlen == len;
	EVP_PKEY_CTX_free(k);
	return ok ? 0 : -EPROTO;
}

static size_t key_len(enum suite s)
{
	return s == SUITE_AES256 ? 32 : 16;
}

static int direction_init(struct direction *d, enum suite s, int encrypt)
{
	const EVP_CIPHER *cipher = s == SUITE_AES256 ? EVP_aes_256_gcm() : EVP_aes_128_gcm();
	if (!(d->ctx = EVP_CIPHER_CTX_new()))
		return -ENOMEM;
	if (EVP_CipherInit_ex(d->ctx, cipher, NULL, d->key, NULL, encrypt) != 1)
		return -EPROTO;
	return 0;
}

static void nonce(const struct direction *d, uint8_t out[12])
{
	memcpy(out, d->iv, 12);
	for (int i = 0; i < 8; i++)
		out[4 + i] ^= (uint8_t)(d->seq >> (56 - 8 * i));
}

/* Hands a direction to the kernel (TLS_TX or TLS_RX); 0 when it took it. */
static int ktls_offer(int fd, int which, enum suite s, const struct direction *d)
{
	union {
		struct tls12_crypto_info_aes_gcm_128 a128;
		struct tls12_crypto_info_aes_gcm_256 a256;
	} ci;
	memset(&ci, 0, sizeof(ci));
	uint8_t seq[8];
	for (int i = 0; i < 8; i++)
		seq[i] = (uint8_t)(d->seq >> (56 - 8 * i));
	socklen_t len;
	if (s == SUITE_AES256) {
		ci.a256.info.version = TLS_1_3_VERSION;
		ci.a256.info.cipher_type = TLS_CIPHER_AES_GCM_256;
		memcpy(ci.a256.salt, d->iv, 4);
		memcpy(ci.a256.iv, d->iv + 4, 8);
		memcpy(ci.a256.key, d->key, 32);
		memcpy(ci.a256.rec_seq, seq, 8);
		len = sizeof(ci.a256);
	} else {
		ci.a128.info.version = TLS_1_3_VERSION;
		ci.a128.info.cipher_type = TLS_CIPHER_AES_GCM_128;
		memcpy(ci.a128.salt, d->iv, 4);
		memcpy(ci.a128.iv, d->iv + 4, 8);
		memcpy(ci.a128.key, d->key, 16);
		memcpy(ci.a128.rec_seq, seq, 8);
		len = sizeof(ci.a128);
	}
	int r = setsockopt(fd, SOL_TLS, which, &ci, len);
	OPENSSL_cleanse(&ci, sizeof(ci));
	return r ? -errno : 0;
}

/* Kernel offload for both directions where the kernel has it ("tls" upper-layer
 * protocol); a direction it refuses stays with this transport. */
static void ktls_try(struct tls_conn *c)
{
	if (setsockopt(c->fd, SOL_TCP, TCP_ULP, "tls", sizeof("tls")))
		return; /* no tls module: records stay here */
	c->tx.ktls = !ktls_offer(c->fd, TLS_TX, c->suite, &c->tx);
	c->rx.ktls = !ktls_offer(c->fd, TLS_RX, c->suite, &c->rx);
}

static int records_start(struct tls_conn *c, int try_ktls)
{
	int err = direction_init(&c->tx, c->suite, 1);
	if (!err)
		err = direction_init(&c->rx, c->suite, 0);
	if (!err && !(c->wbuf = malloc(WBUF_RECORDS * REC_OUT)))
		err = -ENOMEM;
	if (!err && !(c->rbuf = malloc(RBUF_CAP)))
		err = -ENOMEM;
	if (!err && try_ktls)
		ktls_try(c);
	if (!err)
		__atomic_store_n(&last_ktls, c->tx.ktls | c->rx.ktls << 1, __ATOMIC_RELAXED);
	return err;
}

/* After OpenSSL's handshake: the record keys from the secrets, the peer's identity, and
 * the SSL object freed. */
static int handshake_done(struct tls_conn *c)
{
	const SSL_CIPHER *cipher = SSL_get_current_cipher(c->ssl);
	uint32_t id = cipher ? SSL_CIPHER_get_id(cipher) : 0;
	c->suite = id == 0x03001301 ? SUITE_AES128 : id == 0x03001302 ? SUITE_AES256 : SUITE_NONE;
	if (c->cert_requested) {
		rm_transport_set_why(-EACCES, "TLS: the server requires a client certificate (REMORA_TLS_CERT, REMORA_TLS_KEY)");
		return -EACCES;
	}
	if (c->suite == SUITE_NONE || c->secrets != 3) {
		rm_transport_set_why(-EPROTO, "TLS: the handshake agreed on no usable suite");
		return -EPROTO;
	}
	if (SSL_has_pending(c->ssl)) {
		rm_transport_set_why(-EPROTO, "TLS: the peer sent a message after its handshake that this transport does not take");
		return -EPROTO;
	}
	X509 *peer = SSL_get0_peer_certificate(c->ssl);
	if (peer && SSL_get_verify_result(c->ssl) == X509_V_OK) {
		char cn[sizeof(c->identity)] = "";
		int n = X509_NAME_get_text_by_NID(X509_get_subject_name(peer), NID_commonName, cn, sizeof(cn));
		/* Only a name that could be a tenant's: anything else is no identity. */
		if (n > 0 && (size_t)n < sizeof(cn) &&
		    strspn(cn, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") == (size_t)n)
			memcpy(c->identity, cn, (size_t)n + 1);
	}
	const EVP_MD *md = c->suite == SUITE_AES256 ? EVP_sha384() : EVP_sha256();
	size_t kl = key_len(c->suite);
	int err = 0;
	if (expand_label(md, c->secret_tx, c->secret_len, "key", c->tx.key, kl) ||
	    expand_label(md, c->secret_tx, c->secret_len, "iv", c->tx.iv, 12) ||
	    expand_label(md, c->secret_rx, c->secret_len, "key", c->rx.key, kl) ||
	    expand_label(md, c->secret_rx, c->secret_len, "iv", c->rx.iv, 12))
		err = -EPROTO;
	OPENSSL_cleanse(c->secret_tx, sizeof(c->secret_tx));
	OPENSSL_cleanse(c->secret_rx, sizeof(c->secret_rx));
	SSL_free(c->ssl);
	c->ssl = NULL;
	if (!err)
		err = records_start(c, 1);
	if (err)
		rm_transport_set_why(err, "TLS: cannot start the connection's records");
	return err;
}

/* Why OpenSSL's handshake failed, in one line. */
static int handshake_failed(struct tls_conn *c, int r)
{
	int e = SSL_get_error(c->ssl, r);
	long v = SSL_get_verify_result(c->ssl);
	unsigned long ossl = ERR_peek_last_error();
	char detail[160] = "";
	if (ossl)
		ERR_error_string_n(ossl, detail, sizeof(detail));
	ERR_clear_error();
	int err = -ECONNREFUSED;
	if (!c->server && v != X509_V_OK)
		rm_transport_set_why(err, "TLS: the server's certificate is not trusted: %s (REMORA_TLS_CA names "
				     "the CA that signed it)", X509_verify_cert_error_string(v));
	else if (c->server && v != X509_V_OK)
		rm_transport_set_why(err, "TLS: the client's certificate is not trusted: %s",
				     X509_verify_cert_error_string(v));
	else if (ossl && ERR_GET_REASON(ossl) == SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE)
		rm_transport_set_why(err, "TLS: the client presented no certificate, and this daemon requires one "
				     "(REMORA_TLS_CERT, REMORA_TLS_KEY)");
	else if (ossl && ERR_GET_REASON(ossl) == SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED)
		rm_transport_set_why(err, "TLS: the server requires a client certificate (REMORA_TLS_CERT, "
				     "REMORA_TLS_KEY)");
	else if (!c->server && (e == SSL_ERROR_SYSCALL || (ossl && ERR_GET_REASON(ossl) == SSL_R_UNEXPECTED_EOF_WHILE_READING) ||
				(ossl && ERR_GET_REASON(ossl) == SSL_R_WRONG_VERSION_NUMBER)))
		rm_transport_set_why(err = -EPROTO, "TLS: the server ended the handshake without answering it: is it a "
				     "plaintext port? (then use tcp://)");
	else if (e == SSL_ERROR_SYSCALL || (ossl && ERR_GET_REASON(ossl) == SSL_R_UNEXPECTED_EOF_WHILE_READING))
		rm_transport_set_why(err = -ECONNRESET, "TLS: the peer closed the connection during the handshake");
	else
		rm_transport_set_why(err = -EPROTO, "TLS handshake failed: %s", detail[0] ? detail : "no reason given");
	return err;
}

/* A TLS connection's first byte is a handshake record's type; anything else is a client
 * without TLS, told so with an alert (which a Remora client recognises) and refused. */
static int plaintext_peer(struct tls_conn *c)
{
	uint8_t b;
	ssize_t n;
	do
		n = recv(c->fd, &b, 1, MSG_PEEK);
	while (n < 0 && errno == EINTR);
	if (n == 0) {
		rm_transport_set_why(-ECONNRESET, "closed before the TLS handshake");
		return -ECONNRESET;
	}
	if (n < 0)
		return errno == EAGAIN || errno == EWOULDBLOCK ? -ETIMEDOUT : -errno;
	if (b == REC_TYPE_HANDSHAKE)
		return 0;
	static const uint8_t alert[] = {REC_TYPE_ALERT, 3, 3, 0, 2, 2, 70 /* protocol_version */};
	ssize_t w = send(c->fd, alert, sizeof(alert), MSG_NOSIGNAL | MSG_DONTWAIT);
	(void)w;
	rm_transport_set_why(-EPROTO, "a client without TLS at this TLS port (it must use REMORA_SERVER=tls://...)");
	return -EPROTO;
}

static int server_handshake(struct tls_conn *c)
{
	if (c->err)
		return c->err;
	int err = plaintext_peer(c);
	if (!err) {
		int r = SSL_accept(c->ssl);
		err = r == 1 ? handshake_done(c) : handshake_failed(c, r);
	}
	if (err)
		c->err = err; /* every later call fails alike; rm_transport_why(err) says why, in this thread */
	return err;
}

#define READY(c)                                                            \
	do {                                                                \
		if (__builtin_expect((c)->ssl != NULL || (c)->err, 0)) {    \
			int e_ = (c)->ssl ? server_handshake(c) : (c)->err; \
			if (e_)                                             \
				return e_;                                  \
		}                                                           \
	} while (0)

/* ---- records ---- */

static int tls_sendv(struct rm_conn *conn, const struct iovec *iov, int iovcnt)
{
	struct tls_conn *c = tls(conn);
	READY(c);
	if (c->tx.ktls)
		return rm_conn_sendv(c->raw, iov, iovcnt);
	size_t total = 0;
	for (int i = 0; i < iovcnt; i++)
		total += iov[i].iov_len;
	int i = 0;
	size_t off = 0, wpos = 0;
	while (total > 0) {
		size_t rec = total < REC_PLAIN_MAX ? total : REC_PLAIN_MAX, clen = rec + 1 + REC_TAG;
		uint8_t *h = c->wbuf + wpos, *out = h + REC_HDR, n12[12];
		int n, ok = 1;
		h[0] = REC_TYPE_DATA, h[1] = 3, h[2] = 3, h[3] = (uint8_t)(clen >> 8), h[4] = (uint8_t)clen;
		nonce(&c->tx, n12);
		ok &= EVP_EncryptInit_ex(c->tx.ctx, NULL, NULL, NULL, n12) == 1;
		ok &= EVP_EncryptUpdate(c->tx.ctx, NULL, &n, h, REC_HDR) == 1;
		for (size_t left = rec; left > 0;) {
			while (off == iov[i].iov_len)
				i++, off = 0;
			size_t take = iov[i].iov_len - off < left ? iov[i].iov_len - off : left;
			ok &= EVP_EncryptUpdate(c->tx.ctx, out, &n, (const uint8_t *)iov[i].iov_base + off, (int)take) == 1;
			out += n;
			off += take;
			left -= take;
		}
		static const uint8_t type = REC_TYPE_DATA;
		ok &= EVP_EncryptUpdate(c->tx.ctx, out, &n, &type, 1) == 1;
		out += n;
		ok &= EVP_EncryptFinal_ex(c->tx.ctx, out, &n) == 1;
		out += n;
		ok &= EVP_CIPHER_CTX_ctrl(c->tx.ctx, EVP_CTRL_GCM_GET_TAG, REC_TAG, out) == 1;
		if (!ok)
			return -EPROTO;
		c->tx.seq++;
		wpos += REC_HDR + clen;
		total -= rec;
		if (total == 0 || wpos + REC_OUT > WBUF_RECORDS * REC_OUT) {
			struct iovec v = {c->wbuf, wpos};
			int err = rm_conn_sendv(c->raw, &v, 1);
			if (err)
				return err;
			wpos = 0;
		}
	}
	return 0;
}

/* Opens the record at rbuf[rstart] (all of it read), decrypting it into out: clen -
 * REC_TAG bytes of room, the record's own place in rbuf or a caller's buffer large
 * enough, which then takes the bytes without a further copy. Returns the length of its
 * data (0: an empty record), or -errno. */
static ssize_t open_record(struct tls_conn *c, size_t clen, uint8_t *out)
{
	uint8_t *h = c->rbuf + c->rstart, *ct = h + REC_HDR, n12[12];
	size_t plen = clen - REC_TAG;
	int n, ok = 1;
	nonce(&c->rx, n12);
	ok &= EVP_DecryptInit_ex(c->rx.ctx, NULL, NULL, NULL, n12) == 1;
	ok &= EVP_DecryptUpdate(c->rx.ctx, NULL, &n, h, REC_HDR) == 1;
	ok &= EVP_DecryptUpdate(c->rx.ctx, out, &n, ct, (int)plen) == 1;
	ok &= EVP_CIPHER_CTX_ctrl(c->rx.ctx, EVP_CTRL_GCM_SET_TAG, REC_TAG, ct + plen) == 1;
	ok = ok && EVP_DecryptFinal_ex(c->rx.ctx, out + plen, &n) == 1;
	if (!ok) {
		rm_transport_set_why(-EBADMSG, "TLS: a record failed authentication");
		return -EBADMSG;
	}
	c->rx.seq++;
	while (plen > 0 && out[plen - 1] == 0) /* padding */
		plen--;
	if (plen == 0) {
		rm_transport_set_why(-EPROTO, "TLS: a record without a content type");
		return -EPROTO;
	}
	uint8_t type = out[--plen];
	c->rstart += REC_HDR + clen;
	if (type == REC_TYPE_ALERT) {
		int close_notify = plen == 2 && out[1] == 0;
		if (!close_notify)
			rm_transport_set_why(-ECONNRESET, "TLS: the peer sent alert %d", plen == 2 ? out[1] : -1);
		return -ECONNRESET;
	}
	if (type != REC_TYPE_DATA) {
		rm_transport_set_why(-EPROTO, "TLS: the peer sent a record of type %u after the handshake", type);
		return -EPROTO;
	}
	return (ssize_t)plen;
}

/* Decrypted or raw bytes already here, or the TCP connection has some (or has closed). */
static int tls_readable(struct rm_conn *conn)
{
	struct tls_conn *c = tls(conn);
	return c->pstart < c->pend || c->rstart < c->rend || rm_conn_readable(c->raw);
}

/* A small frame is one record, a few bytes more than its plaintext. */
static int tls_writable(struct rm_conn *conn, size_t len)
{
	struct tls_conn *c = tls(conn);
	return !c->ssl && !c->err && rm_conn_writable(c->raw, len + REC_HDR + 1 + REC_TAG);
}

static ssize_t tls_recv_some(struct rm_conn *conn, void *buf, size_t len)
{
	struct tls_conn *c = tls(conn);
	READY(c);
	if (c->rx.ktls) {
		ssize_t r = rm_conn_recv_some(c->raw, buf, len);
		return r == -EIO ? -EPROTO : r; /* a record other than data */
	}
	while (c->pstart == c->pend) {
		size_t avail = c->rend - c->rstart;
		if (avail >= REC_HDR) {
			const uint8_t *h = c->rbuf + c->rstart;
			size_t clen = (size_t)h[3] << 8 | h[4];
			if (h[0] != REC_TYPE_DATA || h[1] != 3 || h[2] != 3 || clen < REC_TAG + 1 || clen > REC_CIPHER_MAX) {
				rm_transport_set_why(-EPROTO, "TLS: not a TLS 1.3 record from the peer");
				return -EPROTO;
			}
			if (avail >= REC_HDR + clen) {
				/* Into the caller's buffer where all of it fits (bulk data: one copy
				 * fewer), else in place, kept for the calls to come. */
				size_t at = c->rstart + REC_HDR;
				int direct = len >= clen - REC_TAG;
				ssize_t plen = open_record(c, clen, direct ? (uint8_t *)buf : c->rbuf + at);
				if (plen < 0)
					return plen;
				if (plen && direct)
					return plen;
				c->pstart = at;
				c->pend = direct ? at : at + (size_t)plen;
				continue; /* an empty record, or data now in rbuf */
			}
			if (c->rstart + REC_HDR + clen > RBUF_CAP) { /* make room for all of it */
				memmove(c->rbuf, c->rbuf + c->rstart, avail);
				c->rstart = 0, c->rend = avail;
			}
		} else if (c->rstart > 0 && c->rstart + REC_HDR > RBUF_CAP) {
			memmove(c->rbuf, c->rbuf + c->rstart, avail);
			c->rstart = 0, c->rend = avail;
		}
		if (c->rstart == c->rend)
			c->rstart = c->rend = 0;
		ssize_t r = rm_conn_recv_some(c->raw, c->rbuf + c->rend, RBUF_CAP - c->rend);
		if (r < 0)
			return r;
		c->rend += (size_t)r;
	}
	size_t n = c->pend - c->pstart < len ? c->pend - c->pstart : len;
	memcpy(buf, c->rbuf + c->pstart, n);
	c->pstart += n;
	return (ssize_t)n;
}

/* ---- connections ---- */

static struct tls_conn *conn_new(struct rm_conn *raw, int server)
{
	struct tls_conn *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->base.tp = &rm_transport_tls;
	c->raw = raw;
	c->server = server;
	c->fd = rm_conn_export_fd(raw, NULL, NULL, NULL);
	return c;
}

static void conn_free(struct tls_conn *c)
{
	if (c->ssl)
		SSL_free(c->ssl);
	EVP_CIPHER_CTX_free(c->tx.ctx);
	EVP_CIPHER_CTX_free(c->rx.ctx);
	free(c->wbuf);
	free(c->rbuf);
	OPENSSL_cleanse(c, sizeof(*c));
	free(c);
}

static int start_ssl(struct tls_conn *c, SSL_CTX *ctx)
{
	if (!(c->ssl = SSL_new(ctx)) || SSL_set_fd(c->ssl, c->fd) != 1)
		return -ENOMEM;
	SSL_set_app_data(c->ssl, c);
	return 0;
}

static int split_host(const char *addr, char *host, size_t cap)
{
	const char *colon = strrchr(addr, ':');
	size_t n = colon ? (size_t)(colon - addr) : strlen(addr);
	if (n >= 2 && addr[0] == '[' && addr[n - 1] == ']')
		addr++, n -= 2;
	if (n == 0 || n >= cap)
		return -EINVAL;
	memcpy(host, addr, n);
	host[n] = 0;
	return 0;
}

static int tls_dial(const char *addr, int timeout_ms, struct rm_conn **out)
{
	char host[256], why[300];
	rm_transport_set_why(0, "%s", "");
	if (!client_ctx && rm_tls_client_configure_env(why, sizeof(why))) {
		rm_transport_set_why(-EINVAL, "%s", why);
		return -EINVAL;
	}
	if (split_host(addr, host, sizeof(host)))
		return -EINVAL;
	struct rm_conn *raw;
	int err = rm_transport_tcp.dial(addr, timeout_ms, &raw);
	if (err)
		return err;
	struct tls_conn *c = conn_new(raw, 0);
	if (!c) {
		rm_conn_close(raw);
		return -ENOMEM;
	}
	err = start_ssl(c, client_ctx);
	if (!err) {
		/* The server's certificate must name the host dialled (an address or a name). */
		unsigned char ip[16];
		X509_VERIFY_PARAM *vp = SSL_get0_param(c->ssl);
		if (inet_pton(AF_INET, host, ip) == 1 || inet_pton(AF_INET6, host, ip) == 1) {
			X509_VERIFY_PARAM_set1_ip_asc(vp, host);
		} else {
			SSL_set_tlsext_host_name(c->ssl, host);
			X509_VERIFY_PARAM_set1_host(vp, host, 0);
		}
		/* The handshake's bound: every wait on the server lasts at most timeout_ms. */
		rm_conn_set_liveness(raw, timeout_ms, timeout_ms);
		int r = SSL_connect(c->ssl);
		if (r == 1)
			err = handshake_done(c);
		else if (SSL_get_error(c->ssl, r) == SSL_ERROR_SYSCALL && (errno == EAGAIN || errno == EWOULDBLOCK))
			rm_transport_set_why(err = -ETIMEDOUT, "TLS: the server did not finish the handshake within %d ms",
					     timeout_ms);
		else
			err = handshake_failed(c, r);
		rm_conn_set_liveness(raw, 0, 0);
	}
	if (err) {
		rm_conn_close(raw);
		conn_free(c);
		return err;
	}
	*out = &c->base;
	return 0;
}

static int tls_listen(const char *addr, struct rm_listener **out)
{
	if (!server_ctx) {
		rm_transport_set_why(-EINVAL, "a tls:// address needs a certificate and its key (--tls-cert, --tls-key)");
		return -EINVAL;
	}
	return rm_transport_tcp.listen(addr, out);
}

static int tls_listener_addr(struct rm_listener *l, char *buf, size_t len)
{
	return rm_transport_tcp.listener_addr(l, buf, len);
}

static int tls_accept(struct rm_listener *l, struct rm_conn **out)
{
	struct rm_conn *raw;
	int err = rm_transport_tcp.accept(l, &raw);
	if (err)
		return err;
	struct tls_conn *c = conn_new(raw, 1);
	if (!c || start_ssl(c, server_ctx)) {
		rm_conn_close(raw);
		if (c)
			conn_free(c);
		return -ENOMEM;
	}
	*out = &c->base;
	return 0;
}

static void tls_listener_close(struct rm_listener *l)
{
	rm_transport_tcp.listener_close(l);
}

static const char *tls_describe(struct rm_listener *l)
{
	return clients_verified ? " (TLS 1.3, client certificates required)" : " (TLS 1.3)";
}

static void tls_shutdown(struct rm_conn *c)
{
	rm_conn_shutdown(tls(c)->raw);
}

static int tls_set_liveness(struct rm_conn *c, int recv_timeout_ms, int send_timeout_ms)
{
	return rm_conn_set_liveness(tls(c)->raw, recv_timeout_ms, send_timeout_ms);
}

static const char *tls_peer(struct rm_conn *c)
{
	return rm_conn_peer(tls(c)->raw);
}

static const char *tls_identity(struct rm_conn *c)
{
	return tls(c)->identity[0] ? tls(c)->identity : NULL;
}

static void tls_close(struct rm_conn *conn)
{
	struct tls_conn *c = tls(conn);
	rm_conn_close(c->raw);
	conn_free(c);
}

/* The records' state goes with the descriptor. Only between records: data read and not
 * yet given out cannot travel. */
static int tls_export_fd(struct rm_conn *conn, void *state, size_t *state_len, int *extra_fd)
{
	(void)extra_fd; /* none */
	struct tls_conn *c = tls(conn);
	if (c->ssl || c->err || !c->tx.ctx)
		return c->err ? c->err : -ENOTCONN;
	if (!state || !state_len || c->pstart != c->pend || c->rstart != c->rend)
		return -EBUSY;
	struct handover h = {.version = 1, .suite = (uint8_t)c->suite, .ktls_tx = (uint8_t)c->tx.ktls,
			     .ktls_rx = (uint8_t)c->rx.ktls, .tx_seq = c->tx.seq, .rx_seq = c->rx.seq};
	memcpy(h.tx_key, c->tx.key, sizeof(h.tx_key));
	memcpy(h.tx_iv, c->tx.iv, sizeof(h.tx_iv));
	memcpy(h.rx_key, c->rx.key, sizeof(h.rx_key));
	memcpy(h.rx_iv, c->rx.iv, sizeof(h.rx_iv));
	memcpy(state, &h, sizeof(h));
	OPENSSL_cleanse(&h, sizeof(h));
	*state_len = sizeof(h);
	return c->fd;
}

static int tls_adopt_fd(int fd, int extra_fd, const void *state, size_t state_len, struct rm_conn **out)
{
	struct handover h;
	if (state_len != sizeof(h) || extra_fd >= 0)
		return -EINVAL;
	memcpy(&h, state, sizeof(h));
	if (h.version != 1 || (h.suite != SUITE_AES128 && h.suite != SUITE_AES256))
		return -EINVAL;
	struct tls_conn *c = calloc(1, sizeof(*c));
	if (!c) {
		OPENSSL_cleanse(&h, sizeof(h));
		return -ENOMEM;
	}
	c->base.tp = &rm_transport_tls;
	c->server = 1;
	c->fd = fd;
	c->suite = (enum suite)h.suite;
	c->tx.ktls = h.ktls_tx, c->rx.ktls = h.ktls_rx;
	c->tx.seq = h.tx_seq, c->rx.seq = h.rx_seq;
	memcpy(c->tx.key, h.tx_key, sizeof(h.tx_key));
	memcpy(c->tx.iv, h.tx_iv, sizeof(h.tx_iv));
	memcpy(c->rx.key, h.rx_key, sizeof(h.rx_key));
	memcpy(c->rx.iv, h.rx_iv, sizeof(h.rx_iv));
	OPENSSL_cleanse(&h, sizeof(h));
	/* The descriptor is wrapped last: on failure it is still the caller's to close. */
	int err = records_start(c, 0);
	if (!err)
		err = rm_transport_tcp.adopt_fd(fd, -1, NULL, 0, &c->raw);
	if (err) {
		conn_free(c);
		return err;
	}
	*out = &c->base;
	return 0;
}

const struct rm_transport rm_transport_tls = {
	.scheme = "tls",
	.flags = RM_TRANSPORT_ENCRYPTS,
	.check_address = rm_transport_check_host_port,
	.dial = tls_dial,
	.listen = tls_listen,
	.listener_addr = tls_listener_addr,
	.accept = tls_accept,
	.listener_close = tls_listener_close,
	.configure_listener = rm_tls_server_configure,
	.describe = tls_describe,
	.sendv = tls_sendv,
	.recv_some = tls_recv_some,
	.readable = tls_readable,
	.writable = tls_writable,
	.shutdown = tls_shutdown,
	.set_liveness = tls_set_liveness,
	.peer = tls_peer,
	.close = tls_close,
	.export_fd = tls_export_fd,
	.adopt_fd = tls_adopt_fd,
	.identity = tls_identity,
};
