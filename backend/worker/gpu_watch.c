/* The worker's watch over its GPUs and its clients' kernels (worker.h): a fault no call
 * reported, free memory for the registry, a kernel past kernel_time_limit. */
#include "worker.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "fault.h"
#include "gpus.h"
#include "kernel_watch.h"
#include "liveness.h"
#include "log.h"
#include "registry.h"

#define WATCH_INTERVAL_MS 200 /* how soon a fault no call reported, or a kernel past its
				* kernel_time_limit, is found */
#define WATCH_MEMORY_EVERY 10 /* intervals between registry updates of free memory */
#define RETIRED_GRACE_MS 2000 /* a faulted worker idle this long after its fault exits */
#define MPS_FAULT_GRACE_MS 300 /* under MPS, a faulted worker ends this long after its fault,
				* time for the replies that carry the fault to go out */

/* The session whose kernel ran past kernel_time_limit (kernel_watch.h), named for the
 * others' notices. */
static char overrun_name[64];
static uint32_t overrun_pid;
static int keep_faulted; /* rm_gpu_watch_keep_faulted */

void rm_gpu_watch_keep_faulted(void)
{
	keep_faulted = 1;
}

static void find_overrun(struct rm_channel *s)
{
	if (!overrun_name[0] && rm_kernel_watch_over(s)) {
		snprintf(overrun_name, sizeof(overrun_name), "%s", s->sh->name);
		overrun_pid = s->sh->pid;
	}
}

/* Tells a client why its worker ends: one line (printed by the client library), then
 * going-away. A busy or full connection is skipped: it finds the connection closed. */
static void tell_recycled(struct rm_channel *s)
{
	char line[RM_NOTICE_MAX];
	int n = rm_kernel_watch_over(s)
			? snprintf(line, sizeof(line), "a kernel of this program ran longer than its tenant's "
				   "kernel_time_limit: the GPU server ended its worker, and with it the kernel and "
				   "every client of the worker")
			: snprintf(line, sizeof(line), "a kernel of program %s (pid %u on its host) ran longer than "
				   "tenant %s's kernel_time_limit: the GPU server ended the worker this program shared "
				   "with it, and this program's GPU work with it", overrun_name, overrun_pid,
				   s->sh->tenant_name);
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
	rm_served_each(tell_recycled);
	_exit(75);
}

/* Under MPS a fatal fault breaks every MPS client of the GPU, and its server takes no new
 * client until all of them have gone: a faulted worker there ends at once rather than
 * when its clients leave, each told why (the one whose kernel faulted has its error). */
static void tell_mps_fault(struct rm_channel *s)
{
	char line[RM_NOTICE_MAX];
	size_t len = s->chan ? 0 : rm_fault_notice(s, line, sizeof(line)); /* once: maybe told already */
	if (len)
		rm_liveness_send_aside(s, RM_OP_FAULT_NOTICE, line, (uint32_t)len);
	rm_liveness_send_aside(s, RM_OP_GOING_AWAY, NULL, 0);
}

/* Asks each GPU's context for its free memory: a sticky error faults the worker (gpus.h),
 * however no call of a client has reported it yet; every few rounds the answer goes into
 * the registry's free-memory figures. A faulted worker whose clients have all left exits
 * (status 75, as supervisor.c expects), a grace after its fault for a hand-over in flight. */
static void *watch_gpus(void *arg)
{
	(void)arg;
	struct timespec tick = {0, WATCH_INTERVAL_MS * 1000000L};
	int under_mps = rm_fault_under_mps();
	for (unsigned round = 0;; round++) {
		for (int g = 0; g < rm_registry()->ngpus; g++) {
			size_t free_b, total_b;
			if (rm_gpu_memory(g, &free_b, &total_b) == CUDA_SUCCESS && round % WATCH_MEMORY_EVERY == 0) {
				rm_registry_lock();
				rm_registry()->gpus[g].free_bytes = free_b;
				rm_registry_unlock();
			}
		}
		rm_served_each(find_overrun);
		if (overrun_name[0])
			recycle();
		if (under_mps && rm_fault_age_ms() > MPS_FAULT_GRACE_MS) {
			rm_log(RM_LOG_WARN, "worker: faulted under MPS, which holds every client of the GPU until all "
			       "have gone: ending this worker and its %zu client(s) now", rm_served_count());
			rm_served_each(tell_mps_fault);
			_exit(75);
		}
		if (!keep_faulted && rm_fault_age_ms() > RETIRED_GRACE_MS) {
			if (!rm_served_count()) {
				rm_log(RM_LOG_INFO, "worker: faulted, and its last client has left; exiting");
				_exit(75);
			}
		}
		nanosleep(&tick, NULL);
	}
	return NULL;
}

int rm_gpu_watch_start(void)
{
	pthread_t t;
	int err = -pthread_create(&t, NULL, watch_gpus, NULL);
	if (!err)
		pthread_detach(t);
	return err;
}
