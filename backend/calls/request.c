/* Finishing requests: replies, async errors, bulk. */
#include "dispatch.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "call_profile.h"
#include "fault.h"
#include "liveness.h"
#include "log.h"
#include "migrate.h"

ProtobufCMessage *rm_request_unpack(struct rm_request *rq, const ProtobufCMessageDescriptor *desc)
{
	ProtobufCMessage *m = protobuf_c_message_unpack(desc, NULL, rq->frame.msg_len, rq->msg);
	if (!m) {
		rm_log(RM_LOG_WARN, "malformed %s message", desc->name);
		rq->fatal = 1;
	}
	return m;
}

static int send_reply(struct rm_channel *s, struct rm_request *rq, CUresult r, const ProtobufCMessage *rep,
		      uint64_t bulk_len)
{
	uint8_t small[1024];
	size_t len = rep ? protobuf_c_message_get_packed_size(rep) : 0;
	uint8_t *buf = len <= sizeof(small) ? small : malloc(len);
	if (!buf)
		return -ENOMEM;
	if (rep)
		protobuf_c_message_pack(rep, buf);
	struct rm_frame f = {
		.magic = RM_WIRE_MAGIC,
		.op = rq->frame.op,
		.seq = rq->frame.seq,
		.msg_len = (uint32_t)len,
		.flags = RM_F_REPLY,
		.bulk_len = bulk_len,
		.result = (int32_t)r,
	};
	if (rq->frame.op < RM_OP_LIMIT && (rm_op_flags[rq->frame.op] & RM_OPF_SYNCPOINT)) {
		f.async_result = (int32_t)s->async_error;
		s->async_error = CUDA_SUCCESS;
	}
	char notice[RM_NOTICE_MAX];
	size_t notice_len = r != CUDA_SUCCESS ? rm_fault_notice(s, notice, sizeof(notice)) : 0;
	pthread_mutex_lock(&s->send_lock);
	rm_liveness_reply_begins(s);
	int err = 0;
	if (notice_len) {
		struct rm_frame nf = {.magic = RM_WIRE_MAGIC, .op = RM_OP_FAULT_NOTICE, .seq = rq->frame.seq,
				      .msg_len = (uint32_t)notice_len, .flags = RM_F_REPLY};
		err = rm_link_send(&s->link, &nf, notice, NULL, 0);
	}
	if (!err)
		err = rm_link_send(&s->link, &f, buf, NULL, 0);
	pthread_mutex_unlock(&s->send_lock);
	if (buf != small)
		free(buf);
	rq->replied = 1;
	return err;
}

void rm_request_async_error(struct rm_channel *s, uint32_t op, CUresult r)
{
	rm_fault_note(s, r);
	if (r == CUDA_SUCCESS)
		return;
	rm_session_log(s, RM_LOG_DEBUG, "async %s failed with %d", op < RM_OP_LIMIT ? rm_op_names[op] : "?", r);
	if (s->async_error == CUDA_SUCCESS)
		s->async_error = r;
}

void rm_request_finish(struct rm_channel *s, struct rm_request *rq, CUresult r, const ProtobufCMessage *rep)
{
	rq->result = r;
	if (rq->frame.flags & RM_F_ASYNC) {
		rm_request_async_error(s, rq->frame.op, r);
		rq->replied = 1;
		return;
	}
	rm_fault_note(s, r);
	uint64_t part = rm_call_part_begin();
	if (__atomic_load_n(&s->sh->migration, __ATOMIC_ACQUIRE)) /* a move asked for (migrate.h): at a synchronous call's end */
		rm_migrate_before_reply(s, rq);
	if (send_reply(s, rq, r, rep, 0))
		rq->fatal = 1;
	rm_call_part_end(RM_PART_REPLY, part);
}

int rm_request_reply_bulk(struct rm_channel *s, struct rm_request *rq, uint64_t bulk_len)
{
	int err = send_reply(s, rq, CUDA_SUCCESS, NULL, bulk_len);
	if (err)
		rq->fatal = 1;
	return err;
}

int rm_request_send_bulk(struct rm_channel *s, const void *buf, size_t len)
{
	struct iovec v = {(void *)buf, len};
	return rm_conn_sendv(s->link.conn, &v, 1);
}

int rm_request_read_bulk(struct rm_channel *s, struct rm_request *rq, void *buf, size_t len)
{
	if (len > rq->bulk_left)
		return -EPROTO;
	int err = buf ? rm_link_read(&s->link, buf, len) : rm_link_skip(&s->link, len);
	if (err) {
		rq->fatal = 1;
		return err;
	}
	rq->bulk_left -= len;
	return 0;
}

#define RM_LOGGED_NAMES 64

/* Whether name (a string constant) is new to logged, where it is then kept: the first
 * RM_LOGGED_NAMES names are remembered, later ones are new every time. */
static int first_time(const char *logged[RM_LOGGED_NAMES], const char *name)
{
	static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	int seen = 0;
	pthread_mutex_lock(&lock);
	for (size_t i = 0; i < RM_LOGGED_NAMES && !seen; i++)
		if (logged[i] && !strcmp(logged[i], name))
			seen = 1;
		else if (!logged[i]) {
			logged[i] = name;
			break;
		}
	pthread_mutex_unlock(&lock);
	return !seen;
}

CUresult rm_unsupported_by_driver(const char *name)
{
	static const char *logged[RM_LOGGED_NAMES];
	if (first_time(logged, name))
		rm_log(RM_LOG_WARN, "the loaded driver lacks %s", name);
	return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult rm_unsupported_use(const char *name)
{
	static const char *logged[RM_LOGGED_NAMES];
	if (first_time(logged, name))
		rm_log(RM_LOG_WARN, "not supported: %s", name);
	return CUDA_ERROR_NOT_SUPPORTED;
}
