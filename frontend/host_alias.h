/* Pinned host memory at an address the GPU host reserved (docs/architecture.md, "Memory of
 * every kind"). On a GPU with unified addressing a kernel may be handed a pinned host
 * pointer and read it; a remote GPU cannot reach this process's memory. So a pinned
 * allocation is placed where the daemon reserved a range of its own address space
 * (cuMemAddressReserve): the same number names the host copy here and, once a kernel is
 * handed a pointer into it, device memory mapped at that address there, kept coherent as
 * mapped memory is (host_memory.c). Reserving takes no device memory; backing does. */
#ifndef REMORA_HOST_ALIAS_H
#define REMORA_HOST_ALIAS_H

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>

struct rm_host_alias {
	CUdeviceptr va;          /* the reservation's base; 0: none */
	size_t reserved;         /* its length: the allocation rounded up to the granularity */
	CUdevice dev;            /* the device it is backed on */
	CUmemGenericAllocationHandle backing; /* 0: not backed */
};

/* Reserves a range of size bytes in the current context's device; 0, or -errno (no
 * context, no virtual memory management, or the daemon refused): then none is made. */
int rm_host_alias_reserve(size_t size, struct rm_host_alias *out);
/* Maps device memory at the reservation, readable and writable by its device. */
CUresult rm_host_alias_back(struct rm_host_alias *a);
/* Unmaps and releases its backing, if any, then frees the reservation. */
void rm_host_alias_release(struct rm_host_alias *a);

#endif
