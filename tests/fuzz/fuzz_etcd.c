/* Fuzz target `etcd`: what pool/etcd.c and pool/pool.c make of an etcd gateway's
 * answer (range replies to kvs, leases, tokens, errors, pool member and admin records),
 * read with json-c. This file stands in for pool/etcd_http.c: its rm_etcd_post answers
 * every request with the input, so no socket or server is involved and the fuzzer
 * drives the answer directly (libcurl reads the real ones off the socket).
 *
 * Input: byte 0 picks the call, byte 1 the HTTP status (0: 200, 1: 404, 2: 500, 3: 401,
 * else 200) and, from bit 7 of byte 0, whether the client has a user (so that the
 * answer is taken for a token first); the rest is the reply body, given to every request
 * the call makes (or, for byte 0 = 10 mod 11, a member's record parsed on its own). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "etcd.h"
#include "etcd_post.h"
#include "pool.h"

static const uint8_t *body;
static size_t body_len;
static int body_status;

int rm_etcd_post(struct rm_etcd *e, const char *endpoint, const char *path, const char *request, const char *token,
		 long *status, char **reply, size_t *reply_len)
{
	/* A token is sent only once it passed the checks a header needs. */
	for (const char *t = token; t && *t; t++)
		if (*t < 0x21 || *t > 0x7e)
			abort();
	if (token && strlen(token) >= sizeof(e->token))
		abort();
	*reply = malloc(body_len + 1);
	if (!*reply)
		return -ENOMEM;
	memcpy(*reply, body, body_len);
	(*reply)[body_len] = 0;
	*reply_len = body_len;
	*status = body_status;
	return 0;
}

static void check_kvs(struct rm_etcd_kv *kvs, int n, int err)
{
	if (err && (kvs || n))
		abort();
	for (int i = 0; i < n; i++)
		if (!kvs[i].key || !kvs[i].value)
			abort();
	rm_etcd_kvs_free(kvs, n);
}

static void check_members(struct rm_pool_member *list, int n, int err)
{
	if (err && (list || n))
		abort();
	for (int i = 0; i < n; i++) {
		const struct rm_pool_member *m = &list[i];
		if (!memchr(m->host, 0, sizeof(m->host)) || !memchr(m->address, 0, sizeof(m->address)) ||
		    !memchr(m->state, 0, sizeof(m->state)) || !memchr(m->admin, 0, sizeof(m->admin)) ||
		    m->ngpus < 0 || m->ngpus > RM_POOL_MAX_GPUS)
			abort();
		rm_pool_state(m);
		rm_pool_max_free(m);
	}
	free(list);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const int statuses[] = {200, 404, 500, 401};
	if (size < 2)
		return 0;
	body = data + 2;
	body_len = size - 2;
	body_status = data[1] < 4 ? statuses[data[1]] : 200;
	struct rm_etcd e;
	if (rm_etcd_init(&e, "http://127.0.0.1:2379"))
		abort();
	struct rm_etcd_credentials user = {.user = "remora", .password = "secret"};
	if ((data[0] & 0x80) && rm_etcd_set_credentials(&e, &user))
		abort();
	int64_t lease = 0;
	char *value = NULL, admin[16];
	struct rm_etcd_kv *kvs = NULL;
	struct rm_pool_member m, *list = NULL;
	int n = 0, deleted = 0, err;
	switch ((data[0] & 0x7f) % 11) {
	case 0:
		err = rm_etcd_lease_grant(&e, 10, &lease);
		if (!err && !lease)
			abort();
		break;
	case 1: rm_etcd_lease_keepalive(&e, 7); break;
	case 2: rm_etcd_lease_revoke(&e, 7); break;
	case 3: rm_etcd_put(&e, "/remora/members/h", "{}", 7); break;
	case 4:
		err = rm_etcd_get(&e, "/remora/members/h", &value);
		if (!err && !value)
			abort();
		free(value);
		break;
	case 5:
		err = rm_etcd_get_prefix(&e, RM_POOL_MEMBERS, &kvs, &n);
		check_kvs(kvs, n, err);
		break;
	case 6: rm_etcd_delete(&e, "/remora/members/h", &deleted); break;
	case 7:
		err = rm_pool_list(&e, &list, &n);
		check_members(list, n, err);
		break;
	case 8: rm_pool_find(&e, "h", &m); break;
	case 9: rm_pool_get_admin(&e, "h", admin, sizeof(admin)); break;
	default: { /* a member's record as it lies in etcd, without the range reply around it */
		char *text = strndup((const char *)body, body_len);
		struct rm_pool_member *one = malloc(sizeof(*one));
		if (text && one && !rm_pool_member_parse(text, one))
			check_members(one, 1, 0);
		else
			free(one);
		free(text);
		break;
	}
	}
	if (!memchr(e.error, 0, sizeof(e.error)) || !memchr(e.token, 0, sizeof(e.token)))
		abort();
	rm_etcd_close(&e);
	return 0;
}
