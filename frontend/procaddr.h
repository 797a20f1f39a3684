/* procaddr.h - which driver symbol cuGetProcAddress hands out for (name, CUDA version, flags).
 *
 * cudart obtains every driver function through cuGetProcAddress_v2(name, &pfn, version, flags,
 * &status), pinning the CUDA version it was written against; the driver must return the ABI
 * variant of that version (cuCtxCreate@3020 is cuCtxCreate_v2) and, with
 * CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, the _ptds/_ptsz variant where one exists.
 *
 * The table is generated at build time by scripts/gen_procaddr.py from the toolkit's
 * cuda*Typedefs.h and the names its stub libcuda.so exports (procaddr_table.c). */
#ifndef RM_FRONTEND_PROCADDR_H
#define RM_FRONTEND_PROCADDR_H

#include <stddef.h>

/* One ABI variant of a driver function. The generated table is sorted by (name in strcmp
 * order, per_thread, min_version) and holds every variant the headers know, also those our
 * library does not define (fn == NULL: the OpenGL/EGL/VDPAU interop). */
struct rm_procaddr_entry {
    const char *name;   /* base name as asked for: "cuCtxCreate" */
    int min_version;    /* first CUDA version (1000 * major + 10 * minor) giving this variant */
    int per_thread;     /* 1: the _ptds/_ptsz variant, only with PER_THREAD_DEFAULT_STREAM */
    const char *symbol; /* exported name of the variant: "cuCtxCreate_v2" */
    void (*fn)(void);   /* its address, NULL where our library does not define it */
};

extern const struct rm_procaddr_entry rm_procaddr_table[];
extern const size_t rm_procaddr_table_len;

/* The generated table defines RM_PROCADDR_NO_CUDA_H: it declares every driver symbol as
 * void f(void), which cuda.h's prototypes would contradict. */
#ifndef RM_PROCADDR_NO_CUDA_H
#include <cuda.h>

/* Finds the variant of name that the driver of cuda_version gives; flags as in cuGetProcAddress.
 * Returns its address or NULL.
 * *symbol_out (if symbol_out is not NULL) is set to the exported name of the chosen variant,
 * also when our library does not define it (the address is NULL then), and to NULL when the
 * name is unknown or no variant is as old as cuda_version. Thread-safe: reads a constant table. */
void *rm_procaddr_resolve(const char *name, int cuda_version, cuuint64_t flags, const char **symbol_out);

/* Exported, with the real driver's signatures (cuda.h declares the old four-argument
 * cuGetProcAddress only under __CUDA_API_VERSION_INTERNAL):
 *   CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);
 *   CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
 *                                CUdriverProcAddressQueryResult *symbolStatus);
 * See procaddr.c for the results. */
#endif

#endif /* RM_FRONTEND_PROCADDR_H */
