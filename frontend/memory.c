/* Copies between the program's memory and the GPU (host allocations: host_memory.c).
 * Copy data travels as bulk, straight from or into the program's buffer; a copy whose
 * host side lies in pinned memory shared with the daemon (docs/hotpath.md) carries only
 * where it is, and the daemon's driver copies it. */
#include "client.h"
#include "client_stubs.h"
#include "compress.h"
#include "copy_links.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "copy_profile.h"
#include "graph_host.h"
#include "remora.pb-c.h"

/* Pre-faulting a pageable destination. A program's fresh buffer (malloc, or
 * calloc, which leaves new pages untouched) takes a page fault, and the kernel
 * zeroes a page, for every 4 KiB the reply's bulk is received into; done by
 * the receiving thread, that halves a large copy's rate. A helper thread
 * populates the range (MADV_POPULATE_WRITE: faults pages in writable, leaves
 * present ones and every byte as they are) from its start while the reply is
 * on its way, and the receive follows behind it on another core. */
#define PREFAULT_MIN (4u << 20)  /* smaller copies are not worth the hand-off */
#define PREFAULT_STEP (2u << 20) /* populated per madvise, so a cancel is quick */

/* A blocking copy from pageable memory of at least this many bytes does not wait for its
 * reply (copy_to_device); smaller ones do, so that a program's error checks of small copies
 * see the error at the copy where they are most likely to look. */
#define RM_DEFER_PAGEABLE_MIN (64u << 10)

static struct {
	pthread_mutex_t lock;
	pthread_cond_t changed;
	char *next, *end; /* left to populate; next == end when idle */
	int claimed;      /* a copy owns the helper (one copy at a time) */
	int in_step;      /* the helper is inside madvise */
	int state;        /* 0 not started, 1 running, -1 unavailable */
	uint64_t busy_ns; /* CPU time inside madvise, counted while copies are profiled */
} prefault = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, NULL, 0, 0, 0, 0};

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* 1 when every page of [p, p + len) is present. A destination used before (a
 * program copying into the same buffer again) needs no populating, and mincore
 * says so for a fraction of the CPU MADV_POPULATE_WRITE spends walking present
 * pages (8% of a CPU during a 256 MiB copy here, docs/hotpath.md). A present page
 * that is not writable (the zero page after a read, copy on write after fork)
 * counts as present: the receive then takes that fault itself. */
static int resident(void *p, size_t len)
{
	unsigned char vec[PREFAULT_STEP / 4096];
	size_t page = (size_t)sysconf(_SC_PAGESIZE), pages = (len + page - 1) / page;
	if (pages > sizeof(vec) || mincore(p, len, vec))
		return 0;
	for (size_t i = 0; i < pages; i++)
		if (!(vec[i] & 1))
			return 0;
	return 1;
}

static void *prefault_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&prefault.lock);
	for (;;) {
		while (prefault.next == prefault.end)
			pthread_cond_wait(&prefault.changed, &prefault.lock);
		char *p = prefault.next;
		size_t len = (size_t)(prefault.end - p) < PREFAULT_STEP ? (size_t)(prefault.end - p) : PREFAULT_STEP;
		prefault.next = p + len;
		prefault.in_step = 1;
		pthread_mutex_unlock(&prefault.lock);
		uint64_t t0 = rm_copy_profile_mode > 0 ? thread_cpu_ns() : 0;
		int err = resident(p, len) ? 0 : madvise(p, len, MADV_POPULATE_WRITE) ? errno : 0;
		uint64_t busy = t0 ? thread_cpu_ns() - t0 : 0;
		pthread_mutex_lock(&prefault.lock);
		prefault.busy_ns += busy;
		prefault.in_step = 0;
		if (err == EINVAL) { /* a kernel before 5.14: never again */
			prefault.state = -1;
			prefault.next = prefault.end;
		} else if (err) { /* not plain writable memory: leave this range to the receive */
			prefault.next = prefault.end;
		}
		pthread_cond_broadcast(&prefault.changed);
	}
	return NULL;
}

/* Starts populating [p, p + n) behind the caller's back; 1 when the caller must call prefault_end. */
static int prefault_begin(void *p, size_t n)
{
	if (n < PREFAULT_MIN || rm_host_alloc_find(p, NULL, NULL, NULL)) /* pinned memory is locked in already */
		return 0;
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	uintptr_t start = ((uintptr_t)p + page - 1) & ~(uintptr_t)(page - 1);
	uintptr_t end = ((uintptr_t)p + n) & ~(uintptr_t)(page - 1);
	int started = 0;
	pthread_mutex_lock(&prefault.lock);
	if (prefault.state == 0) {
		pthread_t t;
		pthread_attr_t attr;
		pthread_attr_init(&attr);
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		prefault.state = pthread_create(&t, &attr, prefault_main, NULL) ? -1 : 1;
		pthread_attr_destroy(&attr);
	}
	if (prefault.state == 1 && !prefault.claimed) {
		prefault.claimed = 1;
		prefault.next = (char *)start;
		prefault.end = (char *)end;
		pthread_cond_broadcast(&prefault.changed);
		started = 1;
	}
	pthread_mutex_unlock(&prefault.lock);
	return started;
}

/* Cancels what is left and waits until the helper no longer touches the range;
 * returns the helper's CPU time inside madvise so far (counted while profiling). */
static uint64_t prefault_end(void)
{
	pthread_mutex_lock(&prefault.lock);
	prefault.next = prefault.end;
	while (prefault.in_step)
		pthread_cond_wait(&prefault.changed, &prefault.lock);
	prefault.claimed = 0;
	uint64_t busy = prefault.busy_ns;
	pthread_mutex_unlock(&prefault.lock);
	return busy;
}

static uint64_t prefault_busy_ns(void)
{
	pthread_mutex_lock(&prefault.lock);
	uint64_t busy = prefault.busy_ns;
	pthread_mutex_unlock(&prefault.lock);
	return busy;
}

/* Waits for a striped copy's links; a link that failed loses the connection. */
static CUresult finish_striped(struct rm_copy_links *cl, CUresult r)
{
	int err = rm_copy_links_finish(cl, r == CUDA_ERROR_DEVICE_UNAVAILABLE);
	if (err && r != CUDA_ERROR_DEVICE_UNAVAILABLE) {
		rm_rpc_fail("copy link", err);
		r = CUDA_ERROR_DEVICE_UNAVAILABLE;
	}
	return r;
}

/* The Async copies are ordered in CUDA after their stream's earlier work only, not after
 * other threads' work on other streams: their calls fence other channels by that stream
 * (rpc.c, rm_rpc_call.order). The blocking ones go on the legacy stream, after everything. */
static void order_by_stream(struct rm_rpc_call *c, uint32_t op, CUstream stream)
{
	if (op == RM_OP_cuMemcpyHtoDAsync_v2 || op == RM_OP_cuMemcpyDtoHAsync_v2) {
		c->order[0] = (uint64_t)(uintptr_t)stream;
		c->ordered = 1;
	}
}

struct striped_in {
	struct rm_copy_links *cl;
	void *dst;
	uint64_t n;
	struct rm_copy_plan plan;
};

static void start_links_in(void *arg)
{
	struct striped_in *in = arg;
	rm_copy_links_start(in->cl, 1, in->dst, in->n, in->plan);
}

/* A copy from or to shared pinned memory, when [host, host + n) lies in such: 1 with *r
 * set, else 0 (the copy's bytes travel). The Async forms return once the daemon has the
 * copy: an HtoDAsync is sent async anyway, a DtoHAsync is made so, as the bytes land in
 * this process's memory without a reply. Not while a capture may be open: a graph would
 * keep the daemon's mapping of memory that can be unshared before the graph runs. */
static int copy_shared(uint32_t op, int to_device, CUdeviceptr dptr, const void *host, size_t n, CUstream stream,
		       CUresult *r)
{
	uint64_t region, off;
	if (!rm_host_shared_find(host, n, &region, &off) || rm_capture_any_open())
		return 0;
	struct rm_copy_profile prof;
	rm_copy_profile_begin(&prof, "client", rm_op_names[op], n);
	prof.host = "shared";
	Remora__MemcpyHtoD in = REMORA__MEMCPY_HTO_D__INIT;
	Remora__MemcpyDtoH out = REMORA__MEMCPY_DTO_H__INIT;
	struct rm_rpc_call c = {.op = op};
	if (to_device) {
		in.dst = dptr;
		in.stream = (uint64_t)(uintptr_t)stream;
		in.count = n;
		in.shared = region;
		in.shared_offset = off;
		c.req = &in.base;
	} else {
		out.src = dptr;
		out.stream = (uint64_t)(uintptr_t)stream;
		out.count = n;
		out.shared = region;
		out.shared_offset = off;
		c.req = &out.base;
		c.async = op == RM_OP_cuMemcpyDtoHAsync_v2;
	}
	order_by_stream(&c, op, stream);
	*r = rm_rpc(&c);
	rm_copy_profile_end(&prof);
	return 1;
}

static CUresult copy_to_device(uint32_t op, CUdeviceptr dst, const void *src, size_t n, CUstream stream)
{
	if (!n)
		return CUDA_SUCCESS;
	if (!src)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult shared_r;
	if (op == RM_OP_cuMemcpyHtoDAsync_v2 && rm_capture_any_open() &&
	    rm_graph_host_capture(0, dst, (void *)src, n, stream, &shared_r))
		return shared_r; /* captured through a staging buffer (graph_host.c) */
	if (copy_shared(op, 1, dst, src, n, stream, &shared_r))
		return shared_r;
	Remora__MemcpyHtoD req = REMORA__MEMCPY_HTO_D__INIT;
	req.dst = dst;
	req.stream = (uint64_t)(uintptr_t)stream;
	/* CUDA lets a blocking copy from pageable memory return once the bytes are staged; from
	 * page-locked memory (allocated or registered) only once they are on the device. */
	req.pageable = op == RM_OP_cuMemcpyHtoD_v2 && !rm_host_alloc_find(src, NULL, NULL, NULL);
	struct iovec data[RM_STRIPE_MAX_CHUNKS_PER_LINK + 1]; /* filled as far as used: no memset per copy */
	data[0] = (struct iovec){(void *)src, n};
	struct rm_rpc_call c = {.op = op, .req = &req.base, .bulk_out = data, .nbulk_out = 1};
	/* Staged, here, is in the sockets: such a copy is sent async and returns once every
	 * byte is (the transports keep no pointer to the program's buffer), not a round trip
	 * later; its error comes at the next synchronizing call, as CUDA's async errors do. The
	 * daemon finishes it before it runs this channel's next call, or another channel's that
	 * fences on it (rpc.c): whatever stream reads it next, natively a race CUDA leaves open
	 * and programs do not expect. Only while a synchronization has nothing else to do
	 * (rm_sync_has_effects: CUDA's wait for the stream before the copy is then seen by
	 * nothing) and no capture is open; and for one in a few, that the link stays measured. */
	int defer = req.pageable && n >= RM_DEFER_PAGEABLE_MIN && !rm_sync_has_effects() && !rm_capture_any_open();
	order_by_stream(&c, op, stream);
	struct rm_copy_profile prof;
	rm_copy_profile_begin(&prof, "client", rm_op_names[op], n);
	if (prof.active)
		prof.host = rm_host_alloc_find(src, NULL, NULL, NULL) ? "pinned" : "pageable";
	struct rm_copy_links *cl = rm_process_copy_links();
	uint8_t *packed = NULL; /* the copy's bytes compressed (compress.h): never striped */
	size_t packed_len = 0;
	if (rm_compress_for(0, n)) {
		int enc = rm_compress_encode(src, n, &packed, &packed_len);
		rm_compress_outcome(0, enc == 0, n);
		if (enc == 0) {
			req.compressed = 1;
			req.count = n;
			data[0] = (struct iovec){packed, packed_len};
			prof.host = "compressed";
		}
	}
	struct rm_copy_plan plan = packed ? (struct rm_copy_plan){1, 0} : rm_copy_links_take(cl, 0, n);
	c.async = defer && (packed || !rm_copy_links_sample(cl, 0, n, plan));
	if (c.async && packed)
		rm_copy_links_unwaited(cl); /* never a sample, but the next waited copy waits for it */
	if (plan.links > 1) { /* this frame carries link 0's share; the links send theirs meanwhile */
		req.links = plan.links;
		req.chunk = plan.chunk;
		req.count = n;
		c.nbulk_out = rm_copy_links_share0((void *)src, n, plan, data, RM_STRIPE_MAX_CHUNKS_PER_LINK + 1);
		rm_copy_links_start(cl, 0, (void *)src, n, plan);
	}
	uint64_t t0 = cl ? rm_transport_now_ns() : 0;
	CUresult r = rm_rpc(&c);
	if (plan.links > 1)
		r = finish_striped(cl, r);
	if (cl && r == CUDA_SUCCESS && op == RM_OP_cuMemcpyHtoD_v2 && !packed && !c.async) /* its reply waited for: the link's pace */
		rm_copy_links_done(0, n, plan, rm_transport_now_ns() - t0);
	free(packed);
	rm_copy_profile_end(&prof);
	return r;
}

static CUresult copy_from_device(uint32_t op, void *dst, CUdeviceptr src, size_t n, CUstream stream)
{
	if (!n)
		return CUDA_SUCCESS;
	if (!dst)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult shared_r;
	if (op == RM_OP_cuMemcpyDtoHAsync_v2 && rm_capture_any_open() &&
	    rm_graph_host_capture(1, src, dst, n, stream, &shared_r))
		return shared_r; /* captured through a staging buffer (graph_host.c) */
	if (copy_shared(op, 0, src, dst, n, stream, &shared_r))
		return shared_r;
	Remora__MemcpyDtoH req = REMORA__MEMCPY_DTO_H__INIT;
	req.src = src;
	req.count = n;
	req.stream = (uint64_t)(uintptr_t)stream;
	struct rm_rpc_call c = {.op = op, .req = &req.base, .bulk_in = dst, .bulk_in_len = n};
	order_by_stream(&c, op, stream);
	struct iovec share0[RM_STRIPE_MAX_CHUNKS_PER_LINK + 1];
	struct rm_copy_links *cl = rm_process_copy_links();
	struct rm_compress_in packed = {.dst = dst, .n = n};
	int compress = rm_compress_for(1, n);
	struct striped_in in = {.cl = cl, .dst = dst, .n = n,
				.plan = compress ? (struct rm_copy_plan){1, 0} : rm_copy_links_take(cl, 1, n)};
	if (compress) { /* the daemon answers compressed where it shrinks, raw (n bytes) where not */
		req.compress = 1;
		req.link_bps = rm_compress_plain_bps(1, n);
		c.read_bulk = rm_compress_read_bulk;
		c.read_bulk_arg = &packed;
	}
	if (in.plan.links > 1) { /* the reply carries link 0's share; the links are started when it comes */
		req.links = in.plan.links;
		req.chunk = in.plan.chunk;
		c.bulk_in = NULL;
		c.bulk_in_len = 0;
		c.bulk_in_vec = share0;
		c.nbulk_in_vec = rm_copy_links_share0(dst, n, in.plan, share0, RM_STRIPE_MAX_CHUNKS_PER_LINK + 1);
		c.before_bulk_in = start_links_in;
		c.before_bulk_in_arg = &in;
	}
	struct rm_copy_profile prof;
	rm_copy_profile_begin(&prof, "client", rm_op_names[op], n);
	uint64_t busy0 = 0;
	if (prof.active) {
		prof.host = rm_host_alloc_find(dst, NULL, NULL, NULL) ? "pinned" : "pageable";
		busy0 = prefault_busy_ns();
	}
	int prefaulting = prefault_begin(dst, n);
	uint64_t t0 = cl ? rm_transport_now_ns() : 0;
	CUresult r = rm_rpc(&c);
	if (in.plan.links > 1)
		r = finish_striped(cl, r);
	if (compress && r == CUDA_SUCCESS)
		rm_compress_outcome(1, packed.compressed, n);
	if (cl && r == CUDA_SUCCESS && !compress) /* a try that went raw was not pipelined: not the link's pace */
		rm_copy_links_done(1, n, in.plan, rm_transport_now_ns() - t0);
	if (prefaulting) {
		uint64_t mark = rm_copy_profile_mark(&prof);
		uint64_t busy = prefault_end();
		rm_copy_profile_add(&prof, &prof.wait, mark);
		prof.prefault_ns = busy - busy0;
	}
	rm_copy_profile_end(&prof);
	return r;
}

CUresult rm_copy_to_device(CUdeviceptr dst, const void *src, size_t n, CUstream stream, int blocking)
{
	return copy_to_device(blocking ? RM_OP_cuMemcpyHtoD_v2 : RM_OP_cuMemcpyHtoDAsync_v2, dst, src, n, stream);
}

CUresult rm_copy_from_device(void *dst, CUdeviceptr src, size_t n)
{
	return copy_from_device(RM_OP_cuMemcpyDtoH_v2, dst, src, n, NULL);
}

/* A blocking copy is a synchronization point (syncpoint): the generated entry point brings
 * mapped host memory up to date after it. */
CUresult rm_client_body_cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
	rm_managed_note_work();
	return copy_to_device(RM_OP_cuMemcpyHtoD_v2, dstDevice, srcHost, ByteCount, NULL);
}

RM_EXPORT CUresult CUDAAPI cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
						 CUstream hStream)
{
	return copy_to_device(RM_OP_cuMemcpyHtoDAsync_v2, dstDevice, srcHost, ByteCount, hStream);
}

CUresult rm_client_body_cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
	CUresult r = rm_managed_push(NULL); /* what the host wrote in managed memory the copy reads */
	return r == CUDA_SUCCESS ? copy_from_device(RM_OP_cuMemcpyDtoH_v2, dstHost, srcDevice, ByteCount, NULL) : r;
}

/* The data must land in the program's memory, so this returns once it has:
 * stronger than CUDA promises, never weaker; into shared pinned memory it returns once
 * queued, as CUDA's does. */
CUresult rm_client_body_cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream)
{
	CUresult r = rm_managed_push(hStream);
	return r == CUDA_SUCCESS ? copy_from_device(RM_OP_cuMemcpyDtoHAsync_v2, dstHost, srcDevice, ByteCount, hStream) : r;
}
