/* Where the client library connects (docs/pool.md): the daemons to try, in order.
 *   REMORA_POOL=http[s]://etcd:2379[,...] the pool's serving members that have at least
 *                                       REMORA_MIN_FREE_MEMORY free on one GPU, fewest
 *                                       clients first, then most free memory
 *   REMORA_SERVER=host:port[,...]       these, in the order given; also when REMORA_POOL
 *                                       is set but its etcd cannot be reached
 *   REMORA_POOL unreachable, no         the pool's members as last seen (pool_cache.h)
 *   REMORA_SERVER
 *   neither                             127.0.0.1:7700
 * The caller tries each until one accepts the hello. */
#ifndef REMORA_PLACEMENT_H
#define REMORA_PLACEMENT_H

#include <stdint.h>

#include "pool.h"

#define RM_PLACEMENT_MAX 32

struct rm_candidates {
	int n;
	char addr[RM_PLACEMENT_MAX][256];
	const char *from;   /* "REMORA_POOL", "REMORA_SERVER", "the pool's last members" or "the default" */
};

/* Fills c from the environment. Returns 0, or -errno after printing one line on
 * stderr: -EHOSTUNREACH etcd unreachable, -ENOENT no member fits, -EACCES etcd refused
 * (TLS, its user or password: REMORA_POOL_CA and the others of etcd.h), -EINVAL a bad
 * setting. Only an unreachable etcd falls back to REMORA_SERVER or the last members. */
int rm_placement_candidates(struct rm_candidates *c);

/* The placement order of n members: fills order with the indexes of the serving ones
 * with at least min_free bytes free on one GPU, best first; returns how many. */
int rm_placement_order(const struct rm_pool_member *m, int n, uint64_t min_free, int *order);

#endif
