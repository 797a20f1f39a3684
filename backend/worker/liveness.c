/* Heartbeats to clients whose calls run long (liveness.h). One thread per worker looks at
 * every session a few times per heartbeat interval. It serves every client, so no client
 * may hold it up (transport.h, writes to a peer): it only tries a session's send lock,
 * skipping the session while its own thread writes (a reply, maybe to a client that reads
 * nothing), and sends a frame only where the connection takes it at once. */
#include "liveness.h"

#include <errno.h>
#include <pthread.h>
#include <time.h>

#include "api_ops.h"
#include "link.h"
#include "log.h"
#include "registry.h"

static void (*for_each_session)(void (*visit)(struct rm_channel *s));

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Every call passes here: no lock. A heartbeat the thread sends between two calls is
 * harmless (the client skips heartbeats); what matters is that none goes out inside a
 * reply, and reply_begun is set under send_lock before a reply's first byte. */
void rm_liveness_call_begin(struct rm_channel *s, uint32_t op)
{
	uint64_t now = now_ns();
	__atomic_store_n(&s->call_op, op, __ATOMIC_RELAXED);
	__atomic_store_n(&s->reply_begun, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&s->heartbeat_ns, now, __ATOMIC_RELAXED);
	__atomic_store_n(&s->call_since_ns, now, __ATOMIC_RELEASE);
}

void rm_liveness_call_end(struct rm_channel *s)
{
	__atomic_store_n(&s->call_since_ns, 0, __ATOMIC_RELEASE);
}

void rm_liveness_reply_begins(struct rm_channel *s)
{
	__atomic_store_n(&s->reply_begun, 1, __ATOMIC_RELAXED);
}

int rm_liveness_send_aside(struct rm_channel *s, uint32_t op, const void *msg, uint32_t len)
{
	if (pthread_mutex_trylock(&s->send_lock))
		return -EBUSY;
	int err = -EBUSY;
	/* Not inside a reply being sent (the frame would cut it). */
	if (!__atomic_load_n(&s->call_since_ns, __ATOMIC_ACQUIRE) || !__atomic_load_n(&s->reply_begun, __ATOMIC_RELAXED)) {
		struct rm_frame f = {.magic = RM_WIRE_MAGIC, .op = op, .flags = RM_F_REPLY, .msg_len = len};
		err = rm_conn_writable(s->link.conn, RM_FRAME_LEN + len) ? rm_link_send(&s->link, &f, msg, NULL, 0) : -EAGAIN;
	}
	pthread_mutex_unlock(&s->send_lock);
	return err;
}

/* Once a call: one that waits on a peer or the GPU that long is named in the log. */
static void log_if_long(struct rm_channel *s, uint64_t since, uint64_t now)
{
	if (s->callbacks || now - since < RM_LONG_CALL_MS * 1000000ull || s->long_call_logged == since)
		return; /* a callback channel listens for as long as the session lasts */
	s->long_call_logged = since; /* only this thread writes it */
	uint32_t op = __atomic_load_n(&s->call_op, __ATOMIC_RELAXED);
	rm_session_log(s, RM_LOG_INFO, "%s has run for %llu s", op < RM_OP_LIMIT && rm_op_names[op] ? rm_op_names[op] : "a call",
		       (unsigned long long)((now - since) / 1000000000u));
}

static void beat_if_due(struct rm_channel *s)
{
	uint64_t since = __atomic_load_n(&s->call_since_ns, __ATOMIC_ACQUIRE);
	if (!since)
		return; /* most sessions, most of the time: no call running */
	uint64_t now = now_ns();
	log_if_long(s, since, now);
	if (now - __atomic_load_n(&s->heartbeat_ns, __ATOMIC_RELAXED) < (uint64_t)s->sh->heartbeat_ms * 1000000u)
		return;
	int err = rm_liveness_send_aside(s, RM_OP_HEARTBEAT, NULL, 0);
	if (err == -EBUSY)
		return; /* its thread is sending (the reply: no heartbeat is due any more), or the
			 * call ended meanwhile: looked at again at the next tick */
	if (err == -EAGAIN)
		rm_session_log(s, RM_LOG_DEBUG, "heartbeat skipped: the client takes nothing");
	else if (err)
		rm_session_log(s, RM_LOG_DEBUG, "heartbeat not sent");
	if (err && err != -EAGAIN && s->chan == 0 && !s->left_early) {
		/* The client is gone while its call runs (a long kernel): its admission place and
		 * quota are free at once; its memory follows when the call returns and the session
		 * is released (worker.c). */
		s->left_early = 1;
		rm_registry_leave_session(s->sh->slot, s->sh->id);
		rm_session_log(s, RM_LOG_INFO,
		               "the client is gone while its call runs: its admission "
		               "place and quota are free now, its memory once the call ends");
	}
	__atomic_store_n(&s->heartbeat_ns, now, __ATOMIC_RELAXED);
}

static void *heartbeat_main(void *arg)
{
	(void)arg;
	struct timespec tick = {0, RM_MIN_HEARTBEAT_MS / 2 * 1000000L};
	for (;;) {
		for_each_session(beat_if_due);
		nanosleep(&tick, NULL);
	}
	return NULL;
}

int rm_liveness_start(void (*sessions_each)(void (*visit)(struct rm_channel *s)))
{
	pthread_t t;
	for_each_session = sessions_each;
	int err = -pthread_create(&t, NULL, heartbeat_main, NULL);
	if (!err)
		pthread_detach(t);
	return err;
}
