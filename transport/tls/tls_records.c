/* The TLS transport's record layer (RFC 8446 5.2), or the kernel's (kTLS): keys from the
 * traffic secrets, and sendv, recv_some, readable and writable of a connection whose
 * handshake is over. */
#include "tls_conn.h"

#include <unistd.h>

int tls_last_ktls_bits;

int rm_tls_last_ktls(void)
{
	return __atomic_load_n(&tls_last_ktls_bits, __ATOMIC_RELAXED);
}

int rm_tls_kernel_available(void)
{
	static int known = -1;
	int k = __atomic_load_n(&known, __ATOMIC_ACQUIRE);
	if (k >= 0)
		return k;
	k = 0;
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t alen = sizeof(a);
	int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), d = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), s = -1;
	if (l >= 0 && d >= 0 && !bind(l, (struct sockaddr *)&a, sizeof(a)) && !listen(l, 1) &&
	    !getsockname(l, (struct sockaddr *)&a, &alen) && !connect(d, (struct sockaddr *)&a, sizeof(a)) &&
	    (s = accept(l, NULL, NULL)) >= 0)
		k = !setsockopt(d, SOL_TCP, TCP_ULP, "tls", sizeof("tls"));
	if (s >= 0)
		close(s);
	if (d >= 0)
		close(d);
	if (l >= 0)
		close(l);
	__atomic_store_n(&known, k, __ATOMIC_RELEASE);
	return k;
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

static size_t key_len(enum suite s);

int tls_keys_from_secrets(struct tls_conn *c)
{
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
	return err;
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

int tls_records_start(struct tls_conn *c, int try_ktls)
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
		__atomic_store_n(&tls_last_ktls_bits, c->tx.ktls | c->rx.ktls << 1, __ATOMIC_RELAXED);
	return err;
}

/* ---- records ---- */

int tls_sendv(struct rm_conn *conn, const struct iovec *iov, int iovcnt)
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
		if (plen == 2 && out[1] == 0) /* close_notify */
			return -ECONNRESET;
		/* Any other alert is a refusal with a reason, not a connection shed: a TLS 1.3
		 * server judges the client's certificate after the client's handshake is over. */
		int desc = plen == 2 ? out[1] : -1;
		const char *name = desc >= 0 ? SSL_alert_desc_string_long(desc) : "malformed";
		if ((desc >= 42 && desc <= 46) || desc == 48 || desc == 116)
			rm_transport_set_why(-EPROTO, "TLS: the %s refused this %s's certificate (%s)%s",
					     c->server ? "client" : "server", c->server ? "server" : "client", name,
					     c->server ? "" : ": REMORA_TLS_CERT must be signed by a CA the daemon's "
					     "tls_client_ca names");
		else
			rm_transport_set_why(-EPROTO, "TLS: the peer ended the connection with alert %s", name);
		return -EPROTO;
	}
	if (type != REC_TYPE_DATA) {
		rm_transport_set_why(-EPROTO, "TLS: the peer sent a record of type %u after the handshake", type);
		return -EPROTO;
	}
	return (ssize_t)plen;
}

/* Decrypted or raw bytes already here, or the TCP connection has some (or has closed). */
int tls_readable(struct rm_conn *conn)
{
	struct tls_conn *c = tls(conn);
	return c->pstart < c->pend || c->rstart < c->rend || rm_conn_readable(c->raw);
}

/* A small frame is one record, a few bytes more than its plaintext. */
int tls_writable(struct rm_conn *conn, size_t len)
{
	struct tls_conn *c = tls(conn);
	return !c->ssl && !c->err && rm_conn_writable(c->raw, len + REC_HDR + 1 + REC_TAG);
}

ssize_t tls_recv_some(struct rm_conn *conn, void *buf, size_t len)
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
