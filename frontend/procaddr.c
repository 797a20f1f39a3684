/* procaddr.c - cuGetProcAddress and cuGetProcAddress_v2 over the generated variant table.
 *
 * Results, as the real driver gives them (driver 580, CUDA 13.0; cuda.h's documentation):
 *   cuGetProcAddress_v2: CUDA_SUCCESS whenever symbol and pfn are given, *pfn the variant's
 *     address or NULL, *symbolStatus (optional) CU_GET_PROC_ADDRESS_SUCCESS, _SYMBOL_NOT_FOUND
 *     (unknown name, the "" probe cudart sends first, or a variant our library does not define)
 *     or _VERSION_NOT_SUFFICIENT (the name is known but no variant is as old as cudaVersion);
 *     CUDA_ERROR_INVALID_VALUE for a NULL symbol or pfn.
 *   cuGetProcAddress (CUDA 11.3-11.8 signature, no status to report): the same, except that a
 *     lookup finding nothing returns CUDA_ERROR_NOT_FOUND, as the 11.x driver documented.
 * Flags: CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM prefers the _ptds/_ptsz variant and
 * falls back to the legacy one; DEFAULT (0) and LEGACY_STREAM give the legacy variant (cuda.h
 * adds the per-thread flag itself for programs built with per-thread default streams). */

/* Stops cuda.h from renaming cuGetProcAddress to cuGetProcAddress_v2 and declares the old
 * four-argument cuGetProcAddress, so both exports are checked against their prototypes. */
#ifndef __CUDA_API_VERSION_INTERNAL
#define __CUDA_API_VERSION_INTERNAL 1
#endif

#include "procaddr.h"

#include <string.h>

#include "common/log.h"

#define RM_EXPORT __attribute__((visibility("default")))

/* First entry of name, or NULL: binary search over the names (the table is in strcmp order). */
static const struct rm_procaddr_entry *find_first(const char *name)
{
    size_t lo = 0, hi = rm_procaddr_table_len;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(rm_procaddr_table[mid].name, name) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < rm_procaddr_table_len && strcmp(rm_procaddr_table[lo].name, name) == 0)
        return &rm_procaddr_table[lo];
    return NULL;
}

/* Newest variant of first's name with this per_thread flag and min_version <= version. Within
 * a name the table is ordered by per_thread, then min_version, so the last match is the newest. */
static const struct rm_procaddr_entry *newest(const struct rm_procaddr_entry *first, int per_thread, int version)
{
    const struct rm_procaddr_entry *end = rm_procaddr_table + rm_procaddr_table_len;
    const struct rm_procaddr_entry *best = NULL;

    for (const struct rm_procaddr_entry *e = first; e < end && strcmp(e->name, first->name) == 0; e++)
        if (e->per_thread == per_thread && e->min_version <= version)
            best = e;
    return best;
}

/* The query result the driver reports; *out is the chosen variant (NULL if none). */
static CUdriverProcAddressQueryResult lookup(const char *name, int version, cuuint64_t flags,
                                             const struct rm_procaddr_entry **out)
{
    const struct rm_procaddr_entry *first = find_first(name);
    const struct rm_procaddr_entry *e = NULL;

    *out = NULL;
    if (first == NULL)
        return CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    if (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)
        e = newest(first, 1, version);
    if (e == NULL)
        e = newest(first, 0, version);
    if (e == NULL)
        return CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
    *out = e;
    return e->fn != NULL ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
}

/* A function's address as the void * the API hands out (POSIX guarantees the round trip). */
static void *fn_address(void (*fn)(void))
{
    union { void (*fn)(void); void *ptr; } u = { .fn = fn };
    return fn != NULL ? u.ptr : NULL;
}

void *rm_procaddr_resolve(const char *name, int cuda_version, cuuint64_t flags, const char **symbol_out)
{
    const struct rm_procaddr_entry *e = NULL;

    if (name != NULL)
        (void)lookup(name, cuda_version, flags, &e);
    if (symbol_out != NULL)
        *symbol_out = e != NULL ? e->symbol : NULL;
    return e != NULL ? fn_address(e->fn) : NULL;
}

static const char *status_name(CUdriverProcAddressQueryResult st)
{
    switch (st) {
    case CU_GET_PROC_ADDRESS_SUCCESS:                return "found";
    case CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND:       return "symbol not found";
    case CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT: return "version not sufficient";
    }
    return "?";
}

/* Both exports: CUDA_SUCCESS or CUDA_ERROR_INVALID_VALUE, the query result in *status. */
static CUresult get_proc_address(const char *api, const char *symbol, void **pfn, int version,
                                 cuuint64_t flags, CUdriverProcAddressQueryResult *status)
{
    const struct rm_procaddr_entry *e;

    if (symbol == NULL || pfn == NULL) {
        rm_log(RM_LOG_DEBUG, "%s(%s, version %d, flags %#llx): NULL %s -> CUDA_ERROR_INVALID_VALUE",
               api, symbol != NULL ? symbol : "NULL", version, (unsigned long long)flags,
               symbol == NULL ? "symbol" : "pfn");
        return CUDA_ERROR_INVALID_VALUE;
    }
    *status = lookup(symbol, version, flags, &e);
    *pfn = *status == CU_GET_PROC_ADDRESS_SUCCESS ? fn_address(e->fn) : NULL;
    rm_log(RM_LOG_DEBUG, "%s(\"%s\", version %d, flags %#llx) -> %s (%s)", api, symbol, version,
           (unsigned long long)flags, e != NULL ? e->symbol : "none", status_name(*status));
    return CUDA_SUCCESS;
}

RM_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                       CUdriverProcAddressQueryResult *symbolStatus)
{
    CUdriverProcAddressQueryResult status;
    CUresult rc = get_proc_address("cuGetProcAddress_v2", symbol, pfn, cudaVersion, flags, &status);

    if (rc == CUDA_SUCCESS && symbolStatus != NULL)
        *symbolStatus = status;
    return rc;
}

RM_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    CUdriverProcAddressQueryResult status;
    CUresult rc = get_proc_address("cuGetProcAddress", symbol, pfn, cudaVersion, flags, &status);

    if (rc == CUDA_SUCCESS && status != CU_GET_PROC_ADDRESS_SUCCESS)
        return CUDA_ERROR_NOT_FOUND;
    return rc;
}
