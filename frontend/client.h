/* The client library's internal interface: calls to the daemon, and state shared by its files. */
#ifndef REMORA_CLIENT_H
#define REMORA_CLIENT_H

#include <cuda.h>
#include <cudaProfiler.h>
#include <protobuf-c/protobuf-c.h>
#include <stdint.h>
#include <sys/uio.h>

#include "api_ops.h"
#include "log.h"
#include "wire.h"

#define RM_EXPORT __attribute__((visibility("default")))

/* One call to the daemon. */
struct rm_link;

struct rm_rpc_call {
	uint32_t op;
	const ProtobufCMessage *req;
	const struct iovec *bulk_out; /* sent after the message, straight from the caller's memory */
	int nbulk_out;
	void *bulk_in;                /* the reply's bulk is read straight into this */
	size_t bulk_in_len;           /* and must be exactly this long */
	const struct iovec *bulk_in_vec; /* or scattered into these, exactly as long together */
	int nbulk_in_vec;
	void (*before_bulk_in)(void *arg); /* called once the reply says its bulk follows */
	void *before_bulk_in_arg;
	int (*read_bulk)(void *arg, struct rm_link *l, uint64_t len); /* or reads a successful reply's bulk
				       * of at most what was asked itself (a compressed copy's) */
	void *read_bulk_arg;
	const ProtobufCMessageDescriptor *rep_desc;
	ProtobufCMessage *rep;        /* out: unpacked reply, free with rm_rpc_free */
	const int *pass_fd;           /* passed to the daemon just before the frame (transport.h
				       * send_fd); NULL: none. CUDA_ERROR_NOT_SUPPORTED, nothing sent,
				       * where the connection cannot */
	int async;                    /* sent async (no reply) whatever the op's flags say */
	uint64_t order[2];            /* the call's stream and event handles (0: none; a stream of
				       * RM_ORDER_NO_STREAM: the call names only the event) */
	int ordered;                  /* order[] names all the call is ordered against, so other
				       * threads' channels are fenced only for those (rpc.c) */
};

/* order[0] of a call that names an event and no stream (cuEventSynchronize). */
#define RM_ORDER_NO_STREAM UINT64_MAX

/* Sends the call; unless its op is async, waits for the reply. Returns the
 * call's CUresult, an earlier async call's error at a synchronizing call, or
 * CUDA_ERROR_DEVICE_UNAVAILABLE once the connection is lost. */
CUresult rm_rpc(struct rm_rpc_call *c);
/* rm_rpc without bulk data. */
CUresult rm_rpc_simple(uint32_t op, const ProtobufCMessage *req,
		       const ProtobufCMessageDescriptor *rep_desc, ProtobufCMessage **rep);
/* rm_rpc_simple for a call ordered against stream and event only (0: none; stream
 * RM_ORDER_NO_STREAM: the event alone): an async call on a stream, or one that waits for a
 * stream or event (cuStreamSynchronize, cuEventQuery). Other threads' async calls on other
 * streams and events need not have run before it. */
CUresult rm_rpc_ordered(uint32_t op, const ProtobufCMessage *req, uint64_t stream, uint64_t event);
void rm_rpc_free(ProtobufCMessage *rep);
/* Gives up the connection after a failure outside rm_rpc (a copy link's). */
void rm_rpc_fail(const char *what, int err);
/* A reply that breaks its call's contract (a length, size or offset out of bounds):
 * nothing of it may be used. Gives up the connection as for a malformed reply, with
 * one line on stderr saying what (printf format), and returns CUDA_ERROR_DEVICE_UNAVAILABLE. */
CUresult rm_rpc_bad_reply(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Opens the process's client (client_object.h): connects and greets the daemon once per
 * process; later calls give the first outcome (CUDA_ERROR_DEINITIALIZED once it closed at exit). */
CUresult rm_connect_once(void);
/* For tests that play the server (tests/fuzz/fuzz_client.c): closes the process's
 * connection, lost or not, and forgets every answer and layout kept, so that the next call
 * connects afresh. Only while no other thread calls, and with nothing handed out before
 * (names, handles) used again. */
void rm_rpc_reset(void);
/* Forgets the function names launch.c keeps (rm_rpc_reset). */
void rm_launch_reset(void);
/* frontend/module.c: the program's image file read whole, NUL-ended; *image the caller's to free. */
CUresult rm_read_image_file(const char *fname, uint8_t **image);
/* Whether the process's connection was closed at exit (client_object.h): then every call
 * returns CUDA_ERROR_DEINITIALIZED, and what fails says nothing. */
int rm_client_closed(void);
/* The GPU host's driver version, known after rm_connect_once. */
int rm_remote_driver_version(void);
/* The copy links of the process's connection (copy_links.h); NULL: none. */
struct rm_copy_links *rm_process_copy_links(void);

/* What every unsupported entry point returns, logging its name once. */
CUresult rm_unsupported(const char *name);

/* Brackets a call made through a _ptds/_ptsz entry point. */
void rm_per_thread_enter(void);
void rm_per_thread_leave(void);
int rm_per_thread_active(void);

/* The calling thread's current context (0 when none). */
CUcontext rm_ctx_current(void);
/* Remembers ctx as a context of device dev, handed out by the daemon. */
void rm_ctx_known(CUcontext ctx, CUdevice dev);
/* Remembers ctx as a context the program created on dev, with its flags (implicit: those of
 * them it did not ask for) and id; rm_ctx_forget forgets it once destroyed, popping it if
 * it is the calling thread's current context. */
void rm_ctx_known_created(CUcontext ctx, CUdevice dev, unsigned flags, unsigned implicit, unsigned long long id);
void rm_ctx_forget(CUcontext ctx);
/* Whether ctx is a context the program created and has not destroyed. */
int rm_ctx_created(CUcontext ctx);
/* Context ctx is about to be destroyed: the device buffers of mapped host memory made in
 * it go while it works (host_memory.c); the host memory stays the program's. */
void rm_host_memory_ctx_gone(CUcontext ctx);
/* Pushes ctx on the calling thread's stack of current contexts. */
CUresult rm_ctx_push(CUcontext ctx);

/* Finds the host allocation or registration holding p (any out may be NULL); 1 if there is one. */
int rm_host_alloc_find(const void *p, void **base, size_t *size, unsigned int *flags);
/* What is known of the host allocation or registration holding p. */
struct rm_host_info {
	void *base;
	size_t size;
	unsigned int flags;
	uint64_t buffer_id;   /* unique among this process's host allocations (high bit set) */
	CUdeviceptr mapped;   /* its device buffer's base (cuMemHostGetDevicePointer), or 0 */
};
int rm_host_alloc_info(const void *p, struct rm_host_info *out);
/* Whether [p, p + n) lies inside one pinned allocation shared with the daemon
 * (docs/hotpath.md, "Shared pinned memory"): 1 with the region's address and p's offset in
 * it, else 0. */
int rm_host_shared_find(const void *p, size_t n, uint64_t *region, uint64_t *offset);
/* Whether the calling thread's connection passes descriptors (its daemon is on this host). */
int rm_rpc_passes_fds(void);
/* Whether a stream capture may be open in this process (capture.c). */
int rm_capture_any_open(void);

/* Copies for the library's own use (memory.c): the coherence copies of mapped and managed
 * memory. The copy alone, without the coherence steps the exported cuMemcpy* take around it,
 * so that coherence never re-enters itself. rm_copy_to_device is async on stream unless
 * blocking (then as cuMemcpyHtoD's: it returns once the bytes are staged, as a blocking copy
 * from pageable memory may); rm_copy_from_device is blocking, as cuMemcpyDtoH's. */
CUresult rm_copy_to_device(CUdeviceptr dst, const void *src, size_t n, CUstream stream, int blocking);
CUresult rm_copy_from_device(void *dst, CUdeviceptr src, size_t n);

/* Mapped host memory (host_memory.c): its device buffer is kept coherent at
 * synchronization points. Before a launch to stream, host copies that changed go up;
 * after a synchronizing call that succeeded, device copies come back down if work was
 * submitted since. Both are no-ops while nothing is mapped; rm_mapped_after_sync returns
 * what the copies give (CUDA_SUCCESS when there is nothing to do). */
CUresult rm_mapped_before_launch(CUstream stream);
/* Backs every pinned allocation that a word of a kernel's parameters points into with
 * device memory at its own address (host_alias.h), so that the kernel reads it there. */
CUresult rm_host_alias_params(const uint8_t *params, size_t len);
CUresult rm_mapped_after_sync(void);
/* Before a synchronizing call: host copies that changed go up at once, on a stream that
 * waits for no other, if kernels were launched since device copies last came down. */
CUresult rm_mapped_before_sync(void);
/* Whether a synchronizing call may have more to do than its own: host memory to bring
 * down or up (mapped, managed, graphs' host ranges) or host functions to have run (the
 * client's callback channel is open). While not, a blocking copy from pageable memory
 * need not wait for its reply (memory.c). */
int rm_sync_has_effects(void);

/* Packs a launch's arguments into req->params as cuLaunchKernel sends them: from extra's
 * buffer, or from kernelParams at the function's parameter offsets, into scratch when they
 * fit, else into *heap (for the caller to free). (launch.c) */
struct Remora__LaunchKernel;
CUresult rm_pack_kernel_params(CUfunction f, void **kernelParams, void **extra, struct Remora__LaunchKernel *req,
			       uint8_t *scratch, size_t scratch_len, uint8_t **heap);
/* The reverse for a kernel node's getter: packed (len bytes, f's arguments) as f's kernelParams,
 * an array of pointers into a copy of packed, all in one allocation (*block, to free()). */
CUresult rm_unpack_kernel_params(CUfunction f, const uint8_t *packed, size_t len, void ***params, void **block);

/* Managed memory (managed.c): rm_managed_push sends what the host changed before work on
 * stream that may read it; rm_managed_pull brings what the device changed down after a
 * synchronizing call, if work was sent since (rm_managed_note_work: any async call, any
 * copy to the device). No-ops while nothing is managed. rm_managed_holds: whether
 * [p, p+n) lies in one managed allocation. */
CUresult rm_managed_push(CUstream stream);
CUresult rm_managed_pull(void);
void rm_managed_note_work(void);
int rm_managed_holds(CUdeviceptr p, size_t n);
/* Whether [p, p + n) is device memory (managed included), not the program's own (misc_calls.c). */
int rm_on_device(CUdeviceptr p, size_t n);

/* Whether the calling thread is running a program's host function (host_functions.c):
 * then every call to the daemon is refused with CUDA_ERROR_NOT_PERMITTED. */
int rm_hostfn_running(void);
/* Whether the program has used host functions (the callback channel is open). */
int rm_hostfn_used(void);
/* Whether anything is managed (managed.c). */
int rm_managed_any(void);

/* Library-wide set-up: logging. Idempotent. */
void rm_client_init(void);
#define RM_MAX_VISIBLE_DEVICES 64 /* ordinals REMORA_VISIBLE_DEVICES may list */
/* Parses REMORA_VISIBLE_DEVICES ("2,0": the host's GPUs 2 and 0, as ordinals 0 and 1)
 * into out; an unset or empty text leaves *n 0 (all GPUs). -1 for a malformed one. */
int rm_visible_devices(const char *text, int32_t *out, size_t cap, size_t *n);
/* REMORA_PEER_TIMEOUT's text (whole seconds, 1 to 3600: how long the daemon may be silent
 * while this client waits on it) in milliseconds; unset or empty: the default. -EINVAL
 * for a malformed one. */
int rm_peer_timeout_ms(const char *text);

#endif
