/* Serving clients: one thread per connection reads frames in order and runs
 * them, so a client's blocking call blocks only that client. */
#include "server.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch.h"
#include "log.h"
#include "remora.pb-c.h"

static const struct rm_server_config *config;
static pthread_mutex_t clients_lock = PTHREAD_MUTEX_INITIALIZER;
static int nclients;

/* Answers the hello frame; returns 0 when the client is admitted. */
static int greet(struct rm_session *s)
{
	struct rm_request rq = {0};
	int err = rm_link_read_frame(&s->link, &rq.frame);
	if (err || rq.frame.op != RM_OP_HELLO || rq.frame.bulk_len) {
		rm_log(RM_LOG_WARN, "client %s: no valid hello (%s); closing", s->peer,
		       err ? strerror(-err) : "unexpected frame");
		return -EPROTO;
	}
	rq.msg = malloc(rq.frame.msg_len ? rq.frame.msg_len : 1);
	if (!rq.msg || rm_link_read(&s->link, rq.msg, rq.frame.msg_len)) {
		free(rq.msg);
		return -EPROTO;
	}
	Remora__Hello *hello = (Remora__Hello *)rm_request_unpack(&rq, &remora__hello__descriptor);
	free(rq.msg);
	if (!hello) {
		rm_log(RM_LOG_WARN, "client %s: malformed hello; closing", s->peer);
		return -EPROTO;
	}
	Remora__HelloReply rep = REMORA__HELLO_REPLY__INIT;
	CUresult r = CUDA_SUCCESS;
	rep.protocol_version = RM_PROTOCOL_VERSION;
	rm_drv.cuDriverGetVersion(&rep.driver_version);
	rep.session_id = s->id;
	snprintf(s->name, sizeof(s->name), "%s", hello->client_name ? hello->client_name : "?");
	s->pid = hello->pid;
	if (hello->protocol_version != RM_PROTOCOL_VERSION) {
		r = CUDA_ERROR_NOT_SUPPORTED;
		rep.error = "protocol version mismatch";
	}
	protobuf_c_message_free_unpacked(&hello->base, NULL);
	rm_request_finish(s, &rq, r, &rep.base);
	if (r != CUDA_SUCCESS)
		rm_log(RM_LOG_WARN, "client %s refused: %s", s->peer, rep.error);
	return r == CUDA_SUCCESS && !rq.fatal ? 0 : -EPERM;
}

static void serve(struct rm_session *s)
{
	struct rm_request rq;
	uint8_t *msgbuf = NULL;
	size_t msgcap = 0;
	for (;;) {
		memset(&rq, 0, sizeof(rq));
		int err = rm_link_read_frame(&s->link, &rq.frame);
		if (err == -ECONNRESET) {
			rm_log(RM_LOG_INFO, "session %llu (%s): client disconnected", (unsigned long long)s->id, s->name);
			break;
		}
		if (err) {
			rm_log(RM_LOG_WARN, "session %llu (%s): %s; closing", (unsigned long long)s->id, s->name,
			       err == -EPROTO ? "malformed frame header" : strerror(-err));
			break;
		}
		if (rq.frame.op == RM_OP_HELLO || rq.frame.op >= RM_OP_LIMIT || !rm_op_handlers[rq.frame.op] ||
		    (rq.frame.flags & RM_F_REPLY)) {
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
		CUresult r = rm_session_enter(s, rq.frame.ctx);
		if (r != CUDA_SUCCESS)
			rm_request_finish(s, &rq, r, NULL);
		else
			rm_op_handlers[rq.frame.op](s, &rq);
		if (rq.fatal) {
			rm_log(RM_LOG_WARN, "session %llu (%s): protocol error in %s; closing", (unsigned long long)s->id,
			       s->name, rm_op_names[rq.frame.op]);
			break;
		}
		if (rq.bulk_left && rm_link_skip(&s->link, rq.bulk_left))
			break;
		if (!rq.replied)
			rm_request_finish(s, &rq, CUDA_ERROR_UNKNOWN, NULL);
	}
	free(msgbuf);
}

static void *client_main(void *arg)
{
	struct rm_session *s = arg;
	if (greet(s) == 0) {
		rm_log(RM_LOG_INFO, "session %llu: client %s (pid %u) from %s", (unsigned long long)s->id, s->name,
		       s->pid, s->peer);
		serve(s);
	}
	rm_session_destroy(s);
	pthread_mutex_lock(&clients_lock);
	nclients--;
	pthread_mutex_unlock(&clients_lock);
	return NULL;
}

int rm_server_run(const struct rm_server_config *cfg)
{
	config = cfg;
	const char *addr;
	const struct rm_transport *tp = rm_transport_for(cfg->listen, &addr);
	if (!tp) {
		rm_log(RM_LOG_ERROR, "unknown transport in %s", cfg->listen);
		return -EINVAL;
	}
	struct rm_listener *l;
	int err = tp->listen(addr, &l);
	if (err) {
		rm_log(RM_LOG_ERROR, "cannot listen on %s: %s", cfg->listen, strerror(-err));
		return err;
	}
	char bound[96];
	tp->listener_addr(l, bound, sizeof(bound));
	rm_log(RM_LOG_INFO, "listening on %s", bound);
	if (cfg->ready_file) {
		FILE *f = fopen(cfg->ready_file, "w");
		if (f) {
			fprintf(f, "%s\n", bound);
			fclose(f);
		}
	}
	for (;;) {
		struct rm_conn *conn;
		err = tp->accept(l, &conn);
		if (err) {
			if (err == -EINTR || err == -ECONNABORTED || err == -EMFILE || err == -ENFILE)
				continue;
			rm_log(RM_LOG_ERROR, "accept: %s", strerror(-err));
			break;
		}
		struct rm_session *s = rm_session_new(tp, conn);
		if (!s) {
			tp->close(conn);
			continue;
		}
		pthread_mutex_lock(&clients_lock);
		nclients++;
		pthread_mutex_unlock(&clients_lock);
		pthread_t t;
		pthread_attr_t attr;
		pthread_attr_init(&attr);
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		if (pthread_create(&t, &attr, client_main, s)) {
			rm_log(RM_LOG_ERROR, "cannot start a thread for %s", s->peer);
			rm_session_destroy(s);
			pthread_mutex_lock(&clients_lock);
			nclients--;
			pthread_mutex_unlock(&clients_lock);
		}
		pthread_attr_destroy(&attr);
	}
	tp->listener_close(l);
	return err;
}
