/* Pool records: members' JSON both ways, and the merged view of members and decisions. */
#include "pool.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_read.h"
#include "text.h"

#define TEXT_MAX 1024 /* the longest string of a record read; what fits its field is kept */

/* Adds key = v to o; nonzero when out of memory. */
static int add(struct json_object *o, const char *key, struct json_object *v)
{
	if (!v || json_object_object_add(o, key, v)) {
		json_object_put(v);
		return -1;
	}
	return 0;
}

char *rm_pool_member_json(const struct rm_pool_member *m)
{
	struct json_object *o = json_object_new_object(), *gpus = json_object_new_array();
	int bad = !o || !gpus;
	for (int i = 0; i < m->ngpus && !bad; i++) {
		const struct rm_pool_gpu *g = &m->gpus[i];
		struct json_object *gj = json_object_new_object();
		bad = !gj || add(gj, "index", json_object_new_int(g->index)) ||
		      add(gj, "name", json_object_new_string(g->name)) || add(gj, "uuid", json_object_new_string(g->uuid)) ||
		      add(gj, "total", json_object_new_uint64(g->total_bytes)) ||
		      add(gj, "free", json_object_new_uint64(g->free_bytes)) ||
		      add(gj, "clients", json_object_new_int(g->clients)) || json_object_array_add(gpus, gj);
		if (bad)
			json_object_put(gj);
	}
	bad = bad || add(o, "host", json_object_new_string(m->host)) ||
	      add(o, "address", json_object_new_string(m->address)) ||
	      add(o, "state", json_object_new_string(m->state)) || add(o, "clients", json_object_new_int(m->clients)) ||
	      add(o, "pid", json_object_new_int(m->pid)) || add(o, "updated", json_object_new_int64(m->updated));
	if (!bad) {
		bad = add(o, "gpus", gpus);
		gpus = NULL; /* o owns it, or add() released it */
	}
	const char *text = bad ? NULL : json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
	char *out = text ? strdup(text) : NULL;
	json_object_put(gpus);
	json_object_put(o);
	return out;
}

/* Records come from etcd, which anyone with write access to it can fill: their text is
 * escaped before it can reach a log or a terminal. */
static void copy(char *dst, size_t cap, const char *src)
{
	rm_text_escape(dst, cap, src ? src : "");
}

/* Integers of a record that must fit an int; 0 otherwise. */
static int small_int(struct json_object *j, const char *key, int dflt)
{
	int64_t v = rm_json_int(j, key, dflt);
	return v >= INT32_MIN && v <= INT32_MAX ? (int)v : dflt;
}

/* Bytes of memory: no negative figure. */
static uint64_t bytes(struct json_object *j, const char *key)
{
	int64_t v = rm_json_int(j, key, 0);
	return v > 0 ? (uint64_t)v : 0;
}

int rm_pool_member_parse(const char *json, struct rm_pool_member *m)
{
	memset(m, 0, sizeof(*m));
	struct json_object *j = rm_json_parse(json, strlen(json));
	const char *host = rm_json_string(j, "host", TEXT_MAX), *address = rm_json_string(j, "address", TEXT_MAX);
	if (!host || !address || !*host) {
		json_object_put(j);
		return -EPROTO;
	}
	copy(m->host, sizeof(m->host), host);
	copy(m->address, sizeof(m->address), address);
	copy(m->state, sizeof(m->state), rm_json_string(j, "state", TEXT_MAX));
	m->clients = small_int(j, "clients", 0);
	m->pid = small_int(j, "pid", 0);
	m->updated = rm_json_int(j, "updated", 0);
	struct json_object *gpus = rm_json_member(j, "gpus", json_type_array);
	size_t n = gpus ? json_object_array_length(gpus) : 0;
	for (size_t i = 0; i < n && m->ngpus < RM_POOL_MAX_GPUS; i++) {
		struct json_object *g = json_object_array_get_idx(gpus, i);
		if (!json_object_is_type(g, json_type_object))
			continue;
		struct rm_pool_gpu *out = &m->gpus[m->ngpus++];
		out->index = small_int(g, "index", m->ngpus - 1);
		copy(out->name, sizeof(out->name), rm_json_string(g, "name", TEXT_MAX));
		copy(out->uuid, sizeof(out->uuid), rm_json_string(g, "uuid", TEXT_MAX));
		out->total_bytes = bytes(g, "total");
		out->free_bytes = bytes(g, "free");
		out->clients = small_int(g, "clients", 0);
	}
	m->registered = 1;
	json_object_put(j);
	return 0;
}

const char *rm_pool_state(const struct rm_pool_member *m)
{
	if (m->admin[0])
		return m->admin;
	return m->state[0] ? m->state : "serving";
}

uint64_t rm_pool_max_free(const struct rm_pool_member *m)
{
	uint64_t best = 0;
	for (int i = 0; i < m->ngpus; i++)
		if (m->gpus[i].free_bytes > best)
			best = m->gpus[i].free_bytes;
	return best;
}

static int parse_decision(const char *json, char *out, int len)
{
	struct json_object *j = rm_json_parse(json, strlen(json));
	const char *d = rm_json_string(j, "decision", 16);
	int ok = d && (!strcmp(d, "draining") || !strcmp(d, "removed"));
	snprintf(out, (size_t)len, "%s", ok ? d : "");
	json_object_put(j);
	return ok ? 0 : -EPROTO;
}

static int by_host(const void *a, const void *b)
{
	return strcmp(((const struct rm_pool_member *)a)->host, ((const struct rm_pool_member *)b)->host);
}

int rm_pool_list(struct rm_etcd *e, struct rm_pool_member **out, int *n)
{
	struct rm_etcd_kv *members = NULL, *admin = NULL;
	int nm = 0, na = 0, err;
	*out = NULL;
	*n = 0;
	if ((err = rm_etcd_get_prefix(e, RM_POOL_MEMBERS, &members, &nm)) ||
	    (err = rm_etcd_get_prefix(e, RM_POOL_ADMIN, &admin, &na)))
		goto out;
	struct rm_pool_member *list = calloc((size_t)(nm + na) + 1, sizeof(*list));
	if (!list) {
		err = -ENOMEM;
		goto out;
	}
	int count = 0;
	for (int i = 0; i < nm; i++)
		if (!rm_pool_member_parse(members[i].value, &list[count]))
			count++; /* a record that is not a member's is skipped, not fatal */
	size_t plen = strlen(RM_POOL_ADMIN);
	for (int i = 0; i < na; i++) {
		/* etcd answers with keys under the prefix asked for, unless it is not etcd. */
		if (strncmp(admin[i].key, RM_POOL_ADMIN, plen) || !admin[i].key[plen])
			continue;
		char host[sizeof(list->host)];
		copy(host, sizeof(host), admin[i].key + plen);
		struct rm_pool_member *m = NULL;
		for (int k = 0; k < count && !m; k++)
			if (!strcmp(list[k].host, host))
				m = &list[k];
		if (!m) {
			m = &list[count++];
			memcpy(m->host, host, sizeof(host));
		}
		parse_decision(admin[i].value, m->admin, sizeof(m->admin));
	}
	qsort(list, (size_t)count, sizeof(*list), by_host);
	*out = list;
	*n = count;
out:
	rm_etcd_kvs_free(members, nm);
	rm_etcd_kvs_free(admin, na);
	return err;
}

int rm_pool_find(struct rm_etcd *e, const char *host, struct rm_pool_member *m)
{
	char key[512], *value = NULL;
	snprintf(key, sizeof(key), RM_POOL_MEMBERS "%s", host);
	int err = rm_etcd_get(e, key, &value);
	if (err && err != -ENOENT)
		return err;
	if (!err) {
		err = rm_pool_member_parse(value, m);
		free(value);
		if (err)
			return err;
	} else {
		memset(m, 0, sizeof(*m));
		copy(m->host, sizeof(m->host), host);
	}
	if ((err = rm_pool_get_admin(e, host, m->admin, sizeof(m->admin))))
		return err;
	if (!m->registered && !m->admin[0]) {
		snprintf(e->error, sizeof(e->error), "no host %s in the pool", host);
		return -ENOENT;
	}
	return 0;
}

int rm_pool_set_admin(struct rm_etcd *e, const char *host, const char *decision)
{
	char key[512];
	snprintf(key, sizeof(key), RM_POOL_ADMIN "%s", host);
	if (!decision)
		return rm_etcd_delete(e, key, NULL);
	char value[64];
	snprintf(value, sizeof(value), "{\"decision\":\"%s\"}", decision);
	return rm_etcd_put(e, key, value, 0);
}

int rm_pool_get_admin(struct rm_etcd *e, const char *host, char *out, int len)
{
	char key[512], *value = NULL;
	snprintf(key, sizeof(key), RM_POOL_ADMIN "%s", host);
	out[0] = 0;
	int err = rm_etcd_get(e, key, &value);
	if (err == -ENOENT)
		return 0;
	if (!err) {
		parse_decision(value, out, len);
		free(value);
	}
	return err;
}
