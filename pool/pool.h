/* The pool's records in etcd (docs/pool.md), shared by remorad, the remora CLI and the
 * client library:
 *   /remora/members/HOST  a member: JSON written by HOST's remorad under its lease
 *   /remora/admin/HOST    an administrator's decision for HOST: "draining" or
 *                         "removed" (JSON, no lease); absent means serving */
#ifndef REMORA_POOL_POOL_H
#define REMORA_POOL_POOL_H

#include <stdint.h>

#include "etcd.h"

#define RM_POOL_MEMBERS "/remora/members/"
#define RM_POOL_ADMIN "/remora/admin/"
#define RM_POOL_MAX_GPUS 64

struct rm_pool_gpu {
	int index;
	char name[128];
	char uuid[48];
	uint64_t total_bytes;
	uint64_t free_bytes;
	int clients;
};

struct rm_pool_member {
	char host[128];
	char address[256];   /* where clients connect: a transport address */
	char state[16];      /* "serving" or "draining" as the daemon last wrote it */
	char admin[16];      /* "", "draining" or "removed": the administrator's decision */
	int registered;      /* 0: only an admin record exists (the daemon left or was removed) */
	int clients;
	int pid;
	int64_t updated;     /* when the daemon last wrote it, seconds since the epoch */
	int ngpus;
	struct rm_pool_gpu gpus[RM_POOL_MAX_GPUS];
};

/* The member's JSON (malloc'd), or NULL without memory. */
char *rm_pool_member_json(const struct rm_pool_member *m);
/* Fills m from a member's JSON; -EPROTO when it is not one. */
int rm_pool_member_parse(const char *json, struct rm_pool_member *m);

/* The state placement and the CLI go by: the administrator's decision when there is
 * one, else the daemon's own: "serving", "draining" or "removed". */
const char *rm_pool_state(const struct rm_pool_member *m);
/* The most free memory on any one of its GPUs. */
uint64_t rm_pool_max_free(const struct rm_pool_member *m);

/* Every member, registered or only administered, sorted by host; *out is malloc'd. */
int rm_pool_list(struct rm_etcd *e, struct rm_pool_member **out, int *n);
/* One host; -ENOENT when it is neither registered nor administered. */
int rm_pool_find(struct rm_etcd *e, const char *host, struct rm_pool_member *m);
/* Records an administrator's decision ("draining", "removed"), or clears it (NULL). */
int rm_pool_set_admin(struct rm_etcd *e, const char *host, const char *decision);
/* Reads the decision for host into out ("" for none). */
int rm_pool_get_admin(struct rm_etcd *e, const char *host, char *out, int len);

#endif
