/* The accepting process: one short-lived thread per new connection reads the
 * hello, checks the credential and admission, and passes the connection to the
 * worker process of the client's tenant, starting that worker when needed. A
 * worker that faulted is retired: a fresh one takes the tenant's new clients
 * (retire_if_faulted). A worker that dies takes only its own clients.
 * What a connection costs before its hello is bounded by handshakes.h.
 *
 * Stopping (SIGTERM, SIGINT): the handler only notes the signal and writes to a pipe.
 * The stopper thread, woken by it, stops new handshakes, makes the accept loop close
 * the listener, leaves the pool, sends SIGTERM to every worker, waits shutdown_grace
 * seconds for them and kills what is left; then rm_server_run returns 0. */
#include "server.h"

#include <cuda.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "admin.h"
#include "attach_keys.h"
#include "auth.h"
#include "handshakes.h"
#include "link.h"
#include "log.h"
#include "metrics.h"
#include "pool_member.h"
#include "privileges.h"
#include "registry.h"
#include "remora.pb-c.h"
#include "sd_notify.h"
#include "text.h"
#ifdef RM_HAVE_SHM
#include "shm.h"
#endif
#ifdef RM_HAVE_TLS
#include "tls.h"
#endif

#define ACCEPT_RETRY_US 100000 /* out of descriptors: how long accept waits before trying again */

struct worker {
	pid_t pid;   /* 0: not running */
	int channel; /* our end of its SOCK_SEQPACKET channel */
};

/* The configuration in force: the one remorad started with, then each that SIGHUP loaded
 * (reload below). Readers take it once per request with current_config(). */
static const struct rm_daemon_config *config;

static const struct rm_daemon_config *current_config(void)
{
	return __atomic_load_n(&config, __ATOMIC_ACQUIRE);
}

const struct rm_daemon_config *rm_server_config(void)
{
	return current_config();
}
static const char *worker_exe;
static char **worker_argv;
/* One worker per tenant (the anonymous tenant last), or only workers[0] when shared; then
 * room for the retired ones: workers that faulted (fault.h) and still serve their clients
 * until those leave. Every loop over workers covers both. */
#define CURRENT_WORKERS (RM_CONFIG_MAX_TENANTS + 1)
#define RETIRED_WORKERS RM_MAX_RETIRED_WORKERS
static struct worker workers[CURRENT_WORKERS + RETIRED_WORKERS];
static pthread_mutex_t workers_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t workers_changed; /* a worker ended (monotonic clock) */
static int workers_reaping;           /* workers reaped whose end is not yet accounted for */
static int workers_stopping;          /* no worker starts, no client is handed over */

/* Stopping: the signal that asked for it, the pipe that wakes the stopper thread, and
 * the thread in the accept loop, the only one that takes the stop signals. */
static volatile sig_atomic_t stop_signal;
static int stop_pipe[2] = {-1, -1};
static pthread_t acceptor;
static int acceptor_done; /* the accept loop has closed the listener (atomics) */
static int sigint_caught; /* SIGINT is ours (not ignored, as in a shell's background job) */

static struct worker *worker_of(int tenant)
{
	return current_config()->isolation == RM_ISOLATE_SHARED ? &workers[0] : &workers[rm_registry_tenant_slot(tenant)];
}

#define DRAIN_WAIT_MS 1000 /* how long a new client waits for departed clients' work */

/* Waits, at most DRAIN_WAIT_MS, while clients that left worker pid still have work running
 * in it, so that a fault of that work is known before a new client joins it (and the new
 * client goes to a fresh worker instead, retire_if_faulted): a program that exits leaves
 * no fault behind for the next one, as natively. */
static void wait_for_departed(pid_t pid)
{
	int fault, draining;
	for (int waited = 0; pid && waited < DRAIN_WAIT_MS; waited++) {
		rm_registry_worker_state(pid, &fault, &draining);
		if (fault || !draining)
			return;
		usleep(1000);
	}
}

/* A current worker that has faulted gives its place to a fresh one (started by the
 * caller): it moves among the retired, where it still takes its sessions' copy links and
 * channels. -EAGAIN where no retired place is free. Under workers_lock. */
static int retire_if_faulted(struct worker *w, const char *tenant_name)
{
	int error = 0, draining;
	if (w->pid)
		rm_registry_worker_state(w->pid, &error, &draining);
	if (!error)
		return 0;
	for (size_t i = CURRENT_WORKERS; i < sizeof(workers) / sizeof(workers[0]); i++)
		if (!workers[i].pid) {
			rm_log(RM_LOG_WARN, "worker %d (%s) faulted with error %d: a fresh worker serves the tenant's "
			       "new clients; the old one serves its clients until they leave", (int)w->pid,
			       current_config()->isolation == RM_ISOLATE_SHARED ? "all tenants" : tenant_name, error);
			workers[i] = *w;
			*w = (struct worker){0};
			return 0;
		}
	return -EAGAIN;
}

/* Starts a worker: this program again, with --worker-channel naming its end of a new channel. */
/* The configuration a worker runs with: the one in force, without any credential (the
 * accepting process checks them all), in a memfd that the worker reads (--config-fd) and
 * closes. A worker so never reads the configuration file, whose text holds every tenant's
 * credential (docs/security.md). The descriptor (close-on-exec), or -errno. */
static int config_for_worker(void)
{
	struct rm_daemon_config *copy = malloc(sizeof(*copy));
	int fd = memfd_create("remorad-config", MFD_CLOEXEC), err = 0;
	if (!copy || fd < 0) {
		err = copy ? -errno : -ENOMEM;
		goto out;
	}
	*copy = *current_config();
	rm_config_drop_credentials(copy);
	const char *p = (const char *)copy;
	for (size_t done = 0; done < sizeof(*copy);) {
		ssize_t n = write(fd, p + done, sizeof(*copy) - done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			err = n < 0 ? -errno : -EIO;
			goto out;
		}
		done += (size_t)n;
	}
out:
	if (copy)
		explicit_bzero(copy, sizeof(*copy));
	free(copy);
	if (err && fd >= 0)
		close(fd);
	return err ? err : fd;
}

/* Starts a worker: this program again, with --worker-channel naming its end of a new
 * channel and --config-fd its configuration. */
static int start_worker(struct worker *w, const char *tenant_name)
{
	int sv[2], cfd = config_for_worker();
	if (cfd < 0)
		return cfd;
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv)) {
		int err = -errno;
		close(cfd);
		return err;
	}
	pid_t pid = fork();
	if (pid < 0) {
		int err = -errno;
		close(sv[0]);
		close(sv[1]);
		close(cfd);
		return err;
	}
	if (pid == 0) {
		/* The worker takes the stop signals' default action: none may reach our handler
		 * here, and this thread blocks them. */
		struct sigaction dfl = {.sa_handler = SIG_DFL};
		sigaction(SIGTERM, &dfl, NULL);
		if (sigint_caught)
			sigaction(SIGINT, &dfl, NULL);
		sigset_t none;
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		int fd = dup(sv[1]), config_fd = dup(cfd); /* without CLOEXEC, so they survive exec */
		char arg[32], config_arg[32];
		snprintf(arg, sizeof(arg), "--worker-channel=%d", fd);
		snprintf(config_arg, sizeof(config_arg), "--config-fd=%d", config_fd);
		int n = 0;
		while (worker_argv[n])
			n++;
		char **argv = calloc(n + 3, sizeof(*argv));
		if (fd < 0 || config_fd < 0 || !argv)
			_exit(127);
		memcpy(argv, worker_argv, n * sizeof(*argv));
		argv[n] = arg;
		argv[n + 1] = config_arg;
		execv(worker_exe, argv);
		_exit(127);
	}
	close(sv[1]);
	close(cfd);
	w->pid = pid;
	w->channel = sv[0];
	rm_log(RM_LOG_INFO, "started worker %d for %s", (int)pid,
	       current_config()->isolation == RM_ISOLATE_SHARED ? "all tenants" : tenant_name);
	return 0;
}

/* Passes a connection's descriptor, its transport's state and what the worker needs to
 * know of the client. */
static int hand_over(struct worker *w, struct rm_conn *conn, struct rm_handoff *h)
{
	size_t state_len = 0;
	int fds[2] = {-1, -1}; /* the connection's descriptor and its transport's second one */
	fds[0] = rm_conn_export_fd(conn, h->transport_state, &state_len, &fds[1]);
	if (fds[0] < 0)
		return fds[0];
	h->transport_state_len = (uint32_t)state_len;
	int nfds = fds[1] >= 0 ? 2 : 1;
	union {
		char buf[CMSG_SPACE(2 * sizeof(int))];
		struct cmsghdr align;
	} cbuf;
	memset(&cbuf, 0, sizeof(cbuf));
	struct iovec iov = {.iov_base = (void *)h, .iov_len = sizeof(*h)};
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf.buf,
			   .msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int))};
	struct cmsghdr *c = CMSG_FIRSTHDR(&m);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
	memcpy(CMSG_DATA(c), fds, (size_t)nfds * sizeof(int));
	int err = sendmsg(w->channel, &m, MSG_NOSIGNAL) == (ssize_t)sizeof(*h) ? 0 : -errno;
	explicit_bzero(h->transport_state, sizeof(h->transport_state));
	return err;
}

/* Waits for workers to end; frees their clients' slots. A worker is reaped with
 * workers_lock held, so that whoever signals a pid under it signals a live worker or
 * its zombie, never a process that took its pid afterwards. */
static void *reap_workers(void *arg)
{
	(void)arg;
	for (;;) {
		int status;
		siginfo_t si = {0};
		if (waitid(P_ALL, 0, &si, WEXITED | WNOWAIT) < 0) {
			if (errno == ECHILD)
				sleep(1); /* no worker yet */
			continue;
		}
		pid_t pid = si.si_pid;
		pthread_mutex_lock(&workers_lock);
		for (size_t i = 0; i < sizeof(workers) / sizeof(workers[0]); i++)
			if (workers[i].pid == pid) {
				close(workers[i].channel);
				workers[i].pid = 0;
			}
		while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
			;
		int stopping = workers_stopping;
		workers_reaping++;
		pthread_mutex_unlock(&workers_lock);
		int n = rm_registry_reap_worker(pid);
		if (stopping)
			rm_log(RM_LOG_INFO, "worker %d stopped (%s %d) with %d client(s)", (int)pid,
			       WIFEXITED(status) ? "status" : "signal",
			       WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), n);
		else if (WIFEXITED(status) && WEXITSTATUS(status) == 75)
			rm_log(RM_LOG_INFO, "worker %d, retired after a GPU fault, ended once its clients had left "
			       "(%d left over)", (int)pid, n);
		else
			rm_log(RM_LOG_WARN, "worker %d ended (%s %d) with %d client(s)", (int)pid,
			       WIFEXITED(status) ? "status" : "signal",
			       WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), n);
		pthread_mutex_lock(&workers_lock);
		workers_reaping--;
		pthread_cond_broadcast(&workers_changed);
		pthread_mutex_unlock(&workers_lock);
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
	struct rm_handshake *handshake; /* until the hello (or a copy link's attach) is read */
	int ended;                      /* what rm_handshake_end said */
};

/* Ends the handshake's deadline: 0, or -ETIMEDOUT or -ESHUTDOWN when the connection has
 * been shut down (a timeout is logged by handshakes.c). */
static int settle(struct greeting *g)
{
	if (g->handshake) {
		g->ended = rm_handshake_end(g->handshake);
		g->handshake = NULL;
	}
	return g->ended;
}

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

/* A copy link's Attach: checked here against the key made at the session's admission
 * (attach_keys.h), then handed to the worker serving that session, which checks it
 * again and answers; anything else is refused here, with one answer for a wrong key
 * and an unknown session. */
static void attach_link(struct rm_link *link, const struct rm_frame *f, struct greeting *g)
{
	const char *peer = rm_conn_peer(g->conn);
	uint8_t msg[256];
	Remora__Attach *a = NULL;
	if (f->bulk_len || f->msg_len > sizeof(msg) || rm_link_read(link, msg, f->msg_len) ||
	    !(a = remora__attach__unpack(NULL, f->msg_len, msg)) || a->key.len != RM_ATTACH_KEY_LEN ||
	    link->rpos != link->rlen) {
		if (rm_handshakes_log_allows(RM_REFUSAL_HELLO))
			rm_log(RM_LOG_WARN, "client %s: malformed copy link attach; closing", peer);
		goto out;
	}
	if (settle(g))
		goto out;
	struct rm_handoff h = {.attach = 1, .channel = a->channel, .link_index = a->index, .session_id = a->session_id,
			       .slot = -1};
	memcpy(h.key, a->key.data, RM_ATTACH_KEY_LEN);
	pid_t pid = 0;
	int slot = -1;
	rm_registry_lock();
	for (int i = 0; i < RM_MAX_CLIENTS && slot < 0; i++) {
		const struct rm_client_record *c = &rm_registry()->clients[i];
		if (c->in_use && c->session_id == a->session_id)
			pid = c->worker, slot = i;
	}
	rm_registry_unlock();
	int key_ok = rm_attach_key_matches(slot, a->session_id, h.key); /* compared even for no slot */
	int err = key_ok || slot < 0 ? -ESRCH : -EACCES; /* until a worker takes it */
	pthread_mutex_lock(&workers_lock);
	for (size_t i = 0; key_ok && pid && i < sizeof(workers) / sizeof(workers[0]); i++)
		if (workers[i].pid == pid)
			err = workers_stopping ? -ESHUTDOWN : hand_over(&workers[i], g->conn, &h);
	pthread_mutex_unlock(&workers_lock);
	if (err) {
		const char *why = err == -ESRCH ? "no such session" : err == -EACCES ? "wrong key"
				: err == -ESHUTDOWN ? "the daemon is stopping" : strerror(-err);
		if (rm_handshakes_log_allows(RM_REFUSAL_HELLO))
			rm_log(RM_LOG_WARN, "client %s: copy link for session %llu refused (%s)", peer,
			       (unsigned long long)a->session_id, why);
		/* A wrong key of a live session is a guess; an unknown session is most often one
		 * that just ended (its links attach late, or its worker refused it), and slowing
		 * its address down would slow every client behind it (a NAT, one host). */
		if (err == -EACCES)
			rm_auth_failed(g->conn, "an attach with a wrong key");
		struct rm_frame rf = {.magic = RM_WIRE_MAGIC, .op = RM_OP_ATTACH, .seq = f->seq, .flags = RM_F_REPLY,
				      .result = CUDA_ERROR_NOT_PERMITTED};
		rm_link_send(link, &rf, NULL, NULL, 0);
	}
out:
	if (a)
		remora__attach__free_unpacked(a, NULL);
}

/* remora status: who asks decides what it sees (admin.h); a request without an
 * acceptable credential is refused. */
static void answer_status(struct rm_link *link, const struct rm_frame *f, struct greeting *g)
{
	const struct rm_daemon_config *cfg = current_config(); /* one configuration for the whole request */
	int view = rm_admin_status_view(link, f, cfg);
	if (settle(g))
		return;
	if (view == RM_VIEW_MALFORMED && rm_handshakes_log_allows(RM_REFUSAL_HELLO))
		rm_log(RM_LOG_WARN, "client %s: malformed status request; closing", rm_conn_peer(g->conn));
	else if (view == RM_VIEW_NONE)
		rm_admin_refuse_status(link, f);
	else
		rm_admin_answer_status(link, f, cfg, view);
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
	/* Reads end at the handshake's deadline (handshakes.h); what this thread writes (a
	 * refusal, a status) ends within as long, also once the handshake is settled: a peer
	 * that reads nothing (over unix:, a reply ring that looks full) holds it no longer. */
	int err = rm_conn_set_liveness(g->conn, 0, current_config()->hello_timeout_s * 1000);
	if (!err)
		err = rm_link_read_frame(&link, &f);
	if (!err && f.op == RM_OP_STATUS) {
		answer_status(&link, &f, g);
		goto out;
	}
	if (!err && f.op == RM_OP_ATTACH) {
		attach_link(&link, &f, g);
		goto out;
	}
	if (err || f.op != RM_OP_HELLO || f.bulk_len) {
		if (!settle(g) && rm_handshakes_log_allows(RM_REFUSAL_HELLO))
			rm_log(RM_LOG_WARN, "client %s: no valid hello (%s); closing", peer,
			       err ? rm_transport_why(err) : "unexpected frame");
		goto out;
	}
	msg = malloc(f.msg_len ? f.msg_len : 1);
	if (!msg || rm_link_read(&link, msg, f.msg_len))
		goto out;
	hello = remora__hello__unpack(NULL, f.msg_len, msg);
	if (!hello) {
		settle(g);
		if (rm_handshakes_log_allows(RM_REFUSAL_HELLO))
			rm_log(RM_LOG_WARN, "client %s: malformed hello; closing", peer);
		goto out;
	}
	char cred_why[200] = "";
	/* Checked while the handshake's bounds still hold: a sender slowed down for failed
	 * credentials waits within them. */
	const struct rm_daemon_config *cfg = current_config(); /* one configuration for the whole hello */
	const struct rm_tenant_config *t = rm_auth_tenant(cfg, g->conn, hello->credential.data,
							  hello->credential.len, cred_why, sizeof(cred_why), NULL);
	if (settle(g))
		goto out;
	char why[200] = "";
	CUresult r = CUDA_SUCCESS;
	struct rm_handoff h = {.tenant = -1, .hello_seq = (uint32_t)f.seq, .pid = hello->pid,
			       .heartbeat_ms = hello->heartbeat_ms};
	rm_text_escape(h.name, sizeof(h.name), hello->client_name ? hello->client_name : "?");
	uint64_t mask = 0;
	if (hello->protocol_version != RM_PROTOCOL_VERSION) {
		snprintf(why, sizeof(why), "protocol version mismatch (client %u, daemon %u)", hello->protocol_version,
			 RM_PROTOCOL_VERSION);
		r = CUDA_ERROR_NOT_SUPPORTED;
	} else if (!t) {
		snprintf(why, sizeof(why), "%s", cred_why);
		r = CUDA_ERROR_NOT_PERMITTED;
	} else if (link.rpos != link.rlen) {
		snprintf(why, sizeof(why), "requests sent before the hello was answered");
		r = CUDA_ERROR_INVALID_VALUE;
	} else if (visible_devices(hello, &h, &mask, why, sizeof(why))) {
		r = CUDA_ERROR_INVALID_DEVICE;
	} else {
		h.tenant = t == &cfg->anonymous ? -1 : (int)(t - cfg->tenants);
		snprintf(h.tenant_name, sizeof(h.tenant_name), "%s", t->name);
		h.slot = rm_registry_admit(h.tenant, mask, cfg->max_clients_per_gpu, why, sizeof(why));
		if (h.slot < 0) {
			r = CUDA_ERROR_DEVICE_UNAVAILABLE;
		} else if ((err = rm_attach_key_issue(h.slot, rm_registry()->clients[h.slot].session_id, h.key))) {
			snprintf(why, sizeof(why), "no attach key could be made: %s", strerror(-err));
			r = CUDA_ERROR_OPERATING_SYSTEM;
			rm_registry_leave(h.slot);
		}
	}
	if (r != CUDA_SUCCESS) {
		if (rm_handshakes_log_allows(RM_REFUSAL_HELLO))
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
	pid_t current = worker_of(h.tenant)->pid;
	pthread_mutex_unlock(&workers_lock);
	wait_for_departed(current);
	pthread_mutex_lock(&workers_lock);
	struct worker *w = worker_of(h.tenant);
	err = workers_stopping ? -ESHUTDOWN : retire_if_faulted(w, t->name);
	if (!err && !w->pid)
		err = start_worker(w, t->name);
	if (!err) {
		rm_registry_lock();
		c->worker = w->pid;
		rm_registry_unlock();
		err = hand_over(w, g->conn, &h);
	}
	pthread_mutex_unlock(&workers_lock);
	if (err == -ESHUTDOWN) {
		rm_log(RM_LOG_INFO, "client %s (%s, pid %u) refused: the daemon is stopping", peer, h.name, h.pid);
		refuse(&link, f.seq, CUDA_ERROR_DEVICE_UNAVAILABLE, "the daemon is stopping");
		rm_registry_leave(h.slot);
	} else if (err == -EAGAIN) {
		rm_log(RM_LOG_ERROR, "client %s (%s, pid %u) refused: %d faulted workers still serve their clients",
		       peer, h.name, h.pid, RETIRED_WORKERS);
		refuse(&link, f.seq, CUDA_ERROR_DEVICE_UNAVAILABLE,
		       "the tenant's worker faulted and too many faulted workers still serve their clients");
		rm_registry_leave(h.slot);
	} else if (err) {
		rm_log(RM_LOG_ERROR, "client %s: cannot hand it to a worker: %s", peer, strerror(-err));
		refuse(&link, f.seq, CUDA_ERROR_OPERATING_SYSTEM, "the daemon could not start serving it");
		rm_registry_leave(h.slot);
	}
out:
	settle(g);
	if (hello) {
		if (hello->credential.len)
			explicit_bzero(hello->credential.data, hello->credential.len);
		remora__hello__free_unpacked(hello, NULL);
	}
	if (msg && f.msg_len)
		explicit_bzero(msg, f.msg_len); /* the credential, as sent */
	free(msg);
	rm_link_close(&link); /* our copy only: the worker has its own descriptor */
	free(g);
	return NULL;
}

static void on_stop_signal(int sig)
{
	int saved = errno;
	stop_signal = sig;
	ssize_t n = write(stop_pipe[1], "", 1); /* full: the stopper has a wake-up pending already */
	(void)n;
	errno = saved;
}

/* Sends sig to every worker not yet reaped; returns how many. Under workers_lock. */
static int signal_workers(int sig)
{
	int n = 0;
	for (size_t i = 0; i < sizeof(workers) / sizeof(workers[0]); i++)
		if (workers[i].pid > 0) {
			kill(workers[i].pid, sig);
			n++;
		}
	return n;
}

/* Waits, with workers_lock held, until every worker is reaped, its clients' slots freed
 * and its end logged, or deadline (monotonic) has passed; returns how many are left. */
static int wait_for_workers(const struct timespec *deadline)
{
	for (int timed_out = 0;;) {
		int n = 0;
		for (size_t i = 0; i < sizeof(workers) / sizeof(workers[0]); i++)
			n += workers[i].pid > 0;
		if ((!n && !workers_reaping) || timed_out)
			return n;
		timed_out = pthread_cond_timedwait(&workers_changed, &workers_lock, deadline) == ETIMEDOUT;
	}
}

/* Asks every worker to end, gives them shutdown_grace seconds, then kills the rest. */
static void stop_workers(void)
{
	struct timespec deadline;
	clock_gettime(CLOCK_MONOTONIC, &deadline);
	const struct rm_daemon_config *cfg = current_config();
	deadline.tv_sec += cfg->shutdown_grace_s;
	pthread_mutex_lock(&workers_lock);
	workers_stopping = 1;
	int n = signal_workers(SIGTERM);
	if (n)
		rm_log(RM_LOG_INFO, "asked %d worker(s) to end; they have %d s", n, cfg->shutdown_grace_s);
	n = wait_for_workers(&deadline);
	if (n) {
		rm_log(RM_LOG_WARN, "%d worker(s) still running after shutdown_grace (%d s); killing them", n,
		       cfg->shutdown_grace_s);
		signal_workers(SIGKILL);
		clock_gettime(CLOCK_MONOTONIC, &deadline);
		deadline.tv_sec += 5; /* SIGKILL is not refused; the kernel may take a moment */
		if ((n = wait_for_workers(&deadline)))
			rm_log(RM_LOG_ERROR, "%d worker(s) still not gone after SIGKILL", n);
	}
	pthread_mutex_unlock(&workers_lock);
}

static void *stopper(void *arg)
{
	(void)arg;
	char c;
	while (read(stop_pipe[0], &c, 1) < 0 && errno == EINTR)
		;
	int sig = stop_signal;
	rm_log(RM_LOG_INFO, "%s: stopping: no new clients; workers get %d s (shutdown_grace) to end",
	       sig == SIGINT ? "SIGINT" : "SIGTERM", current_config()->shutdown_grace_s);
	rm_sd_notify("STOPPING=1");
	rm_handshakes_stop();
	/* The signal may have come between the accept loop's check and its accept(): interrupt
	 * the acceptor until it has seen it. */
	while (!__atomic_load_n(&acceptor_done, __ATOMIC_ACQUIRE)) {
		pthread_kill(acceptor, sig);
		usleep(10000);
	}
	rm_pool_member_stop();
	stop_workers();
	return NULL;
}

/* The handler of SIGTERM and SIGINT, the pipe it writes to and the stopper thread. The
 * calling thread (the acceptor) goes on with the stop signals blocked, as do the threads
 * it starts from now on; it unblocks them for itself once it accepts. */
static int prepare_stopping(sigset_t *stop_signals, pthread_t *t)
{
	sigemptyset(stop_signals);
	sigaddset(stop_signals, SIGTERM);
	sigaddset(stop_signals, SIGINT);
	pthread_sigmask(SIG_BLOCK, stop_signals, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&workers_changed, &ca);
	pthread_condattr_destroy(&ca);
	if (pipe2(stop_pipe, O_CLOEXEC) || fcntl(stop_pipe[1], F_SETFL, O_NONBLOCK))
		return -errno;
	acceptor = pthread_self();
	int err = -pthread_create(t, NULL, stopper, NULL);
	if (err)
		return err;
	struct sigaction sa = {.sa_handler = on_stop_signal}; /* no SA_RESTART: accept() must return */
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	struct sigaction was;
	sigint_caught = !sigaction(SIGINT, NULL, &was) && was.sa_handler != SIG_IGN;
	if (sigint_caught)
		sigaction(SIGINT, &sa, NULL);
	return 0;
}

/* ---- reloading: SIGHUP ----
 * The handler writes to a pipe; a thread reads the configuration again (the files and
 * flags remorad started with) and, if it is whole, puts in force what can change while
 * clients are served: tenants (added, their tokens and quotas changed, removed ones
 * retired: they admit no one, their clients go on), the default quotas, allow_anonymous,
 * the admin credential, max_clients_per_gpu, the handshake bounds and shutdown_grace.
 * The rest (where it listens, the driver, TLS files, the pool...) needs a restart and is
 * logged as such. Quotas reach the workers through the registry: new allocations of
 * every client are checked against them. A configuration that does not read or check is
 * refused whole, and the running one stays.
 * Readers take the configuration once per request (current_config); a replaced one is
 * kept for the next RETIRED_KEPT reloads, at least RELOAD_GAP_S apart, so that no reader
 * still holds it when its memory is used again. */
#define RETIRED_KEPT 4
#define RELOAD_GAP_S 1

static int (*reread_config)(struct rm_daemon_config *out);
static struct rm_daemon_config *config_slots[RETIRED_KEPT];
static int hup_pipe[2] = {-1, -1};

static void on_hup(int sig)
{
	(void)sig;
	char c = 1;
	ssize_t unused = write(hup_pipe[1], &c, 1);
	(void)unused;
}

/* Each tenant's quotas, defaults resolved, into the registry where charges read them. */
static void publish_limits(const struct rm_daemon_config *c)
{
	rm_registry_set_limits(-1, c->anonymous.memory_limit ? c->anonymous.memory_limit : c->tenant_memory_limit,
			       c->anonymous.client_memory_limit ? c->anonymous.client_memory_limit
								: c->client_memory_limit);
	for (int i = 0; i < c->ntenants; i++) {
		const struct rm_tenant_config *t = &c->tenants[i];
		rm_registry_set_limits(i, t->memory_limit ? t->memory_limit : c->tenant_memory_limit,
				       t->client_memory_limit ? t->client_memory_limit : c->client_memory_limit);
	}
}

/* The tenants of fresh, in the running configuration's order (a tenant keeps its index,
 * which names its registry figures and its worker); new ones after them. -1: too many. */
static int keep_tenant_order(const struct rm_daemon_config *old, const struct rm_daemon_config *fresh,
			     struct rm_daemon_config *out, int *added, int *retired)
{
	int n = old->ntenants;
	*added = *retired = 0;
	for (int i = 0; i < old->ntenants; i++) {
		int j = 0;
		while (j < fresh->ntenants && strcmp(fresh->tenants[j].name, old->tenants[i].name))
			j++;
		if (j < fresh->ntenants) {
			out->tenants[i] = fresh->tenants[j];
		} else {
			out->tenants[i] = old->tenants[i];
			*retired += !out->tenants[i].retired;
			out->tenants[i].retired = 1;
		}
	}
	for (int j = 0; j < fresh->ntenants; j++) {
		int i = 0;
		while (i < old->ntenants && strcmp(fresh->tenants[j].name, old->tenants[i].name))
			i++;
		if (i < old->ntenants)
			continue;
		if (n == RM_CONFIG_MAX_TENANTS)
			return -1;
		out->tenants[n++] = fresh->tenants[j];
		(*added)++;
	}
	out->ntenants = n;
	return 0;
}

/* What a reload cannot change, named if the file changed it. */
static void note_restart_only(const struct rm_daemon_config *o, const struct rm_daemon_config *n)
{
	char which[512] = "";
#define DIFFERS(field) (memcmp(&o->field, &n->field, sizeof(o->field)) != 0)
#define NOTE(field, name) \
	if (DIFFERS(field)) \
		snprintf(which + strlen(which), sizeof(which) - strlen(which), "%s%s", which[0] ? ", " : "", name)
	NOTE(listen, "listen");
	NOTE(driver, "driver");
	NOTE(isolation, "isolation");
	NOTE(module_loading, "module_loading");
	NOTE(hardware_queues, "hardware_queues");
	NOTE(queue_sharing_wait, "queue_sharing");
	NOTE(gpu_sync, "gpu_sync");
	NOTE(gpu_wait_spin_us, "gpu_wait_spin_us");
	NOTE(tls_cert, "tls_cert");
	NOTE(tls_key, "tls_key");
	NOTE(tls_client_ca, "tls_client_ca");
	NOTE(user, "user");
	NOTE(worker_host_memory_limit, "worker_host_memory_limit");
	NOTE(client_host_memory_limit, "client_host_memory_limit");
	NOTE(shm_ring_max, "shm_ring_max");
	NOTE(pool_endpoints, "pool");
	NOTE(advertise, "advertise");
	NOTE(host_name, "host_name");
	NOTE(lease_ttl_s, "lease_ttl");
	NOTE(peer_timeout_s, "peer_timeout");
	NOTE(max_channels, "max_channels");
#undef NOTE
#undef DIFFERS
	if (which[0])
		rm_log(RM_LOG_WARN, "SIGHUP: %s changed: they take effect when remorad restarts", which);
}

static void reload(int generation)
{
	struct rm_daemon_config *fresh = calloc(1, sizeof(*fresh));
	struct rm_daemon_config *next = config_slots[generation % RETIRED_KEPT];
	if (!next)
		next = config_slots[generation % RETIRED_KEPT] = malloc(sizeof(*next));
	if (!fresh || !next) {
		rm_log(RM_LOG_ERROR, "SIGHUP: out of memory; the running configuration stays");
		free(fresh);
		return;
	}
	if (reread_config(fresh)) {
		rm_log(RM_LOG_ERROR, "SIGHUP: the configuration was refused (above); the running one stays");
		free(fresh);
		return;
	}
	const struct rm_daemon_config *old = current_config();
	note_restart_only(old, fresh);
	/* What cannot change stays as it runs; the rest is the file's. */
	*next = *old;
	int added, retired;
	if (keep_tenant_order(old, fresh, next, &added, &retired)) {
		rm_log(RM_LOG_ERROR, "SIGHUP: more than %d tenants since remorad started; the running configuration stays",
		       RM_CONFIG_MAX_TENANTS);
		free(fresh);
		return;
	}
	next->anonymous = fresh->anonymous;
	next->allow_anonymous = fresh->allow_anonymous;
	memcpy(next->admin_token, fresh->admin_token, sizeof(next->admin_token));
	memcpy(next->admin_cn, fresh->admin_cn, sizeof(next->admin_cn));
	next->max_clients_per_gpu = fresh->max_clients_per_gpu;
	next->client_memory_limit = fresh->client_memory_limit;
	next->tenant_memory_limit = fresh->tenant_memory_limit;
	next->hello_timeout_s = fresh->hello_timeout_s;
	next->max_pending_hellos = fresh->max_pending_hellos;
	next->max_pending_hellos_per_address = fresh->max_pending_hellos_per_address;
	next->shutdown_grace_s = fresh->shutdown_grace_s;
	explicit_bzero(fresh, sizeof(*fresh));
	free(fresh);
	__atomic_store_n(&config, next, __ATOMIC_RELEASE);
	publish_limits(next);
	rm_handshakes_configure(next);
	rm_auth_warn_credentials(next);
	rm_log(RM_LOG_INFO, "SIGHUP: configuration reloaded: %d tenant(s), %d new, %d retired; quotas apply to "
	       "allocations from now on, every client stays connected", next->ntenants, added, retired);
}

static void *reloader(void *arg)
{
	(void)arg;
	int generation = 0;
	for (;;) {
		char c;
		ssize_t n = read(hup_pipe[0], &c, 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return NULL;
		reload(generation++);
		sleep(RELOAD_GAP_S); /* and the signals that came meanwhile make one more reload */
	}
}

static int prepare_reloading(int (*reread)(struct rm_daemon_config *out))
{
	reread_config = reread;
	pthread_t t;
	if (!reread || pipe2(hup_pipe, O_CLOEXEC) || fcntl(hup_pipe[1], F_SETFL, O_NONBLOCK) ||
	    pthread_create(&t, NULL, reloader, NULL)) {
		signal(SIGHUP, SIG_IGN);
		return -1;
	}
	pthread_detach(t);
	struct sigaction sa = {.sa_handler = on_hup, .sa_flags = SA_RESTART};
	sigemptyset(&sa.sa_mask);
	sigaction(SIGHUP, &sa, NULL);
	return 0;
}

/* `user` (privileges.h): once every listener is bound, every key read and the ready file
 * written, the accepting process becomes the user, a Unix socket given to it first. The
 * configuration is then read again as that user, as each worker (which runs this program
 * again) and each SIGHUP will read it: a file the user cannot read stops remorad here,
 * not at the first client. 0, or -1 after a line saying why. */
static int become_user(const struct rm_daemon_config *cfg, const char *scheme, const char *addr)
{
	struct rm_identity id;
	char why[300];
	if (!cfg->user[0])
		return 0;
	if (rm_identity_lookup(cfg->user, &id, why, sizeof(why))) {
		rm_log(RM_LOG_ERROR, "cannot run as %s: %s", cfg->user, why);
		return -1;
	}
	if (!strcmp(scheme, "unix") && addr[0] != '@' && chown(addr, id.uid, id.gid)) {
		rm_log(RM_LOG_ERROR, "cannot run as %s: chown %s: %s", cfg->user, addr, strerror(errno));
		return -1;
	}
	if (rm_identity_assume(&id, why, sizeof(why))) {
		rm_log(RM_LOG_ERROR, "cannot run as %s: %s; not serving", cfg->user, why);
		return -1;
	}
	struct rm_daemon_config *again = calloc(1, sizeof(*again));
	int unreadable = !again || (reread_config && reread_config(again));
	if (again)
		explicit_bzero(again, sizeof(*again));
	free(again);
	if (unreadable) {
		rm_log(RM_LOG_ERROR, "running as %s, the configuration cannot be read again (above): workers and "
		       "SIGHUP read it as that user; make it readable by %s (docs/security.md)", id.name, id.name);
		return -1;
	}
	int ngroups = getgroups(0, NULL);
	rm_log(RM_LOG_INFO, "running as user %s (uid %u, gid %u, %d group(s)); root given up", id.name,
	       (unsigned)id.uid, (unsigned)id.gid, ngroups);
	return 0;
}

int rm_server_run(const struct rm_daemon_config *cfg, const char *self_exe, char **argv,
		  int (*reread)(struct rm_daemon_config *out))
{
	config = cfg;
	publish_limits(cfg);
	if (prepare_reloading(reread))
		rm_log(RM_LOG_WARN, "SIGHUP will not reload the configuration (no thread for it)");
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
#ifdef RM_HAVE_SHM
	rm_shm_set_ring_max(cfg->shm_ring_max);
#endif
#ifdef RM_HAVE_TLS
	if (!strcmp(tp->scheme, "tls")) {
		char why[400];
		if (rm_tls_server_configure(cfg->tls_cert, cfg->tls_key, cfg->tls_client_ca[0] ? cfg->tls_client_ca : NULL,
					    why, sizeof(why))) {
			rm_log(RM_LOG_ERROR, "TLS: %s", why);
			return -EINVAL;
		}
	}
#endif
	struct rm_listener *l;
	int err = tp->listen(addr, &l);
	if (err) {
		rm_log(RM_LOG_ERROR, "cannot listen on %s: %s", cfg->listen, rm_transport_why(err));
		return err;
	}
	char bound[96];
	tp->listener_addr(l, bound, sizeof(bound));
	rm_log(RM_LOG_INFO, "listening on %s%s%s", bound, !strcmp(tp->scheme, "tls") ? " (TLS 1.3" : "",
	       !strcmp(tp->scheme, "tls") ? (cfg->tls_client_ca[0] ? ", client certificates required)" : ")") : "");
	rm_auth_warn_exposure(cfg, bound);
	rm_auth_warn_credentials(cfg);
	sigset_t stop_signals;
	pthread_t t, stopping;
	if ((err = prepare_stopping(&stop_signals, &stopping)) || (err = rm_handshakes_start(cfg))) {
		rm_log(RM_LOG_ERROR, "cannot start: %s", strerror(-err));
		tp->listener_close(l);
		return err;
	}
	if ((err = rm_metrics_start(cfg))) {
		tp->listener_close(l);
		return err;
	}
	pthread_create(&t, NULL, reap_workers, NULL);
	pthread_detach(t);
	if (cfg->ready_file[0]) {
		FILE *f = fopen(cfg->ready_file, "w");
		if (f) {
			fprintf(f, "%s\n", bound);
			fclose(f);
		}
	}
	if (become_user(cfg, tp->scheme, addr)) {
		tp->listener_close(l);
		return -EPERM;
	}
	if (rm_pool_member_start(cfg, tp->scheme, bound))
		rm_log(RM_LOG_WARN, "serving without pool membership");
	char ready[160];
	snprintf(ready, sizeof(ready), "READY=1\nSTATUS=listening on %s", bound);
	rm_sd_notify(ready);
	int out_of_fds = 0;
	pthread_sigmask(SIG_UNBLOCK, &stop_signals, NULL);
	while (!stop_signal) {
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
		struct rm_handshake *hs = rm_handshake_begin(conn);
		if (!hs)
			continue; /* refused by a bound, and closed */
		struct greeting *g = malloc(sizeof(*g));
		pthread_attr_t attr;
		pthread_attr_init(&attr);
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		sigset_t mine;
		pthread_sigmask(SIG_BLOCK, &stop_signals, &mine); /* only this thread takes them */
		if (!g || (*g = (struct greeting){conn, hs, 0}, pthread_create(&t, &attr, greet, g))) {
			rm_log(RM_LOG_ERROR, "cannot greet a new client: out of resources");
			rm_handshake_end(hs);
			rm_conn_close(conn);
			free(g);
		}
		pthread_sigmask(SIG_SETMASK, &mine, NULL);
		pthread_attr_destroy(&attr);
	}
	tp->listener_close(l);
	if (!stop_signal)
		return err;
	__atomic_store_n(&acceptor_done, 1, __ATOMIC_RELEASE);
	pthread_join(stopping, NULL);
	rm_log(RM_LOG_INFO, "stopped");
	return 0;
}
