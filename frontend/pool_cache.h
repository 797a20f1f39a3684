/* pool_cache.h - the pool's last answer, kept for when its etcd cannot be reached.
 *
 * After each placement from the pool the client writes the serving members' addresses, best
 * first, to a small file: REMORA_POOL_CACHE, else $XDG_CACHE_HOME/remora/pool-members, else
 * ~/.cache/remora/pool-members. A client whose REMORA_POOL cannot be reached, and which is given
 * no REMORA_SERVER, tries those members, saying how old the list is. The file names the etcd
 * endpoints it came from and is used only for the same REMORA_POOL, and only while younger than
 * RM_POOL_CACHE_MAX_AGE_S. */
#ifndef REMORA_POOL_CACHE_H
#define REMORA_POOL_CACHE_H

#include "placement.h"

#define RM_POOL_CACHE_MAX_AGE_S (7 * 24 * 3600)

/* Keeps c's addresses as the members of endpoints (best effort: a failure is logged at debug). */
void rm_pool_cache_write(const char *endpoints, const struct rm_candidates *c);

/* Fills c with the members kept for endpoints; 0 and their age in seconds, or -ENOENT. */
int rm_pool_cache_read(const char *endpoints, struct rm_candidates *c, long *age_s);

#endif
