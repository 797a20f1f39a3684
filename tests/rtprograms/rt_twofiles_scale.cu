// rt_twofiles, second file: scaleArray with its own fatbin.
#define RT_WANT_scaleArray
#include "catalogue.cuh"
#include "rtcommon.h"

void launch_scale(float *x, float s, int n)
{
    scaleArray<<<(n + 255) / 256, 256>>>(x, s, n);
    CK_KERNEL();
}
