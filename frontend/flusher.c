/* The flusher of a connection (connection.h): a thread that sends a batch of async calls
 * whose oldest has waited long enough, and a heartbeat on a connection idle for the
 * daemon's interval. */
#include "connection.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#define FLUSHER_LINGER_NS 2000000 /* the flusher stays armed this long after the last async call */

/* Async calls queued in the batch go out with the next call that sends, at
 * RM_BATCH_FLUSH_AT, or once the oldest has waited the connection's flush delay
 * (connection.h): checked by the next call, and by the flusher thread for a program that
 * makes none. Waking a
 * thread costs a futex call and a context switch, and a flusher that takes the
 * connection's lock while a synchronous call holds it costs two more (together 8 us
 * of a 20 us launch plus synchronize here, docs/hotpath.md). So the flusher is woken
 * only when disarmed; armed, it sleeps on its own, looks at the batch's age
 * without the lock and takes the lock only to flush an overdue batch; it
 * disarms once nothing was queued for FLUSHER_LINGER_NS. */

/* Disarms the flusher unless a call was queued meanwhile (its caller saw the
 * flusher armed and did not wake it, so the flusher must see the call). */
static void flusher_disarm(struct rm_client_conn *c)
{
	pthread_mutex_lock(&c->flusher_lock);
	__atomic_store_n(&c->flusher_armed, 0, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&c->batch_since_ns, __ATOMIC_SEQ_CST))
		__atomic_store_n(&c->flusher_armed, 1, __ATOMIC_SEQ_CST);
	pthread_mutex_unlock(&c->flusher_lock);
}

void rm_client_set_heartbeat(struct rm_client_conn *c, uint32_t ms)
{
	pthread_mutex_lock(&c->flusher_lock);
	__atomic_store_n(&c->heartbeat_ms, ms, __ATOMIC_RELAXED);
	pthread_cond_signal(&c->flusher_cond); /* its wait was for the old interval */
	pthread_mutex_unlock(&c->flusher_lock);
}

/* Called under c->lock after an async call was queued. */
void rm_client_flusher_arm(struct rm_client_conn *c)
{
	if (__atomic_load_n(&c->flusher_armed, __ATOMIC_SEQ_CST))
		return;
	pthread_mutex_lock(&c->flusher_lock);
	__atomic_store_n(&c->flusher_armed, 1, __ATOMIC_SEQ_CST);
	pthread_cond_signal(&c->flusher_cond);
	pthread_mutex_unlock(&c->flusher_lock);
}

/* Sends a heartbeat when nothing went out for the daemon's interval and no call is under
 * way (a call holding the lock is the daemon's to answer, heartbeats included). */
static void heartbeat_if_idle(struct rm_client_conn *c)
{
	uint64_t due = __atomic_load_n(&c->last_send_ns, __ATOMIC_RELAXED) + (uint64_t)c->heartbeat_ms * 1000000u;
	if (!c->heartbeat_ms || rm_now_ns() < due || pthread_mutex_trylock(&c->lock))
		return;
	/* Idle, nothing may arrive but the daemon's going-away frame, perhaps after a notice
	 * saying why: read what did. */
	if (c->connected && !c->reader && (c->link.rpos < c->link.rlen || rm_conn_readable(c->link.conn))) {
		struct rm_frame f;
		int err, said;
		do
			err = rm_link_read_frame(&c->link, &f);
		while (!err && f.op == RM_OP_FAULT_NOTICE && (said = rm_client_before_reply(c, &f)) == 1);
		if (!err && f.op == RM_OP_FAULT_NOTICE)
			err = said < 0 ? said : -EPROTO;
		rm_client_lost_locked(c, "while idle", err ? err : f.op == RM_OP_GOING_AWAY ? -ESHUTDOWN : -EPROTO);
	}
	if (c->connected) {
		uint8_t head[RM_FRAME_LEN];
		struct rm_frame f = {.magic = RM_WIRE_MAGIC, .op = RM_OP_HEARTBEAT, .flags = RM_F_ASYNC};
		rm_frame_encode(&f, head);
		struct iovec v = {head, sizeof(head)};
		int err = rm_client_flush_locked(c, &v, 1);
		if (err)
			rm_client_lost_locked(c, "heartbeat", err);
	}
	pthread_mutex_unlock(&c->lock);
}

/* Until armed (or, with heartbeats, until the next one is due). */
static void flusher_wait(struct rm_client_conn *c)
{
	pthread_mutex_lock(&c->flusher_lock);
	while (__atomic_load_n(&c->connected, __ATOMIC_SEQ_CST) && !__atomic_load_n(&c->flusher_armed, __ATOMIC_SEQ_CST)) {
		if (!c->heartbeat_ms) {
			pthread_cond_wait(&c->flusher_cond, &c->flusher_lock);
			continue;
		}
		uint64_t due = __atomic_load_n(&c->last_send_ns, __ATOMIC_RELAXED) + (uint64_t)c->heartbeat_ms * 1000000u;
		uint64_t now = rm_now_ns();
		if (now >= due)
			break;
		struct timespec ts; /* the condition variable's clock is the real-time one */
		clock_gettime(CLOCK_REALTIME, &ts);
		uint64_t at = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec + (due - now);
		ts = (struct timespec){(time_t)(at / 1000000000u), (long)(at % 1000000000u)};
		pthread_cond_timedwait(&c->flusher_cond, &c->flusher_lock, &ts);
	}
	pthread_mutex_unlock(&c->flusher_lock);
}

int rm_flush_delay_parse(const char *v, uint64_t *ns)
{
	char *end;
	errno = 0;
	unsigned long long us = strtoull(v, &end, 10);
	if (errno || end == v || *end || *v == '-' || us * 1000u < RM_FLUSH_DELAY_NS || us > 10000)
		return -EINVAL;
	*ns = us * 1000u;
	return 0;
}

uint64_t rm_flush_delay_max_ns(void)
{
	static uint64_t max; /* read once; 0: not yet */
	uint64_t m = __atomic_load_n(&max, __ATOMIC_RELAXED);
	if (!m) {
		const char *v = getenv("REMORA_FLUSH_DELAY_MAX_US");
		if (!v || !*v || rm_flush_delay_parse(v, &m)) /* a bad value is reported at start */
			m = RM_FLUSH_DELAY_MAX_NS;
		__atomic_store_n(&max, m, __ATOMIC_RELAXED);
	}
	return m;
}

static void *flusher_main(void *arg)
{
	struct rm_client_conn *c = arg;
	for (;;) {
		flusher_wait(c);
		if (!__atomic_load_n(&c->connected, __ATOMIC_SEQ_CST))
			break;
		heartbeat_if_idle(c);
		if (!__atomic_load_n(&c->flusher_armed, __ATOMIC_SEQ_CST))
			continue;
		uint64_t since = __atomic_load_n(&c->batch_since_ns, __ATOMIC_SEQ_CST);
		uint64_t now = rm_now_ns();
		if (since && now - since >= __atomic_load_n(&c->flush_delay_ns, __ATOMIC_RELAXED)) {
			pthread_mutex_lock(&c->lock);
			since = c->batch_since_ns;
			if (c->connected && since && rm_now_ns() - since >= c->flush_delay_ns) {
				/* the program made no call meanwhile: its run of calls has paused, and
				 * the next run's first batch goes at the first delay */
				__atomic_store_n(&c->flush_delay_ns, RM_FLUSH_DELAY_NS, __ATOMIC_RELAXED);
				int err = rm_client_flush_locked(c, NULL, 0);
				if (err)
					rm_client_lost_locked(c, "send", err);
			}
			pthread_mutex_unlock(&c->lock);
			continue;
		}
		if (!since && now - __atomic_load_n(&c->last_async_ns, __ATOMIC_SEQ_CST) > FLUSHER_LINGER_NS) {
			flusher_disarm(c);
			continue;
		}
		uint64_t due = (since ? since : now) + __atomic_load_n(&c->flush_delay_ns, __ATOMIC_RELAXED);
		struct timespec ts = {(time_t)(due / 1000000000u), (long)(due % 1000000000u)};
		clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
	}
	return NULL;
}

int rm_client_flusher_start(struct rm_client_conn *c)
{
	int err = -pthread_create(&c->flusher, NULL, flusher_main, c);
	c->flusher_running = !err;
	return err;
}

