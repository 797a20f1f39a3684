/* User objects (proto/api.spec, "User objects"): the driver's, with a destructor of the
 * daemon's that calls the client's (host_functions.h, rm_hostfn_once) when the driver
 * drops the last reference. The session counts the references the client holds itself
 * (the record's size): it cannot release or move more than it holds, forgets the object
 * when it holds none (what graphs hold goes with them), and drops the rest when it goes. */
#include "dispatch.h"
#include "host_functions.h"

#include "remora.pb-c.h"

CUresult rm_body_cuUserObjectCreate(struct rm_channel *s, struct rm_request *rq, const Remora__UserObjectCreate *req,
				    Remora__UserObjectCreateReply *rep)
{
	(void)rq;
	CUhostFn fn = NULL;
	void *data = NULL;
	CUuserObject obj = NULL;
	if (!req->refcount || req->flags != CU_USER_OBJECT_NO_DESTRUCTOR_SYNC)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = rm_hostfn_once(s->sh->hostfn, req->id, &fn, &data);
	if (r == CUDA_SUCCESS && (r = rm_drv_cuUserObjectCreate(&obj, data, fn, req->refcount, req->flags)) != CUDA_SUCCESS)
		rm_hostfn_forget(data);
	if (r == CUDA_SUCCESS) {
		rm_session_own_memory(s, RM_H_USER_OBJECT, (uint64_t)(uintptr_t)obj, req->refcount, 0);
		rep->object = (uint64_t)(uintptr_t)obj;
	}
	return r;
}

CUresult rm_body_cuUserObjectRetain(struct rm_channel *s, CUuserObject object, unsigned int count)
{
	if (!count)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = rm_drv_cuUserObjectRetain(object, count);
	if (r == CUDA_SUCCESS && !rm_session_take_refs(s, RM_H_USER_OBJECT, (uint64_t)(uintptr_t)object, count, 1)) {
		rm_drv_cuUserObjectRelease(object, count);
		r = CUDA_ERROR_INVALID_VALUE;
	}
	return r;
}

/* Counted first, so that two threads cannot both release the client's last reference. */
CUresult rm_body_cuUserObjectRelease(struct rm_channel *s, CUuserObject object, unsigned int count)
{
	if (!count || !rm_session_take_refs(s, RM_H_USER_OBJECT, (uint64_t)(uintptr_t)object, count, 0))
		return CUDA_ERROR_INVALID_VALUE;
	return rm_drv_cuUserObjectRelease(object, count);
}

/* A move gives the graph references the client held. */
CUresult rm_body_cuGraphRetainUserObject(struct rm_channel *s, CUgraph graph, CUuserObject object, unsigned int count,
					 unsigned int flags)
{
	uint64_t v = (uint64_t)(uintptr_t)object;
	if (!count || (flags & ~CU_GRAPH_USER_OBJECT_MOVE))
		return CUDA_ERROR_INVALID_VALUE;
	if (!(flags & CU_GRAPH_USER_OBJECT_MOVE))
		return rm_drv_cuGraphRetainUserObject(graph, object, count, flags);
	/* Moved: taken from the client's count first, given back if the driver refuses. The
	 * record may go meanwhile (its last reference moved): the object lives on in the graph. */
	if (!rm_session_take_refs(s, RM_H_USER_OBJECT, v, count, 0))
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = rm_drv_cuGraphRetainUserObject(graph, object, count, flags);
	if (r != CUDA_SUCCESS && !rm_session_take_refs(s, RM_H_USER_OBJECT, v, count, 1))
		rm_session_own_memory(s, RM_H_USER_OBJECT, v, count, 0);
	return r;
}
