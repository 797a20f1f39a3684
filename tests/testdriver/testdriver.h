/* Remora test driver: a CPU implementation of part of the CUDA driver API.
 *
 * A test double for CI machines without a GPU: remorad loads it with
 * --driver, or a program finds it as libcuda.so.1.  Never installed.
 *
 * Objects handed out as CUcontext, CUstream, CUevent, CUmodule, CUlibrary,
 * CUfunction and CUkernel are the structs below; each starts with a magic
 * word so that a stale or foreign handle is refused instead of followed.
 * CUfunction and CUkernel are the same object, since cudart passes a CUkernel
 * wherever a CUfunction is expected.
 *
 * Locking: td_lock guards the device table, the allocation table and the
 * context lists.  Each stream has its own lock for its queue and counters,
 * and each hardware queue (stream.c) its own for its queue; a queue's lock
 * may be taken inside a stream's, never the other way round.  Never take
 * td_lock while holding a stream lock.
 *
 * Failure injection (inject.c), for the tests of what a caller does when the
 * driver fails: REMORA_TESTDRIVER_FAIL="NAME:N[,NAME:N...]" makes the N-th
 * call of NAME in this process (counted from 1, every call counted) fail with
 * CUDA_ERROR_OUT_OF_MEMORY before it does anything, and says so on stderr;
 * every other call behaves as usual, so a caller that tries again succeeds;
 * NAME:N+ fails the N-th and every later call. NAME is cuMemAllocHost_v2 or
 * cuEventCreate (or cuMemAddressReserve, whose hint is then not taken).  A malformed value aborts the
 * process at cuInit: a test that names a call wrongly fails loudly.
 */
#ifndef REMORA_TESTDRIVER_H
#define REMORA_TESTDRIVER_H

#include <cuda.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TD_EXPORT __attribute__((visibility("default")))

#define TD_DRIVER_VERSION 13000
#define TD_MAX_DEVICES 16
#define TD_DEVICE_ALIGN 256
#define TD_MAX_KERNEL_PARAMS 8
#define TD_MAX_ARG_BYTES 256
#define TD_MAX_HARDWARE_QUEUES 32
#define TD_LEGACY_PARAM_BYTES 4096

enum td_magic {
	TD_MAGIC_CONTEXT = 0x43545854, /* "CTXT" */
	TD_MAGIC_STREAM = 0x5354524d,  /* "STRM" */
	TD_MAGIC_EVENT = 0x45564e54,   /* "EVNT" */
	TD_MAGIC_MODULE = 0x4d4f444c,  /* "MODL" */
	TD_MAGIC_FUNCTION = 0x46554e43, /* "FUNC" */
	TD_MAGIC_GRAPH = 0x47525048,    /* "GRPH" */
	TD_MAGIC_NODE = 0x4e4f4445,     /* "NODE" */
	TD_MAGIC_EXEC = 0x45584543,     /* "EXEC" */
	TD_MAGIC_ARRAY = 0x41525259,    /* "ARRY" */
	TD_MAGIC_MIPMAP = 0x4d49504d,   /* "MIPM" */
	TD_MAGIC_TEXREF = 0x54585246,   /* "TXRF" */
	TD_MAGIC_COND = 0x434f4e44,     /* "COND" */
	TD_MAGIC_UOBJ = 0x554f424a      /* "UOBJ" */
};

extern pthread_mutex_t td_lock;

/* ---- devices (device.c) ---- */
int td_device_count(void);
bool td_initialized(void);
size_t td_device_total_mem(int ordinal);
/* CUDA_DEVICE_MAX_CONNECTIONS as read at cuInit (1..32), or 0 if unset or
 * invalid: then there is no hardware-queue model and streams are independent. */
int td_hardware_queues(void);
bool td_channels_fit(void);

/* ---- contexts (context.c) ---- */
struct td_stream;
struct td_channel;

struct td_context {
	uint32_t magic;
	int device;
	unsigned flags;
	bool primary;
	int primary_refs;            /* primary context: cuDevicePrimaryCtxRetain count */
	bool active;                 /* false once destroyed or primary refcount reached 0 */
	unsigned long long id;       /* cuCtxGetId: unique per activation in the process */
	size_t limits[CU_LIMIT_MAX];
	CUfunc_cache cache_config;   /* cuCtxSetCacheConfig: recorded, a hint */
	CUsharedconfig shmem_config; /* cuCtxSetSharedMemConfig: recorded */
	struct td_stream *legacy_stream;  /* created on first use */
	struct td_stream *streams;   /* every stream of this context, linked by next_in_context */
	struct td_channel *channels; /* td_hardware_queues() of them, or NULL (stream.c) */
	unsigned streams_created;    /* stream n gets channel n mod td_hardware_queues() */
	struct td_stream *record_stream; /* cuCtxRecordEvent, cuCtxWaitEvent's (ctx_events.c), or NULL */
	uint64_t wait_ticket;        /* what each new stream waits for on it (0: nothing); td_lock */
	struct td_context *next;     /* created-context list */
};

/* The calling thread's current context, or NULL. */
struct td_context *td_current_context(void);
/* The current context, checked: INVALID_CONTEXT if none, its sticky error if broken. */
/* The process's sticky error: set by the first faulting kernel (an illegal address, a
 * device-side assert), returned by every call that needs a context from then on, in every
 * context, and never cleared, as NVIDIA's driver does. Only with REMORA_TESTDRIVER_RECOVERABLE=1
 * (the request fuzzer, which runs every input in one process) does a primary context reset
 * clear it. */
CUresult td_sticky_error(void);
void td_fault(CUresult rc);
CUresult td_require_context(struct td_context **ctx);
bool td_context_valid(const struct td_context *ctx);
/* Waits for every stream of ctx; returns the sticky error, if any. */
CUresult td_context_synchronize(struct td_context *ctx);

/* ---- memory (memory.c) ---- */
enum td_alloc_kind {
	TD_ALLOC_DEVICE,
	TD_ALLOC_HOST,
	TD_ALLOC_REGISTERED, /* the program's memory, given by cuMemHostRegister: never freed here */
	TD_ALLOC_MAPPING,    /* a cuMemMap'ed piece of a reservation (vmm.c): its physical memory's */
	TD_ALLOC_MANAGED,    /* cuMemAllocManaged (managed.c): mmap'ed in a range of its own */
};

struct td_pool;

struct td_alloc {
	uintptr_t base;
	size_t size;
	enum td_alloc_kind kind;
	struct td_context *ctx;      /* NULL for a library's globals */
	int device;
	uint64_t buffer_id;
	struct td_pool *pool;        /* a stream-ordered allocation's pool, else NULL */
	unsigned int flags;          /* host memory: cuMemHostAlloc's or cuMemHostRegister's flags;
				      * managed: its attach flags */
	int read_mostly;             /* managed: CU_MEM_ADVISE_SET_READ_MOSTLY given */
	int preferred;               /* managed: the preferred location's device, CU_DEVICE_CPU or -2 (none) */
	int last_prefetch;           /* managed: the last prefetch's destination, or -2 (none) */
};

/* Finds the allocation holding [addr, addr + bytes); copies it to *out. */
bool td_find_alloc(uintptr_t addr, size_t bytes, struct td_alloc *out);
/* True if [addr, addr + bytes) lies inside one allocation a kernel may touch. */
bool td_device_range_ok(const void *addr, size_t bytes);
CUresult td_device_alloc(struct td_context *ctx, int device, size_t bytes, CUdeviceptr *out);
void td_free_context_allocs(struct td_context *ctx);
void td_free_device_range(uintptr_t base);
/* Records [base, base + size) as an allocation of kind (memory the caller owns and frees). */
CUresult td_track(void *base, size_t size, enum td_alloc_kind kind, struct td_context *ctx, int device);
/* Forgets the record at base without freeing anything; false if there is none of that kind. */
bool td_untrack(uintptr_t base, enum td_alloc_kind kind);
/* Charges or returns device memory of device, as cuMemAlloc does; false if it does not fit. */
bool td_device_reserve(int device, size_t size);
void td_device_unreserve(int device, size_t size);
void td_set_alloc_flags(uintptr_t base, unsigned int flags);
/* Updates the managed allocation holding ptr under td_lock: false if there is none. */
bool td_managed_update(uintptr_t ptr, void (*update)(struct td_alloc *a, const void *arg), const void *arg);
/* Marks the allocation at base as one of pool's (pools.c). */
void td_set_alloc_pool(uintptr_t base, struct td_pool *pool);
/* A pool's handle of the allocation holding ptr, or NULL (vmm.c reads it for attributes). */
struct td_pool *td_alloc_pool(uintptr_t ptr);
/* Counts a freed allocation of size bytes out of pool's usage (pools.c). */
void td_pool_freed(struct td_pool *pool, size_t size);

/* ---- streams and events (stream.c) ---- */
enum td_op_kind {
	TD_OP_COPY,        /* memmove(dst, src, bytes) */
	TD_OP_SET,         /* fill with an element of 1, 2 or 4 bytes */
	TD_OP_KERNEL,
	TD_OP_RECORD,      /* timestamp an event */
	TD_OP_WAIT,        /* wait until another stream reaches a ticket */
	TD_OP_EVENT_WAIT,  /* replayed graph node: wait for an event's last record */
	TD_OP_NOTHING,     /* replayed empty node */
	TD_OP_HOST,        /* a host function (cuLaunchHostFunc), run by the stream's worker */
	TD_OP_WRITE32,     /* cuStreamWriteValue32: a 4-byte store after the work before it */
	TD_OP_COND         /* replayed conditional node: its body graphs as its handle says (graph.c) */
};

struct td_kernel;
struct td_event;
struct td_gnode;

struct td_launch_shape {
	unsigned grid[3];
	unsigned block[3];
	unsigned shared_bytes;
	bool cooperative;            /* every block co-resident: grid.sync() is allowed */
	unsigned cluster[3];         /* blocks per cluster; 0s: clusters of one block */
	uintptr_t magic;             /* the launched module's kernelsMagic (bumpMagic); 0: none */
};

struct td_op {
	enum td_op_kind kind;
	union {
		struct { void *dst; const void *src; size_t bytes; bool src_host, dst_host; } copy; /* *_host: a graph node's host side */
		struct { void *dst; uint32_t value; unsigned width; size_t count; } set;
		struct { const struct td_kernel *kernel; struct td_launch_shape shape;
			 unsigned char args[TD_MAX_ARG_BYTES];
			 void *handle; /* a graph node's: the function or kernel it was given */ } launch;
		struct { struct td_event *event; uint64_t record_id; } record;
		struct { struct td_stream *stream; uint64_t ticket; } wait;
		struct { struct td_event *event; } event_wait;
		struct { CUhostFn fn; void *data; } host;
		struct { uint32_t *dst; uint32_t value; } write32;
		struct { const struct td_gnode *node; } cond;
	} u;
	struct td_stream *stream;    /* set by td_enqueue: the op's stream and ticket */
	uint64_t ticket;
	struct td_op *next;          /* in its channel's queue, then in its stream's */
};

struct td_stream {
	uint32_t magic;
	struct td_context *ctx;
	unsigned flags;
	int priority;
	bool legacy;                 /* the context's NULL stream */
	pthread_t owner_thread;      /* per-thread default stream: its thread */
	bool per_thread;
	pthread_mutex_t lock;
	pthread_cond_t changed;      /* signalled on enqueue, completion and shutdown */
	struct td_op *head, *tail;   /* ops handed to the worker */
	struct td_channel *channel;  /* the hardware queue ops pass through first, or NULL */
	uint64_t enqueued;           /* tickets handed out: op n has ticket n */
	uint64_t completed;          /* tickets finished, in order */
	bool stopping;
	int refs;
	pthread_t worker;
	struct td_stream *next_in_context;
	struct td_capture *capture;  /* the capture it takes part in, or NULL (graph.c) */
	struct td_gnode **deps;      /* while capturing: the nodes its next op depends on */
	size_t ndeps;
};

struct td_event {
	uint32_t magic;
	unsigned flags;
	struct td_context *ctx;      /* made in it: recorded only on its streams, as natively */
	pthread_mutex_t lock;
	struct td_stream *stream;    /* last record's stream (a reference), or NULL */
	uint64_t ticket;             /* last record's ticket in that stream */
	uint64_t record_id;          /* bumped by each record; a stale record op leaves no timestamp */
	bool timestamped;
	uint64_t timestamp_ns;
	int refs;
	struct td_capture *capture;  /* recorded in a capture: its nodes then (graph.c) */
	struct td_gnode **cap_nodes;
	size_t ncap_nodes;
	struct td_ipc_event *ipc;    /* an interprocess event's shared state (ipc.c), else NULL */
	int ipc_fd;                  /* its page's descriptor where this process made it, else -1 */
};

/* ---- interprocess events (ipc.c): records and waits through a page shared by processes ---- */
struct td_ipc_event;
/* A shared page for a new interprocess event, its descriptor in *fd; NULL if none. */
struct td_ipc_event *td_ipc_event_new(int *fd);
CUresult td_ipc_event_record(struct td_ipc_event *ev, struct td_stream *s);
CUresult td_ipc_event_wait(struct td_ipc_event *ev, struct td_stream *s);
CUresult td_ipc_event_query(struct td_ipc_event *ev);
CUresult td_ipc_event_synchronize(struct td_ipc_event *ev);
/* Exported memory (ipc.c): the allocation moved into a memfd in place, its descriptor (-1:
 * none); another process's mapped here (exporter pid, its base, buffer id, size, a descriptor
 * of the memfd, which it closes), counted; unmapped once closed as often as opened (pool: an
 * imported pool's allocation, given back by a free). */
int td_ipc_share_alloc(const struct td_alloc *a);
CUresult td_ipc_open_mem(uint32_t pid, uint64_t what, uint64_t id, uint64_t size, int fd, bool pool,
			 CUdeviceptr *pdptr);
bool td_ipc_close_mem(CUdeviceptr dptr, bool pool);
/* An event of the current context (stream.c); page: an opened interprocess event's state. */
CUresult td_event_new(CUevent *ph, unsigned flags, struct td_ipc_event *page);

void td_stream_ref(struct td_stream *s);

/* Resolves a CUstream (NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD or a
 * handle) to a stream of the current context. */
CUresult td_resolve_stream(CUstream handle, struct td_stream **out);
/* Appends op (malloc'd; the stream frees it); returns its ticket. */
uint64_t td_enqueue(struct td_stream *s, struct td_op *op);
void td_wait_ticket(struct td_stream *s, uint64_t ticket);
void td_stream_synchronize(struct td_stream *s);
void td_stream_unref(struct td_stream *s);
void td_destroy_context_streams(struct td_context *ctx);
struct td_op *td_op_new(enum td_op_kind kind);
/* A non-blocking stream of ctx, made under td_lock (NULL: no memory). */
struct td_stream *td_stream_new_locked(struct td_context *ctx);
/* Makes s wait for everything queued so far on other (under td_lock, as td_enqueue). */
void td_stream_wait_for(struct td_stream *s, struct td_stream *other);

/* ---- stream capture and graphs (graph.c) ---- */
struct td_capture;
struct td_gnode;

/* An op enqueued to a capturing stream becomes a node of the capture's graph
 * instead of running: true when td_enqueue took (and freed) op that way. */
bool td_capture_take(struct td_stream *s, struct td_op *op);
/* What work given to s gets: CUDA_ERROR_STREAM_CAPTURE_INVALIDATED once its capture is. */
CUresult td_capture_usable(struct td_stream *s);
/* A synchronizing call (synchronize, query) on s while it captures: invalidates the
 * capture and gives CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; CUDA_SUCCESS when s does not capture. */
CUresult td_capture_forbid(struct td_stream *s);
/* cuEventRecord on a capturing stream; cuStreamWaitEvent on an event recorded in a capture.
 * Return -1 when not a capture matter (the caller goes on as usual). */
int td_capture_record(struct td_event *e, struct td_stream *s);
int td_capture_wait(struct td_stream *s, struct td_event *e, CUresult *rc);
/* The event's capture snapshot is dropped (event destroyed or recorded outside capture). */
void td_capture_event_clear(struct td_event *e);
/* A graph kernel node's launch as an op (launch.c). */
CUresult td_kernel_node_op(const CUDA_KERNEL_NODE_PARAMS *p, struct td_op *op);
/* A conditional node at its turn on a stream: its handle's value picks the body graphs
 * that run, at once, on the stream's worker (graph.c). */
void td_graph_run_conditional(const struct td_gnode *node);
/* cudaGraphSetConditional of a kernel's CPU version: false for no handle of the model's. */
bool td_graph_set_conditional(uint64_t handle, unsigned value);
/* cuGraphAddNode(_v2) of a conditional node: its body graphs in p->phGraph_out. */
CUresult td_graph_add_conditional(CUgraphNode *ph, CUgraph h, const CUgraphNode *deps, size_t ndeps,
				  CUDA_CONDITIONAL_NODE_PARAMS *p);
/* Runs a kernel, copy, set or host op now, on the calling thread (stream.c). */
void td_run_op_now(struct td_op *op);
/* A context synchronize while a stream of ctx captures: as td_capture_forbid for each. */
CUresult td_capture_forbid_context(struct td_context *ctx);

/* ---- failure injection (inject.c) ---- */
enum td_fail_point { TD_FAIL_MEM_ALLOC_HOST, TD_FAIL_EVENT_CREATE, TD_FAIL_ADDRESS_HINT, TD_FAIL_POINTS };

/* Reads REMORA_TESTDRIVER_FAIL, once; aborts on a malformed value. */
void td_fail_configure(void);
/* Counts a call of point's function: true when this call is to fail. */
bool td_fail_now(enum td_fail_point point);
/* REMORA_TESTDRIVER_CRASH=NAME: NAME (cuMemAlloc_v2) raises SIGSEGV in the calling
 * thread, as a driver that faults inside a call (the tests of a worker's crash report). */
void td_crash_if_asked(const char *name);
/* REMORA_TESTDRIVER_CONTEXT_MS: making a primary context takes that many milliseconds, as a
 * real GPU's first context takes most of a second. */
void td_context_delay(void);
/* REMORA_TESTDRIVER_TIMED_RECORD_MS: a stream runs a record of a timed event (one without
 * CU_EVENT_DISABLE_TIMING) that many milliseconds late, as a stream behind other work
 * reaches it late: a record of remorad's that lands behind a client's is then still
 * unfinished when the client's is done (drv_ctxevents). */
void td_timed_record_delay(const struct td_event *e);
/* REMORA_TESTDRIVER_REUSE_FREED_VA: as an H100's driver was seen to do, a module loaded
 * after cuMemAddressFree (or cuMemFree, cuMemFreeAsync) lays its memory at the start of the range given
 * back. vmm.c and memory.c record the range; a module takes it (one granule, until it
 * unloads): its address, or 0. */
void td_freed_va_record(uintptr_t base);
uintptr_t td_freed_va_take(void);

/* ---- kernels (kernels.c, launch.c) ---- */
struct td_kernel {
	const char *name;
	unsigned param_count;
	unsigned param_size[TD_MAX_KERNEL_PARAMS];
	unsigned static_shared_bytes;
	unsigned registers;
	/* Runs the whole grid; CUDA_ERROR_ILLEGAL_ADDRESS if it would touch
	 * memory outside every allocation. */
	CUresult (*run)(const struct td_launch_shape *shape, const unsigned char *args);
};

const struct td_kernel *td_find_kernel(const char *name);
const struct td_kernel *td_kernel_at(size_t index);
size_t td_param_offset(const struct td_kernel *k, unsigned index);
size_t td_args_size(const struct td_kernel *k);

struct td_global {
	const char *name;
	size_t size;
	const void *initial; /* NULL: zeros */
	bool named_only;     /* offered only by an image that names it (not a fatbin's) */
};
const struct td_global *td_global_at(size_t index);
/* Module m's variable of that name (module.c); 0: none. */
struct td_module;
CUdeviceptr td_module_global(struct td_module *m, const char *name);

/* ---- modules (module.c) ---- */
struct td_module;

struct td_function {
	uint32_t magic;
	const struct td_kernel *kernel;
	struct td_module *module;
	int max_dynamic_shared;
	int preferred_carveout;
	CUfunc_cache cache_config;
	int non_portable_cluster;    /* CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED */
	int cluster_policy;          /* CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE */
	int required_cluster[3];     /* CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH, _HEIGHT, _DEPTH */
	/* The launch before CUDA 4 (legacy_launch.c): block shape, shared size, parameters. */
	unsigned legacy_block[3], legacy_shared;
	size_t legacy_size;
	unsigned char legacy_params[TD_LEGACY_PARAM_BYTES];
};
struct td_function *td_function_from(const void *handle);


/* ---- arrays (arrays.c) ---- */
/* An array as host memory: depth slices of height rows of width elements of elem bytes,
 * rows packed (pitch = width * elem). */
struct td_array {
	uint32_t magic;
	CUDA_ARRAY3D_DESCRIPTOR desc;
	size_t elem, width, height, depth;
	char *data;
	bool level;                  /* a mipmapped array's level: freed with it */
};
/* The array of handle a, or NULL. */
struct td_array *td_array_of(CUarray a);

/* ---- texture and surface objects (textures.c) ---- */
/* The float texel of 2-D texture tex at unnormalized (u, v), point-sampled, in *out. */
CUresult td_texture_fetch2d(unsigned long long tex, float u, float v, float *out);
/* The address of size bytes at byte xbytes of row y of surface surf's array, or NULL. */
void *td_surface_element(unsigned long long surf, long long xbytes, long long y, size_t size);

/* A graph memory node's allocation freed outside its graph (graph.c): 1 if it was live
 * (allocated by a launch), -1 if not, 0 when dptr is no graph allocation. */
int td_graph_mem_release(CUdeviceptr dptr);
/* ---- legacy texture and surface references (texrefs.c) ---- */
enum td_ref_binding { TD_REF_NONE, TD_REF_ARRAY, TD_REF_MIPMAP, TD_REF_LINEAR, TD_REF_PITCH2D };
/* A module's reference (module.c keeps TD_MODULE_REFS of them) or cuTexRefCreate's. */
struct td_texref {
	uint32_t magic;
	bool surface, created;
	enum td_ref_binding bound;
	CUarray array;
	CUmipmappedArray mipmap;
	CUdeviceptr dptr;
	size_t bytes, pitch, width, height;
	CUarray_format format;
	int channels;
	CUaddress_mode address[3];
	CUfilter_mode filter, mipmap_filter;
	float bias, min_clamp, max_clamp, border[4];
	unsigned anisotropy, flags;
};
#define TD_MODULE_REFS 2
/* The references a module may offer, by index: their names and whether each is a surface's. */
const char *td_module_ref_name(size_t i, bool *surface);
/* A reference of module handle h named name, if its image offers it, in *out (module.c). */
CUresult td_module_reference(CUmodule h, const char *name, bool surface, struct td_texref **out);
/* Sets a reference's defaults (texrefs.c). */
void td_texref_init(struct td_texref *t, bool surface);
/* Float element i of the linear memory the last bound module reference named legacyTex
 * reads (the model's one texture unit), as tex1Dfetch: ILLEGAL_ADDRESS if unbound. */
CUresult td_legacy_tex_fetch(long long i, float *out);

#endif
