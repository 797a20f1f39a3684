/* An etcd v3 client over its JSON gateway (POST /v3/...): leases and keys, nothing more.
 *
 * Every call tries the endpoints in order until one answers; it returns 0 or -errno
 * and, on failure, leaves one line saying why in e->error. -EHOSTUNREACH (or the
 * socket's own error) means no endpoint answered; -ENOENT a missing key or lease;
 * -EIO an answer with an error from etcd; -EPROTO an answer that made no sense.
 * An rm_etcd is used by one thread at a time. */
#ifndef REMORA_POOL_ETCD_H
#define REMORA_POOL_ETCD_H

#include <stdint.h>

#define RM_ETCD_MAX_ENDPOINTS 8
#define RM_ETCD_TIMEOUT_MS 2000

struct rm_etcd {
	char endpoints[RM_ETCD_MAX_ENDPOINTS][256];
	int nendpoints;
	int timeout_ms;
	char error[384];
};

struct rm_etcd_kv {
	char *key;
	char *value;
};

/* Takes a comma-separated list of endpoints (http://host:port). -EINVAL for none or too many. */
int rm_etcd_init(struct rm_etcd *e, const char *endpoints);

/* A new lease of ttl_s seconds. */
int rm_etcd_lease_grant(struct rm_etcd *e, int ttl_s, int64_t *lease);
/* Renews a lease; -ENOENT once it has expired. */
int rm_etcd_lease_keepalive(struct rm_etcd *e, int64_t lease);
int rm_etcd_lease_revoke(struct rm_etcd *e, int64_t lease);

/* Writes key = value, bound to lease unless it is 0 (-ENOENT: the lease has expired). */
int rm_etcd_put(struct rm_etcd *e, const char *key, const char *value, int64_t lease);
/* Reads one key; *value is malloc'd. -ENOENT when it does not exist. */
int rm_etcd_get(struct rm_etcd *e, const char *key, char **value);
/* Every key starting with prefix, in key order; free with rm_etcd_kvs_free. */
int rm_etcd_get_prefix(struct rm_etcd *e, const char *prefix, struct rm_etcd_kv **kvs, int *n);
void rm_etcd_kvs_free(struct rm_etcd_kv *kvs, int n);
/* Deletes one key; *deleted (may be NULL) says whether it existed. */
int rm_etcd_delete(struct rm_etcd *e, const char *key, int *deleted);

#endif
