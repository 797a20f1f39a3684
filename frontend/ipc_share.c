/* CUDA IPC's VMM and pool paths on the client (proto/api.spec, "CUDA IPC"): the file
 * descriptor cuMemExportToShareableHandle or cuMemPoolExportToShareableHandle gives the
 * program is a sealed memfd holding the daemon's token, which the program passes to another
 * process as it would the driver's (SCM_RIGHTS, pidfd_getfd); the import reads the token
 * back and sends it. The daemon checks every byte of it. Other handle types:
 * CUDA_ERROR_NOT_SUPPORTED. */
#include "client.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api.pb-c.h"
#include "log.h"

#define TOKEN_SIZE 64 /* backend/worker/ipc_token.h */
#define TOKEN_SEALS (F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE)

/* A sealed memfd holding the token's bytes, or -errno. */
static int token_fd(const uint8_t *token)
{
	int fd = memfd_create("remora-ipc-handle", MFD_ALLOW_SEALING); /* inherited, as a descriptor to pass on */
	if (fd < 0)
		return -errno;
	errno = EIO; /* a short write sets none */
	if (pwrite(fd, token, TOKEN_SIZE, 0) != TOKEN_SIZE || fcntl(fd, F_ADD_SEALS, TOKEN_SEALS)) {
		int err = -errno;
		close(fd);
		return err;
	}
	return fd;
}

RM_EXPORT CUresult CUDAAPI cuMemExportToShareableHandle(void *shareableHandle, CUmemGenericAllocationHandle handle,
							 CUmemAllocationHandleType handleType, unsigned long long flags)
{
	if (!shareableHandle)
		return CUDA_ERROR_INVALID_VALUE;
	if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return rm_unsupported("cuMemExportToShareableHandle of a handle type but CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR");
	Remora__CuMemExportToShareableHandleReq req = REMORA__CU_MEM_EXPORT_TO_SHAREABLE_HANDLE__REQ__INIT;
	req.handle = handle;
	req.handletype = handleType;
	req.flags = flags;
	req.shareablehandle_len = TOKEN_SIZE;
	Remora__CuMemExportToShareableHandleRep *rep = NULL;
	CUresult r = rm_rpc_simple(RM_OP_cuMemExportToShareableHandle, &req.base,
				   &remora__cu_mem_export_to_shareable_handle__rep__descriptor, (ProtobufCMessage **)&rep);
	if (r == CUDA_SUCCESS && (!rep || rep->shareablehandle.len != TOKEN_SIZE))
		r = rm_rpc_bad_reply("cuMemExportToShareableHandle: the reply's token is %zu bytes, not %zu",
				     rep ? rep->shareablehandle.len : 0, (size_t)TOKEN_SIZE);
	if (r == CUDA_SUCCESS) {
		int fd = token_fd(rep->shareablehandle.data);
		if (fd < 0) {
			rm_log(RM_LOG_ERROR, "cuMemExportToShareableHandle: cannot make its descriptor: %s", strerror(-fd));
			r = CUDA_ERROR_OUT_OF_MEMORY;
		} else {
			*(int *)shareableHandle = fd;
		}
	}
	rm_rpc_free(rep ? &rep->base : NULL);
	return r;
}

/* The token in descriptor fd: a sealed memfd of exactly its size. 0, or -1 (logged why). */
static int read_token(int fd, uint8_t *token, const char *call)
{
	struct stat st;
	int seals = fcntl(fd, F_GET_SEALS);
	if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_size != TOKEN_SIZE || seals < 0 ||
	    (seals & TOKEN_SEALS) != TOKEN_SEALS || pread(fd, token, TOKEN_SIZE, 0) != TOKEN_SIZE) {
		rm_log(RM_LOG_WARN, "%s: descriptor %d is not one a Remora client exported "
		       "(a native driver's, from a process not run through Remora?): CUDA_ERROR_INVALID_HANDLE", call, fd);
		return -1;
	}
	return 0;
}

RM_EXPORT CUresult CUDAAPI cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *osHandle,
							   CUmemAllocationHandleType shHandleType)
{
	if (!handle)
		return CUDA_ERROR_INVALID_VALUE;
	if (shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return rm_unsupported("cuMemImportFromShareableHandle of a handle type but CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR");
	uint8_t token[TOKEN_SIZE];
	if (read_token((int)(intptr_t)osHandle, token, "cuMemImportFromShareableHandle"))
		return CUDA_ERROR_INVALID_HANDLE;
	Remora__CuMemImportFromShareableHandleReq req = REMORA__CU_MEM_IMPORT_FROM_SHAREABLE_HANDLE__REQ__INIT;
	req.oshandle.data = token;
	req.oshandle.len = TOKEN_SIZE;
	req.shhandletype = shHandleType;
	Remora__CuMemImportFromShareableHandleRep *rep = NULL;
	CUresult r = rm_rpc_simple(RM_OP_cuMemImportFromShareableHandle, &req.base,
				   &remora__cu_mem_import_from_shareable_handle__rep__descriptor, (ProtobufCMessage **)&rep);
	if (r == CUDA_SUCCESS && rep)
		*handle = rep->handle;
	rm_rpc_free(rep ? &rep->base : NULL);
	return r;
}

RM_EXPORT CUresult CUDAAPI cuMemPoolExportToShareableHandle(void *handle_out, CUmemoryPool pool,
							     CUmemAllocationHandleType handleType, unsigned long long flags)
{
	if (!handle_out)
		return CUDA_ERROR_INVALID_VALUE;
	if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return rm_unsupported("cuMemPoolExportToShareableHandle of a handle type but CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR");
	Remora__CuMemPoolExportToShareableHandleReq req = REMORA__CU_MEM_POOL_EXPORT_TO_SHAREABLE_HANDLE__REQ__INIT;
	req.pool = (uint64_t)(uintptr_t)pool;
	req.handletype = handleType;
	req.flags = flags;
	req.handle_out_len = TOKEN_SIZE;
	Remora__CuMemPoolExportToShareableHandleRep *rep = NULL;
	CUresult r = rm_rpc_simple(RM_OP_cuMemPoolExportToShareableHandle, &req.base,
				   &remora__cu_mem_pool_export_to_shareable_handle__rep__descriptor, (ProtobufCMessage **)&rep);
	if (r == CUDA_SUCCESS && (!rep || rep->handle_out.len != TOKEN_SIZE))
		r = rm_rpc_bad_reply("cuMemPoolExportToShareableHandle: the reply's token is %zu bytes, not %zu",
				     rep ? rep->handle_out.len : 0, (size_t)TOKEN_SIZE);
	if (r == CUDA_SUCCESS) {
		int fd = token_fd(rep->handle_out.data);
		if (fd < 0) {
			rm_log(RM_LOG_ERROR, "cuMemPoolExportToShareableHandle: cannot make its descriptor: %s", strerror(-fd));
			r = CUDA_ERROR_OUT_OF_MEMORY;
		} else {
			*(int *)handle_out = fd;
		}
	}
	rm_rpc_free(rep ? &rep->base : NULL);
	return r;
}

RM_EXPORT CUresult CUDAAPI cuMemPoolImportFromShareableHandle(CUmemoryPool *pool_out, void *handle,
							       CUmemAllocationHandleType handleType, unsigned long long flags)
{
	if (!pool_out)
		return CUDA_ERROR_INVALID_VALUE;
	if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return rm_unsupported("cuMemPoolImportFromShareableHandle of a handle type but CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR");
	uint8_t token[TOKEN_SIZE];
	if (read_token((int)(intptr_t)handle, token, "cuMemPoolImportFromShareableHandle"))
		return CUDA_ERROR_INVALID_HANDLE;
	Remora__CuMemPoolImportFromShareableHandleReq req = REMORA__CU_MEM_POOL_IMPORT_FROM_SHAREABLE_HANDLE__REQ__INIT;
	req.handle.data = token;
	req.handle.len = TOKEN_SIZE;
	req.handletype = handleType;
	req.flags = flags;
	Remora__CuMemPoolImportFromShareableHandleRep *rep = NULL;
	CUresult r = rm_rpc_simple(RM_OP_cuMemPoolImportFromShareableHandle, &req.base,
				   &remora__cu_mem_pool_import_from_shareable_handle__rep__descriptor, (ProtobufCMessage **)&rep);
	if (r == CUDA_SUCCESS && rep)
		*pool_out = (CUmemoryPool)(uintptr_t)rep->pool_out;
	rm_rpc_free(rep ? &rep->base : NULL);
	return r;
}
