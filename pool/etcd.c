/* etcd's v3 JSON gateway: keys and values travel base64-encoded, int64s as strings. */
#include "etcd.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base64.h"
#include "http.h"
#include "json.h"

/* The key just past every key starting with prefix, as etcd's range_end wants it. */
static char *prefix_end(const char *prefix)
{
	char *end = strdup(prefix);
	if (!end)
		return NULL;
	for (size_t i = strlen(end); i > 0; i--) {
		if ((unsigned char)end[i - 1] < 0xff) {
			end[i - 1]++;
			end[i] = 0;
			return end;
		}
	}
	free(end);
	return NULL; /* a prefix of 0xff bytes only: never one of Remora's */
}

int rm_etcd_init(struct rm_etcd *e, const char *endpoints)
{
	memset(e, 0, sizeof(*e));
	e->timeout_ms = RM_ETCD_TIMEOUT_MS;
	char buf[2048];
	if (!endpoints || snprintf(buf, sizeof(buf), "%s", endpoints) >= (int)sizeof(buf)) {
		snprintf(e->error, sizeof(e->error), "the list of etcd endpoints is too long");
		return -EINVAL;
	}
	for (char *save, *tok = strtok_r(buf, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
		if (e->nendpoints == RM_ETCD_MAX_ENDPOINTS || strlen(tok) >= sizeof(e->endpoints[0])) {
			snprintf(e->error, sizeof(e->error), "more than %d etcd endpoints, or one too long",
				 RM_ETCD_MAX_ENDPOINTS);
			return -EINVAL;
		}
		strcpy(e->endpoints[e->nendpoints++], tok);
	}
	if (!e->nendpoints) {
		snprintf(e->error, sizeof(e->error), "no etcd endpoint given");
		return -EINVAL;
	}
	return 0;
}

/* Posts body to path at the first endpoint that answers; *reply is its parsed body.
 * A non-200 answer is -EIO, or -ENOENT when etcd says a lease was not found. */
static int call(struct rm_etcd *e, const char *path, const char *body, struct rm_json **reply)
{
	int err = -EHOSTUNREACH, status = 0;
	char *text = NULL;
	*reply = NULL;
	const char *where = e->nendpoints ? e->endpoints[0] : "?";
	for (int i = 0; i < e->nendpoints; i++) {
		where = e->endpoints[i];
		err = rm_http_post(where, path, body, e->timeout_ms ? e->timeout_ms : RM_ETCD_TIMEOUT_MS, &status,
				   &text);
		if (err != -ECONNREFUSED && err != -ETIMEDOUT && err != -EHOSTUNREACH && err != -ENETUNREACH &&
		    err != -ECONNRESET)
			break;
	}
	if (err) {
		snprintf(e->error, sizeof(e->error), "cannot reach etcd at %s: %s", where,
			 err == -EPROTO ? "malformed HTTP reply" : strerror(-err));
		return err;
	}
	*reply = rm_json_parse(text, strlen(text));
	if (status != 200) {
		const char *msg = rm_json_str(*reply, "message");
		snprintf(e->error, sizeof(e->error), "etcd at %s answered %d: %s", where, status,
			 msg ? msg : text);
		err = msg && strstr(msg, "lease not found") ? -ENOENT : -EIO;
	} else if (!*reply) {
		snprintf(e->error, sizeof(e->error), "etcd at %s sent malformed JSON", where);
		err = -EPROTO;
	}
	free(text);
	if (err) {
		rm_json_free(*reply);
		*reply = NULL;
	}
	return err;
}

int rm_etcd_lease_grant(struct rm_etcd *e, int ttl_s, int64_t *lease)
{
	char body[64];
	snprintf(body, sizeof(body), "{\"TTL\":%d}", ttl_s);
	struct rm_json *r;
	int err = call(e, "/v3/lease/grant", body, &r);
	if (err)
		return err;
	*lease = rm_json_int(r, "ID", 0);
	rm_json_free(r);
	if (!*lease) {
		snprintf(e->error, sizeof(e->error), "etcd granted no lease");
		return -EPROTO;
	}
	return 0;
}

int rm_etcd_lease_keepalive(struct rm_etcd *e, int64_t lease)
{
	char body[64];
	snprintf(body, sizeof(body), "{\"ID\":\"%lld\"}", (long long)lease);
	struct rm_json *r;
	int err = call(e, "/v3/lease/keepalive", body, &r);
	if (err)
		return err;
	/* The gateway wraps the streamed answer in "result"; an expired lease has no TTL. */
	const struct rm_json *res = rm_json_get(r, "result");
	int64_t ttl = rm_json_int(res ? res : r, "TTL", 0);
	rm_json_free(r);
	if (ttl <= 0) {
		snprintf(e->error, sizeof(e->error), "lease %lld has expired", (long long)lease);
		return -ENOENT;
	}
	return 0;
}

int rm_etcd_lease_revoke(struct rm_etcd *e, int64_t lease)
{
	char body[64];
	snprintf(body, sizeof(body), "{\"ID\":\"%lld\"}", (long long)lease);
	struct rm_json *r;
	int err = call(e, "/v3/lease/revoke", body, &r);
	rm_json_free(r);
	return err;
}

int rm_etcd_put(struct rm_etcd *e, const char *key, const char *value, int64_t lease)
{
	char *k = rm_base64_encode((const unsigned char *)key, strlen(key));
	char *v = rm_base64_encode((const unsigned char *)value, strlen(value));
	struct rm_buf b = {0};
	if (k && v) {
		rm_buf_printf(&b, "{\"key\":\"%s\",\"value\":\"%s\"", k, v);
		if (lease)
			rm_buf_printf(&b, ",\"lease\":\"%lld\"", (long long)lease);
		rm_buf_printf(&b, "}");
	}
	char *body = rm_buf_take(&b);
	free(k);
	free(v);
	if (!body || !k || !v) {
		free(body);
		return -ENOMEM;
	}
	struct rm_json *r;
	int err = call(e, "/v3/kv/put", body, &r);
	free(body);
	rm_json_free(r);
	return err;
}

/* Ranges over [key, range_end) (range_end NULL: the key alone). */
static int range(struct rm_etcd *e, const char *key, const char *range_end, struct rm_etcd_kv **kvs, int *n)
{
	char *k = rm_base64_encode((const unsigned char *)key, strlen(key));
	char *re = range_end ? rm_base64_encode((const unsigned char *)range_end, strlen(range_end)) : NULL;
	struct rm_buf b = {0};
	if (k && (re || !range_end)) {
		rm_buf_printf(&b, "{\"key\":\"%s\"", k);
		if (re)
			rm_buf_printf(&b, ",\"range_end\":\"%s\"", re);
		rm_buf_printf(&b, "}");
	}
	char *body = rm_buf_take(&b);
	free(k);
	free(re);
	if (!body)
		return -ENOMEM;
	struct rm_json *r;
	int err = call(e, "/v3/kv/range", body, &r);
	free(body);
	if (err)
		return err;
	*kvs = NULL;
	*n = 0;
	const struct rm_json *arr = rm_json_get(r, "kvs");
	int count = 0;
	for (const struct rm_json *kv = arr ? arr->child : NULL; kv; kv = kv->next)
		count++;
	if (count && !(*kvs = calloc((size_t)count, sizeof(**kvs))))
		err = -ENOMEM;
	for (const struct rm_json *kv = arr ? arr->child : NULL; kv && !err; kv = kv->next) {
		const char *ks = rm_json_str(kv, "key"), *vs = rm_json_str(kv, "value");
		struct rm_etcd_kv *out = &(*kvs)[*n];
		out->key = ks ? rm_base64_decode_text(ks) : NULL;
		out->value = rm_base64_decode_text(vs ? vs : ""); /* an empty value is left out of the reply */
		(*n)++;
		if (!out->key || !out->value) {
			snprintf(e->error, sizeof(e->error), "etcd sent a key or value that is not base64");
			err = -EPROTO;
		}
	}
	rm_json_free(r);
	if (err) {
		rm_etcd_kvs_free(*kvs, *n);
		*kvs = NULL;
		*n = 0;
	}
	return err;
}

int rm_etcd_get(struct rm_etcd *e, const char *key, char **value)
{
	struct rm_etcd_kv *kvs;
	int n, err = range(e, key, NULL, &kvs, &n);
	if (err)
		return err;
	if (!n) {
		snprintf(e->error, sizeof(e->error), "no key %s", key);
		return -ENOENT;
	}
	*value = kvs[0].value;
	kvs[0].value = NULL;
	rm_etcd_kvs_free(kvs, n);
	return 0;
}

int rm_etcd_get_prefix(struct rm_etcd *e, const char *prefix, struct rm_etcd_kv **kvs, int *n)
{
	char *end = prefix_end(prefix);
	if (!end)
		return -ENOMEM;
	int err = range(e, prefix, end, kvs, n);
	free(end);
	return err;
}

void rm_etcd_kvs_free(struct rm_etcd_kv *kvs, int n)
{
	for (int i = 0; i < n; i++) {
		free(kvs[i].key);
		free(kvs[i].value);
	}
	free(kvs);
}

int rm_etcd_delete(struct rm_etcd *e, const char *key, int *deleted)
{
	char *k = rm_base64_encode((const unsigned char *)key, strlen(key));
	if (!k)
		return -ENOMEM;
	char body[1024];
	int too_long = snprintf(body, sizeof(body), "{\"key\":\"%s\"}", k) >= (int)sizeof(body);
	free(k);
	if (too_long)
		return -ENAMETOOLONG;
	struct rm_json *r;
	int err = call(e, "/v3/kv/deleterange", body, &r);
	if (!err && deleted)
		*deleted = rm_json_int(r, "deleted", 0) > 0;
	rm_json_free(r);
	return err;
}
