/* A session's device memory against its quotas (quota.h). */
#include "session.h"

#include <pthread.h>
#include <stdlib.h>

#include "log.h"
#include "registry.h"

/* Charges charged bytes (rounded already) for what asks for them: CUDA_ERROR_OUT_OF_MEMORY
 * and a line past a quota. */
static CUresult charge(struct rm_channel *s, const char *what, uint64_t asked, uint64_t charged)
{
	uint64_t client_limit, tenant_limit;
	if (!rm_registry_charge(s->sh->slot, s->sh->id, charged, &client_limit, &tenant_limit))
		return CUDA_SUCCESS;
	rm_session_log(s, RM_LOG_WARN, "%s of %llu bytes (charged %llu) refused: over its quota "
		       "(client %llu, tenant %s %llu bytes; 0 is none)",
		       what, (unsigned long long)asked, (unsigned long long)charged, (unsigned long long)client_limit,
		       s->sh->tenant_name, (unsigned long long)tenant_limit);
	return CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult rm_session_charge(struct rm_channel *s, uint64_t bytes)
{
	return charge(s, "allocation", bytes, rm_charged_bytes(bytes));
}

void rm_session_uncharge(struct rm_channel *s, uint64_t bytes)
{
	rm_registry_uncharge(s->sh->slot, s->sh->id, rm_charged_bytes(bytes));
}

CUresult rm_session_recharge(struct rm_channel *s, uint64_t from, uint64_t to)
{
	uint64_t had = rm_charged_bytes(from), want = rm_charged_bytes(to);
	if (want < had)
		rm_registry_uncharge(s->sh->slot, s->sh->id, had - want);
	return want > had ? charge(s, "growth", to - from, want - had) : CUDA_SUCCESS;
}

uint64_t rm_session_client_limit(struct rm_channel *s)
{
	uint64_t client_limit, tenant_limit, mine, tenant;
	rm_registry_usage(s->sh->slot, &client_limit, &tenant_limit, &mine, &tenant);
	return client_limit;
}

void rm_session_memory_view(struct rm_channel *s, size_t *free_b, size_t *total_b)
{
	uint64_t client_limit, tenant_limit, mine, tenant;
	rm_registry_usage(s->sh->slot, &client_limit, &tenant_limit, &mine, &tenant);
	if (client_limit) {
		if (*total_b > client_limit)
			*total_b = client_limit;
		uint64_t left = client_limit > mine ? client_limit - mine : 0;
		if (*free_b > left)
			*free_b = left;
	}
	if (tenant_limit) {
		if (*total_b > tenant_limit)
			*total_b = tenant_limit;
		uint64_t left = tenant_limit > tenant ? tenant_limit - tenant : 0;
		if (*free_b > left)
			*free_b = left;
	}
}

CUresult rm_session_charge_host(struct rm_channel *s, uint64_t bytes)
{
	if (rm_host_account_take(&s->sh->host, bytes) == 0)
		return CUDA_SUCCESS;
	rm_session_log(s, RM_LOG_WARN, "host-located virtual memory of %llu bytes refused: over its host memory limit",
		       (unsigned long long)bytes);
	return CUDA_ERROR_OUT_OF_MEMORY;
}

void rm_session_uncharge_host(struct rm_channel *s, uint64_t bytes)
{
	rm_host_account_give(&s->sh->host, bytes);
}

/* The worker's host-located physical allocations; few (NCCL's buffers), so a list. */
struct host_physical {
	uint64_t handle, bytes;
	struct host_physical *next;
};
static pthread_mutex_t host_physical_lock = PTHREAD_MUTEX_INITIALIZER;
static struct host_physical *host_physical;

CUresult rm_session_note_host_physical(uint64_t handle, uint64_t bytes)
{
	struct host_physical *h = malloc(sizeof(*h));
	if (!h)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&host_physical_lock);
	*h = (struct host_physical){.handle = handle, .bytes = bytes, .next = host_physical};
	host_physical = h;
	pthread_mutex_unlock(&host_physical_lock);
	return CUDA_SUCCESS;
}

void rm_session_uncharge_physical(struct rm_channel *s, uint64_t handle, uint64_t bytes)
{
	struct host_physical *gone = NULL;
	pthread_mutex_lock(&host_physical_lock);
	for (struct host_physical **h = &host_physical; *h; h = &(*h)->next)
		if ((*h)->handle == handle) {
			gone = *h;
			*h = gone->next;
			break; /* *h may be null now: no step past it */
		}
	pthread_mutex_unlock(&host_physical_lock);
	if (gone)
		rm_session_uncharge_host(s, gone->bytes);
	else
		rm_session_uncharge(s, bytes);
	free(gone);
}
