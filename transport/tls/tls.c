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
#include "tls_conn.h"

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
	int err = tls_keys_from_secrets(c);
	SSL_free(c->ssl);
	c->ssl = NULL;
	if (!err)
		err = tls_records_start(c, 1);
	if (err)
		rm_transport_set_why(err, "TLS: cannot start the connection's records");
	return err;
}

/* When the certificate the server sent expires, as OpenSSL prints it: 1, or 0 if unknown. */
static int server_cert_expiry(SSL *ssl, char *buf, size_t cap)
{
	STACK_OF(X509) *chain = SSL_get_peer_cert_chain(ssl); /* the server's own first, verified or not */
	X509 *leaf = chain && sk_X509_num(chain) > 0 ? sk_X509_value(chain, 0) : NULL;
	BIO *b = leaf ? BIO_new(BIO_s_mem()) : NULL;
	int n = b && ASN1_TIME_print(b, X509_get0_notAfter(leaf)) ? BIO_read(b, buf, (int)cap - 1) : 0;
	BIO_free(b);
	buf[n > 0 ? n : 0] = 0;
	return n > 0;
}

/* Why the client refused the server's certificate (v), in words of its own for each
 * cause: the remedy differs (the CA, the certificate's names, a renewal). */
static void server_cert_refused(struct tls_conn *c, long v, const char *host, int err)
{
	char when[64];
	if (v == X509_V_ERR_HOSTNAME_MISMATCH || v == X509_V_ERR_IP_ADDRESS_MISMATCH)
		rm_transport_set_why(err, "TLS: the server's certificate does not cover the name %s that this client "
				     "asked for (dial a name it lists, or give the daemon a certificate whose "
				     "subjectAltName includes %s)", host, host);
	else if (v == X509_V_ERR_CERT_HAS_EXPIRED && server_cert_expiry(c->ssl, when, sizeof(when)))
		rm_transport_set_why(err, "TLS: the server's certificate has expired (on %s): the daemon needs a "
				     "renewed one", when);
	else if (v == X509_V_ERR_CERT_HAS_EXPIRED)
		rm_transport_set_why(err, "TLS: the server's certificate has expired: the daemon needs a renewed one");
	else if (v == X509_V_ERR_CERT_NOT_YET_VALID)
		rm_transport_set_why(err, "TLS: the server's certificate is not valid yet (is this host's clock right?)");
	else
		rm_transport_set_why(err, "TLS: the server's certificate is not trusted: %s (REMORA_TLS_CA names "
				     "the CA that signed it)", X509_verify_cert_error_string(v));
}

/* Whether OpenSSL's reason is a protocol version that the two ends do not share. */
static int version_mismatch(unsigned long ossl)
{
	int why = ossl ? ERR_GET_REASON(ossl) : 0;
	return why == SSL_R_UNSUPPORTED_PROTOCOL || why == SSL_R_TLSV1_ALERT_PROTOCOL_VERSION ||
	       why == SSL_R_NO_PROTOCOLS_AVAILABLE || why == SSL_R_VERSION_TOO_LOW;
}

/* Why OpenSSL's handshake failed, in one line; host is the name a client dialled. */
static int handshake_failed(struct tls_conn *c, int r, const char *host)
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
		server_cert_refused(c, v, host, err);
	else if (version_mismatch(ossl))
		rm_transport_set_why(err = -EPROTO, "TLS: the %s does not speak TLS 1.3, the only version Remora "
				     "uses (%s)", c->server ? "client" : "server", detail);
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

int tls_server_handshake(struct tls_conn *c)
{
	if (c->err)
		return c->err;
	int err = plaintext_peer(c);
	if (!err) {
		int r = SSL_accept(c->ssl);
		err = r == 1 ? handshake_done(c) : handshake_failed(c, r, NULL);
	}
	if (err)
		c->err = err; /* every later call fails alike; rm_transport_why(err) says why, in this thread */
	return err;
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

void tls_conn_free(struct tls_conn *c)
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
	if (!tls_client_ctx && rm_tls_client_configure_env(why, sizeof(why))) {
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
	err = start_ssl(c, tls_client_ctx);
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
			err = handshake_failed(c, r, host);
		rm_conn_set_liveness(raw, 0, 0);
	}
	if (err) {
		rm_conn_close(raw);
		tls_conn_free(c);
		return err;
	}
	*out = &c->base;
	return 0;
}

static int tls_listen(const char *addr, struct rm_listener **out)
{
	if (!tls_server_ctx) {
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
	if (!c || start_ssl(c, tls_server_ctx)) {
		rm_conn_close(raw);
		if (c)
			tls_conn_free(c);
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
	(void)l;
	if (rm_tls_kernel_available())
		return tls_clients_verified ? " (TLS 1.3, client certificates required; records by the kernel, kTLS)"
					    : " (TLS 1.3; records by the kernel, kTLS)";
	return tls_clients_verified ? " (TLS 1.3, client certificates required; records sealed in remorad: no kernel "
				      "TLS, modprobe tls)"
				    : " (TLS 1.3; records sealed in remorad: no kernel TLS, modprobe tls)";
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
	tls_conn_free(c);
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
	int err = tls_records_start(c, 0);
	if (!err)
		err = rm_transport_tcp.adopt_fd(fd, -1, NULL, 0, &c->raw);
	if (err) {
		tls_conn_free(c);
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
