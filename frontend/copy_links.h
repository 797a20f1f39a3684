/* The client's copy links: extra connections to its session that carry shares of
 * large copies beside the main connection (common/wire.h says which chunk goes
 * where; backend/copy/copy_links.h is the daemon's side). Each link has a thread that
 * sends or receives its chunks straight from or into the program's buffer. */
#ifndef REMORA_FRONTEND_COPY_LINKS_H
#define REMORA_FRONTEND_COPY_LINKS_H

#include <stdint.h>
#include <sys/uio.h>

#include "copy_plan.h"
#include "transport.h"

struct rm_attach_to;

struct rm_copy_links;

/* REMORA_COPY_LINKS's text: connections in all, the main one counted, 1 to
 * RM_MAX_COPY_LINKS (1: no copy links); unset or empty: 4. 0 and *links set, or -EINVAL. */
int rm_copy_links_parse_count(const char *text, uint32_t *links);
/* REMORA_STRIPE_MIN's text: the smallest copy striped, a size (size.h) of at least 1
 * byte; unset or empty: 16 MiB until the link is measured. 0 and *bytes set, or -EINVAL. */
int rm_copy_links_parse_stripe_min(const char *text, uint64_t *bytes);

/* Opens the copy links of a session just greeted (REMORA_COPY_LINKS connections in all,
 * REMORA_STRIPE_MIN the smallest copy striped), each with its thread, attached as to says
 * (connection.h). Links that cannot be attached are done without, a line says so; so are
 * those not begun within two of the daemon's heartbeat intervals (heartbeat_ms, 0: none) of
 * the first: the session's connection says nothing while they are greeted, the daemon takes
 * six intervals of silence for gone, and a daemon busy with handshakes (an attack's, say) can
 * take seconds for each. NULL: none. */
struct rm_copy_links *rm_copy_links_open(const struct rm_attach_to *to, uint32_t heartbeat_ms);
/* Ends the links' threads (a share in progress fails) and closes their connections, after
 * a striped copy under way; cl stays, striping nothing, for threads that may still hold it.
 * NULL: nothing. */
void rm_copy_links_end(struct rm_copy_links *cl);
/* rm_copy_links_end, then frees cl: no other thread may hold it. NULL: nothing. */
void rm_copy_links_close(struct rm_copy_links *cl);

/* How a copy of n bytes (to_host 1: device to host) crosses: plan.links 1, not striped,
 * it goes on the main connection (always so when cl is NULL); above 1, striped in chunks
 * of plan.chunk (0: the wire's rule), chosen from the measured link (common/copy_plan.h)
 * or, with REMORA_STRIPE_MIN set, from that size. Striped copies go one at a time: the
 * caller holds the links from here until rm_copy_links_finish when plan.links is above 1. */
struct rm_copy_plan rm_copy_links_take(struct rm_copy_links *cl, int to_host, uint64_t n);
/* A call without bulk took ns to its reply (the round trip's measure). */
void rm_copy_links_rtt(uint64_t ns);
/* The measured rate of a copy of n bytes sent plain to the device (to_host 0) or the host,
 * bytes/s (0: not yet): its size class's (rm_copy_plan_rate), one stream's or striped. */
double rm_copy_links_plain_bps(int to_host, uint64_t n);
/* Whether a copy that need not wait for its reply should, to keep the link measured
 * (rm_copy_plan_sample); 0 without links (nothing to measure for). */
int rm_copy_links_sample(struct rm_copy_links *cl, int to_host, uint64_t n, struct rm_copy_plan plan);
/* A copy goes unwaited that was never to be a sample (compressed): the next waited copy
 * is no sample either (rm_copy_plan_unwaited). */
void rm_copy_links_unwaited(struct rm_copy_links *cl);
/* A copy of n bytes went as plan said and took ns, its reply waited for. */
void rm_copy_links_done(int to_host, uint64_t n, struct rm_copy_plan plan, uint64_t ns);
/* The iovecs of link 0's share of an n-byte copy at host as plan says; the count, or -1
 * when cap is too small. */
int rm_copy_links_share0(void *host, uint64_t n, struct rm_copy_plan plan, struct iovec *iov, int cap);
/* Starts links 1..plan.links-1 sending (to_host 0) or receiving (1) their shares. */
void rm_copy_links_start(struct rm_copy_links *cl, int to_host, void *host, uint64_t n, struct rm_copy_plan plan);
/* Waits for the started shares, then gives the links back; 0, or -errno when a link
 * failed. abort: the main connection failed, so unblock them first. */
int rm_copy_links_finish(struct rm_copy_links *cl, int abort);

#endif
