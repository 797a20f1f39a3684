/* export_tables.c - cuGetExportTable: the private tables cudart and cuBLASLt need from libcuda.
 *
 * Each table is a static array handed out by address: element 0 is the table's size in bytes
 * (context-local storage has no size), then function pointers. Slots nobody has been seen to call
 * log once and return CUDA_ERROR_NOT_SUPPORTED. What each UUID is for, and which slots cudart 13
 * calls, is measured in shared/notes/cudart13.md. */
#include "export_tables.h"
#include "nccl_bridge.h"
#include "nvml_bridge.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "integrity.h"

/* A table element: a function pointer, or element 0's size in bytes. */
typedef void (*rm_slot)(void);
#define SLOT(fn) ((rm_slot)(fn))
#define TABLE_SIZE(t) ((rm_slot)(uintptr_t)sizeof(t))

/* One logging stub per slot whose contract is unknown. */
#define UNKNOWN_SLOT(table, n)                                                                  \
    static CUresult table##_slot##n(void)                                                       \
    {                                                                                           \
        static int logged;                                                                      \
        if (!__atomic_exchange_n(&logged, 1, __ATOMIC_RELAXED))                                 \
            rm_log(RM_LOG_WARN, "export table %s: unknown slot %d called, refused", #table, n); \
        return CUDA_ERROR_NOT_SUPPORTED;                                                        \
    }

/* ---- 6bd5fb6c CUDART_INTERFACE ---- */

struct fatbin_wrapper {         /* __fatBinC_Wrapper_t, magic 0x466243b1 */
    uint32_t magic, version;
    const void *data;
    const void *filename;
};
#define FATBIN_WRAPPER_MAGIC 0x466243b1u

/* [1] (CUmodule *out, const fatbin_wrapper *w): loads the module inside a fatbin wrapper. */
static CUresult cudart_module_from_wrapper(CUmodule *out, const struct fatbin_wrapper *w)
{
    if (!out || !w || w->magic != FATBIN_WRAPPER_MAGIC)
        return CUDA_ERROR_INVALID_VALUE;
    return cuModuleLoadData(out, w->data);
}

/* [2] (CUcontext *out, CUdevice dev): the device's primary context (retained). */
static CUresult cudart_primary_context(CUcontext *out, CUdevice dev)
{
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    return cuDevicePrimaryCtxRetain(out, dev);
}

/* [6] (CUmodule *out, wrapper, a, b, flags): [1] with options; only the option-less form. */
static CUresult cudart_module_from_wrapper_ext(CUmodule *out, const struct fatbin_wrapper *w,
                                               void *a, void *b, unsigned flags)
{
    if (a || b || flags)
        return CUDA_ERROR_NOT_SUPPORTED;
    return cudart_module_from_wrapper(out, w);
}

/* [7] (uintptr_t): returns nothing; no effect seen. */
static void cudart_slot7(uintptr_t arg)
{
    rm_log(RM_LOG_DEBUG, "CUDART_INTERFACE[7](%#lx) ignored", (unsigned long)arg);
}

/* [8] (const void *fatbin, CUmodule *out, a, b, flags): [6] on a bare fatbin. */
static CUresult cudart_module_from_fatbin_ext(const void *fatbin, CUmodule *out, void *a, void *b,
                                              unsigned flags)
{
    if (!out || !fatbin)
        return CUDA_ERROR_INVALID_VALUE;
    if (a || b || flags)
        return CUDA_ERROR_NOT_SUPPORTED;
    return cuModuleLoadData(out, fatbin);
}

/* [12] (): loads the PTX compiler, nvvm, tileir in the real driver; the GPU host does that. */
static CUresult cudart_load_compilers(void)
{
    return CUDA_SUCCESS;
}

UNKNOWN_SLOT(cudart_interface, 3)
UNKNOWN_SLOT(cudart_interface, 4)
UNKNOWN_SLOT(cudart_interface, 5)
UNKNOWN_SLOT(cudart_interface, 9)
UNKNOWN_SLOT(cudart_interface, 10)
UNKNOWN_SLOT(cudart_interface, 11)

static const rm_slot cudart_interface[13] = {
    TABLE_SIZE(cudart_interface),
    SLOT(cudart_module_from_wrapper),
    SLOT(cudart_primary_context),
    SLOT(cudart_interface_slot3),
    SLOT(cudart_interface_slot4),
    SLOT(cudart_interface_slot5),
    SLOT(cudart_module_from_wrapper_ext),
    SLOT(cudart_slot7),
    SLOT(cudart_module_from_fatbin_ext),
    SLOT(cudart_interface_slot9),
    SLOT(cudart_interface_slot10),
    SLOT(cudart_interface_slot11),
    SLOT(cudart_load_compilers),
};

/* ---- a094798c runtime callback hooks ---- */

/* Per-callback-id "enabled" flags, one uint32_t per CUPTI runtime cbid (cuBLASLt reads cbid 406 at
 * byte 0x658); all zero: no tool subscribed. The size handed out counts entries. */
#define HOOKS_RUNTIME_ENTRIES 0x400   /* cudart 13 needs >= 0x210 */
#define HOOKS_SMALL_ENTRIES 0xe
static uint32_t hooks_runtime_flags[HOOKS_RUNTIME_ENTRIES];
static uint32_t hooks_small_flags[HOOKS_SMALL_ENTRIES];

/* [2] (void **buf, size_t *entries): the process-wide runtime-API flag array. */
static void hooks_runtime_buffer(void **buf, size_t *entries)
{
    *buf = hooks_runtime_flags;
    *entries = HOOKS_RUNTIME_ENTRIES;
}

/* [6] (void **buf, size_t *entries): a second, 0xe-entry flag array. */
static void hooks_small_buffer(void **buf, size_t *entries)
{
    *buf = hooks_small_flags;
    *entries = HOOKS_SMALL_ENTRIES;
}

UNKNOWN_SLOT(callback_hooks, 1)
UNKNOWN_SLOT(callback_hooks, 3)
UNKNOWN_SLOT(callback_hooks, 4)
UNKNOWN_SLOT(callback_hooks, 5)

static const rm_slot callback_hooks[7] = {
    TABLE_SIZE(callback_hooks),
    SLOT(callback_hooks_slot1),
    SLOT(hooks_runtime_buffer),
    SLOT(callback_hooks_slot3),
    SLOT(callback_hooks_slot4),
    SLOT(callback_hooks_slot5),
    SLOT(hooks_small_buffer),
};

/* ---- 42d85a81 tools TLS ---- */

/* [2] (CUcontext *out): the calling thread's current context; cuBLASLt passes it to 21318c60[4]. */
static CUresult tools_current_context(CUcontext *out)
{
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    return cuCtxGetCurrent(out);
}

UNKNOWN_SLOT(tools_tls, 1)

static const rm_slot tools_tls[3] = {
    TABLE_SIZE(tools_tls),
    SLOT(tools_tls_slot1),
    SLOT(tools_current_context),
};

/* ---- c693336e context-local storage: ctx_local_storage.c ---- */

/* ---- 263e8860 context checks ---- */

/* [2] (ctx, unsigned *flags, void **extra): flags that the real driver never seems to set. */
static CUresult ctx_check(CUcontext ctx, unsigned *flags, void **extra)
{
    (void)ctx;
    (void)extra;
    if (flags)
        *flags = 0;
    return CUDA_SUCCESS;
}

/* [3] (...) -> 0: called once at startup. */
static unsigned ctx_check_startup(void)
{
    return 0;
}

UNKNOWN_SLOT(ctx_checks, 1)
UNKNOWN_SLOT(ctx_checks, 4)
UNKNOWN_SLOT(ctx_checks, 5)
UNKNOWN_SLOT(ctx_checks, 6)
UNKNOWN_SLOT(ctx_checks, 7)
UNKNOWN_SLOT(ctx_checks, 8)
UNKNOWN_SLOT(ctx_checks, 9)
UNKNOWN_SLOT(ctx_checks, 10)
UNKNOWN_SLOT(ctx_checks, 11)
UNKNOWN_SLOT(ctx_checks, 12)
UNKNOWN_SLOT(ctx_checks, 13)
UNKNOWN_SLOT(ctx_checks, 14)

static const rm_slot ctx_checks[15] = {
    TABLE_SIZE(ctx_checks),
    SLOT(ctx_checks_slot1), SLOT(ctx_check), SLOT(ctx_check_startup),
    SLOT(ctx_checks_slot4), SLOT(ctx_checks_slot5), SLOT(ctx_checks_slot6),
    SLOT(ctx_checks_slot7), SLOT(ctx_checks_slot8), SLOT(ctx_checks_slot9),
    SLOT(ctx_checks_slot10), SLOT(ctx_checks_slot11), SLOT(ctx_checks_slot12),
    SLOT(ctx_checks_slot13), SLOT(ctx_checks_slot14),
};

/* ---- d4082055 integrity check ---- */

static CUresult integrity_check(unsigned version, unsigned long long unix_seconds,
                                unsigned char answer[16]);
UNKNOWN_SLOT(integrity, 2)

static const rm_slot integrity_table[3] = {
    TABLE_SIZE(integrity_table),
    SLOT(integrity_check),
    SLOT(integrity_slot2),
};

static CUresult integrity_device(CUdevice ordinal, struct rm_integrity_device *d)
{
    CUdevice dev;
    CUuuid uuid;
    CUresult r = cuDeviceGet(&dev, ordinal);
    if (r == CUDA_SUCCESS)
        r = cuDeviceGetUuid_v2(&uuid, dev);
    if (r == CUDA_SUCCESS)
        r = cuDeviceGetAttribute(&d->pci_domain, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, dev);
    if (r == CUDA_SUCCESS)
        r = cuDeviceGetAttribute(&d->pci_bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, dev);
    if (r == CUDA_SUCCESS)
        r = cuDeviceGetAttribute(&d->pci_device, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, dev);
    if (r == CUDA_SUCCESS)
        memcpy(d->uuid, uuid.bytes, sizeof d->uuid);
    return r;
}

/* [1] (version, time(), 16-byte answer): the HMAC that cudart recomputes and compares; a wrong
 * answer makes every later runtime call fail with cudaErrorSoftwareValidityNotEstablished. */
static CUresult integrity_check(unsigned version, unsigned long long unix_seconds,
                                unsigned char answer[16])
{
    struct rm_integrity_input in = {
        .check_version = version,
        .unix_seconds = unix_seconds,
        .pid = (uint32_t)getpid(),
        .thread = (uint32_t)(uintptr_t)pthread_self(),
        .cudart_table = (uintptr_t)cudart_interface,
        .integrity_table = (uintptr_t)integrity_table,
        .check_fn = (uintptr_t)integrity_table[1],
    };
    struct rm_integrity_device *devs = NULL;
    int driver = 0, count = 0;

    if (!answer)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = cuDriverGetVersion(&driver);
    if (r == CUDA_SUCCESS)
        r = cuDeviceGetCount(&count);
    if (r == CUDA_SUCCESS && count > 0 && !(devs = calloc((size_t)count, sizeof *devs)))
        r = CUDA_ERROR_OUT_OF_MEMORY;
    for (int i = 0; r == CUDA_SUCCESS && i < count; i++)
        r = integrity_device(i, &devs[i]);
    if (r == CUDA_SUCCESS) {
        in.driver_version = (uint32_t)driver;
        in.devices = devs;
        in.device_count = (size_t)count;
        rm_integrity_answer(&in, answer);
    } else {
        rm_log(RM_LOG_ERROR, "integrity check %u: device query failed (%d)", version, (int)r);
    }
    free(devs);
    return r;
}

/* ---- 21318c60 tools context: cuBLAS and cuBLASLt ----
 * NVIDIA's own name for this UUID is CU_ETID_ToolsContext. Of its 92 slots, libcublas.so.13 and
 * libcublasLt.so.13 call three: [4] from cuBLASLt's kernel registry, [51] then [39] from the
 * workspace pool both libraries link in, which hands each stream a chunk of workspace and gives a
 * chunk to another stream only once the chunk's event has completed. */

/* [4] (CUcontext ctx, unsigned long long *id): the context's unique id, cuBLASLt's key for its
 * per-context state; without it cublasSgemm fails with CUBLAS_STATUS_NOT_SUPPORTED. */
static CUresult cublaslt_context_id(CUcontext ctx, unsigned long long *id)
{
    if (!id)
        return CUDA_ERROR_INVALID_VALUE;
    return cuCtxGetId(ctx, id);
}

/* [51] (CUcontext ctx, CUstream stream, void **out, int per_thread): the driver's own object for a
 * public stream handle in ctx, NULL and the special handles resolved; the pool passes per_thread =
 * (stream == CU_STREAM_PER_THREAD). Callers treat *out as opaque and only pass it to [39], so ours
 * is the public handle itself, NULL replaced by the special handle it stands for. */
static CUresult tools_ctx_stream(CUcontext ctx, CUstream stream, void **out, int per_thread)
{
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    if (!ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!stream)
        stream = per_thread ? CU_STREAM_PER_THREAD : CU_STREAM_LEGACY;
    *out = (void *)stream;
    return CUDA_SUCCESS;
}

/* [39] (CUcontext ctx, void *stream, unsigned long long *id): a 64-bit identity of a stream from
 * [51]. The pool only compares ids, to give a stream back the chunk it used last, so distinct
 * streams must get distinct ids. Ours is the handle's value: the daemon's own handle, unique among
 * live streams, or 1 and 2 for the special streams, which no real handle can be. The driver's ids
 * are never reused; a handle can be, once its stream is destroyed. */
static CUresult tools_ctx_stream_id(CUcontext ctx, void *stream, unsigned long long *id)
{
    (void)ctx;
    if (!stream || !id)
        return CUDA_ERROR_INVALID_VALUE;
    *id = (unsigned long long)(uintptr_t)stream;
    return CUDA_SUCCESS;
}

/* Every other slot: a logging stub of its own, so the log names the slot. */
#define CUBLASLT_UNKNOWN(n) UNKNOWN_SLOT(cublaslt, n)
#define DIGITS(M, t) M(t##0) M(t##1) M(t##2) M(t##3) M(t##4) M(t##5) M(t##6) M(t##7) M(t##8) M(t##9)
#define CUBLASLT_SLOT_LIST(M) \
    M(1) M(2) M(3) M(5) M(6) M(7) M(8) M(9) DIGITS(M, 1) DIGITS(M, 2) \
    M(30) M(31) M(32) M(33) M(34) M(35) M(36) M(37) M(38) DIGITS(M, 4) \
    M(50) M(52) M(53) M(54) M(55) M(56) M(57) M(58) M(59) \
    DIGITS(M, 6) DIGITS(M, 7) DIGITS(M, 8) M(90) M(91) M(92)
CUBLASLT_SLOT_LIST(CUBLASLT_UNKNOWN)

#define CUBLASLT_SLOTS 93
static rm_slot cublaslt[CUBLASLT_SLOTS];   /* filled once by export_tables_init */

/* ---- 1734dc26: cuBLASLt, before it picks an nvjet GEMM kernel ----
 * Asked for by cuBLASLt on the fp16/bf16 paths (torchvision ResNet-50's last layer, AMP training),
 * which call [4] then [13] in pairs; what they compute is not known. cuBLASLt ignores a refusal
 * and calls through the NULL table (it crashes so with the real driver too, the table refused).
 * With every slot failing it falls back to other kernels: ResNet-50's output is then the same as
 * native, bit for bit (H100, cuBLAS 13). So this table is 16 failing slots of the right size. */
#define NVJET_UNKNOWN(n) UNKNOWN_SLOT(nvjet, n)
#define NVJET_SLOT_LIST(M) M(1) M(2) M(3) M(4) M(5) M(6) M(7) M(8) M(9) M(10) M(11) M(12) M(13) M(14) M(15) M(16)
NVJET_SLOT_LIST(NVJET_UNKNOWN)
static rm_slot nvjet[17];

/* ---- 6e163fbe: module tools, cuFFT ----
 * A 98-slot table (NVIDIA's name, from a public symbol table: CU_ETID_ToolsModule). cuFFT calls
 * [7] once after each cuModuleLoadData of its kernels, and fails its plan (CUFFT_INTERNAL_ERROR)
 * if [7] fails or the table is refused. */

/* [7] (CUcontext ctx, CUmodule mod, void (*visit)(void *arg, CUfunction f), void *arg): calls
 * visit for each function of mod. cuFFT's visit stores f in *arg. The driver returned 1 for a
 * module of one kernel: taken as the number of functions visited. */
static int tools_module_visit_functions(CUcontext ctx, CUmodule mod, void (*visit)(void *, CUfunction),
                                        void *arg)
{
    (void)ctx;
    unsigned int count = 0;
    CUfunction stack[16], *fns = stack;
    if (!visit || cuModuleGetFunctionCount(&count, mod) != CUDA_SUCCESS)
        return 0;
    if (count > sizeof stack / sizeof stack[0] && !(fns = calloc(count, sizeof *fns)))
        return 0;
    int visited = 0;
    if (count && cuModuleEnumerateFunctions(fns, count, mod) == CUDA_SUCCESS)
        for (unsigned int i = 0; i < count; i++, visited++)
            visit(arg, fns[i]);
    if (fns != stack)
        free(fns);
    return visited;
}

#define TOOLS_MODULE_UNKNOWN(n) UNKNOWN_SLOT(tools_module, n)
#define TOOLS_MODULE_SLOT_LIST(M) \
    M(1) M(2) M(3) M(4) M(5) M(6) M(8) M(9) DIGITS(M, 1) DIGITS(M, 2) DIGITS(M, 3) DIGITS(M, 4) \
    DIGITS(M, 5) DIGITS(M, 6) DIGITS(M, 7) DIGITS(M, 8) M(90) M(91) M(92) M(93) M(94) M(95) M(96) \
    M(97) M(98)
TOOLS_MODULE_SLOT_LIST(TOOLS_MODULE_UNKNOWN)
static rm_slot tools_module[99];

/* ---- lookup ---- */

struct known_table {
    unsigned char id[16];
    const rm_slot *table;     /* NULL: refused on purpose */
    const char *name;
};

#define UUID(...) { __VA_ARGS__ }
static const struct known_table known_tables[] = {
    { UUID(0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a, 0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd, 0x9d, 0xf9),
      cudart_interface, "CUDART_INTERFACE" },
    { UUID(0xa0, 0x94, 0x79, 0x8c, 0x2e, 0x74, 0x2e, 0x74, 0x93, 0xf2, 0x08, 0x00, 0x20, 0x0c, 0x0a, 0x66),
      callback_hooks, "runtime callback hooks" },
    { UUID(0x42, 0xd8, 0x5a, 0x81, 0x23, 0xf6, 0xcb, 0x47, 0x82, 0x98, 0xf6, 0xe7, 0x8a, 0x3a, 0xec, 0xdc),
      tools_tls, "tools TLS" },
    { UUID(0xc6, 0x93, 0x33, 0x6e, 0x11, 0x21, 0xdf, 0x11, 0xa8, 0xc3, 0x68, 0xf3, 0x55, 0xd8, 0x95, 0x93),
      rm_ctx_local_storage_table, "context-local storage" },
    { UUID(0x26, 0x3e, 0x88, 0x60, 0x7c, 0xd2, 0x61, 0x43, 0x92, 0xf6, 0xbb, 0xd5, 0x00, 0x6d, 0xfa, 0x7e),
      ctx_checks, "context checks" },
    { UUID(0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b, 0x8d, 0x34, 0xba, 0x12, 0x3c, 0x66, 0xe1, 0xf2),
      integrity_table, "integrity check" },
    { UUID(0x21, 0x31, 0x8c, 0x60, 0x97, 0x14, 0x32, 0x48, 0x8c, 0xa6, 0x41, 0xff, 0x73, 0x24, 0xc8, 0xf2),
      cublaslt, "cuBLASLt" },
    { UUID(0x17, 0x34, 0xdc, 0x26, 0x80, 0x0d, 0x47, 0x45, 0x87, 0x26, 0xc0, 0xf1, 0xe7, 0xdd, 0x8b, 0xca),
      nvjet, "cuBLASLt nvjet (every slot fails)" },
    { UUID(0x6e, 0x16, 0x3f, 0xbe, 0xb9, 0x58, 0x44, 0x4d, 0x83, 0x5c, 0xe1, 0x82, 0xaf, 0xf1, 0x99, 0x1e),
      tools_module, "module tools" },
    /* Remora's own: the NVML shim's way to the daemon (nvml_bridge.h). */
    { RM_NVML_BRIDGE_ID, (const rm_slot *)(const void *)&rm_nvml_bridge_table, "Remora NVML bridge" },
    /* Remora's own: the client's libnccl.so.2's way to the daemon (nccl_bridge.h). */
    { RM_NCCL_BRIDGE_ID, (const rm_slot *)(const void *)&rm_nccl_bridge_table, "Remora NCCL bridge" },
    /* Refused on purpose: the GPU host's libraries go on without them (measured, real driver). */
    { UUID(0xda, 0x91, 0x51, 0xd3, 0x3a, 0xe6, 0xcc, 0x41, 0xa5, 0xc0, 0x4f, 0x26, 0xd5, 0x33, 0xe3, 0x28),
      NULL, "da9151d3 (NVRTC, optional)" },
    { UUID(0x69, 0xa2, 0x8e, 0x9f, 0x24, 0x49, 0x8b, 0x47, 0xb0, 0x30, 0xc5, 0xda, 0x33, 0x0e, 0xa4, 0xe9),
      NULL, "69a28e9f (NVML, optional)" },
    { UUID(0xf8, 0xcf, 0xf9, 0x51, 0x21, 0x46, 0x8b, 0x4e, 0xb9, 0xe2, 0xfb, 0x46, 0x9e, 0x7c, 0x0d, 0xd9),
      NULL, "f8cff951 (optional)" },
};

static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

static void export_tables_init(void)
{
    cublaslt[0] = TABLE_SIZE(cublaslt);
#define CUBLASLT_FILL(n) cublaslt[n] = SLOT(cublaslt_slot##n);
    CUBLASLT_SLOT_LIST(CUBLASLT_FILL)
    cublaslt[4] = SLOT(cublaslt_context_id);
    cublaslt[39] = SLOT(tools_ctx_stream_id);
    cublaslt[51] = SLOT(tools_ctx_stream);

    nvjet[0] = TABLE_SIZE(nvjet);
#define NVJET_FILL(n) nvjet[n] = SLOT(nvjet_slot##n);
    NVJET_SLOT_LIST(NVJET_FILL)

    tools_module[0] = TABLE_SIZE(tools_module);
#define TOOLS_MODULE_FILL(n) tools_module[n] = SLOT(tools_module_slot##n);
    TOOLS_MODULE_SLOT_LIST(TOOLS_MODULE_FILL)
    tools_module[7] = SLOT(tools_module_visit_functions);
}

/* Unknown UUIDs are logged once each; a few distinct ones are remembered. */
static void log_unknown_once(const CUuuid *id)
{
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static CUuuid seen[16];
    static size_t nseen;
    int fresh = 1;

    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < nseen && fresh; i++)
        fresh = memcmp(&seen[i], id, sizeof *id) != 0;
    if (fresh && nseen < sizeof seen / sizeof seen[0])
        seen[nseen++] = *id;
    pthread_mutex_unlock(&lock);
    if (fresh) {
        const unsigned char *b = (const unsigned char *)id->bytes;
        rm_log(RM_LOG_WARN, "cuGetExportTable: unknown table "
               "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x refused",
               b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7],
               b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
    }
}

CUresult rm_export_table_get(const void **table, const CUuuid *id)
{
    if (!table || !id)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_once(&tables_once, export_tables_init);
    for (size_t i = 0; i < sizeof known_tables / sizeof known_tables[0]; i++) {
        const struct known_table *k = &known_tables[i];
        if (memcmp(k->id, id->bytes, sizeof k->id) != 0)
            continue;
        rm_log(RM_LOG_DEBUG, "cuGetExportTable: %s%s", k->name, k->table ? "" : " refused");
        *table = (const void *)k->table;
        return k->table ? CUDA_SUCCESS : CUDA_ERROR_NOT_SUPPORTED;
    }
    log_unknown_once(id);
    *table = NULL;
    return CUDA_ERROR_NOT_SUPPORTED;
}

__attribute__((visibility("default")))
CUresult CUDAAPI cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId)
{
    return rm_export_table_get(ppExportTable, pExportTableId);
}
