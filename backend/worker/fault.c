/* The worker's fault state (fault.h). */
#include "fault.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "driver_table.h"
#include "log.h"
#include "registry.h"
#include "session.h"

static pthread_mutex_t fault_lock = PTHREAD_MUTEX_INITIALIZER;
static CUresult fault_error; /* CUDA_SUCCESS until the worker faults (atomic reads) */
static struct timespec fault_at;
static uint64_t culprit_session; /* 0: found by the worker's own check */
static char culprit_name[64];
static uint32_t culprit_pid;

/* The errors cuda.h documents as leaving the process (or its contexts) unusable. */
int rm_fault_is_sticky(CUresult r)
{
	switch (r) {
	case CUDA_ERROR_ECC_UNCORRECTABLE:
	case CUDA_ERROR_CONTAINED:
	case CUDA_ERROR_ILLEGAL_ADDRESS:
	case CUDA_ERROR_LAUNCH_TIMEOUT:
	case CUDA_ERROR_ASSERT:
	case CUDA_ERROR_HARDWARE_STACK_ERROR:
	case CUDA_ERROR_ILLEGAL_INSTRUCTION:
	case CUDA_ERROR_MISALIGNED_ADDRESS:
	case CUDA_ERROR_INVALID_ADDRESS_SPACE:
	case CUDA_ERROR_INVALID_PC:
	case CUDA_ERROR_LAUNCH_FAILED:
	case CUDA_ERROR_TENSOR_MEMORY_LEAK:
	case CUDA_ERROR_MPS_CLIENT_TERMINATED:
	case CUDA_ERROR_EXTERNAL_DEVICE:
		return 1;
	default:
		return 0;
	}
}

static const char *error_name(CUresult r)
{
	const char *name = NULL;
	if (!rm_drv.cuGetErrorName || rm_drv_cuGetErrorName(r, &name) != CUDA_SUCCESS || !name)
		name = "a sticky error";
	return name;
}

void rm_fault_note(const struct rm_channel *s, CUresult r)
{
	if (!rm_fault_is_sticky(r) || __atomic_load_n(&fault_error, __ATOMIC_ACQUIRE) != CUDA_SUCCESS)
		return;
	pthread_mutex_lock(&fault_lock);
	if (fault_error == CUDA_SUCCESS) {
		clock_gettime(CLOCK_MONOTONIC, &fault_at);
		if (s) {
			culprit_session = s->sh->id;
			snprintf(culprit_name, sizeof(culprit_name), "%s", s->sh->name);
			culprit_pid = s->sh->pid;
		}
		__atomic_store_n(&fault_error, r, __ATOMIC_RELEASE);
		rm_registry_mark_faulted(getpid(), (int)r);
		if (s)
			rm_log(RM_LOG_WARN, "worker: error %d (%s), first reported to session %llu (%s, pid %u), "
			       "broke this worker's GPU contexts for good: its clients get it from now on, and the "
			       "tenant's new clients go to a fresh worker", r, error_name(r),
			       (unsigned long long)s->sh->id, s->sh->name, s->sh->pid);
		else
			rm_log(RM_LOG_WARN, "worker: error %d (%s) broke this worker's GPU contexts for good: its "
			       "clients get it from now on, and the tenant's new clients go to a fresh worker", r,
			       error_name(r));
	}
	pthread_mutex_unlock(&fault_lock);
}

CUresult rm_fault_error(void)
{
	return __atomic_load_n(&fault_error, __ATOMIC_ACQUIRE);
}

unsigned long long rm_fault_age_ms(void)
{
	if (rm_fault_error() == CUDA_SUCCESS)
		return 0;
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	pthread_mutex_lock(&fault_lock);
	long long ms = (now.tv_sec - fault_at.tv_sec) * 1000LL + (now.tv_nsec - fault_at.tv_nsec) / 1000000LL;
	pthread_mutex_unlock(&fault_lock);
	return ms > 0 ? (unsigned long long)ms : 1;
}

int rm_fault_under_mps(void)
{
	static int mps = -1;
	if (__atomic_load_n(&mps, __ATOMIC_RELAXED) < 0)
		__atomic_store_n(&mps, getenv("CUDA_MPS_PIPE_DIRECTORY") != NULL, __ATOMIC_RELAXED);
	return __atomic_load_n(&mps, __ATOMIC_RELAXED);
}

static size_t clamp(int n, size_t len)
{
	return n < 0 ? 0 : (size_t)n < len ? (size_t)n : len - 1;
}

/* Under MPS the client the fault was first reported to may be another tenant's bystander
 * (its context broken by a kernel in another process), so every client is told. */
static size_t mps_notice(char *buf, size_t len, CUresult r)
{
	return clamp(snprintf(buf, len, "a GPU fault (error %d, %s) broke every client of this GPU's MPS server "
			      "(tenant_isolation = mps), this program's GPU work and memory included, whichever "
			      "tenant's kernel faulted; the GPU server ends its worker so that the GPU serves again: "
			      "restart the program", (int)r, error_name(r)), len);
}

size_t rm_fault_notice(struct rm_channel *s, char *buf, size_t len)
{
	CUresult r = rm_fault_error();
	if (r == CUDA_SUCCESS || (s->sh->id == culprit_session && !rm_fault_under_mps()) ||
	    __atomic_exchange_n(&s->sh->fault_told, 1, __ATOMIC_ACQ_REL))
		return 0;
	if (rm_fault_under_mps())
		return mps_notice(buf, len, r);
	int n;
	pthread_mutex_lock(&fault_lock);
	if (culprit_session)
		n = snprintf(buf, len, "the GPU context this program shares with the other clients of tenant %s was "
			     "broken by error %d (%s), first reported to program %s (pid %u on its host); this "
			     "program's GPU work and memory are lost, and every CUDA call now fails with that error: "
			     "restart it", s->sh->tenant_name, r, error_name(r), culprit_name, culprit_pid);
	else
		n = snprintf(buf, len, "the GPU context this program shares with the other clients of tenant %s was "
			     "broken by error %d (%s) in a kernel of one of them; this program's GPU work and memory "
			     "are lost, and every CUDA call now fails with that error: restart it",
			     s->sh->tenant_name, r, error_name(r));
	pthread_mutex_unlock(&fault_lock);
	return clamp(n, len);
}

void rm_fault_clear(void)
{
	pthread_mutex_lock(&fault_lock);
	__atomic_store_n(&fault_error, CUDA_SUCCESS, __ATOMIC_RELEASE);
	culprit_session = 0;
	pthread_mutex_unlock(&fault_lock);
}
