/* The accepting process: one short-lived thread per new connection reads the
 * hello, checks the credential and admission, and passes the connection to the
 * worker process of the client's tenant, starting that worker when needed. A
 * worker that dies (a GPU fault ends its process) takes only its tenant's clients. */
#include "server.h"

#include <cuda.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "admin.h"
#include "link.h"
#include "log.h"
#include "pool_member.h"
#include "registry.h"
#include "remora.pb-c.h"
#include "text.h"

#define ACCEPT_RETRY_US 100000 /* out of descriptors: how long accept waits before trying again */

struct worker {
	pid_t pid;   /* 0: not running */
	int channel; /* our end of its SOCK_SEQPACKET channel */
};

static const struct rm_daemon_config *config;
static const char *worker_exe;
static char **worker_argv;
/* One worker per tenant (the anonymous tenant last), or only workers[0] when shared. */
static struct worker workers[RM_CONFIG_MAX_TENANTS + 1];
static pthread_mutex_t workers_lock = PTHREAD_MUTEX_INITIALIZER;

static struct worker *worker_of(int tenant)
{
	return config->isolation == RM_ISOLATE_SHARED ? &workers[0] : &workers[rm_registry_tenant_slot(tenant)];
}

/* Starts a worker: this program again, with --worker-channel naming its end of a new channel. */
static int start_worker(struct worker *w, const char *tenant_name)
{
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv))
		return -errno;
	pid_t pid = fork();
	if (pid < 0) {
		int err = -errno;
		close(sv[0]);
		close(sv[1]);
		return err;
	}
	if (pid == 0) {
		int fd = dup(sv[1]); /* without CLOEXEC, so it survives exec */
		char arg[32];
		snprintf(arg, sizeof(arg), "--worker-channel=%d", fd);
		int n = 0;
		while (worker_argv[n])
			n++;
		char **argv = calloc(n + 2, sizeof(*argv));
		if (fd < 0 || !argv)
			_exit(127);
		memcpy(argv, worker_argv, n * sizeof(*argv));
		argv[n] = arg;
		execv(worker_exe, argv);
		_exit(127);
	}
	close(sv[1]);
	w->pid = pid;
	w->channel = sv[0];
	rm_log(RM_LOG_INFO, "started worker %d for %s", (int)pid,
	       config->isolation == RM_ISOLATE_SHARED ? "all tenants" : tenant_name);
	return 0;
}

/* Passes a connection's descriptor and what the worker needs to know of the client. */
static int hand_over(struct worker *w, int fd, const struct rm_handoff *h)
{
	char cbuf[CMSG_SPACE(sizeof(int))] = {0};
	struct iovec iov = {.iov_base = (void *)h, .iov_len = sizeof(*h)};
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof(cbuf)};
	struct cmsghdr *c = CMSG_FIRSTHDR(&m);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof(int));
	return sendmsg(w->channel, &m, MSG_NOSIGNAL) == (ssize_t)sizeof(*h) ? 0 : -errno;
}

/* Waits for workers to end; frees their clients' slots. */
static void *reap_workers(void *arg)
{
	(void)arg;
	for (;;) {
		int status;
		pid_t pid = waitpid(-1, &status, 0);
		if (pid < 0) {
			if (errno == ECHILD)
				sleep(1); /* no worker yet */
			continue;
		}
		pthread_mutex_lock(&workers_lock);
		for (size_t i = 0; i < sizeof(workers) / sizeof(workers[0]); i++)
			if (workers[i].pid == pid) {
				close(workers[i].channel);
				workers[i].pid = 0;
			}
		pthread_mutex_unlock(&workers_lock);
		int n = rm_registry_reap_worker(pid);
		if (WIFEXITED(status) && WEXITSTATUS(status) == 75)
			rm_log(RM_LOG_WARN, "worker %d ended after a GPU fault its driver cannot recover from; "
			       "its %d client(s) lost their connection, other tenants go on", (int)pid, n);
		else
			rm_log(RM_LOG_WARN, "worker %d ended (%s %d) with %d client(s)", (int)pid,
			       WIFEXITED(status) ? "status" : "signal",
			       WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), n);
	}
	return NULL;
}

/* Answers a hello the accepting process refuses. */
static void refuse(struct rm_link *l, uint64_t seq, CUresult r, const char *why)
{
	Remora__HelloReply rep = REMORA__HELLO_REPLY__INIT;
	rep.protocol_version = RM_PROTOCOL_VERSION;
	rep.error = (char *)why;
	uint8_t buf[512];
	size_t len = remora__hello_reply__get_packed_size(&rep);
	if (len > sizeof(buf))
		return;
	remora__hello_reply__pack(&rep, buf);
	struct rm_frame f = {.magic = RM_WIRE_MAGIC, .op = RM_OP_HELLO, .seq = seq, .msg_len = (uint32_t)len,
			     .flags = RM_F_REPLY, .result = (int32_t)r};
	rm_link_send(l, &f, buf, NULL, 0);
}

struct greeting {
	struct rm_conn *conn;
};

/* The devices a hello asks for, checked: none means all the host's GPUs. */
static int visible_devices(const Remora__Hello *h, struct rm_handoff *out, uint64_t *mask, char *why, size_t n)
{
	int ngpus = rm_registry()->ngpus;
	*mask = 0;
	out->ndevices = 0;
	if (!h->n_devices) {
		for (int g = 0; g < ngpus && g < 64; g++) {
			out->devices[out->ndevices++] = g;
			*mask |= 1ull << g;
		}
		return 0;
	}
	for (size_t i = 0; i < h->n_devices; i++) {
		int g = h->devices[i];
		if (g < 0 || g >= ngpus || g >= 64 || (*mask >> g & 1)) {
			snprintf(why, n, "REMORA_VISIBLE_DEVICES names GPU %d, which this host (%d GPUs) cannot give", g,
				 ngpus);
			return -1;
		}
		out->devices[out->ndevices++] = g;
		*mask |= 1ull << g;
	}
	return 0;
}

/* A copy link's Attach: handed to the worker serving the session it names, which checks
 * its key and answers; anything else is refused here. */
static void attach_link(struct rm_link *link, const struct rm_frame *f, const struct greeting *g)
{
	const char *peer = rm_conn_peer(g->conn);
	uint8_t msg[256];
	Remora__Attach *a = NULL;
	if (f->bulk_len || f->msg_len > sizeof(msg) || rm_link_read(link, msg, f->msg_len) ||
	    !(a = remora__attach__unpack(NULL, f->msg_len, msg)) || a->key.len != 16 || link->rpos != link->rlen) {
		rm_log(RM_LOG_WARN, "client %s: malformed copy link attach; closing", peer);
		goto out;
	}
	struct rm_handoff h = {.attach = 1, .link_index = a->index, .session_id = a->session_id, .slot = -1};
	memcpy(h.key, a->key.data, 16);
	pid_t pid = 0;
	rm_registry_lock();
	for (int i = 0; i < RM_MAX_CLIENTS && !pid; i++) {
		const struct rm_client_record *c = &rm_registry()->clients[i];
		if (c->in_use && c->session_id == a->session_id)
			pid = c->worker;
	}
	rm_registry_unlock();
	int err = -ESRCH;
	pthread_mutex_lock(&workers_lock);
	for (size_t i = 0; pid && i < sizeof(workers) / sizeof(workers[0]); i++)
		if (workers[i].pid == pid)
			err = hand_over(&workers[i], rm_conn_export_fd(g->conn), &h);
	pthread_mutex_unlock(&workers_lock);
	if (err) {
		rm_log(RM_LOG_WARN, "client %s: copy link for session %llu refused (%s)", peer,
		       (unsigned long long)a->session_id, err == -ESRCH ? "no such session" : strerror(-err));
		struct rm_frame rf = {.magic = RM_WIRE_MAGIC, .op = RM_OP_ATTACH, .seq = f->seq, .flags = RM_F_REPLY,
				      .result = CUDA_ERROR_INVALID_VALUE};
		rm_link_send(link, &rf, NULL, NULL, 0);
	}
out:
	if (a)
		remora__attach__free_unpacked(a, NULL);
}

static void *greet(void *arg)
{
	struct greeting *g = arg;
	struct rm_link link;
	if (rm_link_init(&link, g->conn)) {
		rm_conn_close(g->conn);
		free(g);
		return NULL;
	}
	const char *peer = rm_conn_peer(g->conn);
	struct rm_frame f;
	uint8_t *msg = NULL;
	Remora__Hello *hello = NULL;
	int err = rm_link_read_frame(&link, &f);
	if (!err && f.op == RM_OP_STATUS) {
		rm_admin_answer_status(&link, &f, config);
		goto out;
	}
	if (!err && f.op == RM_OP_ATTACH) {
		attach_link(&link, &f, g);
		goto out;
	}
	if (err || f.op != RM_OP_HELLO || f.bulk_len) {
		rm_log(RM_LOG_WARN, "client %s: no valid hello (%s); closing", peer,
		       err ? strerror(-err) : "unexpected frame");
		goto out;
	}
	msg = malloc(f.msg_len ? f.msg_len : 1);
	if (!msg || rm_link_read(&link, msg, f.msg_len))
		goto out;
	hello = remora__hello__unpack(NULL, f.msg_len, msg);
	if (!hello) {
		rm_log(RM_LOG_WARN, "client %s: malformed hello; closing", peer);
		goto out;
	}
	char why[200] = "";
	CUresult r = CUDA_SUCCESS;
	struct rm_handoff h = {.tenant = -1, .hello_seq = (uint32_t)f.seq, .pid = hello->pid,
			       .heartbeat_ms = hello->heartbeat_ms};
	rm_text_escape(h.name, sizeof(h.name), hello->client_name ? hello->client_name : "?");
	uint64_t mask = 0;
	const struct rm_tenant_config *t = rm_config_tenant(config, hello->credential.data, hello->credential.len);
	if (hello->protocol_version != RM_PROTOCOL_VERSION) {
		snprintf(why, sizeof(why), "protocol version mismatch (client %u, daemon %u)", hello->protocol_version,
			 RM_PROTOCOL_VERSION);
		r = CUDA_ERROR_NOT_SUPPORTED;
	} else if (!t) {
		snprintf(why, sizeof(why), hello->credential.len ? "unknown credential" : "this daemon needs a credential");
		r = CUDA_ERROR_NOT_PERMITTED;
	} else if (link.rpos != link.rlen) {
		snprintf(why, sizeof(why), "requests sent before the hello was answered");
		r = CUDA_ERROR_INVALID_VALUE;
	} else if (visible_devices(hello, &h, &mask, why, sizeof(why))) {
		r = CUDA_ERROR_INVALID_DEVICE;
	} else {
		h.tenant = t == &config->anonymous ? -1 : (int)(t - config->tenants);
		h.slot = rm_registry_admit(h.tenant, mask, config->max_clients_per_gpu, why, sizeof(why));
		if (h.slot < 0)
			r = CUDA_ERROR_DEVICE_UNAVAILABLE;
	}
	if (r != CUDA_SUCCESS) {
		rm_log(RM_LOG_WARN, "client %s (%s, pid %u) refused: %s", peer, h.name, h.pid, why);
		refuse(&link, f.seq, r, why);
		goto out;
	}
	struct rm_client_record *c = &rm_registry()->clients[h.slot];
	rm_registry_lock();
	snprintf(c->name, sizeof(c->name), "%s", h.name);
	snprintf(c->peer, sizeof(c->peer), "%s", peer);
	c->pid = h.pid;
	rm_registry_unlock();

	pthread_mutex_lock(&workers_lock);
	struct worker *w = worker_of(h.tenant);
	err = w->pid ? 0 : start_worker(w, t->name);
	if (!err) {
		rm_registry_lock();
		c->worker = w->pid;
		rm_registry_unlock();
		err = hand_over(w, rm_conn_export_fd(g->conn), &h);
	}
	pthread_mutex_unlock(&workers_lock);
	if (err) {
		rm_log(RM_LOG_ERROR, "client %s: cannot hand it to a worker: %s", peer, strerror(-err));
		refuse(&link, f.seq, CUDA_ERROR_OPERATING_SYSTEM, "the daemon could not start serving it");
		rm_registry_leave(h.slot);
	}
out:
	if (hello)
		remora__hello__free_unpacked(hello, NULL);
	free(msg);
	rm_link_close(&link); /* our copy only: the worker has its own descriptor */
	free(g);
	return NULL;
}

int rm_server_run(const struct rm_daemon_config *cfg, const char *self_exe, char **argv)
{
	config = cfg;
	worker_exe = self_exe;
	worker_argv = argv;
	const char *addr;
	const struct rm_transport *tp = rm_transport_for(cfg->listen, &addr);
	if (!tp) {
		rm_log(RM_LOG_ERROR, "unknown transport in %s", cfg->listen);
		return -EINVAL;
	}
	if (!tp->export_fd) {
		rm_log(RM_LOG_ERROR, "the %s transport cannot hand connections to workers", tp->scheme);
		return -ENOTSUP;
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
	pthread_t t;
	pthread_create(&t, NULL, reap_workers, NULL);
	pthread_detach(t);
	if (cfg->ready_file[0]) {
		FILE *f = fopen(cfg->ready_file, "w");
		if (f) {
			fprintf(f, "%s\n", bound);
			fclose(f);
		}
	}
	if (rm_pool_member_start(cfg, tp->scheme, bound))
		rm_log(RM_LOG_WARN, "serving without pool membership");
	int out_of_fds = 0;
	for (;;) {
		struct rm_conn *conn;
		err = tp->accept(l, &conn);
		if (err == -EMFILE || err == -ENFILE) {
			/* Nothing can be accepted until some descriptor is closed: pause, do not spin. */
			if (!out_of_fds)
				rm_log(RM_LOG_WARN, "accept: %s; new clients wait until others leave "
				       "(raise the descriptor limit, ulimit -n)", strerror(-err));
			out_of_fds = 1;
			usleep(ACCEPT_RETRY_US);
			continue;
		}
		if (err) {
			if (err == -EINTR || err == -ECONNABORTED)
				continue;
			rm_log(RM_LOG_ERROR, "accept: %s", strerror(-err));
			break;
		}
		if (out_of_fds)
			rm_log(RM_LOG_INFO, "accepting clients again");
		out_of_fds = 0;
		struct greeting *g = malloc(sizeof(*g));
		pthread_attr_t attr;
		pthread_attr_init(&attr);
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		if (!g || (*g = (struct greeting){conn}, pthread_create(&t, &attr, greet, g))) {
			rm_log(RM_LOG_ERROR, "cannot greet a new client: out of resources");
			rm_conn_close(conn);
			free(g);
		}
		pthread_attr_destroy(&attr);
	}
	tp->listener_close(l);
	return err;
}
