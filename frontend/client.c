/* The client object's lifecycle (client_object.h): library set-up, the open at the first
 * call, the reset tests use, and the close at exit. */
#include "client_object.h"

#include <stdlib.h>
#include <unistd.h>

#include "environment.h"
#include "placement.h"
#include "query_cache.h"
#include "stats.h"

#define MAIN_CONN_INIT                                                                                \
	{                                                                                             \
		.lock = PTHREAD_MUTEX_INITIALIZER, .flusher_lock = PTHREAD_MUTEX_INITIALIZER,         \
		.flusher_cond = PTHREAD_COND_INITIALIZER,                                             \
	}

struct rm_client rm_process_client = {
	.main = MAIN_CONN_INIT,
	.open_lock = PTHREAD_MUTEX_INITIALIZER,
	.open_result = CUDA_ERROR_NOT_INITIALIZED,
	.channels = {.lock = PTHREAD_RWLOCK_INITIALIZER, .key_once = PTHREAD_ONCE_INIT},
};

static __thread int per_thread_depth; /* inside a _ptds/_ptsz entry point */

static void client_init_once(void)
{
	rm_log_init("remora", RM_LOG_ERROR);
	rm_process_client.trace = getenv("REMORA_TRACE") != NULL;
	rm_stats_init();
}

void rm_client_init(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, client_init_once);
}

void rm_per_thread_enter(void) { per_thread_depth++; }
void rm_per_thread_leave(void) { per_thread_depth--; }
int rm_per_thread_active(void) { return per_thread_depth > 0; }

int rm_client_closed(void)
{
	return __atomic_load_n(&rm_process_client.state, __ATOMIC_ACQUIRE) == RM_CLIENT_CLOSED;
}

int rm_remote_driver_version(void) { return rm_process_client.main.driver_version; }

struct rm_copy_links *rm_process_copy_links(void) { return rm_process_client.main.copy_links; }

CUresult rm_unsupported(const char *name)
{
	/* One line per name: a small set of names seen, guarded by a lock. */
	static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	static const char *seen[256];
	static int nseen;
	rm_client_init();
	pthread_mutex_lock(&lock);
	int known = 0;
	for (int i = 0; i < nseen && !known; i++)
		known = seen[i] == name;
	if (!known && nseen < 256)
		seen[nseen++] = name;
	pthread_mutex_unlock(&lock);
	if (!known)
		rm_log(RM_LOG_WARN, "%s is not supported by Remora: returning CUDA_ERROR_NOT_SUPPORTED", name);
	return CUDA_ERROR_NOT_SUPPORTED;
}

/* Checks the environment (environment.h), then tries each candidate (placement.h)
 * until one accepts this client. */
static CUresult open_main(struct rm_client_conn *main)
{
	struct rm_candidates *cand = malloc(sizeof(*cand));
	CUresult r = CUDA_ERROR_NO_DEVICE;
	if (!cand)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (rm_client_environment_check() == 0 && rm_placement_candidates(cand) == 0)
		for (int i = 0; i < cand->n && r != CUDA_SUCCESS; i++)
			if ((r = rm_client_conn_open(main, cand->addr[i])) != CUDA_SUCCESS && i + 1 < cand->n)
				rm_log(RM_LOG_ERROR, "trying the next GPU server of %s", cand->from);
	free(cand);
	return r;
}

CUresult rm_connect_once(void)
{
	struct rm_client *cl = &rm_process_client;
	int state = __atomic_load_n(&cl->state, __ATOMIC_ACQUIRE);
	if (state == RM_CLIENT_NEW) {
		pthread_mutex_lock(&cl->open_lock);
		if (cl->state == RM_CLIENT_NEW) {
			rm_client_init();
			cl->opener = pthread_self();
			cl->opener_pid = getpid();
			cl->open_result = open_main(&cl->main);
			if (cl->open_result == CUDA_SUCCESS)
				cl->channels.tab[0] = &cl->main;
			__atomic_store_n(&cl->state, RM_CLIENT_OPENED, __ATOMIC_RELEASE);
		}
		state = cl->state;
		pthread_mutex_unlock(&cl->open_lock);
	}
	return state == RM_CLIENT_CLOSED ? CUDA_ERROR_DEINITIALIZED : cl->open_result;
}

void rm_rpc_reset(void)
{
	struct rm_client *cl = &rm_process_client;
	pthread_mutex_lock(&cl->open_lock);
	if (cl->channels.tab[0]) /* opened once: what open acquired is released, lost or not */
		rm_client_conn_close(&cl->main);
	cl->channels.tab[0] = NULL;
	cl->main = (struct rm_client_conn)MAIN_CONN_INIT;
	cl->open_result = CUDA_ERROR_NOT_INITIALIZED;
	__atomic_store_n(&cl->state, RM_CLIENT_NEW, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&cl->open_lock);
	rm_query_cache_clear();
	rm_launch_reset();
}

/* Closing at exit. The library's destructor runs after the program's atexit handlers and
 * static destructors (exit() runs those before the loader's finalizers), so calls those
 * make still go to the daemon. It closes the main connection only where nothing else can
 * be using it: in the process that opened it (not a forked child, whose close would cut
 * its parent's connection), on the thread that opened it, while no other thread holds a
 * channel or shares the main connection (the main connection's end is the session's, so
 * their calls would fail while they still run) and while no call is under way on it.
 * Otherwise it is left open for the kernel to close at _exit, as a killed process's is.
 * Closing stops the main connection (from here on a call returns CUDA_ERROR_DEINITIALIZED,
 * as the driver's do once torn down at exit: another library's finalizer may still call),
 * ends its flusher and copy links and closes its link, so that the daemon sees the client
 * leave; its memory stays (a late call may still look at it), and goes with the process. */
__attribute__((destructor)) static void close_at_exit(void)
{
	struct rm_client *cl = &rm_process_client;
	if (pthread_mutex_trylock(&cl->open_lock))
		return; /* an open or reset under way on another thread */
	if (cl->state == RM_CLIENT_OPENED && cl->channels.tab[0] && cl->opener_pid == getpid() &&
	    pthread_equal(cl->opener, pthread_self()) && rm_channels_none(cl) &&
	    pthread_mutex_trylock(&cl->main.lock) == 0) {
		__atomic_store_n(&cl->state, RM_CLIENT_CLOSED, __ATOMIC_RELEASE);
		rm_client_conn_stop_locked(&cl->main);
		pthread_mutex_unlock(&cl->main.lock);
		rm_client_conn_end(&cl->main);
		rm_log(RM_LOG_DEBUG, "connection to the GPU server closed at exit");
	}
	pthread_mutex_unlock(&cl->open_lock);
}
