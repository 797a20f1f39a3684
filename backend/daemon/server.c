/* The accepting process's run: it listens, then accepts connections, each greeted on a
 * short-lived thread of its own (admission.h) and handed to the worker process of the
 * client's tenant (supervisor.h); SIGHUP reloads the configuration (reload.h). What a
 * connection costs before its hello is bounded by handshakes.h.
 *
 * Stopping (SIGTERM, SIGINT): the handler only notes the signal and wakes the stopper
 * thread (signals.h), which stops new handshakes, makes the accept loop close the
 * listener, leaves the pool, sends SIGTERM to every worker, waits shutdown_grace seconds
 * for them and kills what is left; then rm_server_run returns 0. */
#include "server.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "admission.h"
#include "auth.h"
#include "handshakes.h"
#include "log.h"
#include "metrics.h"
#include "mps.h"
#include "pool_member.h"
#include "privileges.h"
#include "reload.h"
#include "sd_notify.h"
#include "signals.h"
#include "supervisor.h"

#define ACCEPT_RETRY_US 100000 /* out of descriptors: how long accept waits before trying again */

/* Stopping: the signal that asked for it and wakes the stopper thread, and the thread in
 * the accept loop, the only one that takes the stop signals. */
static struct rm_signal_pipe stop;
static pthread_t acceptor;
static int acceptor_done; /* the accept loop has closed the listener (atomics) */

static void *stopper(void *arg)
{
	(void)arg;
	int sig = rm_signal_wait(&stop);
	if (!sig)
		return NULL;
	rm_log(RM_LOG_INFO, "%s: stopping: no new clients; workers get %d s (shutdown_grace) to end",
	       sig == SIGINT ? "SIGINT" : "SIGTERM", rm_server_config()->shutdown_grace_s);
	rm_sd_notify("STOPPING=1");
	rm_handshakes_stop();
	/* The signal may have come between the accept loop's check and its accept(): interrupt
	 * the acceptor until it has seen it. */
	while (!__atomic_load_n(&acceptor_done, __ATOMIC_ACQUIRE)) {
		pthread_kill(acceptor, sig);
		usleep(10000);
	}
	rm_pool_member_stop();
	rm_workers_stop();
	rm_mps_stop(5);
	return NULL;
}

/* SIGTERM and SIGINT (unless ignored) routed to the stopper thread. The calling thread
 * (the acceptor) goes on with the stop signals blocked, as do the threads it starts from
 * now on; it unblocks them for itself once it accepts. */
static int prepare_stopping(sigset_t *stop_signals, pthread_t *t)
{
	sigemptyset(stop_signals);
	sigaddset(stop_signals, SIGTERM);
	sigaddset(stop_signals, SIGINT);
	pthread_sigmask(SIG_BLOCK, stop_signals, NULL);
	int err = rm_signal_pipe_open(&stop);
	if (err)
		return err;
	acceptor = pthread_self();
	if ((err = -pthread_create(t, NULL, stopper, NULL)))
		return err;
	rm_signal_route(SIGTERM, &stop, 0); /* no RM_SIGNAL_RESTART: accept() must return */
	rm_signal_route(SIGINT, &stop, RM_SIGNAL_UNLESS_IGNORED);
	return 0;
}

/* `user` (privileges.h): once every listener is bound, every key read and the ready file
 * written, the accepting process becomes the user, a Unix socket given to it first. The
 * configuration is then read again as that user, as each worker (which runs this program
 * again) and each SIGHUP will read it: a file the user cannot read stops remorad here,
 * not at the first client. 0, or -1 after a line saying why. */
static int become_user(const struct rm_daemon_config *cfg, const struct rm_transport *tp, const char *addr)
{
	struct rm_identity id;
	char why[300];
	if (!cfg->user[0])
		return 0;
	if (rm_identity_lookup(cfg->user, &id, why, sizeof(why))) {
		rm_log(RM_LOG_ERROR, "cannot run as %s: %s", cfg->user, why);
		return -1;
	}
	if ((tp->flags & RM_TRANSPORT_PATH_ADDRESS) && addr[0] != '@' && chown(addr, id.uid, id.gid)) {
		rm_log(RM_LOG_ERROR, "cannot run as %s: chown %s: %s", cfg->user, addr, strerror(errno));
		return -1;
	}
	if (rm_identity_assume(&id, why, sizeof(why))) {
		rm_log(RM_LOG_ERROR, "cannot run as %s: %s; not serving", cfg->user, why);
		return -1;
	}
	struct rm_daemon_config *again = calloc(1, sizeof(*again));
	int unreadable = !again || (rm_reload_reread(again));
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
	rm_reload_start(cfg, reread);
	int err = rm_workers_start(self_exe, argv);
	if (err) {
		rm_log(RM_LOG_ERROR, "cannot start: %s", strerror(-err));
		return err;
	}
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
	rm_transport_limit_peer_buffers(cfg->shm_ring_max);
	if (tp->configure_listener) {
		char why[400];
		if (tp->configure_listener(cfg->tls_cert, cfg->tls_key, cfg->tls_client_ca[0] ? cfg->tls_client_ca : NULL,
					   why, sizeof(why))) {
			rm_log(RM_LOG_ERROR, "TLS: %s", why);
			return -EINVAL;
		}
		if (why[0])
			rm_log(RM_LOG_WARN, "TLS: %s", why);
	}
	struct rm_listener *l;
	err = tp->listen(addr, &l);
	if (err) {
		rm_log(RM_LOG_ERROR, "cannot listen on %s: %s", cfg->listen, rm_transport_why(err));
		return err;
	}
	char bound[96];
	tp->listener_addr(l, bound, sizeof(bound));
	rm_log(RM_LOG_INFO, "listening on %s%s", bound, rm_transport_describe(tp, l));
	rm_auth_warn_exposure(cfg, bound);
	rm_auth_warn_credentials(cfg);
	sigset_t stop_signals;
	pthread_t stopping;
	if ((err = prepare_stopping(&stop_signals, &stopping)) || (err = rm_handshakes_start(cfg))) {
		rm_log(RM_LOG_ERROR, "cannot start: %s", strerror(-err));
		tp->listener_close(l);
		return err;
	}
	if ((err = rm_metrics_start(cfg))) {
		tp->listener_close(l);
		return err;
	}
	if (cfg->ready_file[0]) {
		FILE *f = fopen(cfg->ready_file, "w");
		if (f) {
			fprintf(f, "%s\n", bound);
			fclose(f);
		}
	}
	if (become_user(cfg, tp, addr)) {
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
	while (!stop.caught) {
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
		sigset_t mine;
		pthread_sigmask(SIG_BLOCK, &stop_signals, &mine); /* only this thread takes them */
		if (rm_admission_begin(conn, hs)) {
			rm_log(RM_LOG_ERROR, "cannot greet a new client: out of resources");
			rm_handshake_end(hs);
			rm_conn_close(conn);
		}
		pthread_sigmask(SIG_SETMASK, &mine, NULL);
	}
	tp->listener_close(l);
	if (!stop.caught)
		return err;
	__atomic_store_n(&acceptor_done, 1, __ATOMIC_RELEASE);
	pthread_join(stopping, NULL);
	rm_log(RM_LOG_INFO, "stopped");
	return 0;
}
