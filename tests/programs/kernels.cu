// The module the driver-API test programs load: every kernel of the shared catalogue
// (tests/rtprograms/catalogue.cuh, which the CPU test driver mirrors by name), plus
// a global and a faulting kernel of their own.
#define RT_WANT_vecAdd
#define RT_WANT_scaleArray
#define RT_WANT_fillU32
#define RT_WANT_reduceSum
#define RT_WANT_matmulTiled
#define RT_WANT_spinFma
#define RT_WANT_sleepNs
#define RT_WANT_emptyKernel
#include "../rtprograms/catalogue.cuh"

extern "C" {

// Read back with cuModuleGetGlobal by drv_vecadd: "REMO".
__device__ unsigned int kernelsMagic = 0x52454d4fu;

// Launched with a bad pointer to raise an illegal-address error.
__global__ void faultKernel(int *p)
{
    *p = 1;
}

}
