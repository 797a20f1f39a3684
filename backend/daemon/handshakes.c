/* Handshakes (handshakes.h): the pending connections in a list in the order they came,
 * so that, every one having the same timeout, the first one still pending holds the
 * next deadline. One thread sleeps until it, shuts down what has passed it and sums up
 * the log lines held back, its own and those of refusals (rm_handshakes_log_allows). */
#include "handshakes.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"

#define LINES_PER_SECOND 5 /* log lines of one kind a second; past it they are counted */

enum { PENDING, TIMED_OUT, STOPPED };

struct rm_handshake {
	struct rm_conn *conn;
	char addr[64];        /* the peer's address without its port */
	uint64_t deadline_ms; /* on the monotonic clock */
	int state;
	struct rm_handshake *prev, *next;
};

/* Lines of one kind: up to LINES_PER_SECOND in a second, the rest counted. */
struct log_budget {
	uint64_t second; /* the second the lines were counted in */
	int lines;
	unsigned long held_back;
};

static struct {
	pthread_mutex_t lock;
	struct rm_handshake list; /* the sentinel of a circular list */
	int count;
	int stopping;
	int timeout_s, max_total, max_per_address;
	struct log_budget refused, timed_out;
	struct log_budget refusals[2]; /* enum rm_refusal_log */
} hs = {.lock = PTHREAD_MUTEX_INITIALIZER, .list = {.prev = &hs.list, .next = &hs.list}};

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Whether one more line may be logged now; otherwise it is counted. Under hs.lock. */
static int budget_allows(struct log_budget *b, uint64_t now)
{
	if (now / 1000 != b->second) {
		b->second = now / 1000;
		b->lines = 0;
	}
	if (b->lines < LINES_PER_SECOND) {
		b->lines++;
		return 1;
	}
	b->held_back++;
	return 0;
}

/* The lines held back in a second that has ended, now to be summed up. Under hs.lock. */
static unsigned long budget_take(struct log_budget *b, uint64_t now)
{
	if (!b->held_back || now / 1000 == b->second)
		return 0;
	unsigned long n = b->held_back;
	b->held_back = 0;
	return n;
}

static void log_held_back(unsigned long refused, unsigned long timed_out, const unsigned long *refusals)
{
	if (refusals[RM_REFUSAL_HELLO])
		rm_log(RM_LOG_WARN, "%lu more refused hello(s) or request(s) not logged", refusals[RM_REFUSAL_HELLO]);
	if (refusals[RM_REFUSAL_CREDENTIAL])
		rm_log(RM_LOG_WARN, "%lu more failed credential(s) not logged", refusals[RM_REFUSAL_CREDENTIAL]);
	if (refused)
		rm_log(RM_LOG_WARN, "%lu more connection(s) closed at once: too many handshakes pending "
		       "(max_pending_hellos, max_pending_hellos_per_address)", refused);
	if (timed_out)
		rm_log(RM_LOG_WARN, "%lu more connection(s) closed without a hello within %d s", timed_out, hs.timeout_s);
}

static void *watch_deadlines(void *arg)
{
	(void)arg;
	for (;;) {
		pthread_mutex_lock(&hs.lock);
		uint64_t now = now_ms(), next = now + 1000;
		for (struct rm_handshake *h = hs.list.next; h != &hs.list; h = h->next) {
			if (h->state != PENDING)
				continue;
			if (h->deadline_ms > now) {
				next = h->deadline_ms < next ? h->deadline_ms : next;
				break;
			}
			h->state = TIMED_OUT;
			rm_conn_shutdown(h->conn); /* its greeting thread's read ends; it logs and closes */
		}
		unsigned long refused = budget_take(&hs.refused, now), timed_out = budget_take(&hs.timed_out, now);
		unsigned long refusals[2] = {budget_take(&hs.refusals[0], now), budget_take(&hs.refusals[1], now)};
		pthread_mutex_unlock(&hs.lock);
		log_held_back(refused, timed_out, refusals);
		struct timespec ts = {(time_t)(next / 1000), (long)(next % 1000) * 1000000L};
		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
			;
	}
	return NULL;
}

void rm_handshakes_configure(const struct rm_daemon_config *cfg)
{
	pthread_mutex_lock(&hs.lock);
	hs.timeout_s = cfg->hello_timeout_s;
	hs.max_total = cfg->max_pending_hellos;
	hs.max_per_address = cfg->max_pending_hellos_per_address;
	pthread_mutex_unlock(&hs.lock);
}

int rm_handshakes_start(const struct rm_daemon_config *cfg)
{
	rm_handshakes_configure(cfg);
	pthread_t t;
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	int err = -pthread_create(&t, &attr, watch_deadlines, NULL);
	pthread_attr_destroy(&attr);
	return err;
}

/* "host:port" without ":port". */
static void address_of(const char *peer, char *out, size_t len)
{
	const char *colon = strrchr(peer, ':');
	size_t n = colon ? (size_t)(colon - peer) : strlen(peer);
	snprintf(out, len, "%.*s", (int)n, peer);
}

struct rm_handshake *rm_handshake_begin(struct rm_conn *conn)
{
	const char *peer = rm_conn_peer(conn);
	struct rm_handshake *h = calloc(1, sizeof(*h));
	const char *bound = NULL; /* the setting that refuses it */
	int pending = 0, say = 0;
	if (h) {
		h->conn = conn;
		address_of(peer, h->addr, sizeof(h->addr));
	}
	pthread_mutex_lock(&hs.lock);
	uint64_t now = now_ms();
	if (!h || hs.stopping) {
		bound = "";
	} else if (hs.count >= hs.max_total) {
		bound = "max_pending_hellos";
		pending = hs.count;
	} else {
		for (struct rm_handshake *e = hs.list.next; e != &hs.list; e = e->next)
			pending += !strcmp(e->addr, h->addr);
		if (pending >= hs.max_per_address)
			bound = "max_pending_hellos_per_address";
	}
	if (!bound) {
		h->deadline_ms = now + (uint64_t)hs.timeout_s * 1000;
		h->prev = hs.list.prev;
		h->next = &hs.list;
		hs.list.prev->next = h;
		hs.list.prev = h;
		hs.count++;
	} else {
		say = *bound && budget_allows(&hs.refused, now);
	}
	pthread_mutex_unlock(&hs.lock);
	if (!bound)
		return h;
	int per_address = say && !strcmp(bound, "max_pending_hellos_per_address");
	if (say)
		rm_log(RM_LOG_WARN, "client %s: closed at once: %d handshakes%s%s are pending already (%s)", peer,
		       pending, per_address ? " from " : "", per_address ? h->addr : "", bound);
	else if (!h)
		rm_log(RM_LOG_ERROR, "client %s: closed at once: out of memory", peer);
	rm_conn_close(conn);
	free(h);
	return NULL;
}

int rm_handshake_end(struct rm_handshake *h)
{
	pthread_mutex_lock(&hs.lock);
	h->prev->next = h->next;
	h->next->prev = h->prev;
	hs.count--;
	int state = h->state, say = state == TIMED_OUT && budget_allows(&hs.timed_out, now_ms());
	pthread_mutex_unlock(&hs.lock);
	if (say)
		rm_log(RM_LOG_WARN, "client %s: no hello within %d s; closing", rm_conn_peer(h->conn), hs.timeout_s);
	free(h);
	return state == TIMED_OUT ? -ETIMEDOUT : state == STOPPED ? -ESHUTDOWN : 0;
}

int rm_handshakes_log_allows(enum rm_refusal_log kind)
{
	pthread_mutex_lock(&hs.lock);
	int say = budget_allows(&hs.refusals[kind], now_ms());
	pthread_mutex_unlock(&hs.lock);
	return say;
}

void rm_handshakes_stop(void)
{
	pthread_mutex_lock(&hs.lock);
	hs.stopping = 1;
	for (struct rm_handshake *h = hs.list.next; h != &hs.list; h = h->next)
		if (h->state == PENDING) {
			h->state = STOPPED;
			rm_conn_shutdown(h->conn);
		}
	unsigned long refused = hs.refused.held_back, timed_out = hs.timed_out.held_back;
	unsigned long refusals[2] = {hs.refusals[0].held_back, hs.refusals[1].held_back};
	hs.refused.held_back = hs.timed_out.held_back = hs.refusals[0].held_back = hs.refusals[1].held_back = 0;
	pthread_mutex_unlock(&hs.lock);
	log_held_back(refused, timed_out, refusals);
}
