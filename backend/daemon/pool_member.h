/* Pool membership (docs/pool.md): a thread of the accepting process registers this
 * daemon in etcd under a lease, rewrites its record from the registry every
 * lease_ttl/3 seconds, and mirrors the administrator's decision for it (drain,
 * remove) into the registry's draining flag and its record. Without a configured
 * pool nothing runs and no store is needed. */
#ifndef REMORA_POOL_MEMBER_H
#define REMORA_POOL_MEMBER_H

#include <stddef.h>

#include "config.h"

/* Records this daemon's name and advertised address (from scheme and the listener's
 * bound host:port unless cfg->advertise says) and, when cfg names a pool, starts the
 * registration thread. Returns 0, or -errno when the thread cannot start. */
int rm_pool_member_start(const struct rm_daemon_config *cfg, const char *scheme, const char *bound);

/* Leaves the pool at once, for a daemon that is stopping: the registration thread makes
 * no further round, the lease is revoked and the record deleted. Blocks for at most the
 * etcd call a round is in and the two of leaving (RM_ETCD_TIMEOUT_MS each, per endpoint).
 * 0 (also without a pool), or -errno after logging why; the record then expires with its lease. */
int rm_pool_member_stop(void);

/* Who this daemon is, for status: its pool name, its address and its membership
 * ("none", "registered", "removed", "unreachable"). Safe from any thread. */
void rm_pool_member_identity(char *host, size_t hostlen, char *address, size_t addrlen, char *membership,
			     size_t memberlen);

#endif
