/* A small cudaProfiler.h for tests/unit/test_gen_api.py. */
CUresult CUDAAPI cuProfilerStart(void);
