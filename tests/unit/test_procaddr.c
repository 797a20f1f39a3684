/* test_procaddr.c - cuGetProcAddress against the real driver's answers.
 *
 * Usage: test_procaddr GROUND_TRUTH [EXPORTS]
 *   GROUND_TRUTH: tests/data/gpa_real_vec_static.txt, every cuGetProcAddress_v2 request of
 *     cudart 13.0 with what driver 580.159.04 returned, lines like
 *       "cuCtxCreate", ver 3020, flags 0) -> 0 cuCtxCreate_v2
 *   EXPORTS (optional): the exported names the table was generated from, one a line; then each
 *     answer must be resolvable exactly when our library exports its symbol.
 * For every request the chosen variant must be the driver's, and cuGetProcAddress_v2 must give
 * its address and status. Then a few cases the file does not cover. Prints each mismatch and
 * exits 1 if there is any. Link: procaddr.c, the generated table, its --dummies file. */
#define _POSIX_C_SOURCE 200809L  /* strtok_r */
#define __CUDA_API_VERSION_INTERNAL 1 /* declares the four-argument cuGetProcAddress too */

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "procaddr.h"

static int failures;

#define CHECK(cond, ...)                                      \
    do {                                                      \
        if (!(cond)) {                                        \
            failures++;                                       \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                     \
            fputc('\n', stderr);                              \
        }                                                     \
    } while (0)


static char **exports;
static size_t nexports;

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int load_exports(const char *path)
{
    FILE *f = fopen(path, "r");
    char line[256];
    size_t cap = 0;

    if (f == NULL) {
        perror(path);
        return -1;
    }
    while (fgets(line, sizeof line, f) != NULL) {
        /* a name a line, or nm output: the last field, less any @VERSION */
        char *name = line, *tok, *save = NULL;
        for (tok = strtok_r(line, " \t\r\n", &save); tok != NULL; tok = strtok_r(NULL, " \t\r\n", &save))
            name = tok;
        name[strcspn(name, "@\r\n")] = '\0';
        if (strncmp(name, "cu", 2) != 0)
            continue;
        if (nexports == cap) {
            cap = cap ? 2 * cap : 1024;
            exports = realloc(exports, cap * sizeof *exports);
            if (exports == NULL)
                abort();
        }
        size_t len = strlen(name) + 1;
        if ((exports[nexports] = malloc(len)) == NULL)
            abort();
        memcpy(exports[nexports++], name, len);
    }
    fclose(f);
    qsort(exports, nexports, sizeof *exports, cmp_str);
    return 0;
}

static int exported(const char *sym)
{
    return bsearch(&sym, exports, nexports, sizeof *exports, cmp_str) != NULL;
}

/* One ground-truth request; returns 0 if the line parsed. */
static int check_request(const char *line, int lineno, int *unprovided)
{
    char name[128], want[128];
    int version, rc_want, n;
    unsigned long long flags;
    const char *q;
    size_t len;

    if (line[0] != '"' || (q = strchr(line + 1, '"')) == NULL || (len = (size_t)(q - line - 1)) >= sizeof name)
        return -1;
    memcpy(name, line + 1, len);
    name[len] = '\0';
    n = sscanf(q + 1, ", ver %d, flags %llu) -> %d %127s", &version, &flags, &rc_want, want);
    if (n == 3)
        strcpy(want, "(nil)"); /* an error return logs no symbol */
    else if (n != 4)
        return -1;

    int want_none = strcmp(want, "(nil)") == 0; /* the driver handed out no address */
    const char *got = NULL;
    void *addr = rm_procaddr_resolve(name, version, flags, &got);

    if (want_none)
        CHECK(got == NULL, "line %d: \"%s\"@%d flags %llu: resolved to %s, the driver gave none",
              lineno, name, version, flags, got);
    else
        CHECK(got != NULL && strcmp(got, want) == 0, "line %d: \"%s\"@%d flags %llu: resolved to %s, the driver gave %s",
              lineno, name, version, flags, got != NULL ? got : "nothing", want);

    void *pfn = (void *)&pfn;
    CUdriverProcAddressQueryResult st = (CUdriverProcAddressQueryResult)-1;
    CUresult rc = cuGetProcAddress_v2(name, &pfn, version, flags, &st);

    CHECK((int)rc == rc_want, "line %d: \"%s\"@%d: cuGetProcAddress_v2 returned %d, the driver %d",
          lineno, name, version, (int)rc, rc_want);
    if (want_none || addr == NULL) {
        /* not found, or a variant our library does not define (graphics interop) */
        CHECK(pfn == NULL && st == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND,
              "line %d: \"%s\"@%d: pfn %p status %d, want NULL and SYMBOL_NOT_FOUND", lineno, name, version, pfn, (int)st);
        if (!want_none)
            (*unprovided)++;
    } else {
        CHECK(pfn == addr && st == CU_GET_PROC_ADDRESS_SUCCESS,
              "line %d: \"%s\"@%d: pfn %p status %d, want %p and SUCCESS", lineno, name, version, pfn, (int)st, addr);
    }
    if (nexports > 0 && !want_none)
        CHECK((addr != NULL) == exported(want), "line %d: %s is %s but resolves to %p",
              lineno, want, exported(want) ? "exported" : "not exported", addr);
    return 0;
}

static int check_ground_truth(const char *path)
{
    FILE *f = fopen(path, "r");
    char line[512];
    int lineno = 0, requests = 0, unprovided = 0;

    if (f == NULL) {
        perror(path);
        return -1;
    }
    while (fgets(line, sizeof line, f) != NULL) {
        lineno++;
        line[strcspn(line, "\r\n")] = '\0';
        if (line[0] == '\0' || line[0] == '#')
            continue;
        if (check_request(line, lineno, &unprovided) != 0) {
            CHECK(0, "%s:%d: cannot parse \"%s\"", path, lineno, line);
            continue;
        }
        requests++;
    }
    fclose(f);
    printf("%d requests checked; %d answers name a symbol our library does not define\n", requests, unprovided);
    CHECK(requests > 0, "%s: no requests", path);
    return 0;
}

static void expect(const char *name, int version, unsigned long long flags, const char *want_sym,
                   CUdriverProcAddressQueryResult want_st)
{
    const char *got = NULL;
    void *pfn = (void *)&pfn;
    CUdriverProcAddressQueryResult st = (CUdriverProcAddressQueryResult)-1;

    rm_procaddr_resolve(name, version, flags, &got);
    CHECK(want_sym == NULL ? got == NULL : got != NULL && strcmp(got, want_sym) == 0,
          "\"%s\"@%d flags %llu: resolved to %s, want %s", name, version, flags,
          got ? got : "nothing", want_sym ? want_sym : "nothing");
    CHECK(cuGetProcAddress_v2(name, &pfn, version, flags, &st) == CUDA_SUCCESS && st == want_st &&
          (st == CU_GET_PROC_ADDRESS_SUCCESS) == (pfn != NULL),
          "\"%s\"@%d flags %llu: status %d pfn %p, want status %d", name, version, flags, (int)st, pfn, (int)want_st);
}

/* A function's address as a void *, without the cast ISO C leaves undefined. */
static void *fn_address(void (*fn)(void))
{
    union { void (*fn)(void); void *ptr; } u = { .fn = fn };
    return u.ptr;
}

static void check_edges(void)
{
    void *pfn;
    CUdriverProcAddressQueryResult st;

    /* the table is what the binary search assumes */
    for (size_t i = 1; i < rm_procaddr_table_len; i++) {
        const struct rm_procaddr_entry *a = &rm_procaddr_table[i - 1], *b = &rm_procaddr_table[i];
        int c = strcmp(a->name, b->name);
        CHECK(c < 0 || (c == 0 && (a->per_thread < b->per_thread ||
                                   (a->per_thread == b->per_thread && a->min_version < b->min_version))),
              "table not sorted at %zu: %s/%d/%d then %s/%d/%d", i, a->name, a->per_thread, a->min_version,
              b->name, b->per_thread, b->min_version);
    }

    expect("cuNoSuchFunction", 13000, 0, NULL, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    expect("cuCtxCreate_v2", 13000, 0, NULL, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND); /* base names only */
    expect("cuMemAllocAsync", 11010, 0, NULL, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    expect("cuCtxCreate", 1000, 0, NULL, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    expect("cuCtxCreate", 2000, 0, "cuCtxCreate", CU_GET_PROC_ADDRESS_SUCCESS);
    expect("cuCtxCreate", 11039, 0, "cuCtxCreate_v2", CU_GET_PROC_ADDRESS_SUCCESS);
    expect("cuCtxCreate", 99999, 0, "cuCtxCreate_v4", CU_GET_PROC_ADDRESS_SUCCESS);
    /* per-thread flag: no per-thread variant yet, or none at all, gives the legacy one */
    expect("cuMemcpyHtoD", 6050, 2, "cuMemcpyHtoD_v2", CU_GET_PROC_ADDRESS_SUCCESS);
    expect("cuInit", 2000, 2, "cuInit", CU_GET_PROC_ADDRESS_SUCCESS);
    expect("cuLaunchKernel", 7000, 1, "cuLaunchKernel", CU_GET_PROC_ADDRESS_SUCCESS);
    expect("cuLaunchKernel", 7000, 3, "cuLaunchKernel_ptsz", CU_GET_PROC_ADDRESS_SUCCESS);

    /* the driver hands out its own entry points */
    CHECK(rm_procaddr_resolve("cuGetProcAddress", 12000, 0, NULL) == fn_address((void (*)(void))cuGetProcAddress_v2),
          "cuGetProcAddress@12000 is not our cuGetProcAddress_v2");
    CHECK(rm_procaddr_resolve("cuGetProcAddress", 11030, 0, NULL) == fn_address((void (*)(void))cuGetProcAddress),
          "cuGetProcAddress@11030 is not our cuGetProcAddress");

    /* the old entry point: same answers, CUDA_ERROR_NOT_FOUND instead of a status */
    pfn = NULL;
    CHECK(cuGetProcAddress("cuCtxCreate", &pfn, 3020, 0) == CUDA_SUCCESS &&
          pfn == rm_procaddr_resolve("cuCtxCreate", 3020, 0, NULL), "v1 cuCtxCreate@3020");
    pfn = (void *)&pfn;
    CHECK(cuGetProcAddress("cuNoSuchFunction", &pfn, 13000, 0) == CUDA_ERROR_NOT_FOUND && pfn == NULL,
          "v1 unknown name");
    pfn = (void *)&pfn;
    CHECK(cuGetProcAddress("", &pfn, 0, 0) == CUDA_ERROR_NOT_FOUND && pfn == NULL, "v1 probe");

    /* arguments; the status is optional */
    CHECK(cuGetProcAddress_v2(NULL, &pfn, 13000, 0, &st) == CUDA_ERROR_INVALID_VALUE, "NULL symbol");
    CHECK(cuGetProcAddress_v2("cuInit", NULL, 13000, 0, &st) == CUDA_ERROR_INVALID_VALUE, "NULL pfn");
    CHECK(cuGetProcAddress_v2("cuInit", &pfn, 13000, 0, NULL) == CUDA_SUCCESS && pfn != NULL, "NULL status");
    CHECK(rm_procaddr_resolve(NULL, 13000, 0, NULL) == NULL, "resolve NULL name");
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: %s GROUND_TRUTH [EXPORTS]\n", argv[0]);
        return 2;
    }
    if (argc == 3 && load_exports(argv[2]) != 0)
        return 2;
    if (check_ground_truth(argv[1]) != 0)
        return 2;
    check_edges();
    if (failures > 0) {
        fprintf(stderr, "%d failures\n", failures);
        return 1;
    }
    printf("all passed\n");
    return 0;
}
