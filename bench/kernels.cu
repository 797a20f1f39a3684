// The benchmark's kernels: the catalogue's empty kernel and FMA chain, so that
// the CPU test driver, which knows the catalogue by name, can serve them in CI.
#define RT_WANT_emptyKernel
#define RT_WANT_spinFma
#include "catalogue.cuh"
