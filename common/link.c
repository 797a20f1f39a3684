#include "link.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>


int rm_link_init(struct rm_link *l, struct rm_conn *conn)
{
	memset(l, 0, sizeof(*l));
	l->rbuf = malloc(RM_LINK_RBUF);
	if (!l->rbuf)
		return -ENOMEM;
	l->conn = conn;
	l->rcap = RM_LINK_RBUF;
	return 0;
}

void rm_link_close(struct rm_link *l)
{
	if (l->conn)
		rm_conn_close(l->conn);
	free(l->rbuf);
	memset(l, 0, sizeof(*l));
}

int rm_link_read(struct rm_link *l, void *buf, size_t len)
{
	if (len == 0) /* buf may be NULL then */
		return 0;
	uint8_t *out = buf;
	size_t have = l->rlen - l->rpos;
	size_t take = have < len ? have : len;
	memcpy(out, l->rbuf + l->rpos, take);
	l->rpos += take;
	out += take;
	len -= take;
	while (len > 0) {
		ssize_t n;
		if (len >= l->rcap / 2) { /* large: no copy through the buffer */
			n = rm_conn_recv_some(l->conn, out, len);
			if (n < 0)
				return (int)n;
			out += n;
			len -= (size_t)n;
			continue;
		}
		n = rm_conn_recv_some(l->conn, l->rbuf, l->rcap);
		if (n < 0)
			return (int)n;
		l->rpos = 0;
		l->rlen = (size_t)n;
		take = l->rlen < len ? l->rlen : len;
		memcpy(out, l->rbuf, take);
		l->rpos = take;
		out += take;
		len -= take;
	}
	return 0;
}

int rm_link_skip(struct rm_link *l, uint64_t len)
{
	uint8_t scratch[4096];
	while (len > 0) {
		size_t n = len < sizeof(scratch) ? (size_t)len : sizeof(scratch);
		int err = rm_link_read(l, scratch, n);
		if (err)
			return err;
		len -= n;
	}
	return 0;
}

/* A TLS record where a frame should be: the peer speaks TLS and this end does not. Then
 * -EPROTO with the reason said, else err: a refusal, not a connection closed or shed. */
static int note_tls_peer(const uint8_t *hdr, int err)
{
	if (hdr[1] != 3 || hdr[2] > 4)
		return err;
	if (hdr[0] == 0x16) /* a handshake: a TLS client */
		rm_transport_set_why(err = -EPROTO, "a TLS client at this plaintext port (serve TLS with --tls-cert "
				     "and --tls-key, or have the client use tcp://)");
	else if (hdr[0] == 0x15) /* an alert: a TLS server refusing a plaintext client */
		rm_transport_set_why(err = -EPROTO, "the server speaks TLS: use REMORA_SERVER=tls://HOST:PORT");
	return err;
}

int rm_link_peek_frame(const struct rm_link *l, struct rm_frame *f, const uint8_t **msg)
{
	size_t avail = l->rlen - l->rpos;
	*msg = NULL;
	if (avail < RM_FRAME_LEN)
		return -EAGAIN;
	int err = rm_frame_decode(l->rbuf + l->rpos, f);
	if (!err && f->msg_len <= avail - RM_FRAME_LEN)
		*msg = l->rbuf + l->rpos + RM_FRAME_LEN;
	return err;
}

int rm_link_read_frame(struct rm_link *l, struct rm_frame *f)
{
	uint8_t hdr[RM_FRAME_LEN] = {0};
	int err = rm_link_read(l, hdr, sizeof(hdr));
	if (!err)
		err = rm_frame_decode(hdr, f);
	if (err == -EPROTO || err == -ECONNRESET)
		err = note_tls_peer(hdr, err);
	return err;
}

int rm_link_send(struct rm_link *l, const struct rm_frame *f, const void *msg,
		 const struct iovec *bulk, int nbulk)
{
	uint8_t hdr[RM_FRAME_LEN];
	struct iovec iov[8];
	int n = 0;
	if (nbulk > 6)
		return -EINVAL;
	rm_frame_encode(f, hdr);
	iov[n++] = (struct iovec){hdr, sizeof(hdr)};
	if (f->msg_len)
		iov[n++] = (struct iovec){(void *)msg, f->msg_len};
	for (int i = 0; i < nbulk; i++)
		if (bulk[i].iov_len)
			iov[n++] = bulk[i];
	return rm_conn_sendv(l->conn, iov, n);
}
