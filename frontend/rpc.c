/* Calls to the daemon over a connection (connection.h): frames built and sent, async
 * calls batched (their flusher: flusher.c), other channels fenced, replies read and
 * checked. */
#include "client_object.h"
#include "copy_links.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.pb-c.h"
#include "remora.pb-c.h"
#include "stats.h"
#include "text.h"

#define BATCH_INLINE_BULK (16u << 10) /* async bulk up to this size is copied into the batch */

void rm_client_conn_stop_locked(struct rm_client_conn *c)
{
	if (c->connected && c->link.conn)
		rm_conn_shutdown(c->link.conn);
	__atomic_store_n(&c->connected, 0, __ATOMIC_SEQ_CST);
	pthread_mutex_lock(&c->flusher_lock); /* lets the flusher see it and end */
	pthread_cond_broadcast(&c->flusher_cond);
	pthread_mutex_unlock(&c->flusher_lock);
}

CUresult rm_client_lost_locked(struct rm_client_conn *c, const char *what, int err)
{
	struct rm_client *cl = &rm_process_client;
	/* Said once; and not at all once the client is closed at exit (its channels then end),
	 * nor while greeting: the opener dials again (a shed) or says why in one line. */
	int say = c->connected && !c->greeting && !rm_client_closed();
	if (say && err == -ESHUTDOWN)
		rm_log(RM_LOG_ERROR, "the GPU server is shutting down: connection to the GPU server lost (%s)", what);
	else if (say && err == -ETIMEDOUT)
		rm_log(RM_LOG_ERROR, "the GPU server was silent for longer than REMORA_PEER_TIMEOUT while this "
		       "client waited on it (%s): it is frozen or unreachable; giving up the connection", what);
	else if (say)
		rm_log(RM_LOG_ERROR, "connection to the GPU server lost (%s: %s)", what, strerror(-err));
	c->lost_err = err;
	rm_client_conn_stop_locked(c);
	if (c == &cl->main)
		cl->open_result = CUDA_ERROR_DEVICE_UNAVAILABLE;
	return CUDA_ERROR_DEVICE_UNAVAILABLE;
}

int rm_client_flush_locked(struct rm_client_conn *c, const struct iovec *extra, int nextra)
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
	__atomic_store_n(&c->last_send_ns, rm_now_ns(), __ATOMIC_RELAXED);
	if (n)
		rm_stats_send();
	int err = n ? rm_conn_sendv(c->link.conn, iov, n) : 0;
	if (!err && i < nextra) /* a striped copy's share: many pieces */
		err = rm_conn_sendv(c->link.conn, extra + i, nextra - i);
	return err;
}

/* Heartbeats say the daemon is busy with this call or one before it; a fault notice says
 * why the reply is an error (the daemon's one line, escaped, since it is a peer's text). */
int rm_client_before_reply(struct rm_client_conn *c, const struct rm_frame *rf)
{
	if (!(rf->flags & RM_F_REPLY) || rf->bulk_len)
		return 0;
	if (rf->op == RM_OP_HEARTBEAT)
		return !rf->msg_len;
	if (rf->op == RM_OP_MOVED)
		return rm_client_moved_note_locked(c, rf);
	if (rf->op == RM_OP_MOVE_PREPARE)
		return rm_client_move_prepare_locked(c, rf);
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

/* Appends a frame with its message (and, when it fits, its bulk) to the batch. */
static int append_locked(struct rm_client_conn *c, const struct rm_frame *f, const ProtobufCMessage *req,
			 const struct iovec *bulk, int nbulk, int inline_bulk)
{
	size_t need = RM_FRAME_LEN + f->msg_len + (inline_bulk ? f->bulk_len : 0);
	if (c->batch_len + need > RM_CLIENT_BATCH_CAP) {
		int err = rm_client_flush_locked(c, NULL, 0);
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
	struct rm_channels *ch = &rm_process_client.channels;
	pthread_rwlock_rdlock(&ch->lock);
	int hi = __atomic_load_n(&ch->hi, __ATOMIC_ACQUIRE);
	for (int i = 0; i <= hi && n < cap; i++) {
		struct rm_client_conn *x = ch->tab[i];
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
					int err = rm_client_flush_locked(x, NULL, 0);
					if (err)
						rm_client_lost_locked(x, "send", err);
				}
				pthread_mutex_unlock(&x->lock);
				break;
			}
			sched_yield();
		}
		out[n++] = (struct fence){(uint32_t)i, a};
	}
	pthread_rwlock_unlock(&ch->lock);
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
				     .seq = __atomic_add_fetch(&rm_process_client.seq, 1, __ATOMIC_RELAXED),
				     .msg_len = (uint32_t)protobuf_c_message_get_packed_size(&m.base)};
		int err = append_locked(c, &f, &m.base, NULL, 0, 0);
		if (err)
			return rm_client_lost_locked(c, "send", err);
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
	while (!err && (skip = rm_client_before_reply(c, &rf)) == 1);
	if (!err && skip < 0)
		err = skip;
	if (!err && rf.op == RM_OP_GOING_AWAY && (rf.flags & RM_F_REPLY))
		err = -ESHUTDOWN;
	if (err)
		return rm_client_lost_locked(c, "waiting for a reply", err);
	if (!(rf.flags & RM_F_REPLY) || rf.seq != f->seq || rf.op != f->op)
		return rm_client_lost_locked(c, "reply out of order", -EPROTO);
	uint8_t small[512];
	uint8_t *msg = rf.msg_len <= sizeof(small) ? small : malloc(rf.msg_len);
	CUresult result = CUDA_SUCCESS;
	if (!msg || (err = rm_link_read(&c->link, msg, rf.msg_len))) {
		result = rm_client_lost_locked(c, "receive", err ? err : -ENOMEM);
		goto out;
	}
	uint64_t want = call->bulk_in_len;
	for (int i = 0; i < call->nbulk_in_vec; i++)
		want += call->bulk_in_vec[i].iov_len;
	if (call->read_bulk && rf.result == CUDA_SUCCESS && rf.bulk_len && rf.bulk_len <= want) {
		if ((err = call->read_bulk(call->read_bulk_arg, &c->link, rf.bulk_len))) {
			result = rm_client_lost_locked(c, "receive bulk", err);
			goto out;
		}
	} else if (rf.bulk_len || (want && rf.result == CUDA_SUCCESS)) { /* a success brings all that was asked */
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
			result = rm_client_lost_locked(c, "receive bulk", err);
			goto out;
		}
	}
	if (call->rep_desc && !(call->rep = protobuf_c_message_unpack(call->rep_desc, NULL, rf.msg_len, msg))) {
		result = rm_client_lost_locked(c, "malformed reply", -EPROTO);
		goto out;
	}
	result = (CUresult)rf.result;
	if (result == CUDA_SUCCESS && rf.async_result)
		result = (CUresult)rf.async_result;
out:
	if (msg != small)
		free(msg);
	int moved = c->moved;
	if (c->moved && c->connected && rm_client_move_locked(c))
		result = CUDA_ERROR_DEVICE_UNAVAILABLE;
	if (c->holding)
		rm_client_channels_release_locked(c, moved && c->connected);
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
	int nfences = __atomic_load_n(&rm_process_client.channels.hi, __ATOMIC_ACQUIRE) ? fences_needed(c, ordered, fences, RM_MAX_CHANNELS + 1) : 0;
	pthread_mutex_lock(&c->lock);
	CUresult result;
	int waited = 0;
	if (!c->connected) {
		result = rm_client_closed() ? CUDA_ERROR_DEINITIALIZED : CUDA_ERROR_DEVICE_UNAVAILABLE;
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
			result = rm_client_lost_locked(c, "send", err);
			goto out;
		}
	}
	f.seq = __atomic_add_fetch(&rm_process_client.seq, 1, __ATOMIC_RELAXED);
	uint64_t sent = flags & RM_F_ASYNC ? 0 : rm_now_ns();
	int inline_bulk = bulk_len <= BATCH_INLINE_BULK;
	int err = append_locked(c, &f, call->req, call->bulk_out, call->nbulk_out, inline_bulk);
	uint64_t now = 0;
	if (!err && (flags & RM_F_ASYNC)) {
		now = rm_now_ns();
		__atomic_store_n(&c->last_async_ns, now, __ATOMIC_SEQ_CST);
		if (!c->batch_since_ns)
			__atomic_store_n(&c->batch_since_ns, now, __ATOMIC_SEQ_CST);
	}
	uint64_t delay = c->flush_delay_ns;
	int overdue = (flags & RM_F_ASYNC) && now - c->batch_since_ns >= delay;
	if (!err && (!(flags & RM_F_ASYNC) || !inline_bulk || c->batch_len >= RM_BATCH_FLUSH_AT || overdue)) {
		err = rm_client_flush_locked(c, inline_bulk ? NULL : call->bulk_out, inline_bulk ? 0 : call->nbulk_out);
		/* A run of async calls that outlasts the delay feeds the GPU steadily: longer
		 * batches cost it nothing but their first's wait, and save a send and the
		 * daemon's wake-up each. A call that waits ends the run. */
		if (!(flags & RM_F_ASYNC))
			delay = RM_FLUSH_DELAY_NS;
		else if (overdue)
			delay = delay * 2 < rm_flush_delay_max_ns() ? delay * 2 : rm_flush_delay_max_ns();
		__atomic_store_n(&c->flush_delay_ns, delay, __ATOMIC_RELAXED);
	}
	if (err) {
		result = rm_client_lost_locked(c, "send", err);
		goto out;
	}
	if (flags & RM_F_ASYNC) {
		rm_managed_note_work(); /* it may write managed memory: brought down at the next sync */
		order_note_locked(c, ordered, f.seq);
		__atomic_store_n(&c->last_async_seq, f.seq, __ATOMIC_RELEASE);
		if (c->batch_len && c->flusher_running)
			rm_client_flusher_arm(c);
		result = CUDA_SUCCESS;
		goto out;
	}
	waited = 1;
	result = read_reply_locked(c, &f, call);
	/* A call without bulk that waits for no GPU work: the link's round trip (copy_plan.h). */
	if (result == CUDA_SUCCESS && !bulk_len && !call->bulk_in && !call->nbulk_in_vec && call->op < RM_OP_LIMIT &&
	    !(rm_op_flags[call->op] & RM_OPF_SYNCPOINT))
		rm_copy_links_rtt(rm_now_ns() - sent);
	if (c->connected)
		__atomic_store_n(&c->synced_seq, f.seq, __ATOMIC_RELEASE);
out:
	pthread_mutex_unlock(&c->lock);
	rm_stats_call(waited);
	if (result != CUDA_SUCCESS || rm_process_client.trace) /* "waited": a round trip (counted in hotpath.md) */
		rm_log(RM_LOG_DEBUG, "%s returned %d%s", call->op < RM_OP_LIMIT ? rm_op_names[call->op] : "?", result,
		       waited ? " (waited)" : "");
	return result;
}

int rm_client_send_frame(struct rm_client_conn *c, const struct rm_frame *f)
{
	uint8_t head[RM_FRAME_LEN];
	struct iovec v = {head, sizeof(head)};
	rm_frame_encode(f, head);
	pthread_mutex_lock(&c->lock);
	int err = c->connected ? rm_client_flush_locked(c, &v, 1) : -ENOTCONN;
	if (err && c->connected)
		rm_client_lost_locked(c, "send", err);
	pthread_mutex_unlock(&c->lock);
	return err;
}

CUresult rm_rpc(struct rm_rpc_call *c)
{
	if (rm_hostfn_running())
		return CUDA_ERROR_NOT_PERMITTED; /* a host function may not call CUDA (it would wait for itself) */
	CUresult r = rm_connect_once();
	return r == CUDA_SUCCESS ? rm_client_call(rm_client_thread_conn(&rm_process_client), c) : r;
}

int rm_rpc_passes_fds(void)
{
	/* Every channel is a connection of the main one's transport. */
	const struct rm_transport *tp = rm_process_client.main.attach.tp;
	return rm_connect_once() == CUDA_SUCCESS && tp && tp->send_fd;
}

void rm_rpc_fail(const char *what, int err)
{
	struct rm_client_conn *c = &rm_process_client.main;
	pthread_mutex_lock(&c->lock);
	rm_client_lost_locked(c, what, err);
	pthread_mutex_unlock(&c->lock);
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
