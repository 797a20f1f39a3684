/* Handshakes: the connections the accepting process has taken but whose greeting
 * (admission.c) has not finished yet. Before its hello a connection is a stranger's, so
 * what it may cost is bounded: at most max_pending_hellos of them at once, at most
 * max_pending_hellos_per_address from one peer address (a connection past either is
 * closed at once), and each for at most hello_timeout seconds, after which a thread of
 * this module shuts the connection down, which ends its greeting thread's read.
 * Refusals and timeouts are logged one line per connection, up to a few a second;
 * past that one line a second counts the rest. */
#ifndef REMORA_HANDSHAKES_H
#define REMORA_HANDSHAKES_H

#include "config.h"
#include "transport.h"

struct rm_handshake;

/* Starts the deadline thread with cfg's bounds. 0, or -errno. */
/* Applies the bounds of cfg (hello_timeout, max_pending_hellos...) from now on: at start,
 * and at each reload of the configuration. */
void rm_handshakes_configure(const struct rm_daemon_config *cfg);
int rm_handshakes_start(const struct rm_daemon_config *cfg);

/* Counts conn as pending and starts its deadline. NULL when a bound refuses it (or the
 * daemon is stopping): conn is then closed, and the refusal logged. Otherwise conn stays
 * the caller's. */
struct rm_handshake *rm_handshake_begin(struct rm_conn *conn);

/* The handshake is over (read, refused, or about to be handed to a worker): from now on
 * its connection is not touched here. Frees h. Returns 0; -ETIMEDOUT when its deadline
 * had passed and its connection was shut down (logged here); -ESHUTDOWN when the daemon
 * is stopping and shut it down. Call it before the connection leaves this process. */
int rm_handshake_end(struct rm_handshake *h);

/* Lines about refused connections, each kind up to a few a second; past that they are
 * counted, and the deadline thread logs the count of each kind once a second. */
enum rm_refusal_log {
	RM_REFUSAL_HELLO,      /* a hello or status request refused, or malformed */
	RM_REFUSAL_CREDENTIAL, /* a failed credential (auth.h) */
};
/* Whether a line of kind may be logged now: 1, or 0 after counting it as held back. */
int rm_handshakes_log_allows(enum rm_refusal_log kind);

/* The daemon is stopping: every pending connection is shut down and new ones are
 * refused (closed, without a log line each). */
void rm_handshakes_stop(void);

#endif
