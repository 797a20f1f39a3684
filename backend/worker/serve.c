/* A channel's requests, read in order and each run to its reply (worker.h): the generated
 * calls' handlers (rm_op_handlers) and the reserved opcodes a session may call, beside
 * the one-way frames (heartbeats, fences, host functions' answers). */
#include "worker.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "call_profile.h"
#include "crash_report.h"
#include "device_state.h"
#include "dispatch.h"
#include "fault.h"
#include "host_functions.h"
#include "kernel_timing.h"
#include "launch_replay.h"
#include "liveness.h"
#include "log.h"
#include "migrate.h"
#include "registry.h"
#include "remora.pb-c.h"
#include "shared_host.h"
#include "stream_pool.h"
#include "zchunk.h"

int rm_serve_welcome(struct rm_channel *s, uint32_t seq)
{
	Remora__HelloReply rep = REMORA__HELLO_REPLY__INIT;
	struct rm_request rq = {.frame = {.op = RM_OP_HELLO, .seq = seq}};
	rep.protocol_version = RM_PROTOCOL_VERSION;
	rm_drv_cuDriverGetVersion(&rep.driver_version);
	rep.session_id = s->sh->id;
	rep.attach_key.data = s->sh->attach_key;
	rep.attach_key.len = sizeof(s->sh->attach_key);
	rep.heartbeat_ms = (uint32_t)rm_worker_config()->peer_timeout_s * 1000 / 6; /* six chances before a timeout */
	rep.compression = rm_zchunk_available() && rm_worker_config()->compress_copies;
	rm_request_finish(s, &rq, CUDA_SUCCESS, &rep.base);
	return rq.fatal ? -EPIPE : 0;
}

/* A fence (RM_OP_FENCE): waits, covered by heartbeats, until the channel it names has
 * finished the request it names. 0, or -1 when the frame is malformed (closing). */
static int fence(struct rm_channel *s, const struct rm_frame *f)
{
	uint8_t msg[64];
	Remora__Fence *m = NULL;
	if (f->msg_len > sizeof(msg) || rm_link_read(&s->link, msg, f->msg_len) ||
	    !(m = remora__fence__unpack(NULL, f->msg_len, msg))) {
		rm_session_log(s, RM_LOG_WARN, "malformed fence; closing");
		return -1;
	}
	rm_liveness_call_begin(s, RM_OP_FENCE);
	rm_session_fence(s, m->channel, m->seq);
	rm_liveness_call_end(s);
	remora__fence__free_unpacked(m, NULL);
	return 0;
}

/* Counts a finished call against the client (registry.h, accounting), with the time it
 * was held for a shared hardware queue; a synchronizing call also collects the kernel
 * times its wait has made known (rm_kernel_timing_collect). */
static void account(struct rm_channel *s, const struct rm_request *rq)
{
	struct rm_usage *u = &rm_registry()->clients[s->sh->slot].usage;
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

void rm_serve(struct rm_channel *s)
{
	struct rm_request rq;
	uint8_t *msgbuf = NULL;
	size_t msgcap = 0;
	struct rm_call_profile *profile = rm_call_profile_begin();
	for (;;) {
		memset(&rq, 0, sizeof(rq));
		/* A run left pending by a frame that was no call (a heartbeat) is made before waiting,
		 * and its spans closed before its progress counts (below). */
		if (rm_launch_replay_pending(s) && !rm_link_buffered(&s->link) && !rm_conn_readable(s->link.conn)) {
			uint64_t seq = rm_launch_replay_make(s, RM_REPLAY_END_BATCH);
			rm_kernel_timing_close(s, 0);
			rm_session_progress(s, seq);
		}
		uint64_t read_ns = profile ? rm_call_profile_now_ns() : 0;
		int err = rm_link_read_frame(&s->link, &rq.frame);
		rm_call_profile_read(profile, read_ns);
		if (err == -ECONNRESET) {
			rm_session_log(s, RM_LOG_INFO, "client disconnected");
			break;
		}
		if (err == -ETIMEDOUT) {
			rm_session_log(s, RM_LOG_WARN,
			               "the client was silent for %d s (stopped, frozen or "
			               "unreachable); closing",
			               rm_worker_config()->peer_timeout_s);
			break;
		}
		if (err) {
			rm_session_log(s, RM_LOG_WARN, "%s; closing",
			               err == -EPROTO ? "malformed frame header" : strerror(-err));
			break;
		}
		/* Heartbeats, fences and host functions' answers are one-way: a client marks them
		 * async, and one that does not would wait for a reply that never comes. */
		int one_way = rm_op_one_way(rq.frame.op);
		if (one_way && !(rq.frame.flags & RM_F_ASYNC)) {
			rm_session_log(s, RM_LOG_WARN, "one-way opcode %u without the async flag; closing",
			               rq.frame.op);
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
				rm_session_log(s, RM_LOG_WARN, "channel %d refused as callback channel (%s); closing",
				               s->chan, strerror(-err));
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
			rm_session_log(s, RM_LOG_WARN, "opcode %u on its callback channel; closing", rq.frame.op);
			break;
		}
		if (rq.frame.op == RM_OP_FENCE && !(rq.frame.flags & RM_F_REPLY) && !rq.frame.bulk_len) {
			rm_launch_replay_flush(s, RM_REPLAY_END_FENCE);
			if (fence(s, &rq.frame))
				break;
			continue;
		}
		/* The generated calls' handlers, and the reserved opcodes a session may call. */
		rm_op_handler handler = rm_op_handler_of(rq.frame.op);
		if (rq.frame.op == RM_OP_HELLO || !handler || (rq.frame.flags & RM_F_REPLY)) {
			rm_session_log(s, RM_LOG_WARN, "unknown opcode %u; closing", rq.frame.op);
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
			rm_session_log(s, RM_LOG_WARN, "truncated frame (%s); closing", strerror(-err));
			break;
		}
		rq.bulk_left = rq.frame.bulk_len;
		/* The run of launches is made before anything but a launch that may continue it,
		 * in the run's context (launch_replay.h). */
		if (rm_launch_replay_pending(s) && !rm_launch_replay_continues(s, &rq.frame))
			rm_launch_replay_flush(s, rq.frame.op);
		uint64_t call_ns = profile ? rm_call_profile_now_ns() : 0;
		int waits = rq.frame.op >= RM_OP_LIMIT || !(rm_op_flags[rq.frame.op] & RM_OPF_ASYNC);
		if (waits)
			rm_kernel_timing_close(s, RM_SPAN_EARLY_CLOSE_NS);
		rm_liveness_call_begin(s, rq.frame.op);
		rm_crash_note_call(rq.frame.op, s->sh->id);
		CUresult r = rm_session_enter(s, rq.frame.ctx);
		/* The thread's current context may be one destroyed before: natively that does not
		 * stop it destroying another (NVIDIA's memMapIPCDrv). */
		if (r == CUDA_ERROR_CONTEXT_IS_DESTROYED && rq.frame.op == RM_OP_cuCtxDestroy_v2)
			r = rm_session_enter(s, 0);
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
		rm_crash_note_call(UINT32_MAX, 0);
		rm_liveness_call_end(s);
		if (waits) /* replied: the young spans' ends, off the client's path */
			rm_kernel_timing_close(s, 0);
		/* The client's batch is done: unless its next frame has come (a synchronize
		 * would end the spans in host time, rm_kernel_timing_synced). Before the call
		 * counts as done, so that another thread fenced on it (rm_session_fence) finds
		 * the end records queued: its wait for the stream then covers them, and a query
		 * after it does not see them pending. Never on the callback channel, which
		 * launches nothing: the timers' lock may be held by a thread whose driver call
		 * waits behind the host function whose answer this thread is to read. The run of
		 * launches is made first (launch_replay.h): the spans' ends follow its launches. */
		else if (!s->callbacks && (rm_kernel_timing_open(s) || rm_launch_replay_pending(s)) &&
			 !rm_link_buffered(&s->link) && !rm_conn_readable(s->link.conn)) {
			rm_launch_replay_make(s, RM_REPLAY_END_BATCH); /* its progress: this call's, below */
			rm_kernel_timing_close(s, 0);
		}
		if (rq.frame.op < RM_OP_LIMIT && (rm_op_flags[rq.frame.op] & RM_OPF_DROPS_REPLAYS))
			rm_launch_replay_drop_all(s);
		account(s, &rq);
		if (!rm_launch_replay_pending(s)) /* else its run's flush records it */
			rm_session_progress(s, rq.frame.seq);
		rm_call_part_end(RM_PART_AFTER_HANDLER, after_ns);
		rm_call_profile_call(profile, rq.frame.op, call_ns);
		if (rq.fatal) {
			rm_session_log(s, RM_LOG_WARN, "protocol error in %s; closing",
			               rq.frame.op < RM_OP_LIMIT ? rm_op_names[rq.frame.op] : "a reserved call");
			break;
		}
		if (rq.bulk_left && rm_request_read_bulk(s, &rq, NULL, rq.bulk_left))
			break;
		if (!rq.replied)
			rm_request_finish(s, &rq, CUDA_ERROR_UNKNOWN, NULL);
		if (rm_migrate_moved(s)) {
			rm_session_log(s, RM_LOG_INFO, "client moved to another remorad; its session here ends");
			break;
		}
	}
	rm_launch_replay_free(s); /* a run left is the gone client's */
	rm_kernel_timing_post(s, 1); /* before the channel or session leaves the registry */
	rm_call_profile_end(profile, s->sh->id);
	free(msgbuf);
}
