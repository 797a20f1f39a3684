// Device state a client could write: a __device__ counter, an initialised table, user constants.
__device__ int counter;
__device__ float table[4] = {1, 2, 3, 4};
__constant__ float coef[8];
__global__ void useState(float *out)
{
    out[0] = table[1] + coef[2];
    atomicAdd(&counter, 1);
}
