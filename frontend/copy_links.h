/* The client's copy links: extra connections to its session that carry shares of
 * large copies beside the main connection (common/wire.h says which chunk goes
 * where; backend/copy_links.h is the daemon's side). Each link has a thread that
 * sends or receives its chunks straight from or into the program's buffer. */
#ifndef REMORA_FRONTEND_COPY_LINKS_H
#define REMORA_FRONTEND_COPY_LINKS_H

#include <stdint.h>
#include <sys/uio.h>

#include "transport.h"

struct rm_copy_links;

/* Opens the copy links of a session just greeted at addr (REMORA_COPY_LINKS links in
 * all, the main connection counted; default 4, 1 for none), each with its thread and
 * the connection's liveness timeout (transport.h).
 * Links that cannot be attached are done without, a line says so; NULL: none. */
struct rm_copy_links *rm_copy_links_open(const struct rm_transport *tp, const char *addr, uint64_t session_id,
					  const uint8_t *key, size_t keylen, int timeout_ms);
/* Ends the links' threads (a share in progress fails) and closes them. NULL: nothing. */
void rm_copy_links_close(struct rm_copy_links *cl);

/* How many links a copy of n bytes is striped over (1: not striped, it goes on the main
 * connection; always so when cl is NULL). Striped copies go one at a time: the caller
 * holds the links from here until rm_copy_links_finish when the answer is above 1. */
uint32_t rm_copy_links_take(struct rm_copy_links *cl, uint64_t n);
/* The iovecs of link 0's share of an n-byte copy at host over links links; the count,
 * or -1 when cap is too small. */
int rm_copy_links_share0(void *host, uint64_t n, uint32_t links, struct iovec *iov, int cap);
/* Starts links 1..links-1 sending (to_host 0) or receiving (1) their shares. */
void rm_copy_links_start(struct rm_copy_links *cl, int to_host, void *host, uint64_t n, uint32_t links);
/* Waits for the started shares, then gives the links back; 0, or -errno when a link
 * failed. abort: the main connection failed, so unblock them first. */
int rm_copy_links_finish(struct rm_copy_links *cl, int abort);

#endif
