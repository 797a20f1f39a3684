/* Placement: reads the pool once at connect and orders its members; no daemon is
 * asked anything until the caller dials. */
#include "placement.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "pool_cache.h"
#include "size.h"

#define DEFAULT_SERVER "127.0.0.1:7700"

static const struct rm_pool_member *sort_base;

static int better(const void *a, const void *b)
{
	const struct rm_pool_member *x = &sort_base[*(const int *)a], *y = &sort_base[*(const int *)b];
	if (x->clients != y->clients)
		return x->clients < y->clients ? -1 : 1;
	uint64_t fx = rm_pool_max_free(x), fy = rm_pool_max_free(y);
	if (fx != fy)
		return fx > fy ? -1 : 1;
	return strcmp(x->host, y->host);
}

int rm_placement_order(const struct rm_pool_member *m, int n, uint64_t min_free, int *order)
{
	int count = 0;
	for (int i = 0; i < n; i++)
		if (m[i].registered && !strcmp(rm_pool_state(&m[i]), "serving") && m[i].ngpus &&
		    rm_pool_max_free(&m[i]) >= min_free)
			order[count++] = i;
	sort_base = m; /* qsort has no context argument; placement runs once, under the connect once */
	qsort(order, (size_t)count, sizeof(*order), better);
	return count;
}

static int from_pool(struct rm_candidates *c, const char *endpoints)
{
	uint64_t min_free = 0;
	const char *mf = getenv("REMORA_MIN_FREE_MEMORY");
	if (mf && *mf && rm_parse_size(mf, &min_free)) {
		rm_log(RM_LOG_ERROR, "REMORA_MIN_FREE_MEMORY=%s is not a size (e.g. 512M, 8G)", mf);
		return -EINVAL;
	}
	struct rm_etcd e;
	struct rm_etcd_credentials cred;
	struct rm_pool_member *members = NULL;
	int n = 0, err = rm_etcd_init(&e, endpoints);
	if (!err && (err = rm_etcd_credentials_from_env(&cred, e.error, sizeof(e.error))) == 0)
		err = rm_etcd_set_credentials(&e, &cred);
	explicit_bzero(cred.password, sizeof(cred.password));
	if (!err)
		err = rm_pool_list(&e, &members, &n);
	rm_etcd_close(&e);
	if (err) {
		rm_log(RM_LOG_ERROR, "REMORA_POOL: %s", e.error);
		/* Only an etcd that did not answer lets the client go on to other servers: a
		 * refusal or a wrong setting is the administrator's to fix. */
		return err == -EINVAL || err == -ENOMEM || err == -EACCES || err == -ENOSYS || err == -ENAMETOOLONG
			       ? err : -EHOSTUNREACH;
	}
	int *order = malloc(((size_t)n + 1) * sizeof(*order));
	/* Every serving member, kept for when etcd is away; then those that fit. */
	struct rm_candidates *all = malloc(sizeof(*all));
	int count = order && all ? rm_placement_order(members, n, 0, order) : 0;
	if (all) {
		all->n = 0;
		for (int i = 0; i < count && all->n < RM_PLACEMENT_MAX; i++)
			snprintf(all->addr[all->n++], sizeof(all->addr[0]), "%s", members[order[i]].address);
		rm_pool_cache_write(endpoints, all);
		free(all);
	}
	count = order ? rm_placement_order(members, n, min_free, order) : 0;
	for (int i = 0; i < count && c->n < RM_PLACEMENT_MAX; i++)
		snprintf(c->addr[c->n++], sizeof(c->addr[0]), "%s", members[order[i]].address);
	free(order);
	free(members);
	if (!c->n) {
		rm_log(RM_LOG_ERROR, "the pool at %s has no serving GPU host with %llu bytes free (%d member(s))", endpoints,
		       (unsigned long long)min_free, n);
		return -ENOENT;
	}
	return 0;
}

int rm_placement_candidates(struct rm_candidates *c)
{
	memset(c, 0, sizeof(*c));
	const char *pool = getenv("REMORA_POOL"), *server = getenv("REMORA_SERVER");
	if (pool && *pool) {
		c->from = "REMORA_POOL";
		int err = from_pool(c, pool);
		if (err != -EHOSTUNREACH)
			return err;
		/* The daemons may well be serving while their store is away. */
		c->n = 0;
		long age;
		if ((!server || !*server) && !rm_pool_cache_read(pool, c, &age)) {
			rm_log(RM_LOG_ERROR, "the pool at %s cannot be reached: trying its %d member(s) last seen %ld s ago",
			       pool, c->n, age);
			c->from = "the pool's last members";
			return 0;
		}
		if (!server || !*server)
			return err;
		rm_log(RM_LOG_ERROR, "the pool at %s cannot be reached: trying the servers REMORA_SERVER names", pool);
	}
	c->from = server && *server ? "REMORA_SERVER" : "the default";
	char list[2048];
	snprintf(list, sizeof(list), "%s", server && *server ? server : DEFAULT_SERVER);
	for (char *save, *tok = strtok_r(list, ", ", &save); tok && c->n < RM_PLACEMENT_MAX;
	     tok = strtok_r(NULL, ", ", &save))
		snprintf(c->addr[c->n++], sizeof(c->addr[0]), "%s", tok);
	if (!c->n) {
		rm_log(RM_LOG_ERROR, "REMORA_SERVER names no server");
		return -EINVAL;
	}
	return 0;
}
