/* Pinned host memory at an address the GPU host reserved (host_alias.h). The calls go
 * through this library's own driver API, as the program's would. */
#include "host_alias.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"

#define MAX_ALIAS_DEVICES 64 /* of MAX_ACCESS_DESCS, the daemon's bound on a cuMemSetAccess */

static CUmemAllocationProp device_prop(CUdevice dev)
{
	CUmemAllocationProp prop;
	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = dev;
	return prop;
}

int rm_host_alias_reserve(size_t size, struct rm_host_alias *out)
{
	memset(out, 0, sizeof(*out));
	const char *on = getenv("REMORA_HOST_ALIAS"); /* checked at cuInit (environment.c) */
	if (on && !strcmp(on, "0"))
		return -EPERM;
	size_t granularity = 0;
	CUdevice dev;
	if (!rm_ctx_current() || cuCtxGetDevice(&dev) != CUDA_SUCCESS)
		return -ENODEV;
	CUmemAllocationProp prop = device_prop(dev);
	if (cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS ||
	    !granularity || size > SIZE_MAX - granularity)
		return -ENOTSUP;
	size_t reserved = (size + granularity - 1) / granularity * granularity;
	CUdeviceptr va;
	if (cuMemAddressReserve(&va, reserved, granularity, 0, 0) != CUDA_SUCCESS)
		return -ENOMEM;
	*out = (struct rm_host_alias){.va = va, .reserved = reserved, .dev = dev};
	return 0;
}

CUresult rm_host_alias_back(struct rm_host_alias *a)
{
	CUmemAllocationProp prop = device_prop(a->dev);
	CUmemGenericAllocationHandle h;
	CUresult r = cuMemCreate(&h, a->reserved, &prop, 0);
	if (r != CUDA_SUCCESS)
		return r;
	r = cuMemMap(a->va, a->reserved, 0, h, 0);
	if (r == CUDA_SUCCESS) {
		/* Pinned memory is every GPU's to reach, as natively: each of the client's GPUs that
		 * can reach the backing one's memory gets access too (else only the backing one). */
		CUmemAccessDesc access[MAX_ALIAS_DEVICES];
		int n = 0, count = 0;
		access[n++] = (CUmemAccessDesc){.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
		if (cuDeviceGetCount(&count) != CUDA_SUCCESS)
			count = 0;
		for (int d = 0; d < count && n < MAX_ALIAS_DEVICES; d++) {
			int can = 0;
			if (d != a->dev && cuDeviceCanAccessPeer(&can, d, a->dev) == CUDA_SUCCESS && can)
				access[n++] = (CUmemAccessDesc){.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = d},
								.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
		}
		r = cuMemSetAccess(a->va, a->reserved, access, (size_t)n);
		if (r != CUDA_SUCCESS && n > 1)
			r = cuMemSetAccess(a->va, a->reserved, access, 1);
		if (r != CUDA_SUCCESS)
			cuMemUnmap(a->va, a->reserved);
	}
	if (r != CUDA_SUCCESS) {
		cuMemRelease(h);
		return r;
	}
	a->backing = h;
	return CUDA_SUCCESS;
}

void rm_host_alias_release(struct rm_host_alias *a)
{
	if (!a->va)
		return;
	if (a->backing) {
		cuMemUnmap(a->va, a->reserved);
		cuMemRelease(a->backing);
		a->backing = 0;
	}
	cuMemAddressFree(a->va, a->reserved);
	a->va = 0;
}
