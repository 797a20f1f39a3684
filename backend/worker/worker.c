/* A worker process: receives admitted clients from the accepting process and
 * serves each on a thread of its own that reads frames in order and runs them,
 * so a client's blocking call blocks only that client. Its GPU contexts are
 * shared by all its clients (one tenant's, or everyone's when isolation is shared). */
#include "worker.h"

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

#include "crash_report.h"
#include "driver_table.h"
#include "gpus.h"
#include "kernel_timing.h"
#include "launch_replay.h"
#include "liveness.h"
#include "log.h"
#include "migrate.h"
#include "registry.h"
#include "signals.h"

static const struct rm_daemon_config *config;

const struct rm_daemon_config *rm_worker_config(void)
{
	return config;
}

/* A client's main channel: welcomed, served until it closes, then its session closed. */
static void *client_main(void *arg)
{
	struct rm_channel *s = arg;
	int slot = s->sh->slot;
	/* Calls held for a shared hardware queue poll with sleeps from 10 us (stream_pool.c):
	 * without this, Linux stretches each by its default 50 us slack. */
	prctl(PR_SET_TIMERSLACK, 1000UL);
	if (s->sh->migrate_in) /* a move's greeting (migrate.h) */
		rm_migrate_make_contexts(s);
	if (rm_serve_welcome(s, s->sh->hello_seq) == 0) {
		rm_log(RM_LOG_INFO, "session %llu: client %s (pid %u) from %s, tenant %s", (unsigned long long)s->sh->id,
		       s->sh->name, s->sh->pid, s->peer, s->sh->tenant_name);
		rm_serve(s);
		while (rm_migrate_wait_resume(s)) /* a client that moved in: served from its own connection */
			rm_serve(s);
	}
	rm_migrate_abandon(s); /* a move asked for and not made: the admin is told why */
	/* Until its work is waited for (rm_session_destroy), a fault of it may still break this
	 * worker: a new client waits for that (supervisor.c, wait_for_departed). */
	rm_registry_worker_draining(getpid(), 1);
	rm_served_remove(s);
	/* The main connection ended: the process is gone (or gave up on the daemon), so its
	 * threads' channels go too, before what they share. */
	struct rm_session *sh = s->sh;
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
	rm_registry_leave_session(slot, s->sh->id);
	rm_session_destroy(s);
	rm_registry_worker_draining(getpid(), -1);
	/* The last client gone: what the allocator keeps for its threads (an arena each, staging
	 * buffers freed) goes back to the host, so an idle worker holds little. */
	if (!rm_served_count())
		malloc_trim(0);
	return NULL;
}

/* Receives one hand-over from the channel: its handoff, the connection's descriptor in
 * fds[0], its transport's second one (shm: the rings' memfd) in fds[1] or -1. 0, or
 * -errno; -ECONNRESET at the end. */
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

/* ---- stopping: SIGTERM from remorad ----
 * SIGTERM wakes a thread (signals.h) that tells every client that the daemon is going
 * away (one empty frame, so that its next call fails with a line saying why instead of a
 * bare "connection lost"), then lets SIGTERM end the worker as before. */
static struct rm_signal_pipe stop;
static int told;

static void tell_going_away(struct rm_channel *s)
{
	told += !rm_liveness_send_aside(s, RM_OP_GOING_AWAY, NULL, 0); /* a busy or full session is skipped */
}

static void *stopper_main(void *arg)
{
	(void)arg;
	if (!rm_signal_wait(&stop))
		return NULL;
	rm_served_each(tell_going_away);
	rm_log(RM_LOG_INFO, "SIGTERM: told %d client connection(s) that the daemon is going away", told);
	rm_signal_unroute(SIGTERM);
	raise(SIGTERM);
	return NULL;
}

static void stop_on_sigterm(void)
{
	pthread_t t;
	if (rm_signal_pipe_open(&stop) || pthread_create(&t, NULL, stopper_main, NULL)) {
		rm_log(RM_LOG_WARN, "clients will not be told when this worker stops");
		return;
	}
	pthread_detach(t);
	rm_signal_route(SIGTERM, &stop, 0);
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
	struct rm_channel *s = NULL;
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
	if (h->attach && h->migrate) { /* an admin's move of a client (migrate.h) */
		if (conn)
			rm_migrate_request(conn, h);
		explicit_bzero(h, sizeof(*h));
		free(x);
		return NULL;
	}
	if (h->attach) {
		if (conn)
			rm_attach(conn, h);
		explicit_bzero(h, sizeof(*h));
		free(x);
		return NULL;
	}
	if (conn && !(s = rm_session_new(conn, cfg, h))) {
		rm_conn_close(conn);
	} else if (s && h->migrate) { /* a move's target: its state comes first (migrate.h) */
		s->sh->migrate_in = 1;
	}
	if (s && rm_served_add(s)) {
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

/* A worker among several of its tenant's (workers_per_tenant) may be a spare that the
 * next client is placed on at once: it makes its GPUs' shared contexts at start, off the
 * thread that takes clients, so that client does not wait for them. */
static void *make_contexts(void *unused)
{
	(void)unused;
	int count = 0;
	if (rm_drv_cuDeviceGetCount(&count) != CUDA_SUCCESS)
		return NULL;
	for (int dev = 0; dev < count; dev++) {
		CUcontext ctx;
		if (rm_gpu_acquire(dev, &ctx) == CUDA_SUCCESS)
			rm_gpu_release(dev);
	}
	return NULL;
}

int rm_worker_run(const struct rm_daemon_config *cfg, int channel)
{
	config = cfg;
	rm_crash_report_install();
	rm_kernel_timing_enable(cfg->kernel_timing);
	rm_launch_replay_enable(cfg->launch_replay);
	rm_host_memory_set_limit(cfg->worker_host_memory_limit);
	rm_transport_limit_peer_buffers(cfg->shm_ring_max);
	const char *addr;
	const struct rm_transport *tp = rm_transport_for(cfg->listen, &addr);
	pthread_t t;
	rm_gpu_watch_start();
	if (rm_liveness_start(rm_served_each))
		rm_log(RM_LOG_WARN, "no heartbeat thread: clients of long calls may take this worker for frozen");
	stop_on_sigterm();
	if (cfg->workers_per_tenant > 1 && cfg->isolation != RM_ISOLATE_SHARED &&
	    (pthread_create(&t, NULL, make_contexts, NULL) || pthread_detach(t)))
		rm_log(RM_LOG_WARN, "worker: its GPU contexts are made at its first client's call");
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
