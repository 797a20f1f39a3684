/* Modules. Images arrive whole and the driver picks their code. Loads and the calls whose
 * messages are in remora.proto have typed bodies of hand calls; unloads and globals are
 * typed bodies of generated ones. Launches: launch_handlers.c. */
#include "dispatch.h"

#include <errno.h>
#include <stdlib.h>

#include "host_memory.h"
#include "handle_alias.h"
#include "image_cache.h"
#include "image_charge.h"
#include "migrate.h"
#include "log.h"
#include "remora.pb-c.h"
#include "variable_alias.h"

/* An image being received is host memory the daemon holds for the client: it counts
 * against the client's memory quota and the worker's host-memory bound until loaded. */
static CUresult hold_image_memory(struct rm_channel *s, uint64_t n)
{
	CUresult r = rm_session_charge(s, n);
	int err = r == CUDA_SUCCESS ? rm_host_account_take(&s->sh->host, n) : 0;
	if (err) {
		if (err == -EDQUOT)
			rm_session_log(s, RM_LOG_WARN,
			               "image of %llu bytes refused: the client holds %llu bytes "
			               "of host memory (client_host_memory_limit)",
			               (unsigned long long)n, (unsigned long long)rm_host_account_held(&s->sh->host));
		else
			rm_session_log(s, RM_LOG_WARN,
			               "image of %llu bytes refused: the worker holds %llu bytes "
			               "of host memory for its clients (worker_host_memory_limit)",
			               (unsigned long long)n, (unsigned long long)rm_host_memory_held());
		rm_session_uncharge(s, n);
		r = CUDA_ERROR_OUT_OF_MEMORY;
	}
	return r;
}

/* Reads an image sent as bulk and loads it as a module or a library owned by the session. */
static CUresult load_image(struct rm_channel *s, struct rm_request *rq, Remora__ModuleLoadReply *rep,
			   enum rm_handle_kind kind)
{
	uint64_t n = rq->frame.bulk_len;
	/* A module belongs to the current context; a library to none. */
	CUresult r = s->cur || kind == RM_H_LIBRARY ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
	uint8_t *image = NULL;
	int held = 0, charged = 0; /* the host-memory bound's hold, and the quota's */
	if (r == CUDA_SUCCESS && (n == 0 || n > RM_MAX_IMAGE_LEN))
		r = CUDA_ERROR_INVALID_IMAGE;
	if (r == CUDA_SUCCESS)
		r = hold_image_memory(s, n);
	held = charged = r == CUDA_SUCCESS;
	/* Zeros after it: PTX ends in NUL whatever the client sent, and a driver reading a
	 * short image's header stays inside the buffer. */
	if (r == CUDA_SUCCESS && !(image = calloc(1, n + RM_IMAGE_PAD)))
		r = CUDA_ERROR_OUT_OF_MEMORY;
	if (r == CUDA_SUCCESS) {
		if (rm_request_read_bulk(s, rq, image, n)) {
			r = CUDA_ERROR_UNKNOWN; /* the connection fails (rq->fatal) */
			goto out;
		}
		if (!rm_image_contained(image, n)) {
			rm_session_log(s, RM_LOG_WARN,
			               "an image of %llu bytes whose headers reach past its end, "
			               "refused",
			               (unsigned long long)n);
			r = CUDA_ERROR_INVALID_IMAGE;
		}
		/* The quota charges the module it becomes instead (image_charge.h); the buffer stays
		 * within the host-memory bound until freed. */
		rm_session_uncharge(s, n);
		charged = 0;
		void *h = NULL;
		if (r == CUDA_SUCCESS)
			r = rm_image_load_owned(s, kind, image, n, &h);
		if (r == CUDA_SUCCESS) {
			rm_image_load_here(kind, h); /* shared or not: maybe not yet in this context */
			rm_migrate_keep_image(s, kind, (uint64_t)(uintptr_t)h, image, n); /* to move it on (migrate.h) */
			image = NULL;
			rep->module = rm_session_out_value(s, kind, (uint64_t)(uintptr_t)h);
		}
	}
out:
	free(image);
	if (held)
		rm_host_account_give(&s->sh->host, n);
	if (charged)
		rm_session_uncharge(s, n);
	return r;
}

CUresult rm_body_cuModuleLoadData(struct rm_channel *s, struct rm_request *rq, const Remora__ModuleLoad *req,
				  Remora__ModuleLoadReply *rep)
{
	(void)req; /* the image kind is the driver's to find */
	return load_image(s, rq, rep, RM_H_MODULE);
}

CUresult rm_body_cuLibraryLoadData(struct rm_channel *s, struct rm_request *rq, const Remora__ModuleLoad *req,
				   Remora__ModuleLoadReply *rep)
{
	(void)req;
	return load_image(s, rq, rep, RM_H_LIBRARY);
}

/* Typed bodies of generated handlers (proto/api.spec, daemon_handlers.h): the record of
 * an unloaded module or library, and what was its, is taken first, so that of two unloads
 * of one module at once one unloads it (the handler's forgetting, hmod=del and
 * library=del, then finds none), and its charge goes back. Like CUDA's unload, the call
 * returns once the client's work is done; the driver's unload, which waits for every
 * client's, is made off its thread (deferred.h). */
static CUresult unload(struct rm_channel *s, enum rm_handle_kind kind, void *h)
{
	struct rm_handle rec;
	if (!rm_session_take(s, kind, (uint64_t)(uintptr_t)h, &rec))
		return CUDA_ERROR_INVALID_HANDLE;
	CUresult r = rm_session_synchronize_all(s);
	CUresult u = rm_image_unload(kind, h);
	rm_image_uncharge(s, &rec);
	rm_migrate_forget_image(s, (uint64_t)(uintptr_t)h);
	return r != CUDA_SUCCESS ? r : u;
}

CUresult rm_body_cuModuleUnload(struct rm_channel *s, CUmodule hmod)
{
	return unload(s, RM_H_MODULE, hmod);
}

CUresult rm_body_cuLibraryUnload(struct rm_channel *s, CUlibrary library)
{
	return unload(s, RM_H_LIBRARY, library);
}

/* A global is usable memory of the client's, owned with its module or library, so
 * that it goes when they go (dptr=new:body); asking twice records it once. One the client
 * brought when it moved in is at another address here: it gets the address it holds
 * (variable_alias.h). */
static void own_global(struct rm_channel *s, CUdeviceptr *p, size_t bytes, const void *parent)
{
	uint64_t held = rm_session_client_dptr(s, *p);
	if (held != *p)
		*p = held;
	else if (!rm_session_find(s, RM_H_GLOBAL, *p, NULL))
		rm_session_own_memory(s, RM_H_GLOBAL, *p, bytes, (uint64_t)(uintptr_t)parent);
}

CUresult rm_body_cuModuleGetGlobal_v2(struct rm_channel *s, CUdeviceptr *dptr, size_t *bytes, CUmodule hmod,
				      const char *name)
{
	CUresult r = rm_drv_cuModuleGetGlobal_v2(dptr, bytes, hmod, name);
	if (r == CUDA_SUCCESS)
		own_global(s, dptr, *bytes, hmod);
	return r;
}

CUresult rm_body_cuLibraryGetGlobal(struct rm_channel *s, CUdeviceptr *dptr, size_t *bytes, CUlibrary library,
				    const char *name)
{
	CUresult r = rm_drv_cuLibraryGetGlobal(dptr, bytes, library, name);
	if (r == CUDA_SUCCESS)
		own_global(s, dptr, *bytes, library);
	return r;
}

CUresult rm_body_cuFuncGetName(struct rm_channel *s, struct rm_request *rq, const Remora__FuncGetName *req,
			       Remora__FuncGetNameReply *rep)
{
	(void)rq;
	void *func;
	const char *name = NULL;
	CUresult r = rm_session_use(s, RM_H_FUNCTION, req->func, &func);
	if (r == CUDA_SUCCESS)
		r = rm_drv_cuFuncGetName(&name, func);
	rep->name = (char *)(name ? name : "");
	return r;
}

/* rmFuncGetParamLayout: what the driver's cuFuncGetParamInfo answers for each parameter of
 * a function, up to the first index it answers CUDA_ERROR_INVALID_VALUE, in one reply. A
 * function of more than RM_MAX_KERNEL_PARAMS is answered too_many, its parameters unlisted. */
CUresult rm_body_rmFuncGetParamLayout(struct rm_channel *s, struct rm_request *rq, const Remora__FuncGetParamLayout *req,
				      Remora__FuncGetParamLayoutReply *rep)
{
	void *func;
	size_t n = 0;
	uint64_t *layout = NULL; /* offsets, then sizes */
	CUresult r = rm_session_use(s, RM_H_FUNCTION, req->func, &func);
	if (r == CUDA_SUCCESS && !(layout = calloc(2 * RM_MAX_KERNEL_PARAMS, sizeof(*layout))))
		r = CUDA_ERROR_OUT_OF_MEMORY;
	while (r == CUDA_SUCCESS) {
		size_t at = 0, len = 0;
		CUresult q = rm_drv_cuFuncGetParamInfo(func, n, &at, &len);
		if (q == CUDA_ERROR_INVALID_VALUE) /* past the last parameter */
			break;
		if (q != CUDA_SUCCESS) {
			r = q;
		} else if (n == RM_MAX_KERNEL_PARAMS) {
			rep->too_many = 1;
			n = 0;
			break;
		} else {
			layout[n] = at;
			layout[RM_MAX_KERNEL_PARAMS + n++] = len;
		}
	}
	if (r == CUDA_SUCCESS) {
		rep->offset = layout;
		rep->n_offset = n;
		rep->size = layout + RM_MAX_KERNEL_PARAMS;
		rep->n_size = n;
	}
	rq->reply_mem = layout; /* freed once the reply is sent */
	return r;
}

/* The handles filled in become the client's, children of the module like cuModuleGetFunction's. */
CUresult rm_body_cuModuleEnumerateFunctions(struct rm_channel *s, CUfunction *functions, unsigned int numFunctions,
					    CUmodule mod)
{
	CUresult r = rm_drv_cuModuleEnumerateFunctions(functions, numFunctions, mod);
	for (unsigned int i = 0; r == CUDA_SUCCESS && i < numFunctions; i++)
		if (functions[i])
			rm_session_own(s, RM_H_FUNCTION, functions[i], (uint64_t)(uintptr_t)mod);
	return r;
}
