/* Who a connection is (docs/security.md): the credential of its hello or status request,
 * else the verified client certificate its transport reports; and the slowing down of
 * addresses whose credentials fail. */
#ifndef REMORA_AUTH_H
#define REMORA_AUTH_H

#include <stddef.h>

#include "config.h"
#include "transport.h"

/* Failed credentials from one address: each doubles the wait (from AUTH_DELAY_MIN_MS up to
 * AUTH_DELAY_MAX_MS) that this address's next credential check waits first; a success
 * clears it. Addresses are kept in a bounded table (the oldest entry makes room). */
#define RM_AUTH_ADDRESSES 1024

/* The tenant conn presents with token (len bytes; 0: none): the token's tenant, or the
 * certificate's, or the anonymous tenant where allowed; NULL for none. *why says which
 * failed. Waits first while conn's address is being slowed down, and records a failure. */
const struct rm_tenant_config *rm_auth_tenant(const struct rm_daemon_config *cfg, struct rm_conn *conn,
					      const void *token, size_t len, char *why, size_t whylen);
/* Whether conn, with token, is the admin (no failure is recorded for a tenant's token). */
int rm_auth_admin(const struct rm_daemon_config *cfg, struct rm_conn *conn, const void *token, size_t len);
/* Records a failed credential from conn's address and logs it (one line each, up to a
 * few a second). */
void rm_auth_failed(struct rm_conn *conn, const char *what);

/* Logs, loudly, a daemon listening beyond loopback without TLS or without credentials. */
void rm_auth_warn_exposure(const struct rm_daemon_config *cfg, const char *bound);

#endif
