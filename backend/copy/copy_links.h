/* A session's copy links: extra connections of one client that carry the bytes of its
 * large copies beside its session's connection (copy.h), so that a copy is not bound by
 * what one TCP stream moves (one stream copies on one CPU each side: 4.7 GB/s from a
 * 1 GiB buffer on the H200 host; 4 streams 17 GB/s). Each attached link has a thread of
 * its own and staging of its own. */
#ifndef REMORA_COPY_LINKS_H
#define REMORA_COPY_LINKS_H

#include <stdint.h>
#include <sys/uio.h>

#include "session.h"
/* Makes conn the session's copy link number index (1.., in order), sending the Attach's
 * answer ok on it once the link is sure to be taken; 0, or -errno with nothing sent
 * (-EPROTO: an index out of order, -EDQUOT/-ENOMEM: past the client's or the worker's
 * host memory) but for -EPIPE (ok was not sent whole). The caller keeps conn on failure. */
int rm_copy_link_attach(struct rm_channel *s, struct rm_conn *conn, uint32_t index, const struct iovec *ok);
/* Stops and closes the session's copy links. */
void rm_copy_links_close(struct rm_channel *s);

#endif
