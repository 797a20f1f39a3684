/* Peer access between contexts: enabled per ordered pair (the current context reaching
 * the peer's memory), with the driver's errors. One address space, so an enabled pair
 * changes nothing a kernel can reach; what is checked is the bookkeeping. */
#include "testdriver.h"

#include <stdlib.h>

struct peer_pair {
	const struct td_context *from, *to;
	struct peer_pair *next;
};

static struct peer_pair *pairs; /* guarded by td_lock */

static struct peer_pair **find(const struct td_context *from, const struct td_context *to)
{
	struct peer_pair **p = &pairs;
	while (*p && !((*p)->from == from && (*p)->to == to))
		p = &(*p)->next;
	return p;
}

static CUresult pair_of(CUcontext peer, struct td_context **from, struct td_context **to)
{
	CUresult rc = td_require_context(from);
	if (rc != CUDA_SUCCESS)
		return rc;
	*to = (struct td_context *)peer;
	if (!td_context_valid(*to))
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!(*to)->active)
		return CUDA_ERROR_CONTEXT_IS_DESTROYED;
	return (*from)->device == (*to)->device ? CUDA_ERROR_PEER_ACCESS_UNSUPPORTED : CUDA_SUCCESS;
}

TD_EXPORT CUresult cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags)
{
	struct td_context *from, *to;
	CUresult rc = pair_of(peerContext, &from, &to);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (Flags)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&td_lock);
	struct peer_pair **p = find(from, to);
	if (*p) {
		rc = CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
	} else if ((*p = calloc(1, sizeof **p))) {
		(*p)->from = from;
		(*p)->to = to;
	} else {
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	}
	pthread_mutex_unlock(&td_lock);
	return rc;
}

TD_EXPORT CUresult cuCtxDisablePeerAccess(CUcontext peerContext)
{
	struct td_context *from, *to;
	CUresult rc = pair_of(peerContext, &from, &to);
	if (rc != CUDA_SUCCESS)
		return rc;
	pthread_mutex_lock(&td_lock);
	struct peer_pair **p = find(from, to), *gone = *p;
	if (gone)
		*p = gone->next;
	else
		rc = CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
	pthread_mutex_unlock(&td_lock);
	free(gone);
	return rc;
}
