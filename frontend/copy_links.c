/* Copy links of the client (copy_links.h). */
#include "copy_links.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "connection.h"
#include "copy_plan.h"
#include "link.h"
#include "remora.pb-c.h"
#include "size.h"

#define DEFAULT_LINKS 4
/* Over TLS, where the process may use as many CPUs: each link's thread seals and opens
 * its records, so encryption spreads over more cores (docs/performance.md). */
#define DEFAULT_TLS_LINKS 8
#define DEFAULT_STRIPE_MIN (16ull << 20) /* smaller copies: one connection */

struct copy_link {
	struct rm_link link;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t changed;
	int stop;         /* set by close: the thread ends */
	int busy;         /* a share is being moved */
	int to_host;
	uint8_t *host;
	uint64_t n, chunk;
	uint32_t links, index;
	int err;
};

struct rm_copy_links {
	struct copy_link tab[RM_MAX_COPY_LINKS]; /* [1 .. n]: attached; [n+1 .. attached] given up */
	int n;          /* links striped copies use; 0 once one fell out of step */
	int attached;   /* links whose threads run, to be ended by close */
	int fixed;      /* REMORA_STRIPE_MIN set: stripe from that size, nothing measured */
	uint64_t min_share; /* the least a link carries of a striped copy (0: the plan's rule) */
	pthread_mutex_t lock; /* one striped copy at a time */
};

/* The measured link, for every copy of the process (copy_plan.h). */
static pthread_mutex_t plan_lock = PTHREAD_MUTEX_INITIALIZER;
_Static_assert(RM_COPY_PLAN_CLASSES == 5, "plan_state's striping initializer names each class");
static struct rm_copy_plan_state plan_state = {
	.fixed_min = DEFAULT_STRIPE_MIN, .striping = {{-1, -1, -1, -1, -1}, {-1, -1, -1, -1, -1}}};
static unsigned striped_seen[2]; /* per direction, a bit per size class that has had a striped copy (logged) */
/* Over shared memory (RM_TRANSPORT_MEMORY), a striped copy after the links idled this long
 * is not sampled: remorad opens its links' staging at their first copy and closes it after
 * an idle (RM_STAGING_IDLE_MS), and its links' threads sleep; such a copy measured about
 * 1 GB/s where the next ones moved several, and its sample held striping off for dozens
 * of copies. Under plan_lock. */
#define STRIPED_COLD_NS 1000000000ull
static int plan_memory;            /* the links are shared memory's */
static uint64_t striped_last_ns;   /* when the last striped copy ended (0: none yet) */

/* Sends or receives link l's chunks of its current copy. */
static int move_share(struct copy_link *l)
{
	uint64_t chunk = rm_stripe_chunk_of(l->n, l->links, l->chunk), chunks = (l->n + chunk - 1) / chunk;
	for (uint64_t k = l->index; k < chunks; k += l->links) {
		uint64_t off = k * chunk, len = l->n - off < chunk ? l->n - off : chunk;
		int err;
		if (l->to_host) {
			err = rm_link_read(&l->link, l->host + off, len);
		} else {
			struct iovec v = {l->host + off, len};
			err = rm_conn_sendv(l->link.conn, &v, 1);
		}
		if (err)
			return err;
	}
	return 0;
}

static void *link_main(void *arg)
{
	struct copy_link *l = arg;
	pthread_mutex_lock(&l->lock);
	for (;;) {
		while (!l->busy && !l->stop)
			pthread_cond_wait(&l->changed, &l->lock);
		if (l->stop)
			break;
		pthread_mutex_unlock(&l->lock);
		int err = move_share(l);
		pthread_mutex_lock(&l->lock);
		l->err = err;
		l->busy = 0;
		pthread_cond_broadcast(&l->changed);
	}
	pthread_mutex_unlock(&l->lock);
	return NULL;
}

/* Attaches link index and starts its thread; 0 or -errno. */
static int attach(struct copy_link *l, const struct rm_attach_to *to, uint32_t index)
{
	int err = rm_client_attach(&l->link, to, index, 0);
	if (err)
		return err;
	pthread_mutex_init(&l->lock, NULL);
	pthread_cond_init(&l->changed, NULL);
	l->index = index;
	if ((err = -pthread_create(&l->thread, NULL, link_main, l))) {
		pthread_cond_destroy(&l->changed);
		pthread_mutex_destroy(&l->lock);
		rm_link_close(&l->link);
	}
	return err;
}

int rm_copy_links_parse_count(const char *text, uint32_t *links)
{
	char *end;
	long n = text && *text ? strtol(text, &end, 10) : DEFAULT_LINKS;
	if (text && *text && (*end || n < 1 || n > RM_MAX_COPY_LINKS))
		return -EINVAL;
	*links = (uint32_t)n;
	return 0;
}

int rm_copy_links_parse_stripe_min(const char *text, uint64_t *bytes)
{
	uint64_t n = DEFAULT_STRIPE_MIN;
	if (text && *text && (rm_parse_size(text, &n) || n == 0))
		return -EINVAL;
	*bytes = n;
	return 0;
}

struct rm_copy_links *rm_copy_links_open(const struct rm_attach_to *to, uint32_t heartbeat_ms)
{
	const struct rm_transport *tp = to->tp;
	uint32_t want;
	uint64_t stripe_min;
	/* Both checked before the first connection (environment.h). */
	const char *links = getenv("REMORA_COPY_LINKS");
	if (rm_copy_links_parse_count(links, &want) ||
	    rm_copy_links_parse_stripe_min(getenv("REMORA_STRIPE_MIN"), &stripe_min))
		return NULL;
	cpu_set_t cpus;
	if ((!links || !*links) && (tp->flags & RM_TRANSPORT_ENCRYPTS) && !sched_getaffinity(0, sizeof(cpus), &cpus) &&
	    CPU_COUNT(&cpus) >= DEFAULT_TLS_LINKS)
		want = DEFAULT_TLS_LINKS;
	if (to->keylen == 0 || want < 2)
		return NULL; /* a daemon that offers no copy links, or none wanted */
	struct rm_copy_links *cl = calloc(1, sizeof(*cl));
	if (!cl)
		return NULL;
	pthread_mutex_init(&cl->lock, NULL);
	const char *fixed = getenv("REMORA_STRIPE_MIN");
	cl->fixed = fixed && *fixed;
	if (tp->flags & RM_TRANSPORT_MEMORY)
		cl->min_share = RM_TRANSPORT_MEMORY_SHARE;
	pthread_mutex_lock(&plan_lock);
	plan_state.fixed_min = stripe_min;
	plan_memory = cl->min_share != 0;
	pthread_mutex_unlock(&plan_lock);
	uint64_t start_ns = rm_now_ns(), budget_ms = 2 * (uint64_t)heartbeat_ms;
	for (long i = 1; i < (long)want; i++) {
		uint64_t spent_ms = (rm_now_ns() - start_ns) / 1000000u;
		if (i > 1 && budget_ms && spent_ms >= budget_ms) {
			rm_log(RM_LOG_WARN, "copy links to %s: %ld attached in %llu ms (the server slow to greet); "
			       "large copies use %ld connection(s)", to->addr, i - 1, (unsigned long long)spent_ms, i);
			break;
		}
		int err = attach(&cl->tab[i], to, (uint32_t)i);
		if (err) {
			rm_log(RM_LOG_ERROR, "copy link %ld to %s not attached (%s); large copies use %ld connection(s)",
			       i, to->addr, rm_transport_why(err), i);
			break;
		}
		cl->n = cl->attached = (int)i;
	}
	if (!cl->attached) {
		rm_copy_links_close(cl);
		return NULL;
	}
	return cl;
}

void rm_copy_links_end(struct rm_copy_links *cl)
{
	if (!cl)
		return;
	for (int i = 1; i <= cl->attached; i++)
		rm_conn_shutdown(cl->tab[i].link.conn); /* a share in progress ends with an error */
	pthread_mutex_lock(&cl->lock);                 /* after a striped copy under way */
	for (int i = cl->attached; i >= 1; i--) {
		struct copy_link *l = &cl->tab[i];
		pthread_mutex_lock(&l->lock);
		l->stop = 1;
		pthread_cond_broadcast(&l->changed);
		pthread_mutex_unlock(&l->lock);
		pthread_join(l->thread, NULL);
		pthread_cond_destroy(&l->changed);
		pthread_mutex_destroy(&l->lock);
		rm_link_close(&l->link);
	}
	cl->n = cl->attached = 0;
	pthread_mutex_unlock(&cl->lock);
}

void rm_copy_links_close(struct rm_copy_links *cl)
{
	if (!cl)
		return;
	rm_copy_links_end(cl);
	pthread_mutex_destroy(&cl->lock);
	free(cl);
}

void rm_copy_links_rtt(uint64_t ns)
{
	if (pthread_mutex_trylock(&plan_lock))
		return; /* another thread's sample or copy: calls of many threads never queue here */
	rm_copy_plan_rtt(&plan_state, ns);
	pthread_mutex_unlock(&plan_lock);
}

struct rm_copy_plan rm_copy_links_take(struct rm_copy_links *cl, int to_host, uint64_t n)
{
	struct rm_copy_plan p = {1, 0};
	if (!cl || !cl->n)
		return p;
	if (cl->fixed) {
		if (n < plan_state.fixed_min)
			return p;
		p.links = (uint32_t)cl->n + 1;
	} else {
		/* Over shared memory one stream moves a copy of up to a few MiB faster than links
		 * of smaller shares, whose wake-ups cost more than their memcpy saves: such copies
		 * go whole, and a striped one gives each link at least min_share. Where the plan
		 * (copy_plan.h) striped smaller shares too, their slow samples held striping off
		 * for larger copies that it speeds up (issue 36: 4 MiB over shm at 0.61 of TCP). */
		uint32_t most = (uint32_t)cl->n + 1;
		if (cl->min_share && n / cl->min_share < most)
			most = (uint32_t)(n / cl->min_share);
		if (most < 2)
			return p;
		int d = !!to_host, cls = rm_copy_plan_class(n), first = 0, changed, striping = 0;
		double rtt_us = 0, stream_bps = 0, striped_bps = 0; /* logged where the class's choice changed */
		pthread_mutex_lock(&plan_lock);
		p = rm_copy_plan_choose(&plan_state, to_host, n, most);
		if ((changed = plan_state.changed[d] != 0)) { /* the class of this copy: choose changed no other */
			striping = plan_state.striping[d][cls];
			rtt_us = (double)plan_state.rtt_ns / 1e3;
			stream_bps = plan_state.stream_bps[d][cls];
			striped_bps = plan_state.striped_bps[d][cls];
			plan_state.changed[d] = 0;
		}
		if (p.links > 1 && !(striped_seen[d] & (1u << cls))) {
			striped_seen[d] |= 1u << cls;
			first = 1;
		}
		pthread_mutex_unlock(&plan_lock);
		unsigned long long kib = (unsigned long long)(RM_COPY_PLAN_MIN_SHARE >> 10) << (2 * cls); /* the class's least */
		if (first)
			rm_log(RM_LOG_DEBUG, "copies of %llu KiB and up %s the device: a striped copy over %u links (the "
			       "size's first)", kib, to_host ? "from" : "to", p.links);
		if (changed)
			rm_log(RM_LOG_DEBUG, "copies of %llu KiB and up %s the device %s striped (round trip %.1f us, one "
			       "stream %.2f GB/s, striped %.2f GB/s)", kib, to_host ? "from" : "to",
			       striping ? "are" : "are not", rtt_us, stream_bps / 1e9, striped_bps / 1e9);
		if (p.links < 2)
			return p;
	}
	pthread_mutex_lock(&cl->lock);
	if (!cl->n) { /* given up since the caller looked */
		pthread_mutex_unlock(&cl->lock);
		return (struct rm_copy_plan){1, 0};
	}
	if (p.links > (uint32_t)cl->n + 1)
		p.links = (uint32_t)cl->n + 1;
	return p;
}

double rm_copy_links_plain_bps(int to_host, uint64_t n)
{
	pthread_mutex_lock(&plan_lock);
	double bps = rm_copy_plan_rate(&plan_state, to_host, n);
	pthread_mutex_unlock(&plan_lock);
	return bps;
}

int rm_copy_links_sample(struct rm_copy_links *cl, int to_host, uint64_t n, struct rm_copy_plan plan)
{
	if (!cl || cl->fixed)
		return 0;
	pthread_mutex_lock(&plan_lock);
	int sample = rm_copy_plan_sample(&plan_state, to_host, n, plan);
	pthread_mutex_unlock(&plan_lock);
	return sample;
}

void rm_copy_links_unwaited(struct rm_copy_links *cl)
{
	if (!cl || cl->fixed)
		return;
	pthread_mutex_lock(&plan_lock);
	rm_copy_plan_unwaited(&plan_state);
	pthread_mutex_unlock(&plan_lock);
}

void rm_copy_links_done(int to_host, uint64_t n, struct rm_copy_plan plan, uint64_t ns)
{
	pthread_mutex_lock(&plan_lock);
	int cold = 0;
	if (plan_memory && plan.links > 1) {
		uint64_t end = rm_transport_now_ns();
		uint64_t start = end - ns; /* after the last one's end, but for another thread's */
		cold = !striped_last_ns || (start > striped_last_ns && start - striped_last_ns > STRIPED_COLD_NS);
		striped_last_ns = end;
	}
	rm_copy_plan_done(&plan_state, to_host, n, plan, cold ? 0 : ns);
	pthread_mutex_unlock(&plan_lock);
}

int rm_copy_links_share0(void *host, uint64_t n, struct rm_copy_plan plan, struct iovec *iov, int cap)
{
	uint64_t chunk = rm_stripe_chunk_of(n, plan.links, plan.chunk), chunks = (n + chunk - 1) / chunk;
	int count = 0;
	for (uint64_t k = 0; k < chunks; k += plan.links) {
		if (count == cap)
			return -1;
		uint64_t off = k * chunk;
		iov[count++] = (struct iovec){(uint8_t *)host + off, n - off < chunk ? n - off : chunk};
	}
	return count;
}

void rm_copy_links_start(struct rm_copy_links *cl, int to_host, void *host, uint64_t n, struct rm_copy_plan plan)
{
	for (uint32_t i = 1; i < plan.links; i++) {
		struct copy_link *l = &cl->tab[i];
		pthread_mutex_lock(&l->lock);
		l->to_host = to_host;
		l->host = host;
		l->n = n;
		l->links = plan.links;
		l->chunk = plan.chunk;
		l->err = 0;
		l->busy = 1;
		pthread_cond_broadcast(&l->changed);
		pthread_mutex_unlock(&l->lock);
	}
}

int rm_copy_links_finish(struct rm_copy_links *cl, int abort)
{
	int first = 0;
	for (int i = 1; i <= cl->n; i++) {
		struct copy_link *l = &cl->tab[i];
		if (abort)
			rm_conn_shutdown(l->link.conn);
		pthread_mutex_lock(&l->lock);
		while (l->busy)
			pthread_cond_wait(&l->changed, &l->lock);
		if (l->err && !first)
			first = l->err;
		pthread_mutex_unlock(&l->lock);
	}
	if (first || abort) { /* out of step with the daemon: no more striped copies */
		for (int i = 1; i <= cl->n; i++)
			rm_conn_shutdown(cl->tab[i].link.conn);
		cl->n = 0;
	}
	pthread_mutex_unlock(&cl->lock);
	return first;
}
