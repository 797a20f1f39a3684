/* Calls to the daemon over a connection (connection.h): frames built and sent, async
 * calls batched, replies read and checked; and the process's one connection. */
#include "connection.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api.pb-c.h"
#include "copy_links.h"
#include "environment.h"
#include "placement.h"
#include "query_cache.h"
#include "remora.pb-c.h"
#include "text.h"
#include <sched.h>

#define BATCH_FLUSH_AT (64u << 10)  /* flush async calls once this much is queued */
#define BATCH_INLINE_BULK (16u << 10) /* async bulk up to this size is copied into the batch */
#define FLUSH_DELAY_NS 50000          /* async calls wait at most this long for company */
#define FLUSHER_LINGER_NS 2000000     /* the flusher stays armed this long after the last async call */

/* Async calls queued in the batch go out with the next call that sends, at
 * BATCH_FLUSH_AT, or once the oldest has waited FLUSH_DELAY_NS: checked by the
 * next call, and by the flusher thread for a program that makes none. Waking a
 * thread costs a futex call and a context switch, and a flusher that takes the
 * connection's lock while a synchronous call holds it costs two more (together 8 us
 * of a 20 us launch plus synchronize here, docs/hotpath.md). So the flusher is woken
 * only when disarmed; armed, it sleeps on its own, looks at the batch's age
 * without the lock and takes the lock only to flush an overdue batch; it
 * disarms once nothing was queued for FLUSHER_LINGER_NS. */

static struct rm_client_conn process_conn = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.flusher_lock = PTHREAD_MUTEX_INITIALIZER,
	.flusher_cond = PTHREAD_COND_INITIALIZER,
};
static pthread_mutex_t connect_lock = PTHREAD_MUTEX_INITIALIZER;
static int connect_done; /* atomic: connect_result holds the first outcome (rm_rpc_reset clears it) */
static CUresult connect_result = CUDA_ERROR_NOT_INITIALIZED;
static uint64_t process_seq; /* frames' seqs, unique in the process (fences name them) */

/* Channels (docs/protocol.md): the thread that connected uses process_conn; each other
 * thread, at its first call, attaches a connection of its own to the session, so that
 * its calls run on a daemon thread of their own and wait for no other thread's. The
 * daemon bounds them (max_channels): a thread it refuses shares process_conn. A thread's
 * channel closes when the thread exits (channel_end). chan_tab holds the open ones for
 * fences, under chan_lock (written by opening and closing, read by every call's fence
 * scan while thread channels exist). */
static struct rm_client_conn *chan_tab[RM_MAX_CHANNELS + 1];
static uint8_t chan_taken[RM_MAX_CHANNELS + 1];
static int chan_hi; /* the highest number ever opened (atomic); 0: none, no fences */
static pthread_rwlock_t chan_lock = PTHREAD_RWLOCK_INITIALIZER;
static pthread_key_t chan_key;
static pthread_once_t chan_key_once = PTHREAD_ONCE_INIT;
static pthread_t connect_thread;
static __thread struct rm_client_conn *thread_conn;
static int chan_key_once_failed;
static __thread int per_thread_depth;
static int trace_calls; /* REMORA_TRACE set: log every call's result at debug level */

static void client_init_once(void)
{
	rm_log_init("remora", RM_LOG_ERROR);
	trace_calls = getenv("REMORA_TRACE") != NULL;
}

void rm_client_init(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, client_init_once);
}

void rm_per_thread_enter(void) { per_thread_depth++; }
void rm_per_thread_leave(void) { per_thread_depth--; }
int rm_per_thread_active(void) { return per_thread_depth > 0; }

int rm_remote_driver_version(void) { return process_conn.driver_version; }

struct rm_copy_links *rm_process_copy_links(void) { return process_conn.copy_links; }

CUresult rm_unsupported(const char *name)
{
	/* One line per name: a small set of names seen, guarded by a lock. */
	static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	static const char *seen[256];
	static int nseen;
	rm_client_init();
	pthread_mutex_lock(&lock);
	int known = 0;
	for (int i = 0; i < nseen && !known; i++)
		known = seen[i] == name;
	if (!known && nseen < 256)
		seen[nseen++] = name;
	pthread_mutex_unlock(&lock);
	if (!known)
		rm_log(RM_LOG_WARN, "%s is not supported by Remora: returning CUDA_ERROR_NOT_SUPPORTED", name);
	return CUDA_ERROR_NOT_SUPPORTED;
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void rm_client_conn_stop_locked(struct rm_client_conn *c)
{
	if (c->connected && c->link.conn)
		rm_conn_shutdown(c->link.conn);
	__atomic_store_n(&c->connected, 0, __ATOMIC_SEQ_CST);
	pthread_mutex_lock(&c->flusher_lock); /* lets the flusher see it and end */
	pthread_cond_broadcast(&c->flusher_cond);
	pthread_mutex_unlock(&c->flusher_lock);
}

/* Drops the connection after a transport error; every later call fails fast. */
static CUresult lost(struct rm_client_conn *c, const char *what, int err)
{
	if (c->connected && err == -ESHUTDOWN)
		rm_log(RM_LOG_ERROR, "the GPU server is shutting down: connection to the GPU server lost (%s)", what);
	else if (c->connected && err == -ETIMEDOUT)
		rm_log(RM_LOG_ERROR, "the GPU server was silent for longer than REMORA_PEER_TIMEOUT while this "
		       "client waited on it (%s): it is frozen or unreachable; giving up the connection", what);
	else if (c->connected)
		rm_log(RM_LOG_ERROR, "connection to the GPU server lost (%s: %s)", what, strerror(-err));
	rm_client_conn_stop_locked(c);
	if (c == &process_conn)
		connect_result = CUDA_ERROR_DEVICE_UNAVAILABLE;
	return CUDA_ERROR_DEVICE_UNAVAILABLE;
}

static int flush_locked(struct rm_client_conn *c, const struct iovec *extra, int nextra)
{
	struct iovec iov[8];
	int n = 0, i = 0;
	if (c->batch_len)
		iov[n++] = (struct iovec){c->batch, c->batch_len};
	for (; i < nextra && n < 8; i++)
		if (extra[i].iov_len)
			iov[n++] = extra[i];
	if (!n && i == nextra)
		return 0;
	c->batch_len = 0;
	__atomic_store_n(&c->batch_since_ns, 0, __ATOMIC_SEQ_CST);
	__atomic_store_n(&c->last_send_ns, now_ns(), __ATOMIC_RELAXED);
	int err = n ? rm_conn_sendv(c->link.conn, iov, n) : 0;
	if (!err && i < nextra) /* a striped copy's share: many pieces */
		err = rm_conn_sendv(c->link.conn, extra + i, nextra - i);
	return err;
}

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

/* Called under c->lock after an async call was queued. */
static void flusher_arm(struct rm_client_conn *c)
{
	if (__atomic_load_n(&c->flusher_armed, __ATOMIC_SEQ_CST))
		return;
	pthread_mutex_lock(&c->flusher_lock);
	__atomic_store_n(&c->flusher_armed, 1, __ATOMIC_SEQ_CST);
	pthread_cond_signal(&c->flusher_cond);
	pthread_mutex_unlock(&c->flusher_lock);
}

/* A frame that may come before a reply, read and dealt with: 1, or 0 where rf is none
 * (-errno where its text could not be read). Heartbeats say the daemon is busy with this
 * call or one before it; a fault notice says why the reply is an error (the daemon's one
 * line, escaped, since it is a peer's text). */
static int before_reply(struct rm_client_conn *c, const struct rm_frame *rf)
{
	if (!(rf->flags & RM_F_REPLY) || rf->bulk_len)
		return 0;
	if (rf->op == RM_OP_HEARTBEAT)
		return !rf->msg_len;
	if (rf->op != RM_OP_FAULT_NOTICE || rf->msg_len > RM_NOTICE_MAX)
		return 0;
	char text[RM_NOTICE_MAX + 1], line[4 * RM_NOTICE_MAX + 1];
	int err = rm_link_read(&c->link, text, rf->msg_len);
	if (err)
		return err;
	text[rf->msg_len] = 0;
	rm_log(RM_LOG_ERROR, "%s", rm_text_escape(line, sizeof(line), text));
	return 1;
}

/* Sends a heartbeat when nothing went out for the daemon's interval and no call is under
 * way (a call holding the lock is the daemon's to answer, heartbeats included). */
static void heartbeat_if_idle(struct rm_client_conn *c)
{
	uint64_t due = __atomic_load_n(&c->last_send_ns, __ATOMIC_RELAXED) + (uint64_t)c->heartbeat_ms * 1000000u;
	if (!c->heartbeat_ms || now_ns() < due || pthread_mutex_trylock(&c->lock))
		return;
	/* Idle, nothing may arrive but the daemon's going-away frame, perhaps after a notice
	 * saying why: read what did. */
	if (c->connected && !c->reader && (c->link.rpos < c->link.rlen || rm_conn_readable(c->link.conn))) {
		struct rm_frame f;
		int err, said;
		do
			err = rm_link_read_frame(&c->link, &f);
		while (!err && f.op == RM_OP_FAULT_NOTICE && (said = before_reply(c, &f)) == 1);
		if (!err && f.op == RM_OP_FAULT_NOTICE)
			err = said < 0 ? said : -EPROTO;
		lost(c, "while idle", err ? err : f.op == RM_OP_GOING_AWAY ? -ESHUTDOWN : -EPROTO);
	}
	if (c->connected) {
		uint8_t head[RM_FRAME_LEN];
		struct rm_frame f = {.magic = RM_WIRE_MAGIC, .op = RM_OP_HEARTBEAT, .flags = RM_F_ASYNC};
		rm_frame_encode(&f, head);
		struct iovec v = {head, sizeof(head)};
		int err = flush_locked(c, &v, 1);
		if (err)
			lost(c, "heartbeat", err);
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
		uint64_t now = now_ns();
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
		uint64_t now = now_ns();
		if (since && now - since >= FLUSH_DELAY_NS) {
			pthread_mutex_lock(&c->lock);
			since = c->batch_since_ns;
			if (c->connected && since && now_ns() - since >= FLUSH_DELAY_NS) {
				int err = flush_locked(c, NULL, 0);
				if (err)
					lost(c, "send", err);
			}
			pthread_mutex_unlock(&c->lock);
			continue;
		}
		if (!since && now - __atomic_load_n(&c->last_async_ns, __ATOMIC_SEQ_CST) > FLUSHER_LINGER_NS) {
			flusher_disarm(c);
			continue;
		}
		uint64_t due = (since ? since : now) + FLUSH_DELAY_NS;
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

/* Appends a frame with its message (and, when it fits, its bulk) to the batch. */
static int append_locked(struct rm_client_conn *c, const struct rm_frame *f, const ProtobufCMessage *req,
			 const struct iovec *bulk, int nbulk, int inline_bulk)
{
	size_t need = RM_FRAME_LEN + f->msg_len + (inline_bulk ? f->bulk_len : 0);
	if (c->batch_len + need > RM_CLIENT_BATCH_CAP) {
		int err = flush_locked(c, NULL, 0);
		if (err)
			return err;
	}
	if (need > RM_CLIENT_BATCH_CAP)
		return -EMSGSIZE;
	rm_frame_encode(f, c->batch + c->batch_len);
	c->batch_len += RM_FRAME_LEN;
	if (req)
		c->batch_len += protobuf_c_message_pack(req, c->batch + c->batch_len);
	if (inline_bulk)
		for (int i = 0; i < nbulk; i++) {
			memcpy(c->batch + c->batch_len, bulk[i].iov_base, bulk[i].iov_len);
			c->batch_len += bulk[i].iov_len;
		}
	return 0;
}

/* A call on one channel comes after every call other threads' channels returned from
 * before it began, as in CUDA (a handle made, an event recorded, work queued on a stream
 * by one thread, then used by another): synchronous calls have run when they return, but
 * async ones only sit in their channel's batch or the daemon's socket. So a call is
 * preceded by a fence (RM_OP_FENCE) for each other channel with an async call newer than
 * its last answered synchronous call and than what this channel fenced on before: the
 * daemon's thread for this channel waits until that channel's thread has run it. The
 * other channel's batch is sent first, here, rather than after its flusher's delay. */
struct fence {
	uint32_t chan;
	uint64_t seq;
};

/* A call ordered on streams and events (rm_rpc_ordered: an async call on a stream, or a
 * wait for one stream or event) waits only for other channels' async calls on the same
 * ones, or on something unknown: work on different streams is unordered in CUDA until an
 * event or a synchronizing call joins it, and a stream's or event's wait covers only the
 * work queued on it, as the driver's does. A key is a
 * stream's or event's handle; the legacy stream (NULL without per-thread default streams)
 * has none, since it waits for and holds up every blocking stream; a thread's per-thread
 * stream is its channel's alone. */
#define PER_THREAD_KEY (0xfe11ull << 48)

static uint64_t stream_key(const struct rm_client_conn *c, uint64_t h)
{
	if (h == (uint64_t)(uintptr_t)CU_STREAM_PER_THREAD || (h == 0 && rm_per_thread_active()))
		return PER_THREAD_KEY | c->chan;
	return h == (uint64_t)(uintptr_t)CU_STREAM_LEGACY ? 0 : h;
}

/* The keys of call on c, into keys[2]: 0 when the call is to be ordered after everything
 * (it names the legacy stream, or nothing). */
static int order_keys(const struct rm_client_conn *c, const struct rm_rpc_call *call, uint64_t keys[2])
{
	if (!call->ordered)
		return 0;
	int no_stream = call->order[0] == RM_ORDER_NO_STREAM;
	keys[0] = no_stream ? 0 : stream_key(c, call->order[0]);
	keys[1] = call->order[1];
	return no_stream ? keys[1] != 0 : keys[0] != 0;
}

static unsigned order_slot_of(uint64_t key)
{
	return (unsigned)((key * 0x9e3779b97f4a7c15ull) >> 60) % RM_ORDER_SLOTS;
}

/* Notes async call seq on c (lock held) for fences_needed. A slot taken by another key
 * gives that key's seq to unordered_seq, before the slot changes hands. */
static void order_note_locked(struct rm_client_conn *c, const uint64_t *keys, uint64_t seq)
{
	if (!keys) {
		__atomic_store_n(&c->unordered_seq, seq, __ATOMIC_RELEASE);
		return;
	}
	for (int k = 0; k < 2; k++) {
		if (!keys[k])
			continue;
		unsigned i = order_slot_of(keys[k]);
		uint64_t held = c->order_slot[i].key;
		if (held && held != keys[k] && c->order_slot[i].seq > c->unordered_seq)
			__atomic_store_n(&c->unordered_seq, c->order_slot[i].seq, __ATOMIC_RELEASE);
		__atomic_store_n(&c->order_slot[i].seq, seq, __ATOMIC_RELEASE);
		__atomic_store_n(&c->order_slot[i].key, keys[k], __ATOMIC_RELEASE);
	}
}

/* The last async call on x that a call with keys (NULL: ordered after everything) must
 * follow. Slots are read before unordered_seq, which a slot changing hands raised first. */
static uint64_t order_needed(struct rm_client_conn *x, const uint64_t *keys)
{
	if (!keys)
		return __atomic_load_n(&x->last_async_seq, __ATOMIC_ACQUIRE);
	uint64_t a = 0;
	for (int k = 0; k < 2; k++) {
		if (!keys[k])
			continue;
		unsigned i = order_slot_of(keys[k]);
		if (__atomic_load_n(&x->order_slot[i].key, __ATOMIC_ACQUIRE) == keys[k]) {
			uint64_t seq = __atomic_load_n(&x->order_slot[i].seq, __ATOMIC_ACQUIRE);
			a = seq > a ? seq : a;
		}
	}
	uint64_t u = __atomic_load_n(&x->unordered_seq, __ATOMIC_ACQUIRE);
	return u > a ? u : a;
}

static int fences_needed(struct rm_client_conn *c, const uint64_t *keys, struct fence *out, int cap)
{
	int n = 0;
	pthread_rwlock_rdlock(&chan_lock);
	int hi = __atomic_load_n(&chan_hi, __ATOMIC_ACQUIRE);
	for (int i = 0; i <= hi && n < cap; i++) {
		struct rm_client_conn *x = chan_tab[i];
		if (!x || x == c || !c->fenced)
			continue;
		uint64_t a = order_needed(x, keys);
		if (a <= __atomic_load_n(&x->synced_seq, __ATOMIC_ACQUIRE) || a <= c->fenced[i])
			continue;
		/* Its batch holds the call only while nobody holds its lock for long: a call
		 * that waits for a reply has sent the batch first. */
		while (__atomic_load_n(&x->batch_since_ns, __ATOMIC_SEQ_CST)) {
			if (pthread_mutex_trylock(&x->lock) == 0) {
				if (x->connected && x->batch_len) {
					int err = flush_locked(x, NULL, 0);
					if (err)
						lost(x, "send", err);
				}
				pthread_mutex_unlock(&x->lock);
				break;
			}
			sched_yield();
		}
		out[n++] = (struct fence){(uint32_t)i, a};
	}
	pthread_rwlock_unlock(&chan_lock);
	return n;
}

static CUresult append_fences_locked(struct rm_client_conn *c, const struct fence *fences, int n)
{
	for (int i = 0; i < n; i++) {
		if (fences[i].seq <= c->fenced[fences[i].chan])
			continue;
		Remora__Fence m = REMORA__FENCE__INIT;
		m.channel = fences[i].chan;
		m.seq = fences[i].seq;
		struct rm_frame f = {.magic = RM_WIRE_MAGIC, .op = RM_OP_FENCE, .flags = RM_F_ASYNC,
				     .seq = __atomic_add_fetch(&process_seq, 1, __ATOMIC_RELAXED),
				     .msg_len = (uint32_t)protobuf_c_message_get_packed_size(&m.base)};
		int err = append_locked(c, &f, &m.base, NULL, 0, 0);
		if (err)
			return lost(c, "send", err);
		c->fenced[fences[i].chan] = fences[i].seq;
	}
	return CUDA_SUCCESS;
}

/* Reads the reply to call (frame f sent) off c's link. */
static CUresult read_reply_locked(struct rm_client_conn *c, const struct rm_frame *f, struct rm_rpc_call *call)
{
	struct rm_frame rf;
	int err, skip = 0;
	do
		err = rm_link_read_frame(&c->link, &rf);
	while (!err && (skip = before_reply(c, &rf)) == 1);
	if (!err && skip < 0)
		err = skip;
	if (!err && rf.op == RM_OP_GOING_AWAY && (rf.flags & RM_F_REPLY))
		err = -ESHUTDOWN;
	if (err)
		return lost(c, "waiting for a reply", err);
	if (!(rf.flags & RM_F_REPLY) || rf.seq != f->seq || rf.op != f->op)
		return lost(c, "reply out of order", -EPROTO);
	uint8_t small[512];
	uint8_t *msg = rf.msg_len <= sizeof(small) ? small : malloc(rf.msg_len);
	CUresult result = CUDA_SUCCESS;
	if (!msg || (err = rm_link_read(&c->link, msg, rf.msg_len))) {
		result = lost(c, "receive", err ? err : -ENOMEM);
		goto out;
	}
	uint64_t want = call->bulk_in_len;
	for (int i = 0; i < call->nbulk_in_vec; i++)
		want += call->bulk_in_vec[i].iov_len;
	if (rf.bulk_len || (want && rf.result == CUDA_SUCCESS)) { /* a success brings all that was asked */
		if (rf.bulk_len != want || (!call->bulk_in && !call->nbulk_in_vec)) {
			err = -EPROTO;
		} else {
			if (call->before_bulk_in)
				call->before_bulk_in(call->before_bulk_in_arg);
			if (call->bulk_in)
				err = rm_link_read(&c->link, call->bulk_in, call->bulk_in_len);
			for (int i = 0; !err && i < call->nbulk_in_vec; i++)
				err = rm_link_read(&c->link, call->bulk_in_vec[i].iov_base, call->bulk_in_vec[i].iov_len);
		}
		if (err) {
			result = lost(c, "receive bulk", err);
			goto out;
		}
	}
	if (call->rep_desc && !(call->rep = protobuf_c_message_unpack(call->rep_desc, NULL, rf.msg_len, msg))) {
		result = lost(c, "malformed reply", -EPROTO);
		goto out;
	}
	result = (CUresult)rf.result;
	if (result == CUDA_SUCCESS && rf.async_result)
		result = (CUresult)rf.async_result;
out:
	if (msg != small)
		free(msg);
	return result;
}

CUresult rm_client_call(struct rm_client_conn *c, struct rm_rpc_call *call)
{
	uint64_t bulk_len = 0;
	for (int i = 0; i < call->nbulk_out; i++)
		bulk_len += call->bulk_out[i].iov_len;
	uint32_t flags = (call->op < RM_OP_LIMIT ? rm_op_flags[call->op] & RM_OPF_ASYNC : 0) | (call->async ? RM_F_ASYNC : 0);
	struct rm_frame f = {
		.magic = RM_WIRE_MAGIC,
		.op = call->op,
		.msg_len = call->req ? (uint32_t)protobuf_c_message_get_packed_size(call->req) : 0,
		.flags = flags | (rm_per_thread_active() ? RM_F_PER_THREAD : 0),
		.bulk_len = bulk_len,
		.ctx = (uint64_t)(uintptr_t)rm_ctx_current(),
	};
	call->rep = NULL;
	if (f.msg_len > RM_MAX_MSG_LEN)
		return CUDA_ERROR_INVALID_VALUE;

	struct fence fences[RM_MAX_CHANNELS + 1]; /* one per other channel at most */
	uint64_t keys[2];
	const uint64_t *ordered = order_keys(c, call, keys) ? keys : NULL;
	int nfences = __atomic_load_n(&chan_hi, __ATOMIC_ACQUIRE) ? fences_needed(c, ordered, fences, RM_MAX_CHANNELS + 1) : 0;
	pthread_mutex_lock(&c->lock);
	CUresult result;
	int waited = 0;
	if (!c->connected) {
		result = CUDA_ERROR_DEVICE_UNAVAILABLE;
		goto out;
	}
	if (nfences && (result = append_fences_locked(c, fences, nfences)) != CUDA_SUCCESS)
		goto out;
	if (call->pass_fd) { /* on its way before the frame is: the daemon takes it at the frame */
		int err = rm_conn_send_fd(c->link.conn, *call->pass_fd);
		if (err == -EOPNOTSUPP) {
			result = CUDA_ERROR_NOT_SUPPORTED;
			goto out;
		}
		if (err) {
			result = lost(c, "send", err);
			goto out;
		}
	}
	f.seq = __atomic_add_fetch(&process_seq, 1, __ATOMIC_RELAXED);
	int inline_bulk = bulk_len <= BATCH_INLINE_BULK;
	int err = append_locked(c, &f, call->req, call->bulk_out, call->nbulk_out, inline_bulk);
	uint64_t now = 0;
	if (!err && (flags & RM_F_ASYNC)) {
		now = now_ns();
		__atomic_store_n(&c->last_async_ns, now, __ATOMIC_SEQ_CST);
		if (!c->batch_since_ns)
			__atomic_store_n(&c->batch_since_ns, now, __ATOMIC_SEQ_CST);
	}
	if (!err && (!(flags & RM_F_ASYNC) || !inline_bulk || c->batch_len >= BATCH_FLUSH_AT ||
		     now - c->batch_since_ns >= FLUSH_DELAY_NS))
		err = flush_locked(c, inline_bulk ? NULL : call->bulk_out, inline_bulk ? 0 : call->nbulk_out);
	if (err) {
		result = lost(c, "send", err);
		goto out;
	}
	if (flags & RM_F_ASYNC) {
		rm_managed_note_work(); /* it may write managed memory: brought down at the next sync */
		order_note_locked(c, ordered, f.seq);
		__atomic_store_n(&c->last_async_seq, f.seq, __ATOMIC_RELEASE);
		if (c->batch_len && c->flusher_running)
			flusher_arm(c);
		result = CUDA_SUCCESS;
		goto out;
	}
	waited = 1;
	result = read_reply_locked(c, &f, call);
	if (c->connected)
		__atomic_store_n(&c->synced_seq, f.seq, __ATOMIC_RELEASE);
out:
	pthread_mutex_unlock(&c->lock);
	if (result != CUDA_SUCCESS || trace_calls) /* "waited": a round trip (counted in hotpath.md) */
		rm_log(RM_LOG_DEBUG, "%s returned %d%s", call->op < RM_OP_LIMIT ? rm_op_names[call->op] : "?", result,
		       waited ? " (waited)" : "");
	return result;
}

/* Checks the environment (environment.h), then tries each candidate (placement.h)
 * until one accepts this client. */
static CUresult do_connect(void)
{
	struct rm_candidates *cand = malloc(sizeof(*cand));
	CUresult r = CUDA_ERROR_NO_DEVICE;
	if (!cand)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (rm_client_environment_check() == 0 && rm_placement_candidates(cand) == 0)
		for (int i = 0; i < cand->n && r != CUDA_SUCCESS; i++)
			if ((r = rm_client_conn_open(&process_conn, cand->addr[i])) != CUDA_SUCCESS && i + 1 < cand->n)
				rm_log(RM_LOG_ERROR, "trying the next GPU server of %s", cand->from);
	free(cand);
	return r;
}

static void connect_body(void)
{
	rm_client_init();
	connect_thread = pthread_self();
	connect_result = do_connect();
	if (connect_result == CUDA_SUCCESS)
		chan_tab[0] = &process_conn;
}

CUresult rm_connect_once(void)
{
	if (!__atomic_load_n(&connect_done, __ATOMIC_ACQUIRE)) {
		pthread_mutex_lock(&connect_lock);
		if (!connect_done) {
			connect_body();
			__atomic_store_n(&connect_done, 1, __ATOMIC_RELEASE);
		}
		pthread_mutex_unlock(&connect_lock);
	}
	return connect_result;
}

void rm_rpc_reset(void)
{
	pthread_mutex_lock(&connect_lock);
	if (chan_tab[0]) /* connected once: what open acquired is released, lost or not */
		rm_client_conn_close(&process_conn);
	chan_tab[0] = NULL;
	process_conn = (struct rm_client_conn){
		.lock = PTHREAD_MUTEX_INITIALIZER,
		.flusher_lock = PTHREAD_MUTEX_INITIALIZER,
		.flusher_cond = PTHREAD_COND_INITIALIZER,
	};
	connect_result = CUDA_ERROR_NOT_INITIALIZED;
	__atomic_store_n(&connect_done, 0, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&connect_lock);
	rm_query_cache_clear();
	rm_launch_reset();
}

/* At a thread's exit: what it queued is run (one round trip, so that nothing is left
 * in flight when the connection closes), then its channel closes. The daemon then
 * drains and gives back the thread's per-thread streams. */
static void channel_end(void *arg)
{
	struct rm_client_conn *c = arg;
	thread_conn = &process_conn; /* a later destructor's calls share the main connection */
	if (__atomic_load_n(&c->last_async_seq, __ATOMIC_ACQUIRE) > __atomic_load_n(&c->synced_seq, __ATOMIC_ACQUIRE)) {
		Remora__CuDeviceGetCountReq req = REMORA__CU_DEVICE_GET_COUNT__REQ__INIT;
		struct rm_rpc_call call = {.op = RM_OP_cuDeviceGetCount, .req = &req.base,
					   .rep_desc = &remora__cu_device_get_count__rep__descriptor};
		rm_client_call(c, &call);
		rm_rpc_free(call.rep);
	}
	pthread_rwlock_wrlock(&chan_lock);
	chan_tab[c->chan] = NULL;
	chan_taken[c->chan] = 0;
	pthread_rwlock_unlock(&chan_lock);
	rm_client_conn_close(c);
	pthread_cond_destroy(&c->flusher_cond);
	pthread_mutex_destroy(&c->flusher_lock);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

static void chan_key_create(void)
{
	if (pthread_key_create(&chan_key, channel_end))
		chan_key_once_failed = 1;
}

/* A channel number no thread uses, taken; 0 when none is free. */
static uint32_t channel_number_take(void)
{
	uint32_t chan = 0;
	pthread_rwlock_wrlock(&chan_lock);
	for (uint32_t i = 1; i <= RM_MAX_CHANNELS && !chan; i++)
		if (!chan_taken[i])
			chan = i;
	if (chan)
		chan_taken[chan] = 1;
	pthread_rwlock_unlock(&chan_lock);
	return chan;
}

static void channel_number_give(uint32_t chan)
{
	pthread_rwlock_wrlock(&chan_lock);
	chan_taken[chan] = 0;
	pthread_rwlock_unlock(&chan_lock);
}

/* A channel for the calling thread, or NULL: it shares the main connection. */
static struct rm_client_conn *channel_open(void)
{
	pthread_once(&chan_key_once, chan_key_create);
	if (chan_key_once_failed || !process_conn.keylen)
		return NULL;
	uint32_t chan = channel_number_take();
	if (!chan)
		return NULL;
	struct rm_client_conn *c = calloc(1, sizeof(*c));
	if (c) {
		pthread_mutex_init(&c->lock, NULL);
		pthread_mutex_init(&c->flusher_lock, NULL);
		pthread_cond_init(&c->flusher_cond, NULL);
	}
	if (!c || rm_client_channel_open(c, &process_conn, chan) != CUDA_SUCCESS ||
	    pthread_setspecific(chan_key, c)) {
		if (c && c->connected)
			rm_client_conn_close(c);
		free(c);
		channel_number_give(chan);
		return NULL;
	}
	pthread_rwlock_wrlock(&chan_lock);
	chan_tab[chan] = c;
	if ((int)chan > chan_hi)
		__atomic_store_n(&chan_hi, (int)chan, __ATOMIC_RELEASE);
	pthread_rwlock_unlock(&chan_lock);
	rm_log(RM_LOG_DEBUG, "thread channel %u attached", chan);
	return c;
}

/* The calling thread's connection: its channel, made at its first call, or the main one. */
static struct rm_client_conn *thread_connection(void)
{
	struct rm_client_conn *c = thread_conn;
	if (c)
		return c;
	thread_conn = &process_conn;
	if (!pthread_equal(pthread_self(), connect_thread) && (c = channel_open()))
		thread_conn = c;
	return thread_conn;
}

int rm_client_send_frame(struct rm_client_conn *c, const struct rm_frame *f)
{
	uint8_t head[RM_FRAME_LEN];
	struct iovec v = {head, sizeof(head)};
	rm_frame_encode(f, head);
	pthread_mutex_lock(&c->lock);
	int err = c->connected ? flush_locked(c, &v, 1) : -ENOTCONN;
	if (err && c->connected)
		lost(c, "send", err);
	pthread_mutex_unlock(&c->lock);
	return err;
}

struct rm_client_conn *rm_channel_open_spare(void)
{
	if (rm_connect_once() != CUDA_SUCCESS || !process_conn.keylen)
		return NULL;
	uint32_t chan = channel_number_take();
	struct rm_client_conn *c = chan ? calloc(1, sizeof(*c)) : NULL;
	if (!c) {
		if (chan)
			channel_number_give(chan);
		return NULL;
	}
	pthread_mutex_init(&c->lock, NULL);
	pthread_mutex_init(&c->flusher_lock, NULL);
	pthread_cond_init(&c->flusher_cond, NULL);
	c->reader = 1;
	if (rm_client_channel_open(c, &process_conn, chan) != CUDA_SUCCESS) {
		c->chan = chan;
		rm_channel_close_spare(c);
		return NULL;
	}
	return c;
}

void rm_channel_close_spare(struct rm_client_conn *c)
{
	uint32_t chan = c->chan;
	if (c->connected)
		rm_client_conn_close(c);
	pthread_cond_destroy(&c->flusher_cond);
	pthread_mutex_destroy(&c->flusher_lock);
	pthread_mutex_destroy(&c->lock);
	free(c);
	if (chan)
		channel_number_give(chan);
}

CUresult rm_rpc(struct rm_rpc_call *c)
{
	if (rm_hostfn_running())
		return CUDA_ERROR_NOT_PERMITTED; /* a host function may not call CUDA (it would wait for itself) */
	CUresult r = rm_connect_once();
	return r == CUDA_SUCCESS ? rm_client_call(thread_connection(), c) : r;
}

int rm_rpc_passes_fds(void)
{
	/* Every channel is a connection of the main one's transport. */
	return rm_connect_once() == CUDA_SUCCESS && process_conn.tp && process_conn.tp->send_fd;
}

void rm_rpc_fail(const char *what, int err)
{
	pthread_mutex_lock(&process_conn.lock);
	lost(&process_conn, what, err);
	pthread_mutex_unlock(&process_conn.lock);
}

CUresult rm_rpc_bad_reply(const char *fmt, ...)
{
	char what[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	rm_rpc_fail(what, -EPROTO);
	return CUDA_ERROR_DEVICE_UNAVAILABLE;
}

CUresult rm_rpc_simple(uint32_t op, const ProtobufCMessage *req,
		       const ProtobufCMessageDescriptor *rep_desc, ProtobufCMessage **rep)
{
	struct rm_rpc_call c = {.op = op, .req = req, .rep_desc = rep_desc};
	CUresult r = rm_rpc(&c);
	if (rep)
		*rep = c.rep;
	else
		rm_rpc_free(c.rep);
	return r;
}

CUresult rm_rpc_ordered(uint32_t op, const ProtobufCMessage *req, uint64_t stream, uint64_t event)
{
	struct rm_rpc_call c = {.op = op, .req = req, .order = {stream, event}, .ordered = 1};
	CUresult r = rm_rpc(&c);
	rm_rpc_free(c.rep);
	return r;
}

void rm_rpc_free(ProtobufCMessage *rep)
{
	if (rep)
		protobuf_c_message_free_unpacked(rep, NULL);
}
