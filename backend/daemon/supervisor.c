/* The accepting process's workers (supervisor.h). A worker is reaped with workers_lock
 * held, so that whoever signals a pid under it signals a live worker or its zombie, never
 * a process that took its pid afterwards. */
#include "supervisor.h"

#include <errno.h>
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

#include "log.h"
#include "mps.h"
#include "registry.h"
#include "signals.h"

struct worker {
	pid_t pid;   /* 0: not running */
	int channel; /* our end of its SOCK_SEQPACKET channel */
};

static const char *worker_exe;
static char **worker_argv;
/* workers_per_tenant places per tenant (the anonymous tenant last), or only workers[0]
 * when shared; then room for the retired ones: workers that faulted (fault.h) and still
 * serve their clients until those leave. Every loop over workers covers both. */
#define CURRENT_WORKERS ((RM_CONFIG_MAX_TENANTS + 1) * RM_CONFIG_MAX_WORKERS_PER_TENANT)
#define RETIRED_WORKERS RM_MAX_RETIRED_WORKERS
static struct worker workers[CURRENT_WORKERS + RETIRED_WORKERS];
static pthread_mutex_t workers_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t workers_changed; /* a worker ended (monotonic clock) */
static int workers_reaping;           /* workers reaped whose end is not yet accounted for */
static int workers_stopping;          /* no worker starts, no client is handed over */

/* The tenant's place whose worker a new client goes to: the running worker with the fewest
 * clients, or a place with none running where every running one has clients, so that
 * clients spread over workers_per_tenant processes (one client's module load then waits
 * only for the kernels of its own worker's clients). Under workers_lock. */
static struct worker *worker_of(int tenant)
{
	const struct rm_daemon_config *cfg = rm_server_config();
	if (cfg->isolation == RM_ISOLATE_SHARED)
		return &workers[0];
	struct worker *places = &workers[rm_registry_tenant_slot(tenant) * RM_CONFIG_MAX_WORKERS_PER_TENANT];
	struct worker *least = NULL, *empty = NULL;
	int least_clients = 0;
	for (int k = 0; k < cfg->workers_per_tenant && cfg->workers_per_tenant > 1; k++) {
		if (!places[k].pid) {
			empty = empty ? empty : &places[k];
			continue;
		}
		int n = rm_registry_worker_clients(places[k].pid);
		if (!least || n < least_clients)
			least = &places[k], least_clients = n;
	}
	if (least && !(least_clients > 0 && empty))
		return least; /* an idle one, or the least busy where no place is free */
	return empty ? empty : &places[0];
}

/* Under workers_lock, after a hand-over: where every running worker of the tenant has
 * clients and a place is free, a spare is started now, so that the tenant's next client
 * does not wait for a worker to start. */
static void start_spare(int tenant, const char *tenant_name, const struct rm_tenant_config *t);

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
			       rm_server_config()->isolation == RM_ISOLATE_SHARED ? "all tenants" : tenant_name, error);
			workers[i] = *w;
			*w = (struct worker){0};
			return 0;
		}
	return -EAGAIN;
}

static int start_worker(struct worker *w, const char *tenant_name, const struct rm_tenant_config *t);

/* A worker whose channel is broken has died and is not yet reaped: it moves among the
 * retired, where the reaper still finds it (its channel closed, its clients' slots freed),
 * and a fresh worker takes its place. Under workers_lock. 0 or -errno. */
static int replace_dead(struct worker *w, const char *tenant_name, const struct rm_tenant_config *t, int why)
{
	for (size_t i = CURRENT_WORKERS; i < sizeof(workers) / sizeof(workers[0]); i++)
		if (!workers[i].pid) {
			rm_log(RM_LOG_WARN, "worker %d (%s) is gone (%s): a fresh worker serves the tenant's clients",
			       (int)w->pid, tenant_name, strerror(-why));
			kill(w->pid, SIGKILL);
			workers[i] = *w;
			*w = (struct worker){0};
			return start_worker(w, tenant_name, t);
		}
	return why;
}

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
	*copy = *rm_server_config();
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

extern char **environ;

#define MPS_ENV_MAX 8

/* The environment of a worker of tenant t: remorad's own, and under tenant_isolation = mps
 * the MPS client's settings (mps.h), whose control daemon is started first if need be.
 * Built before fork: the child only execs. 0 or -errno. */
static int worker_environment(const struct rm_tenant_config *t, char ***envp, char *buf, size_t buflen)
{
	*envp = environ;
	if (rm_server_config()->isolation != RM_ISOLATE_MPS)
		return 0;
	int err = rm_mps_ensure();
	if (err)
		return err;
	char *extra[MPS_ENV_MAX];
	int n = rm_mps_worker_env(t, rm_registry()->ngpus, extra, MPS_ENV_MAX, buf, buflen);
	if (n < 0)
		return -E2BIG;
	size_t own = 0;
	while (environ[own])
		own++;
	char **env = calloc(own + (size_t)n + 1, sizeof(*env));
	if (!env)
		return -ENOMEM;
	size_t k = 0;
	for (size_t i = 0; i < own; i++)
		if (strncmp(environ[i], "CUDA_MPS_", 9)) /* remorad's own MPS settings are not the tenant's */
			env[k++] = environ[i];
	memcpy(env + k, extra, (size_t)n * sizeof(*env));
	*envp = env;
	return 0;
}

/* Starts a worker of tenant t: this program again, with --worker-channel naming its end of
 * a new channel and --config-fd its configuration. */
static int start_worker(struct worker *w, const char *tenant_name, const struct rm_tenant_config *t)
{
	char env_buf[2048];
	char **envp;
	int err = worker_environment(t, &envp, env_buf, sizeof(env_buf));
	if (err)
		return err;
	int sv[2], cfd = config_for_worker();
	if (cfd < 0) {
		if (envp != environ)
			free(envp);
		return cfd;
	}
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv)) {
		err = -errno;
		close(cfd);
		if (envp != environ)
			free(envp);
		return err;
	}
	pid_t pid = fork();
	if (pid < 0) {
		err = -errno;
		close(sv[0]);
		close(sv[1]);
		close(cfd);
		if (envp != environ)
			free(envp);
		return err;
	}
	if (pid == 0) {
		/* The worker takes the stop signals' default action: none may reach our handler
		 * here, and this thread blocks them. */
		rm_signal_unroute(SIGTERM);
		rm_signal_unroute(SIGINT);
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
		execve(worker_exe, argv, envp);
		_exit(127);
	}
	if (envp != environ)
		free(envp);
	close(sv[1]);
	close(cfd);
	w->pid = pid;
	w->channel = sv[0];
	const struct rm_daemon_config *cfg = rm_server_config();
	rm_log(RM_LOG_INFO, "started worker %d for %s", (int)pid,
	       cfg->isolation == RM_ISOLATE_SHARED ? "all tenants" : tenant_name);
	if (cfg->isolation == RM_ISOLATE_MPS)
		rm_log(RM_LOG_INFO, "worker %d is a client of MPS: compute share %d%%, priority %s", (int)pid,
		       t && t->compute_share ? t->compute_share : 100, t && t->priority ? "low" : "normal");
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

/* Waits for workers to end; frees their clients' slots. */
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
		if (rm_mps_reaped(pid)) { /* the MPS control daemon, or the client asking it to quit */
			while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
				;
			continue;
		}
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

void rm_workers_stop(void)
{
	struct timespec deadline;
	clock_gettime(CLOCK_MONOTONIC, &deadline);
	const struct rm_daemon_config *cfg = rm_server_config();
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

int rm_workers_admit(struct rm_conn *conn, struct rm_handoff *h, const char *tenant_name)
{
	pthread_mutex_lock(&workers_lock);
	pid_t current = worker_of(h->tenant)->pid;
	pthread_mutex_unlock(&workers_lock);
	wait_for_departed(current);
	pthread_mutex_lock(&workers_lock);
	struct worker *w = worker_of(h->tenant);
	int err = workers_stopping ? -ESHUTDOWN : retire_if_faulted(w, tenant_name);
	const struct rm_daemon_config *cfg = rm_server_config();
	const struct rm_tenant_config *t =
		h->tenant >= 0 && h->tenant < cfg->ntenants ? &cfg->tenants[h->tenant] : &cfg->anonymous;
	if (!err && !w->pid)
		err = start_worker(w, tenant_name, t);
	for (int tries = 0; !err && tries < 2; tries++) {
		rm_registry_lock();
		rm_registry()->clients[h->slot].worker = w->pid;
		rm_registry_unlock();
		err = hand_over(w, conn, h);
		if ((err == -EPIPE || err == -ECONNRESET) && !tries)
			err = replace_dead(w, tenant_name, t, err);
		else
			break;
	}
	if (!err)
		start_spare(h->tenant, tenant_name, t);
	pthread_mutex_unlock(&workers_lock);
	return err;
}

static void start_spare(int tenant, const char *tenant_name, const struct rm_tenant_config *t)
{
	const struct rm_daemon_config *cfg = rm_server_config();
	if (cfg->isolation == RM_ISOLATE_SHARED || cfg->workers_per_tenant < 2 || workers_stopping)
		return;
	struct worker *places = &workers[rm_registry_tenant_slot(tenant) * RM_CONFIG_MAX_WORKERS_PER_TENANT];
	struct worker *empty = NULL;
	for (int k = 0; k < cfg->workers_per_tenant; k++)
		if (!places[k].pid)
			empty = empty ? empty : &places[k];
		else if (!rm_registry_worker_clients(places[k].pid))
			return; /* an idle one is there */
	int err = empty ? start_worker(empty, tenant_name, t) : 0;
	if (err)
		rm_log(RM_LOG_WARN, "a spare worker for %s could not be started: %s", tenant_name, strerror(-err));
}

int rm_workers_attach(pid_t pid, struct rm_conn *conn, struct rm_handoff *h)
{
	int err = -ESRCH;
	pthread_mutex_lock(&workers_lock);
	for (size_t i = 0; pid && i < sizeof(workers) / sizeof(workers[0]); i++)
		if (workers[i].pid == pid)
			err = workers_stopping ? -ESHUTDOWN : hand_over(&workers[i], conn, h);
	pthread_mutex_unlock(&workers_lock);
	return err;
}

int rm_workers_start(const char *self_exe, char **argv)
{
	worker_exe = self_exe;
	worker_argv = argv;
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&workers_changed, &ca);
	pthread_condattr_destroy(&ca);
	pthread_t t;
	int err = -pthread_create(&t, NULL, reap_workers, NULL);
	if (!err)
		pthread_detach(t);
	return err;
}
