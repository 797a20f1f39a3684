/* A link: one transport connection with a read buffer, speaking frames (common/wire.h). */
#ifndef REMORA_LINK_H
#define REMORA_LINK_H

#include "transport.h"
#include "wire.h"

#include <stdint.h>

#define RM_LINK_RBUF (256u << 10) /* each link's read buffer */

struct rm_link {
	struct rm_conn *conn;
	uint8_t *rbuf;
	size_t rpos, rlen, rcap;
};

/* A link over conn, which it then owns. */
int rm_link_init(struct rm_link *l, struct rm_conn *conn);
/* Closes the connection and frees the buffer. */
void rm_link_close(struct rm_link *l);

/* Whether bytes read from the connection wait in the buffer. */
static inline int rm_link_buffered(const struct rm_link *l)
{
	return l->rpos < l->rlen;
}
/* The next frame's header and, where it is wholly buffered too, its msg (*msg; else
 * NULL), from what the buffer already holds, consuming nothing: 0, or -EAGAIN where no
 * whole header is buffered, -EPROTO for a malformed one. */
int rm_link_peek_frame(const struct rm_link *l, struct rm_frame *f, const uint8_t **msg);
/* Reads exactly len bytes (from the buffer first, large reads straight into buf). */
int rm_link_read(struct rm_link *l, void *buf, size_t len);
/* Reads and discards len bytes. */
int rm_link_skip(struct rm_link *l, uint64_t len);
/* Reads and checks one frame header. -EPROTO for a malformed one. */
int rm_link_read_frame(struct rm_link *l, struct rm_frame *f);

/* Sends a frame: header, msg (f->msg_len bytes) and the bulk iovecs (f->bulk_len bytes in all). */
int rm_link_send(struct rm_link *l, const struct rm_frame *f, const void *msg,
		 const struct iovec *bulk, int nbulk);

#endif
