/* etcd's v3 JSON gateway: keys and values travel base64-encoded, int64s as strings. With
 * a user, each request carries the token /v3/auth/authenticate gave (header
 * Authorization); a token etcd no longer knows (it expires when idle, or etcd restarted)
 * is taken again once and the request repeated. */
#include "etcd.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base64.h"
#include "etcd_post.h"
#include "json_read.h"
#include "text.h"

#define MESSAGE_MAX 256 /* the longest error text of etcd's that is shown */

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
		if (strstr(tok, "://") && strncmp(tok, "http://", 7) && strncmp(tok, "https://", 8)) {
			snprintf(e->error, sizeof(e->error), "the etcd endpoint %.200s is neither http:// nor https://", tok);
			return -EINVAL;
		}
		size_t len = strlen(tok);
		while (len && tok[len - 1] == '/')
			tok[--len] = 0; /* the gateway's paths start with one */
		strcpy(e->endpoints[e->nendpoints++], tok);
	}
	if (!e->nendpoints) {
		snprintf(e->error, sizeof(e->error), "no etcd endpoint given");
		return -EINVAL;
	}
	return 0;
}

int rm_etcd_set_credentials(struct rm_etcd *e, const struct rm_etcd_credentials *c)
{
	if (!c->cert_file[0] != !c->key_file[0]) {
		snprintf(e->error, sizeof(e->error), "a client certificate for etcd needs its key, and a key its certificate");
		return -EINVAL;
	}
	if (c->user[0] && !c->password[0]) {
		snprintf(e->error, sizeof(e->error), "the etcd user %.128s has no password", c->user);
		return -EINVAL;
	}
	const struct {
		const char *what, *path;
	} files[] = {{"CA", c->ca_file}, {"client certificate", c->cert_file}, {"client key", c->key_file}};
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
		if (files[i].path[0] && access(files[i].path, R_OK)) {
			int err = -errno;
			snprintf(e->error, sizeof(e->error), "cannot read the %s file for etcd, %.200s: %s", files[i].what,
				 files[i].path, strerror(-err));
			return err;
		}
	e->cred = *c;
	e->token[0] = 0;
	return 0;
}

void rm_etcd_close(struct rm_etcd *e)
{
	explicit_bzero(e->cred.password, sizeof(e->cred.password));
	explicit_bzero(e->token, sizeof(e->token));
}

/* A token may go into a header: printable ASCII without spaces, and it must fit. */
static int usable_token(const char *t)
{
	if (!t || !*t || strlen(t) >= sizeof(((struct rm_etcd *)0)->token))
		return 0;
	for (; *t; t++)
		if (*t < 0x21 || *t > 0x7e)
			return 0;
	return 1;
}

/* The -errno for a non-200 answer, with e->error saying why. -EKEYEXPIRED: the token is
 * no longer valid (taken again by call()). */
static int refusal(struct rm_etcd *e, const char *where, const char *path, long status, struct json_object *r)
{
	const char *raw = rm_json_string(r, "message", MESSAGE_MAX);
	if (!raw)
		raw = rm_json_string(r, "error", MESSAGE_MAX);
	/* etcd's text goes into log lines and onto terminals: escaped (text.h). */
	char shown[MESSAGE_MAX * 4 + 1];
	const char *msg = raw ? rm_text_escape(shown, sizeof(shown), raw) : NULL;
	int64_t code = rm_json_int(r, "code", -1);
	int err = -EIO;
	if (msg && strstr(msg, "lease not found")) {
		err = -ENOENT;
	} else if (code == 16 /* Unauthenticated */ || (msg && strstr(msg, "invalid auth token"))) {
		err = -EKEYEXPIRED;
	} else if (msg && (strstr(msg, "authentication failed") || strstr(msg, "user name is empty") ||
			   strstr(msg, "permission denied") || strstr(msg, "user name not found"))) {
		err = -EACCES;
	}
	if (err == -EACCES && msg && strstr(msg, "user name is empty"))
		snprintf(e->error, sizeof(e->error), "etcd at %s has authentication enabled: give the pool a user "
			 "(pool_user, REMORA_POOL_USER) (%s)", where, msg);
	else if (err == -EACCES && msg && strstr(msg, "permission denied"))
		snprintf(e->error, sizeof(e->error), "etcd at %s refused %s to user %.128s: %s", where, path,
			 e->cred.user[0] ? e->cred.user : "(none)", msg);
	else if (err == -EACCES)
		snprintf(e->error, sizeof(e->error), "etcd at %s refused user %.128s: %s", where, e->cred.user, msg);
	else
		snprintf(e->error, sizeof(e->error), "etcd at %s answered %ld: %s", where, status,
			 msg ? msg : "(no message)");
	return err;
}

/* Posts body to path at the first endpoint that answers; *reply is its parsed body. */
static int exchange(struct rm_etcd *e, const char *path, const char *body, const char *token,
		    struct json_object **reply)
{
	int err = -EHOSTUNREACH;
	long status = 0;
	char *text = NULL;
	size_t len = 0;
	const char *where = e->endpoints[0];
	*reply = NULL;
	for (int i = 0; i < e->nendpoints; i++) {
		where = e->endpoints[i];
		err = rm_etcd_post(e, where, path, body, token, &status, &text, &len);
		if (!err || err == -EINVAL || err == -ENOMEM || err == -ENOSYS)
			break; /* an answer, or no endpoint will do better */
	}
	if (!e->nendpoints)
		snprintf(e->error, sizeof(e->error), "no etcd endpoint given");
	if (err)
		return err;
	struct json_object *r = rm_json_parse(text, len);
	free(text);
	if (status != 200) {
		err = refusal(e, where, path, status, r);
	} else if (!r || !json_object_is_type(r, json_type_object)) {
		snprintf(e->error, sizeof(e->error), "etcd at %s sent malformed JSON", where);
		err = -EPROTO;
	}
	if (err)
		json_object_put(r);
	else
		*reply = r;
	return err;
}

/* Takes a token for e's user. */
static int authenticate(struct rm_etcd *e)
{
	struct json_object *req = json_object_new_object(), *r = NULL;
	const char *body = NULL;
	if (req && !json_object_object_add(req, "name", json_object_new_string(e->cred.user)) &&
	    !json_object_object_add(req, "password", json_object_new_string(e->cred.password)))
		body = json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN);
	int err = body ? exchange(e, "/v3/auth/authenticate", body, NULL, &r) : -ENOMEM;
	if (body)
		explicit_bzero((char *)body, strlen(body));
	json_object_put(req);
	if (err == -EKEYEXPIRED)
		err = -EACCES;
	if (!err) {
		const char *token = rm_json_string(r, "token", sizeof(e->token) - 1);
		if (usable_token(token)) {
			snprintf(e->token, sizeof(e->token), "%s", token);
		} else {
			snprintf(e->error, sizeof(e->error), "etcd gave user %.128s no usable token (is its authentication "
				 "enabled?)", e->cred.user);
			err = -EPROTO;
		}
	}
	json_object_put(r);
	return err;
}

/* One request: req (released here) to path, as e's user when there is one. */
static int call(struct rm_etcd *e, const char *path, struct json_object *req, struct json_object **reply)
{
	*reply = NULL;
	const char *body = req ? json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN) : NULL;
	int err = body ? 0 : -ENOMEM;
	if (err)
		snprintf(e->error, sizeof(e->error), "out of memory");
	if (!err && e->cred.user[0] && !e->token[0])
		err = authenticate(e);
	if (!err)
		err = exchange(e, path, body, e->token[0] ? e->token : NULL, reply);
	if (err == -EKEYEXPIRED && e->cred.user[0]) {
		e->token[0] = 0;
		if (!(err = authenticate(e)))
			err = exchange(e, path, body, e->token, reply);
	}
	if (err == -EKEYEXPIRED)
		err = -EACCES;
	json_object_put(req);
	return err;
}

/* A request object with key (base64) and, unless NULL, range_end (base64). */
static struct json_object *key_request(const char *key, const char *range_end)
{
	struct json_object *req = json_object_new_object();
	char *k = rm_base64_encode((const unsigned char *)key, strlen(key));
	char *re = range_end ? rm_base64_encode((const unsigned char *)range_end, strlen(range_end)) : NULL;
	int bad = !req || !k || (range_end && !re) || json_object_object_add(req, "key", json_object_new_string(k)) ||
		  (re && json_object_object_add(req, "range_end", json_object_new_string(re)));
	free(k);
	free(re);
	if (bad) {
		json_object_put(req);
		return NULL;
	}
	return req;
}

/* A request object {"ID": "lease"} (the gateway takes int64s as strings), or {"TTL": n}. */
static struct json_object *int_request(const char *name, int64_t v)
{
	char text[32];
	snprintf(text, sizeof(text), "%lld", (long long)v);
	struct json_object *req = json_object_new_object();
	if (req && json_object_object_add(req, name, json_object_new_string(text))) {
		json_object_put(req);
		return NULL;
	}
	return req;
}

int rm_etcd_lease_grant(struct rm_etcd *e, int ttl_s, int64_t *lease)
{
	struct json_object *r;
	int err = call(e, "/v3/lease/grant", int_request("TTL", ttl_s), &r);
	if (err)
		return err;
	*lease = rm_json_int(r, "ID", 0);
	json_object_put(r);
	if (*lease <= 0) {
		snprintf(e->error, sizeof(e->error), "etcd granted no lease");
		*lease = 0;
		return -EPROTO;
	}
	return 0;
}

int rm_etcd_lease_keepalive(struct rm_etcd *e, int64_t lease)
{
	struct json_object *r;
	int err = call(e, "/v3/lease/keepalive", int_request("ID", lease), &r);
	if (err)
		return err;
	/* The gateway wraps the streamed answer in "result"; an expired lease has no TTL. */
	struct json_object *res = rm_json_member(r, "result", json_type_object);
	int64_t ttl = rm_json_int(res ? res : r, "TTL", 0);
	json_object_put(r);
	if (ttl <= 0) {
		snprintf(e->error, sizeof(e->error), "lease %lld has expired", (long long)lease);
		return -ENOENT;
	}
	return 0;
}

int rm_etcd_lease_revoke(struct rm_etcd *e, int64_t lease)
{
	struct json_object *r;
	int err = call(e, "/v3/lease/revoke", int_request("ID", lease), &r);
	json_object_put(r);
	return err;
}

int rm_etcd_put(struct rm_etcd *e, const char *key, const char *value, int64_t lease)
{
	struct json_object *req = key_request(key, NULL);
	char *v = rm_base64_encode((const unsigned char *)value, strlen(value)), id[32];
	snprintf(id, sizeof(id), "%lld", (long long)lease);
	if (req && (!v || json_object_object_add(req, "value", json_object_new_string(v)) ||
		    (lease && json_object_object_add(req, "lease", json_object_new_string(id))))) {
		json_object_put(req);
		req = NULL;
	}
	free(v);
	struct json_object *r;
	int err = call(e, "/v3/kv/put", req, &r);
	json_object_put(r);
	return err;
}

/* Decodes one of a range answer's kvs into out; -EPROTO when it is not base64 text. */
static int decode_kv(struct json_object *kv, struct rm_etcd_kv *out)
{
	const char *ks = rm_json_string(kv, "key", RM_ETCD_MAX_REPLY);
	const char *vs = rm_json_string(kv, "value", RM_ETCD_MAX_REPLY);
	out->key = ks ? rm_base64_decode_text(ks) : NULL;
	out->value = rm_base64_decode_text(vs ? vs : ""); /* an empty value is left out of the answer */
	return out->key && out->value ? 0 : -EPROTO;
}

/* Ranges over [key, range_end) (range_end NULL: the key alone). */
static int range(struct rm_etcd *e, const char *key, const char *range_end, struct rm_etcd_kv **kvs, int *n)
{
	struct json_object *r;
	*kvs = NULL;
	*n = 0;
	int err = call(e, "/v3/kv/range", key_request(key, range_end), &r);
	if (err)
		return err;
	struct json_object *arr = rm_json_member(r, "kvs", json_type_array);
	size_t count = arr ? json_object_array_length(arr) : 0;
	if (count && !(*kvs = calloc(count, sizeof(**kvs)))) {
		snprintf(e->error, sizeof(e->error), "out of memory");
		err = -ENOMEM;
	}
	for (size_t i = 0; i < count && !err; i++) {
		err = decode_kv(json_object_array_get_idx(arr, i), &(*kvs)[(*n)++]);
		if (err)
			snprintf(e->error, sizeof(e->error), "etcd sent a key or value that is not base64 text");
	}
	json_object_put(r);
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
	struct json_object *r;
	int err = call(e, "/v3/kv/deleterange", key_request(key, NULL), &r);
	if (!err && deleted)
		*deleted = rm_json_int(r, "deleted", 0) > 0;
	json_object_put(r);
	return err;
}
