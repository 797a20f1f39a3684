// drv_migrate's kernels (tests/programs/kernels.cu's of the same names) in a module with no
// device variables (kernels.cu's kernelsMagic): the moves of tests/robustness/migrate.py
// run on this one, and on kernels.fatbin to move a variable too (docs/pool.md, "Live
// migration").
extern "C" {

__global__ void vecAdd(const float *a, const float *b, float *c, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        c[i] = a[i] + b[i];
}

__global__ void scaleArray(float *x, float s, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        x[i] *= s;
}

__global__ void fillU32(unsigned *x, unsigned v, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        x[i] = v;
}

}
