/* The one HTTP exchange the etcd client makes (etcd.c), apart so that the fuzz target
 * `etcd` can answer in its place. Implemented over libcurl by etcd_http.c. */
#ifndef REMORA_POOL_ETCD_POST_H
#define REMORA_POOL_ETCD_POST_H

#include <stddef.h>

#include "etcd.h"

/* POSTs body (JSON) to endpoint + path with e's TLS files, and token as the Authorization
 * header unless it is NULL, within e->timeout_ms. Returns 0 with *status and *reply
 * (malloc'd, NUL-terminated, *reply_len bytes before the NUL) whatever the status; or,
 * when no answer came, -errno with e->error saying why: -ECONNREFUSED (or another
 * socket error), -ETIMEDOUT, -EHOSTUNREACH, -EACCES when TLS failed, -EMSGSIZE for an
 * answer over RM_ETCD_MAX_REPLY, -EINVAL for a TLS file or URL that cannot be used,
 * -ENOSYS without libcurl. */
int rm_etcd_post(struct rm_etcd *e, const char *endpoint, const char *path, const char *body, const char *token,
		 long *status, char **reply, size_t *reply_len);

#endif
