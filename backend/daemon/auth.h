/* Who a connection is (docs/security.md): the credential of its hello or status request,
 * else the verified client certificate its transport reports; and what a stranger may
 * spend guessing credentials.
 *
 * A presented token names the one stored credential it is checked against by its token
 * id (credential.h), so a check costs one hash whatever the number of tenants. Checks
 * are bounded three ways, each by a table of fixed size that failures cannot flush:
 * - per (presented credential, address) pair, keyed by a hash of the token: one check at
 *   a time; each failure doubles the wait before the pair's next check (AUTH_DELAY_MIN_MS
 *   up to AUTH_DELAY_MAX_MS), a success clears it. Failures of one token do not slow
 *   another's from the same address, another token of the same tenant included.
 * - per address: one verification at a time; past RM_AUTH_ADDRESS_GRACE recent failures
 *   (of any credential) the address itself is slowed down the same way.
 * - per credential, across all addresses: a budget of failed checks a second.
 * And at most a few verifications (PBKDF2) run at once in the whole process, a credential
 * with few recent failures going before every one under attack.
 * The address of a Unix-socket peer is its user (SO_PEERCRED). An address entry is
 * reused only once it holds nothing live: no check, and its failures forgotten; when
 * none is free a new address shares one entry with every other such address. */
#ifndef REMORA_AUTH_H
#define REMORA_AUTH_H

#include <stddef.h>

#include "config.h"
#include "transport.h"

#define RM_AUTH_ADDRESSES 4096
#define RM_AUTH_ADDRESS_GRACE 16

/* The tenant conn presents with token (len bytes; 0: none): the token's tenant, or the
 * certificate's, or the anonymous tenant where allowed; NULL for none, with *why saying
 * which failed, and *admin set when the token is the admin credential (admin may be
 * NULL). A token waits its turn first (above), and a failure is recorded and logged. */
const struct rm_tenant_config *rm_auth_tenant(const struct rm_daemon_config *cfg, struct rm_conn *conn,
					      const void *token, size_t len, char *why, size_t whylen, int *admin);
/* Whether conn's verified certificate names the admin (admin_cn). */
int rm_auth_admin_certificate(const struct rm_daemon_config *cfg, struct rm_conn *conn);
/* Records a failed credential from conn's address (of no known stored credential) and
 * logs it, a few lines a second at most (handshakes.h). */
void rm_auth_failed(struct rm_conn *conn, const char *what);

/* Logs, loudly, a daemon listening beyond loopback without TLS or without credentials. */
void rm_auth_warn_exposure(const struct rm_daemon_config *cfg, const char *bound);
/* Logs a configuration that refuses every client (no tenant, anonymous off), and stored
 * hashes without a token id (each costs a hash per unknown token). */
void rm_auth_warn_credentials(const struct rm_daemon_config *cfg);

#endif
