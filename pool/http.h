/* A minimal HTTP/1.1 client for etcd's JSON gateway: one POST per connection. */
#ifndef REMORA_POOL_HTTP_H
#define REMORA_POOL_HTTP_H

#include <stddef.h>

#define RM_HTTP_MAX_REPLY (16u << 20) /* a longer reply body is an error */

/* POSTs body (JSON) to path at endpoint ("http://host:port" or "host:port") and reads
 * the whole reply within timeout_ms. Returns 0 with *status and *reply (malloc'd, NUL-
 * terminated, the body with any chunked encoding removed) filled in, whatever the status;
 * or -errno when no reply came: -ECONNREFUSED, -ETIMEDOUT, -EHOSTUNREACH, -EINVAL for
 * a malformed endpoint, -EPROTO for a malformed reply, -EMSGSIZE for one too long. */
int rm_http_post(const char *endpoint, const char *path, const char *body, int timeout_ms, int *status,
		 char **reply);

#endif
