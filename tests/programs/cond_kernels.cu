// Kernels of drv_graph_cond: conditional graph nodes' handles set on the device
// (cudaGraphSetConditional, resolved by the driver at load), sm_90 images like
// coop_kernels.cu. The test driver has CPU versions (tests/testdriver/kernels.c).
#include <cuda_runtime.h>

// The handle takes *v: an IF or SWITCH node after this one picks its body by it.
extern "C" __global__ void condSet(const unsigned *v, cudaGraphConditionalHandle handle)
{
	cudaGraphSetConditional(handle, *v);
}

// A loop's step: counts *counter down and ends a WHILE node's loop at zero.
extern "C" __global__ void condCountDown(unsigned *counter, cudaGraphConditionalHandle handle)
{
	if (--*counter == 0)
		cudaGraphSetConditional(handle, 0);
}

// What a body does: *x += v, so that each body's runs show in one word.
extern "C" __global__ void condAddU32(unsigned *x, unsigned v)
{
	*x += v;
}
