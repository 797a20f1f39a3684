/* A worker process: receives admitted clients from the accepting process and
 * serves each on a thread of its own that reads frames in order and runs them,
 * so a client's blocking call blocks only that client. Its GPU contexts are
 * shared by all its clients (one tenant's, or everyone's when isolation is shared). */
#include "server.h"

#include <errno.h>
#include <malloc.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "copy_links.h"
#include "device_state.h"
#include "dispatch.h"
#include "gpus.h"
#include "host_functions.h"
#include "host_memory.h"
#include "call_profile.h"
#include "fault.h"
#include "kernel_timing.h"
#include "kernel_watch.h"
#include "liveness.h"
#include "log.h"
#include "registry.h"
#include "remora.pb-c.h"
#include "shared_host.h"
#include "stream_pool.h"
#ifdef RM_HAVE_SHM
#include "shm.h"
#endif

static const struct rm_daemon_config *config;
/* The sessions being served, for copy links that ask for theirs. */
static struct rm_session **sessions;
static size_t nsessions, sessions_cap;
static pthread_mutex_t sessions_lock = PTHREAD_MUTEX_INITIALIZER;

/* The sessions' channels, main ones and client threads' (the heartbeat thread visits
 * each); an attach looks for the main one. */
static int sessions_add_locked(struct rm_session *s)
{
	if (nsessions == sessions_cap) {
		size_t cap = sessions_cap ? 2 * sessions_cap : 64;
		struct rm_session **p = realloc(sessions, cap * sizeof(*p));
		if (!p)
			return -1;
		sessions = p;
		sessions_cap = cap;
	}
	sessions[nsessions++] = s;
	return 0;
}

static int sessions_add(struct rm_session *s)
{
	pthread_mutex_lock(&sessions_lock);
	int err = sessions_add_locked(s);
	pthread_mutex_unlock(&sessions_lock);
	return err;
}

static void sessions_each(void (*visit)(struct rm_session *s))
{
	pthread_mutex_lock(&sessions_lock);
	for (size_t i = 0; i < nsessions; i++)
		visit(sessions[i]);
	pthread_mutex_unlock(&sessions_lock);
}

static void sessions_remove_locked(struct rm_session *s)
{
	for (size_t i = 0; i < nsessions; i++)
		if (sessions[i] == s) {
			sessions[i] = sessions[--nsessions];
			break;
		}
}

static void sessions_remove(struct rm_session *s)
{
	pthread_mutex_lock(&sessions_lock);
	sessions_remove_locked(s);
	pthread_mutex_unlock(&sessions_lock);
}

/* Answers the hello the accepting process read for this client. */
static int welcome(struct rm_session *s, uint32_t seq)
{
	Remora__HelloReply rep = REMORA__HELLO_REPLY__INIT;
	struct rm_request rq = {.frame = {.op = RM_OP_HELLO, .seq = seq}};
	rep.protocol_version = RM_PROTOCOL_VERSION;
	rm_drv.cuDriverGetVersion(&rep.driver_version);
	rep.session_id = s->id;
	rep.attach_key.data = s->attach_key;
	rep.attach_key.len = sizeof(s->attach_key);
	rep.heartbeat_ms = (uint32_t)config->peer_timeout_s * 1000 / 6; /* six chances before a timeout */
	rm_request_finish(s, &rq, CUDA_SUCCESS, &rep.base);
	return rq.fatal ? -EPIPE : 0;
}

/* A fence (RM_OP_FENCE): waits, covered by heartbeats, until the channel it names has
 * finished the request it names. 0, or -1 when the frame is malformed (closing). */
static int fence(struct rm_session *s, const struct rm_frame *f)
{
	uint8_t msg[64];
	Remora__Fence *m = NULL;
	if (f->msg_len > sizeof(msg) || rm_link_read(&s->link, msg, f->msg_len) ||
	    !(m = remora__fence__unpack(NULL, f->msg_len, msg))) {
		rm_log(RM_LOG_WARN, "session %llu (%s): malformed fence; closing", (unsigned long long)s->id, s->name);
		return -1;
	}
	rm_liveness_call_begin(s);
	rm_session_fence(s, m->channel, m->seq);
	rm_liveness_call_end(s);
	remora__fence__free_unpacked(m, NULL);
	return 0;
}

/* Counts a finished call against the client (registry.h, accounting), with the time it
 * was held for a shared hardware queue; a synchronizing call also collects the kernel
 * times its wait has made known (rm_kernel_timing_collect). */
static void account(struct rm_session *s, const struct rm_request *rq)
{
	struct rm_usage *u = &rm_registry()->clients[s->slot].usage;
	enum rm_call_kind kind = rm_call_kind(rq->frame.op);
	rm_usage_add(&u->calls[kind], 1);
	uint64_t waited = rm_stream_pool_take_waited_ns();
	if (waited)
		rm_usage_add(&u->queue_wait_ns, waited);
	if (rq->replied && rq->result != CUDA_SUCCESS)
		rm_usage_add(&u->errors, 1);
	rm_kernel_timing_post(s, 0);
	if (kind == RM_CALL_SYNC)
		rm_kernel_timing_collect(s);
}

static void serve(struct rm_session *s)
{
	struct rm_request rq;
	uint8_t *msgbuf = NULL;
	size_t msgcap = 0;
	struct rm_call_profile *profile = rm_call_profile_begin();
	for (;;) {
		memset(&rq, 0, sizeof(rq));
		uint64_t read_ns = profile ? rm_call_profile_now_ns() : 0;
		int err = rm_link_read_frame(&s->link, &rq.frame);
		rm_call_profile_read(profile, read_ns);
		if (err == -ECONNRESET) {
			rm_log(RM_LOG_INFO, "session %llu (%s): client disconnected", (unsigned long long)s->id, s->name);
			break;
		}
		if (err == -ETIMEDOUT) {
			rm_log(RM_LOG_WARN, "session %llu (%s): the client was silent for %d s (stopped, frozen or "
			       "unreachable); closing", (unsigned long long)s->id, s->name, config->peer_timeout_s);
			break;
		}
		if (err) {
			rm_log(RM_LOG_WARN, "session %llu (%s): %s; closing", (unsigned long long)s->id, s->name,
			       err == -EPROTO ? "malformed frame header" : strerror(-err));
			break;
		}
		/* Heartbeats, fences and host functions' answers are one-way: a client marks them
		 * async, and one that does not would wait for a reply that never comes. */
		int one_way = rm_op_one_way(rq.frame.op);
		if (one_way && !(rq.frame.flags & RM_F_ASYNC)) {
			rm_log(RM_LOG_WARN, "session %llu (%s): one-way opcode %u without the async flag; closing",
			       (unsigned long long)s->id, s->name, rq.frame.op);
			break;
		}
		if (rq.frame.op == RM_OP_HEARTBEAT && !rq.frame.msg_len && !rq.frame.bulk_len &&
		    !(rq.frame.flags & RM_F_REPLY)) {
			/* An idle client is alive; a client sends one only after a silent interval,
			 * so the channel's staging goes back until its next copy (staging.h). */
			rm_staging_release_idle(&s->staging);
			continue;
		}
		if (rq.frame.op == RM_OP_HOST_LISTEN && !rq.frame.msg_len && !rq.frame.bulk_len &&
		    !(rq.frame.flags & RM_F_REPLY)) {
			if ((err = rm_hostfn_listen(s))) {
				rm_log(RM_LOG_WARN, "session %llu (%s): channel %d refused as callback channel (%s); closing",
				       (unsigned long long)s->id, s->name, s->chan, strerror(-err));
				break;
			}
			continue;
		}
		if (s->callbacks) { /* a callback channel carries answers, nothing else */
			if (rq.frame.op == RM_OP_HOST_DONE && !rq.frame.msg_len && !rq.frame.bulk_len &&
			    !(rq.frame.flags & RM_F_REPLY)) {
				rm_hostfn_done(s, rq.frame.seq);
				continue;
			}
			rm_log(RM_LOG_WARN, "session %llu (%s): opcode %u on its callback channel; closing",
			       (unsigned long long)s->id, s->name, rq.frame.op);
			break;
		}
		if (rq.frame.op == RM_OP_FENCE && !(rq.frame.flags & RM_F_REPLY) && !rq.frame.bulk_len) {
			if (fence(s, &rq.frame))
				break;
			continue;
		}
		/* The generated calls' handlers, and the reserved opcodes a session may call. */
		rm_op_handler handler = rm_op_handler_of(rq.frame.op);
		if (rq.frame.op == RM_OP_HELLO || !handler || (rq.frame.flags & RM_F_REPLY)) {
			rm_log(RM_LOG_WARN, "session %llu (%s): unknown opcode %u; closing", (unsigned long long)s->id,
			       s->name, rq.frame.op);
			break;
		}
		if (rq.frame.msg_len > msgcap) {
			uint8_t *p = realloc(msgbuf, rq.frame.msg_len);
			if (!p)
				break;
			msgbuf = p;
			msgcap = rq.frame.msg_len;
		}
		rq.msg = msgbuf;
		if ((err = rm_link_read(&s->link, msgbuf, rq.frame.msg_len))) {
			rm_log(RM_LOG_WARN, "session %llu (%s): truncated frame (%s); closing", (unsigned long long)s->id,
			       s->name, strerror(-err));
			break;
		}
		rq.bulk_left = rq.frame.bulk_len;
		uint64_t call_ns = profile ? rm_call_profile_now_ns() : 0;
		int waits = rq.frame.op >= RM_OP_LIMIT || !(rm_op_flags[rq.frame.op] & RM_OPF_ASYNC);
		if (waits)
			rm_kernel_timing_close(s, RM_SPAN_EARLY_CLOSE_NS);
		rm_liveness_call_begin(s);
		CUresult r = rm_session_enter(s, rq.frame.ctx);
		/* A striped call's handler runs even when the call is to fail, so that its bytes are
		 * drained or the copy links told (memory_handlers.c fails it with the fault's error). */
		if (r == CUDA_SUCCESS && !(rq.frame.op < RM_OP_LIMIT && (rm_op_flags[rq.frame.op] & RM_OPF_STRIPED)))
			r = rm_fault_error(); /* a faulted worker answers every call with its error */
		rm_call_part_end(RM_PART_BEFORE_HANDLER, call_ns);
		if (r != CUDA_SUCCESS)
			rm_request_finish(s, &rq, r, NULL);
		else
			handler(s, &rq);
		uint64_t after_ns = rm_call_part_begin();
		rm_liveness_call_end(s);
		if (waits) /* replied: the young spans' ends, off the client's path */
			rm_kernel_timing_close(s, 0);
		/* The client's batch is done: unless its next frame has come (a synchronize
		 * would end the spans in host time, rm_kernel_timing_synced). Before the call
		 * counts as done, so that another thread fenced on it (rm_session_fence) finds
		 * the end records queued: its wait for the stream then covers them, and a query
		 * after it does not see them pending. Never on the callback channel, which
		 * launches nothing: the timers' lock may be held by a thread whose driver call
		 * waits behind the host function whose answer this thread is to read. */
		else if (!s->callbacks && rm_kernel_timing_open(s) && !rm_link_buffered(&s->link) &&
			 !rm_conn_readable(s->link.conn))
			rm_kernel_timing_close(s, 0);
		account(s, &rq);
		rm_session_progress(s, rq.frame.seq);
		rm_call_part_end(RM_PART_AFTER_HANDLER, after_ns);
		rm_call_profile_call(profile, rq.frame.op, call_ns);
		if (rq.fatal) {
			rm_log(RM_LOG_WARN, "session %llu (%s): protocol error in %s; closing", (unsigned long long)s->id,
			       s->name, rq.frame.op < RM_OP_LIMIT ? rm_op_names[rq.frame.op] : "a reserved call");
			break;
		}
		if (rq.bulk_left && rm_link_skip(&s->link, rq.bulk_left))
			break;
		if (!rq.replied)
			rm_request_finish(s, &rq, CUDA_ERROR_UNKNOWN, NULL);
	}
	rm_kernel_timing_post(s, 1); /* before the channel or session leaves the registry */
	rm_call_profile_end(profile, s->id);
	free(msgbuf);
}

static void *client_main(void *arg)
{
	struct rm_session *s = arg;
	int slot = s->slot;
	/* Calls held for a shared hardware queue poll with sleeps from 10 us (stream_pool.c):
	 * without this, Linux stretches each by its default 50 us slack. */
	prctl(PR_SET_TIMERSLACK, 1000UL);
	if (welcome(s, s->hello_seq) == 0) {
		rm_log(RM_LOG_INFO, "session %llu: client %s (pid %u) from %s, tenant %s", (unsigned long long)s->id,
		       s->name, s->pid, s->peer, s->tenant_name);
		serve(s);
	}
	/* Until its work is waited for (rm_session_destroy), a fault of it may still break this
	 * worker: a new client waits for that (server.c, wait_for_departed). */
	rm_registry_worker_draining(getpid(), 1);
	sessions_remove(s);
	/* The main connection ended: the process is gone (or gave up on the daemon), so its
	 * threads' channels go too, before what they share. */
	struct rm_session_shared *sh = s->sh;
	pthread_mutex_lock(&sh->lock);
	sh->closing = 1;
	for (int i = 1; i <= RM_MAX_CHANNELS; i++)
		if (sh->channels[i])
			rm_conn_shutdown(sh->channels[i]->link.conn);
	pthread_cond_broadcast(&sh->progress);
	while (sh->nchannels)
		pthread_cond_wait(&sh->channel_gone, &sh->lock);
	pthread_mutex_unlock(&sh->lock);
	/* Its admission place and quota go now, with the kernel time known; the memory follows
	 * once its work is drained. */
	rm_kernel_timing_settle(s, 200);
	rm_registry_leave_session(slot, s->id);
	rm_session_destroy(s);
	rm_registry_worker_draining(getpid(), -1);
	/* The last client gone: what the allocator keeps for its threads (an arena each, staging
	 * buffers freed) goes back to the host, so an idle worker holds little. */
	pthread_mutex_lock(&sessions_lock);
	int idle = nsessions == 0;
	pthread_mutex_unlock(&sessions_lock);
	if (idle)
		malloc_trim(0);
	return NULL;
}

/* A client thread's channel: serves it until it closes, then frees what it alone held.
 * Its end leaves the session and its other channels be. */
static void *channel_main(void *arg)
{
	struct rm_session *ch = arg;
	struct rm_session_shared *sh = ch->sh;
	prctl(PR_SET_TIMERSLACK, 1000UL);
	serve(ch);
	rm_log(RM_LOG_INFO, "session %llu (%s): channel %d closed", (unsigned long long)ch->id, ch->name, ch->chan);
	rm_hostfn_channel_gone(ch); /* waiting host functions go on without it */
	sessions_remove(ch);
	pthread_mutex_lock(&sh->lock);
	sh->channels[ch->chan] = NULL;
	pthread_cond_broadcast(&sh->progress);
	pthread_mutex_unlock(&sh->lock);
	rm_session_channel_close(ch);
	pthread_mutex_lock(&sh->lock);
	sh->nchannels--;
	pthread_cond_broadcast(&sh->channel_gone);
	pthread_mutex_unlock(&sh->lock);
	return NULL;
}

/* Makes conn channel index of session s (its main channel), with a thread of its own,
 * once the Attach's answer ok is sent on it. The caller holds s (attach_hold): the hold
 * passes to the channel's thread. The slot is taken before ok goes, so that a session
 * closing meanwhile shuts conn down, and ok is sent under no lock (transport.h).
 * 0 (the thread owns conn), or -errno (-EPIPE: ok was not sent). */
static int channel_attach(struct rm_session *s, struct rm_conn *conn, uint32_t index, const struct iovec *ok)
{
	struct rm_session_shared *sh = s->sh;
	int err = 0;
	pthread_mutex_lock(&sh->lock);
	if (sh->closing)
		err = -ESHUTDOWN;
	else if (index < 1 || index > (uint32_t)s->max_channels)
		err = -ERANGE;
	else if (sh->channels[index])
		err = -EBUSY;
	struct rm_session *ch = err ? NULL : rm_session_channel_new(s, conn, (int)index);
	if (!err && !ch)
		err = -ENOMEM;
	if (!err)
		sh->channels[index] = ch;
	pthread_mutex_unlock(&sh->lock);
	if (!err && rm_conn_sendv(conn, ok, 1))
		err = -EPIPE;
	int listed = !err && !sessions_add(ch);
	if (!err && !listed)
		err = -ENOMEM;
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_t t;
	if (!err)
		err = -pthread_create(&t, &attr, channel_main, ch);
	pthread_attr_destroy(&attr);
	if (err && listed)
		sessions_remove(ch);
	if (err && ch) {
		pthread_mutex_lock(&sh->lock);
		sh->channels[index] = NULL;
		pthread_mutex_unlock(&sh->lock);
		ch->link.conn = NULL; /* the caller still owns conn */
		rm_session_channel_close(ch);
	}
	return err;
}

/* Holds the session of a main channel against its end while a link attaches to it: counted
 * as a channel (client_main waits for those), so that no lock need be held meanwhile. 0, or
 * -ESHUTDOWN where it is closing. */
static int attach_hold(struct rm_session *s)
{
	pthread_mutex_lock(&s->sh->lock);
	int err = s->sh->closing ? -ESHUTDOWN : 0;
	if (!err)
		s->sh->nchannels++;
	pthread_mutex_unlock(&s->sh->lock);
	return err;
}

static void attach_release(struct rm_session *s)
{
	struct rm_session_shared *sh = s->sh;
	pthread_mutex_lock(&sh->lock);
	sh->nchannels--;
	pthread_cond_broadcast(&sh->channel_gone);
	pthread_mutex_unlock(&sh->lock);
}

/* Receives one client from the channel: its descriptor and handoff. 0, or -errno; -ECONNRESET at the end. */
/* A hand-over: the connection's descriptor in fds[0], its transport's second one (shm:
 * the rings' memfd) in fds[1] or -1. */
static int receive(int channel, struct rm_handoff *h, int fds[2])
{
	union {
		char buf[CMSG_SPACE(2 * sizeof(int))];
		struct cmsghdr align;
	} cbuf;
	struct iovec iov = {.iov_base = h, .iov_len = sizeof(*h)};
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf.buf, .msg_controllen = sizeof(cbuf.buf)};
	ssize_t n = recvmsg(channel, &m, MSG_CMSG_CLOEXEC);
	if (n == 0)
		return -ECONNRESET;
	if (n < 0)
		return errno == EINTR ? -EINTR : -errno;
	struct cmsghdr *c = CMSG_FIRSTHDR(&m);
	size_t nfds = c && c->cmsg_type == SCM_RIGHTS ? (c->cmsg_len - CMSG_LEN(0)) / sizeof(int) : 0;
	fds[0] = fds[1] = -1;
	if (nfds >= 1 && nfds <= 2)
		memcpy(fds, CMSG_DATA(c), nfds * sizeof(int));
	if (n != (ssize_t)sizeof(*h) || nfds < 1 || nfds > 2) {
		for (int i = 0; i < 2; i++)
			if (fds[i] >= 0)
				close(fds[i]);
		return -EPROTO;
	}
	return 0;
}

/* Makes conn a copy link or a channel of the session h names, if it presents that
 * session's key; answers the Attach either way. sessions_lock is held only to find the
 * session: the answers go to a peer that may read nothing (transport.h). */
static void attach_link(struct rm_conn *conn, const struct rm_handoff *h)
{
	int err = -ESRCH, diff = 0;
	const char *what = h->channel ? "channel" : "copy link";
	struct rm_session *s = NULL;
	char name[sizeof(s->name)] = "";
	pthread_mutex_lock(&sessions_lock);
	for (size_t i = 0; i < nsessions && !s; i++) {
		if (sessions[i]->id != h->session_id || sessions[i]->chan)
			continue;
		s = sessions[i];
		uint8_t d = 0; /* compared in full: no early exit to time */
		for (size_t k = 0; k < sizeof(s->attach_key); k++)
			d |= s->attach_key[k] ^ h->key[k];
		diff = d != 0;
		err = diff ? -EACCES : attach_hold(s);
		snprintf(name, sizeof(name), "%s", s->name); /* s may go once the lock is let go */
	}
	pthread_mutex_unlock(&sessions_lock);
	if (!s) {
		rm_conn_close(conn);
		return;
	}
	struct rm_frame f = {.magic = RM_WIRE_MAGIC, .op = RM_OP_ATTACH, .flags = RM_F_REPLY,
			     .result = diff ? CUDA_ERROR_NOT_PERMITTED : CUDA_SUCCESS};
	uint8_t hdr[RM_FRAME_LEN];
	rm_frame_encode(&f, hdr);
	struct iovec v = {hdr, sizeof(hdr)};
	int held = !err; /* a hold on s: given to a channel's thread, else released below */
	/* A refused channel or copy link is told so before its connection closes (a channel's
	 * thread then shares the main connection; a copy needs no link). */
	if (!err && h->channel) {
		err = channel_attach(s, conn, h->link_index, &v);
		held = err != 0;
	} else if (!err) {
		err = rm_copy_link_attach(s, conn, h->link_index, &v);
	}
	if (err && err != -EPIPE && !diff) {
		f.result = h->channel ? CUDA_ERROR_TOO_MANY_PEERS
			 : err == -EPROTO ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_OUT_OF_MEMORY;
		rm_frame_encode(&f, hdr);
		rm_conn_sendv(conn, &v, 1);
	}
	if (err)
		rm_log(RM_LOG_WARN, "session %llu (%s): %s %u refused: %s", (unsigned long long)h->session_id, name, what,
		       h->link_index, err == -EACCES ? "wrong key"
		       : err == -EDQUOT ? "the client holds its client_host_memory_limit of host memory"
		       : strerror(-err));
	else
		rm_log(RM_LOG_INFO, "session %llu (%s): %s %u attached", (unsigned long long)h->session_id, name, what,
		       h->link_index);
	if (diff)
		rm_conn_sendv(conn, &v, 1);
	if (held)
		attach_release(s);
	if (err)
		rm_conn_close(conn);
}

#define WATCH_INTERVAL_MS 200 /* how soon a fault no call reported, or a kernel past its
				* kernel_time_limit, is found */
#define WATCH_MEMORY_EVERY 10 /* intervals between registry updates of free memory */
#define RETIRED_GRACE_MS 2000 /* a faulted worker idle this long after its fault exits */

/* The session whose kernel ran past kernel_time_limit (kernel_watch.h), named for the
 * others' notices. */
static char overrun_name[64];
static uint32_t overrun_pid;

static void find_overrun(struct rm_session *s)
{
	if (!overrun_name[0] && rm_kernel_watch_over(s)) {
		snprintf(overrun_name, sizeof(overrun_name), "%s", s->name);
		overrun_pid = s->pid;
	}
}

/* Tells a client why its worker ends: one line (printed by the client library), then
 * going-away. A busy or full connection is skipped: it finds the connection closed. */
static void tell_recycled(struct rm_session *s)
{
	char line[RM_NOTICE_MAX];
	int n = rm_kernel_watch_over(s)
			? snprintf(line, sizeof(line), "a kernel of this program ran longer than its tenant's "
				   "kernel_time_limit: the GPU server ended its worker, and with it the kernel and "
				   "every client of the worker")
			: snprintf(line, sizeof(line), "a kernel of program %s (pid %u on its host) ran longer than "
				   "tenant %s's kernel_time_limit: the GPU server ended the worker this program shared "
				   "with it, and this program's GPU work with it", overrun_name, overrun_pid,
				   s->tenant_name);
	size_t len = n < 0 ? 0 : (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1;
	if (len && !s->chan)
		rm_liveness_send_aside(s, RM_OP_FAULT_NOTICE, line, (uint32_t)len);
	rm_liveness_send_aside(s, RM_OP_GOING_AWAY, NULL, 0);
}

/* Ends the worker, and so the kernel that ran past its limit: the only way to stop a
 * kernel is to end its context's process. Marked faulted first, so that the tenant's next
 * client goes to a fresh worker. */
static void recycle(void)
{
	rm_log(RM_LOG_WARN, "worker: a kernel of %s (pid %u) ran past kernel_time_limit: ending this worker and "
	       "its clients' work; the tenant's next client gets a fresh worker", overrun_name, overrun_pid);
	rm_registry_mark_faulted(getpid(), CUDA_ERROR_LAUNCH_TIMEOUT);
	sessions_each(tell_recycled);
	_exit(75);
}

/* Asks each GPU's context for its free memory: a sticky error faults the worker (gpus.h),
 * however no call of a client has reported it yet; every few rounds the answer goes into
 * the registry's free-memory figures. A faulted worker whose clients have all left exits
 * (status 75, as server.c expects), a grace after its fault for a hand-over in flight. */
static void *watch_gpus(void *arg)
{
	(void)arg;
	struct timespec tick = {0, WATCH_INTERVAL_MS * 1000000L};
	for (unsigned round = 0;; round++) {
		for (int g = 0; g < rm_registry()->ngpus; g++) {
			size_t free_b, total_b;
			if (rm_gpu_memory(g, &free_b, &total_b) == CUDA_SUCCESS && round % WATCH_MEMORY_EVERY == 0) {
				rm_registry_lock();
				rm_registry()->gpus[g].free_bytes = free_b;
				rm_registry_unlock();
			}
		}
		sessions_each(find_overrun);
		if (overrun_name[0])
			recycle();
		if (rm_fault_age_ms() > RETIRED_GRACE_MS) {
			pthread_mutex_lock(&sessions_lock);
			int idle = nsessions == 0;
			pthread_mutex_unlock(&sessions_lock);
			if (idle) {
				rm_log(RM_LOG_INFO, "worker: faulted, and its last client has left; exiting");
				_exit(75);
			}
		}
		nanosleep(&tick, NULL);
	}
	return NULL;
}

/* ---- stopping: SIGTERM from remorad ----
 * The handler only writes to a pipe; a thread tells every client that the daemon is going
 * away (one empty frame, so that its next call fails with a line saying why instead of a
 * bare "connection lost"), then lets SIGTERM end the worker as before. */
static int stop_pipe[2] = {-1, -1};

static void on_sigterm(int sig)
{
	(void)sig;
	char c = 1;
	ssize_t unused = write(stop_pipe[1], &c, 1);
	(void)unused;
}

static int told;

static void tell_going_away(struct rm_session *s)
{
	told += !rm_liveness_send_aside(s, RM_OP_GOING_AWAY, NULL, 0); /* a busy or full session is skipped */
}

static void *stopper_main(void *arg)
{
	(void)arg;
	char c;
	while (read(stop_pipe[0], &c, 1) < 0 && errno == EINTR)
		;
	sessions_each(tell_going_away);
	rm_log(RM_LOG_INFO, "SIGTERM: told %d client connection(s) that the daemon is going away", told);
	signal(SIGTERM, SIG_DFL);
	raise(SIGTERM);
	return NULL;
}

static void stop_on_sigterm(void)
{
	pthread_t t;
	struct sigaction sa = {.sa_handler = on_sigterm};
	sigemptyset(&sa.sa_mask);
	if (pipe2(stop_pipe, O_CLOEXEC) || pthread_create(&t, NULL, stopper_main, NULL)) {
		rm_log(RM_LOG_WARN, "clients will not be told when this worker stops");
		return;
	}
	pthread_detach(t);
	sigaction(SIGTERM, &sa, NULL);
}

/* A connection the accepting process handed over, on its way to its own thread. */
struct handed {
	const struct rm_transport *tp;
	struct rm_handoff h;
	int fds[2];
};

/* Takes one handed-over connection: adopts it, then serves it as a session, or attaches it
 * to its session as a copy link or channel. On a thread of its own, so that a take-over
 * that waits on its client (rdma://: the upgrade, up to 10 s) holds up no other; a client
 * attaches its links one after another, each after the last one's answer. */
static void *take_over(void *arg)
{
	struct handed *x = arg;
	struct rm_handoff *h = &x->h;
	int fd = x->fds[0];
	const struct rm_daemon_config *cfg = config;
	struct rm_conn *conn;
	struct rm_session *s = NULL;
	int adopted = h->transport_state_len <= sizeof(h->transport_state)
			      ? x->tp->adopt_fd(fd, x->fds[1], h->transport_state, h->transport_state_len, &conn) : -EINVAL;
	explicit_bzero(h->transport_state, sizeof(h->transport_state));
	if (adopted) {
		rm_log(RM_LOG_WARN, "client %s: cannot take its connection over: %s", h->name, rm_transport_why(adopted));
		close(fd);
		if (x->fds[1] >= 0)
			close(x->fds[1]);
		conn = NULL;
	} else if (rm_conn_set_liveness(conn, cfg->peer_timeout_s * 1000, cfg->peer_timeout_s * 1000)) {
		rm_log(RM_LOG_WARN, "client %s: its connection has no liveness timeout", h->name);
	}
	if (h->attach) {
		if (conn)
			attach_link(conn, h);
		explicit_bzero(h, sizeof(*h));
		free(x);
		return NULL;
	}
	if (conn && !(s = rm_session_new(conn, cfg, h))) {
		rm_conn_close(conn);
	} else if (s && sessions_add(s)) {
		rm_session_destroy(s);
		s = NULL;
	}
	if (!s) {
		if (conn) /* else the line above said why */
			rm_log(RM_LOG_ERROR, "cannot serve client %s: out of resources", h->name);
		rm_registry_leave(h->slot);
	}
	explicit_bzero(h, sizeof(*h));
	free(x);
	return s ? client_main(s) : NULL;
}

int rm_worker_run(const struct rm_daemon_config *cfg, int channel)
{
	config = cfg;
	rm_kernel_timing_enable(cfg->kernel_timing);
	rm_host_memory_set_limit(cfg->worker_host_memory_limit);
#ifdef RM_HAVE_SHM
	rm_shm_set_ring_max(cfg->shm_ring_max);
#endif
	const char *addr;
	const struct rm_transport *tp = rm_transport_for(cfg->listen, &addr);
	pthread_t t;
	pthread_create(&t, NULL, watch_gpus, NULL);
	pthread_detach(t);
	if (rm_liveness_start(sessions_each))
		rm_log(RM_LOG_WARN, "no heartbeat thread: clients of long calls may take this worker for frozen");
	stop_on_sigterm();
	for (;;) {
		struct handed *x = calloc(1, sizeof(*x));
		if (!x) {
			rm_log(RM_LOG_ERROR, "worker: out of memory");
			break;
		}
		x->fds[0] = x->fds[1] = -1;
		int err = receive(channel, &x->h, x->fds);
		if (err == -EINTR) {
			free(x);
			continue;
		}
		if (err) {
			free(x);
			if (err != -ECONNRESET)
				rm_log(RM_LOG_ERROR, "worker channel: %s", strerror(-err));
			break;
		}
		x->tp = tp;
		pthread_attr_t attr;
		pthread_attr_init(&attr);
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		if (pthread_create(&t, &attr, take_over, x)) {
			rm_log(RM_LOG_ERROR, "cannot serve client %s: out of resources", x->h.name);
			close(x->fds[0]);
			if (x->fds[1] >= 0)
				close(x->fds[1]);
			if (!x->h.attach)
				rm_registry_leave(x->h.slot);
			explicit_bzero(&x->h, sizeof(x->h));
			free(x);
		}
		pthread_attr_destroy(&attr);
	}
	/* The accepting process is gone: nobody can reach this worker's clients' slots. */
	rm_log(RM_LOG_INFO, "the accepting process has gone; worker exiting");
	return 0;
}
