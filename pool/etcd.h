/* An etcd v3 client over its JSON gateway (POST /v3/...): leases and keys, nothing more,
 * over http:// or https:// (libcurl), optionally as one of etcd's users (docs/pool.md).
 *
 * Every call tries the endpoints in order until one answers; it returns 0 or -errno
 * and, on failure, leaves one line saying why in e->error. -EHOSTUNREACH (or the
 * socket's own error, -ETIMEDOUT) means no endpoint answered; -ENOENT a missing key or
 * lease; -EACCES a refusal: TLS failed, or etcd refused the user, its password or its
 * permission; -EIO another error from etcd; -EPROTO an answer that made no sense;
 * -EINVAL a setting that cannot work (an endpoint's scheme, a TLS file); -ENOSYS no
 * libcurl (only where it is loaded at run time: the client library).
 * Nothing etcd sends is trusted: an answer is at most RM_ETCD_MAX_REPLY bytes, every
 * request ends within timeout_ms, and every field is checked before use.
 * An rm_etcd is used by one thread at a time; it holds no connection between calls. */
#ifndef REMORA_POOL_ETCD_H
#define REMORA_POOL_ETCD_H

#include <stddef.h>
#include <stdint.h>

#define RM_ETCD_MAX_ENDPOINTS 8
#define RM_ETCD_TIMEOUT_MS 2000
#define RM_ETCD_MAX_REPLY (4u << 20)

/* How to reach a secured etcd; an empty field is not used. */
struct rm_etcd_credentials {
	char ca_file[512];   /* verifies etcd's certificate (https://); "": the system's CAs */
	char cert_file[512]; /* this side's certificate and key, for etcd's --client-cert-auth */
	char key_file[512];
	char user[128];      /* one of etcd's users (etcd --auth enabled); needs password */
	char password[256];
};

struct rm_etcd {
	char endpoints[RM_ETCD_MAX_ENDPOINTS][256];
	int nendpoints;
	int timeout_ms;
	struct rm_etcd_credentials cred;
	char token[1024];    /* etcd's token for cred.user, taken on the first call, renewed once it expires */
	char error[384];
};

struct rm_etcd_kv {
	char *key;
	char *value;
};

/* Takes a comma-separated list of endpoints (http://host:port, https://host:port, or
 * host:port for http). -EINVAL for none, too many, or another scheme. No credentials. */
int rm_etcd_init(struct rm_etcd *e, const char *endpoints);
/* Uses c from the next call on. -EINVAL for a certificate without its key (or the other
 * way round), or a user without a password; -errno for a file that cannot be read. */
int rm_etcd_set_credentials(struct rm_etcd *e, const struct rm_etcd_credentials *c);
/* Forgets the password and the token. e may be initialized again afterwards. */
void rm_etcd_close(struct rm_etcd *e);

/* Credentials from the environment, as the client library and the CLI read them:
 * REMORA_POOL_CA, REMORA_POOL_CERT, REMORA_POOL_KEY, REMORA_POOL_USER and its password
 * from REMORA_POOL_PASSWORD_FILE, else REMORA_POOL_PASSWORD. 0, or -errno with why. */
int rm_etcd_credentials_from_env(struct rm_etcd_credentials *c, char *why, size_t whylen);
/* Reads a password from the first line of path (the line's end is not part of it). 0, or
 * -errno with why: unreadable, empty, or longer than the field. */
int rm_etcd_read_password(const char *path, char *out, size_t len, char *why, size_t whylen);

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
