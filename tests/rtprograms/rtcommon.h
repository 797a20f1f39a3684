// Host-side helpers shared by the runtime test programs.
//
// Conventions: stdout carries a deterministic summary only (timings go on
// lines starting with "time_"), diagnostics go to stderr, and a program exits
// 0 only when every CUDA call succeeded and every result matched.
#pragma once

#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

// Abort the program on any CUDA error, naming the call and the line.
#define CK(call)                                                              \
    do {                                                                      \
        cudaError_t ck_err_ = (call);                                         \
        if (ck_err_ != cudaSuccess) {                                         \
            fprintf(stderr, "%s:%d: %s: %s (%d): %s\n", __FILE__, __LINE__,   \
                    #call, cudaGetErrorName(ck_err_), (int)ck_err_,           \
                    cudaGetErrorString(ck_err_));                             \
            exit(1);                                                          \
        }                                                                     \
    } while (0)

// Check a <<<>>> launch: the launch itself, then (if sync) its completion.
#define CK_LAUNCH()    CK(cudaGetLastError())
#define CK_KERNEL()    do { CK(cudaGetLastError()); CK(cudaDeviceSynchronize()); } while (0)

static inline double rt_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

// FNV-1a over a byte range; used to print checksums of exact results.
static inline uint64_t rt_fnv1a(const void *p, size_t n)
{
    const unsigned char *b = (const unsigned char *)p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

// Deterministic pseudo-random stream (splitmix64).
static inline uint64_t rt_rand(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// A float in [-1, 1) with 24 significant bits, from the stream.
static inline float rt_randf(uint64_t *state)
{
    return (float)((int32_t)(rt_rand(state) >> 40) - (1 << 23)) / (float)(1 << 23);
}

// Parse a positive count argument, or return dflt when absent.
static inline long long rt_arg_count(int argc, char **argv, int i, long long dflt)
{
    if (argc <= i)
        return dflt;
    char *end;
    long long v = strtoll(argv[i], &end, 10);
    if (*end != '\0' || v <= 0) {
        fprintf(stderr, "usage: %s [COUNT]: bad count '%s'\n", argv[0], argv[i]);
        exit(2);
    }
    return v;
}
