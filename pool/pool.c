/* Pool records: members' JSON both ways, and the merged view of members and decisions. */
#include "pool.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "text.h"

char *rm_pool_member_json(const struct rm_pool_member *m)
{
	struct rm_buf b = {0};
	rm_buf_printf(&b, "{\"host\":");
	rm_buf_json_string(&b, m->host);
	rm_buf_printf(&b, ",\"address\":");
	rm_buf_json_string(&b, m->address);
	rm_buf_printf(&b, ",\"state\":");
	rm_buf_json_string(&b, m->state);
	rm_buf_printf(&b, ",\"clients\":%d,\"pid\":%d,\"updated\":%lld,\"gpus\":[", m->clients, m->pid,
		      (long long)m->updated);
	for (int i = 0; i < m->ngpus; i++) {
		const struct rm_pool_gpu *g = &m->gpus[i];
		rm_buf_printf(&b, "%s{\"index\":%d,\"name\":", i ? "," : "", g->index);
		rm_buf_json_string(&b, g->name);
		rm_buf_printf(&b, ",\"uuid\":");
		rm_buf_json_string(&b, g->uuid);
		rm_buf_printf(&b, ",\"total\":%llu,\"free\":%llu,\"clients\":%d}", (unsigned long long)g->total_bytes,
			      (unsigned long long)g->free_bytes, g->clients);
	}
	rm_buf_printf(&b, "]}");
	return rm_buf_take(&b);
}

/* Records come from etcd, which anyone with write access to it can fill: their text is
 * escaped before it can reach a log or a terminal. */
static void copy(char *dst, size_t cap, const char *src)
{
	rm_text_escape(dst, cap, src ? src : "");
}

int rm_pool_member_parse(const char *json, struct rm_pool_member *m)
{
	memset(m, 0, sizeof(*m));
	struct rm_json *j = rm_json_parse(json, strlen(json));
	const char *host = rm_json_str(j, "host"), *address = rm_json_str(j, "address");
	if (!host || !address) {
		rm_json_free(j);
		return -EPROTO;
	}
	copy(m->host, sizeof(m->host), host);
	copy(m->address, sizeof(m->address), address);
	copy(m->state, sizeof(m->state), rm_json_str(j, "state"));
	m->clients = (int)rm_json_int(j, "clients", 0);
	m->pid = (int)rm_json_int(j, "pid", 0);
	m->updated = rm_json_int(j, "updated", 0);
	const struct rm_json *gpus = rm_json_get(j, "gpus");
	for (const struct rm_json *g = gpus ? gpus->child : NULL; g && m->ngpus < RM_POOL_MAX_GPUS; g = g->next) {
		struct rm_pool_gpu *out = &m->gpus[m->ngpus++];
		out->index = (int)rm_json_int(g, "index", m->ngpus - 1);
		copy(out->name, sizeof(out->name), rm_json_str(g, "name"));
		copy(out->uuid, sizeof(out->uuid), rm_json_str(g, "uuid"));
		out->total_bytes = (uint64_t)rm_json_int(g, "total", 0);
		out->free_bytes = (uint64_t)rm_json_int(g, "free", 0);
		out->clients = (int)rm_json_int(g, "clients", 0);
	}
	m->registered = 1;
	rm_json_free(j);
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
	struct rm_json *j = rm_json_parse(json, strlen(json));
	const char *d = rm_json_str(j, "decision");
	int ok = d && (!strcmp(d, "draining") || !strcmp(d, "removed"));
	snprintf(out, (size_t)len, "%s", ok ? d : "");
	rm_json_free(j);
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
