/* Memory the process keeps page-locked (transport.h, rm_transport_pin): the program's
 * pinned allocations in the client library, the staging buffers in remorad. An rdma://
 * connection registers such a region in its protection domain the first time a read offer
 * or a read uses it, and keeps it registered until the region is unpinned or the
 * connection ends; bulk bytes from and to it then go by RDMA read with no registration of
 * their own. Protection domains are not shared between connections: a peer can reach only
 * what was registered for its own connection. */
#include <pthread.h>
#include <stdlib.h>

#include "rdma_conn.h"

struct region_mr {
	struct ibv_pd *pd;
	struct ibv_mr *mr; /* NULL: registering failed; not tried again for this domain */
	int writable;      /* registered for local writes too: reads may land in it */
	const struct rm_verbs_api *v;
	struct region_mr *next;
};

struct region {
	uintptr_t start;
	size_t len;
	int users; /* offers and reads using one of its registrations now */
	int gone;  /* unpinned while in use: on the retired list, freed by its last user */
	struct region_mr *mrs;
	struct region *next;
};

static pthread_mutex_t regions_lock = PTHREAD_MUTEX_INITIALIZER;
static struct region *regions, *retired;

/* Unlinks r from the list at *link. */
static void unlink_from(struct region **link, struct region *r)
{
	while (*link && *link != r)
		link = &(*link)->next;
	if (*link)
		*link = r->next;
}

static void region_free(struct region *r)
{
	for (struct region_mr *m = r->mrs, *next; m; m = next) {
		next = m->next;
		if (m->mr)
			m->v->dereg_mr(m->mr);
		free(m);
	}
	free(r);
}

void rm_rdma_pin(void *addr, size_t len)
{
	struct region *r = calloc(1, sizeof(*r));
	if (!r || !addr || !len) {
		free(r);
		return; /* not known: its bytes are registered for each use instead */
	}
	r->start = (uintptr_t)addr;
	r->len = len;
	pthread_mutex_lock(&regions_lock);
	r->next = regions;
	regions = r;
	pthread_mutex_unlock(&regions_lock);
}

void rm_rdma_unpin(void *addr)
{
	pthread_mutex_lock(&regions_lock);
	struct region **link = &regions;
	while (*link && (*link)->start != (uintptr_t)addr)
		link = &(*link)->next;
	struct region *r = *link;
	if (r) {
		*link = r->next;
		if (r->users) {
			r->gone = 1;
			r->next = retired;
			retired = r;
		} else {
			region_free(r);
		}
	}
	pthread_mutex_unlock(&regions_lock);
}

struct ibv_mr *rregion_get(struct rdma_conn *c, const void *p, int need_write, size_t *usable, void **token)
{
	uintptr_t at = (uintptr_t)p;
	struct ibv_mr *mr = NULL;
	pthread_mutex_lock(&regions_lock);
	struct region *r = regions;
	while (r && !(at >= r->start && at - r->start < r->len))
		r = r->next;
	struct region_mr *m = r ? r->mrs : NULL;
	while (m && m->pd != c->pd)
		m = m->next;
	if (r && !m && (m = calloc(1, sizeof(*m)))) {
		/* The whole region, a destination of reads and offered to the peer; read-only
		 * memory (cuMemHostRegister's READ_ONLY) only offered. */
		m->pd = c->pd;
		m->v = c->v;
		m->writable = 1;
		m->mr = c->v->reg_mr(c->pd, (void *)r->start, r->len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
		if (!m->mr) {
			m->writable = 0;
			m->mr = c->v->reg_mr(c->pd, (void *)r->start, r->len, IBV_ACCESS_REMOTE_READ);
		}
		m->next = r->mrs;
		r->mrs = m;
	}
	if (m && m->mr && (m->writable || !need_write)) {
		mr = m->mr;
		r->users++;
		*usable = r->len - (at - r->start);
		*token = r;
	}
	pthread_mutex_unlock(&regions_lock);
	return mr;
}

void rregion_put(void *token)
{
	struct region *r = token;
	pthread_mutex_lock(&regions_lock);
	if (!--r->users && r->gone) {
		unlink_from(&retired, r);
		region_free(r);
	}
	pthread_mutex_unlock(&regions_lock);
}

static void forget_pd_in(struct region *list, struct ibv_pd *pd)
{
	for (struct region *r = list; r; r = r->next)
		for (struct region_mr **link = &r->mrs; *link;) {
			struct region_mr *m = *link;
			if (m->pd != pd) {
				link = &m->next;
				continue;
			}
			*link = m->next;
			if (m->mr)
				m->v->dereg_mr(m->mr);
			free(m);
		}
}

void rregion_forget_pd(struct ibv_pd *pd)
{
	pthread_mutex_lock(&regions_lock);
	forget_pd_in(regions, pd);
	forget_pd_in(retired, pd);
	pthread_mutex_unlock(&regions_lock);
}
