/* The request target's watch on the driver (fuzz_request.c). */
#include "driver_watch.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "driver_table.h"
#include "fault.h"
#include "gpus.h"

/* ---- What sessions hold: the driver's allocation and event entries, counted ---- */

struct made {
	uint64_t value;
	const char *what;
};

static struct {
	pthread_mutex_t lock;
	struct made *live; /* made and not yet released */
	size_t n, cap;
} held = {.lock = PTHREAD_MUTEX_INITIALIZER};

static __typeof__(rm_drv.cuMemAlloc_v2) real_mem_alloc;
static __typeof__(rm_drv.cuMemAllocHost_v2) real_mem_alloc_host;
static __typeof__(rm_drv.cuMemFree_v2) real_mem_free;
static __typeof__(rm_drv.cuMemFreeAsync) real_mem_free_async;
static __typeof__(rm_drv.cuMemFreeHost) real_mem_free_host;
static __typeof__(rm_drv.cuEventCreate) real_event_create;
static __typeof__(rm_drv.cuEventDestroy_v2) real_event_destroy;

static void note_made(uint64_t v, const char *what)
{
	pthread_mutex_lock(&held.lock);
	if (held.n == held.cap) {
		held.cap = held.cap ? 2 * held.cap : 64;
		held.live = realloc(held.live, held.cap * sizeof(*held.live));
		if (!held.live) {
			fprintf(stderr, "fuzz-request: out of memory\n");
			abort();
		}
	}
	held.live[held.n++] = (struct made){v, what};
	pthread_mutex_unlock(&held.lock);
}

static void note_released(uint64_t v)
{
	pthread_mutex_lock(&held.lock);
	for (size_t i = 0; i < held.n; i++)
		if (held.live[i].value == v) {
			held.live[i] = held.live[--held.n];
			break;
		}
	pthread_mutex_unlock(&held.lock);
}

static CUresult CUDAAPI mem_alloc(CUdeviceptr *p, size_t bytes)
{
	CUresult r = real_mem_alloc(p, bytes);
	if (r == CUDA_SUCCESS)
		note_made(*p, "device memory");
	return r;
}

static CUresult CUDAAPI mem_alloc_host(void **p, size_t bytes)
{
	CUresult r = real_mem_alloc_host(p, bytes);
	if (r == CUDA_SUCCESS)
		note_made((uint64_t)(uintptr_t)*p, "pinned host memory");
	return r;
}

static CUresult CUDAAPI mem_free(CUdeviceptr p)
{
	CUresult r = real_mem_free(p);
	if (r == CUDA_SUCCESS)
		note_released(p);
	return r;
}

static CUresult CUDAAPI mem_free_async(CUdeviceptr p, CUstream st)
{
	CUresult r = real_mem_free_async(p, st);
	if (r == CUDA_SUCCESS)
		note_released(p);
	return r;
}

static CUresult CUDAAPI mem_free_host(void *p)
{
	CUresult r = real_mem_free_host(p);
	if (r == CUDA_SUCCESS)
		note_released((uint64_t)(uintptr_t)p);
	return r;
}

static CUresult CUDAAPI event_create(CUevent *ev, unsigned int flags)
{
	CUresult r = real_event_create(ev, flags);
	if (r == CUDA_SUCCESS)
		note_made((uint64_t)(uintptr_t)*ev, "an event");
	return r;
}

static CUresult CUDAAPI event_destroy(CUevent ev)
{
	CUresult r = real_event_destroy(ev);
	if (r == CUDA_SUCCESS)
		note_released((uint64_t)(uintptr_t)ev);
	return r;
}

/* ---- What the daemon hands the driver: device ranges inside one allocation ---- */

static __typeof__(rm_drv.cuMemsetD8Async) real_memset_d8;
static __typeof__(rm_drv.cuMemsetD16Async) real_memset_d16;
static __typeof__(rm_drv.cuMemsetD32Async) real_memset_d32;
static __typeof__(rm_drv.cuMemcpyHtoDAsync_v2) real_memcpy_htod;
static __typeof__(rm_drv.cuMemcpyDtoHAsync_v2) real_memcpy_dtoh;
static __typeof__(rm_drv.cuMemcpyDtoDAsync_v2) real_memcpy_dtod;

/* Aborts unless [p, p + count * unit) lies inside one device allocation: the daemon
 * checks every range a client names against what it owns before it copies or sets. */
static void check_device_range(const char *call, CUdeviceptr p, uint64_t count, uint64_t unit)
{
	CUdeviceptr base = 0;
	size_t size = 0;
	uint64_t len;
	if (!count || !rm_drv.cuMemGetAddressRange_v2)
		return;
	int wraps = __builtin_mul_overflow(count, unit, &len);
	CUresult r = rm_drv.cuMemGetAddressRange_v2(&base, &size, p);
	if (r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_FOUND)
		return; /* a faulted context answers nothing */
	if (!wraps && r == CUDA_SUCCESS && len <= size - (p - base))
		return;
	fprintf(stderr, "fuzz-request: the daemon passed %s the device range 0x%llx + %llu x %llu bytes, "
		"past any allocation\n", call, (unsigned long long)p, (unsigned long long)count,
		(unsigned long long)unit);
	abort();
}

static CUresult CUDAAPI memset_d8(CUdeviceptr p, unsigned char v, size_t n, CUstream st)
{
	check_device_range("cuMemsetD8Async", p, n, 1);
	return real_memset_d8(p, v, n, st);
}

static CUresult CUDAAPI memset_d16(CUdeviceptr p, unsigned short v, size_t n, CUstream st)
{
	check_device_range("cuMemsetD16Async", p, n, 2);
	return real_memset_d16(p, v, n, st);
}

static CUresult CUDAAPI memset_d32(CUdeviceptr p, unsigned int v, size_t n, CUstream st)
{
	check_device_range("cuMemsetD32Async", p, n, 4);
	return real_memset_d32(p, v, n, st);
}

static CUresult CUDAAPI memcpy_htod(CUdeviceptr dst, const void *src, size_t n, CUstream st)
{
	check_device_range("cuMemcpyHtoDAsync_v2", dst, n, 1);
	return real_memcpy_htod(dst, src, n, st);
}

static CUresult CUDAAPI memcpy_dtoh(void *dst, CUdeviceptr src, size_t n, CUstream st)
{
	check_device_range("cuMemcpyDtoHAsync_v2", src, n, 1);
	return real_memcpy_dtoh(dst, src, n, st);
}

static CUresult CUDAAPI memcpy_dtod(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream st)
{
	check_device_range("cuMemcpyDtoDAsync_v2", dst, n, 1);
	check_device_range("cuMemcpyDtoDAsync_v2", src, n, 1);
	return real_memcpy_dtod(dst, src, n, st);
}

void driver_watch_start(void)
{
#define WRAP(entry, real, ours)    \
	if ((real = rm_drv.entry)) \
		rm_drv.entry = ours;
	WRAP(cuMemAlloc_v2, real_mem_alloc, mem_alloc)
	WRAP(cuMemAllocHost_v2, real_mem_alloc_host, mem_alloc_host)
	WRAP(cuMemFree_v2, real_mem_free, mem_free)
	WRAP(cuMemFreeAsync, real_mem_free_async, mem_free_async)
	WRAP(cuMemFreeHost, real_mem_free_host, mem_free_host)
	WRAP(cuEventCreate, real_event_create, event_create)
	WRAP(cuEventDestroy_v2, real_event_destroy, event_destroy)
	WRAP(cuMemsetD8Async, real_memset_d8, memset_d8)
	WRAP(cuMemsetD16Async, real_memset_d16, memset_d16)
	WRAP(cuMemsetD32Async, real_memset_d32, memset_d32)
	WRAP(cuMemcpyHtoDAsync_v2, real_memcpy_htod, memcpy_htod)
	WRAP(cuMemcpyDtoHAsync_v2, real_memcpy_dtoh, memcpy_dtoh)
	WRAP(cuMemcpyDtoDAsync_v2, real_memcpy_dtod, memcpy_dtod)
#undef WRAP
}

/* Whether a client's kernel faulted the worker. Nothing can be freed then (the driver
 * answers with the fault): the contexts are reset, which frees what they held (the test
 * driver, run with REMORA_TESTDRIVER_RECOVERABLE=1, then forgets the fault too), and so is
 * the worker's fault, so that every input starts on a working worker. */
static int context_faulted(int ngpus)
{
	int faulted = 0;
	for (int g = 0; g < ngpus; g++) {
		size_t free_b, total_b;
		/* No context (INVALID_CONTEXT) holds nothing. */
		if (rm_gpu_memory(g, &free_b, &total_b) != CUDA_SUCCESS)
			faulted = 1;
	}
	if (faulted || rm_fault_error() != CUDA_SUCCESS) {
		for (int g = 0; g < ngpus; g++)
			rm_gpu_reset(g);
		rm_fault_clear();
		faulted = 1;
	}
	return faulted;
}

void driver_watch_check_released(int ngpus)
{
	int faulted = context_faulted(ngpus);
	pthread_mutex_lock(&held.lock);
	if (faulted)
		held.n = 0;
	for (size_t i = 0; i < held.n; i++)
		fprintf(stderr, "fuzz-request: the session ended holding %s 0x%llx\n", held.live[i].what,
			(unsigned long long)held.live[i].value);
	size_t left = held.n;
	pthread_mutex_unlock(&held.lock);
	if (left)
		abort();
}
