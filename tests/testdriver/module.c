/* Modules and libraries.
 *
 * A loaded image must look like a real one: PTX text with a .version
 * directive, an ELF cubin, a fatbin (magic 0xBA55ED50) or a fatbin wrapper
 * (magic 0x466243b1) pointing at one.  Code is never run: a module offers
 * the catalogue kernels and globals whose names appear in the image (all of
 * them for a fatbin, whose entries are usually compressed).
 *
 * A CUlibrary is a module with no context; CUkernel and CUfunction are the
 * same td_function.
 *
 * As a real driver's, handles come again: a module's functions take its first
 * slots, in catalogue order, and the next module loaded takes the place of the
 * last one unloaded, so that its first function has the handle the unloaded
 * module's first function had.
 */
#include "testdriver.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define FATBIN_MAGIC 0xBA55ED50u
#define FATBIN_WRAPPER_MAGIC 0x466243b1u
#define MAX_IMAGE_BYTES ((size_t)1 << 30)
#define MAX_CATALOGUE 32

struct td_module {
	uint32_t magic;
	struct td_context *ctx;          /* NULL for a library */
	struct td_function functions[MAX_CATALOGUE];   /* those the image offers, then magic 0 */
	CUdeviceptr globals[MAX_CATALOGUE];            /* by global index; 0 if absent */
	struct td_texref refs[TD_MODULE_REFS];         /* magic 0 if the image does not offer it */
	uintptr_t reused_va;                           /* td_freed_va_take's granule, or 0 */
	struct td_module *next;
};

static struct td_module *modules;   /* guarded by td_lock */
static struct td_module *spare;     /* the last one unloaded, zeroed, for the next load; td_lock */

struct image { const unsigned char *bytes; size_t size; bool names_visible; };

static uint32_t read_u32(const unsigned char *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint16_t read_u16(const unsigned char *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static uint64_t read_u64(const unsigned char *p) { uint64_t v; memcpy(&v, p, 8); return v; }

/* Works out what the image is and how long; false if it is none of the kinds. */
static bool classify_image(const void *data, struct image *out)
{
	const unsigned char *p = data;
	if (read_u32(p) == FATBIN_WRAPPER_MAGIC) {
		const void *fatbin;
		memcpy(&fatbin, p + 8, sizeof fatbin);
		return fatbin && read_u32(fatbin) == FATBIN_MAGIC && classify_image(fatbin, out);
	}
	if (read_u32(p) == FATBIN_MAGIC) {
		*out = (struct image){ p, read_u16(p + 6) + read_u64(p + 8), false };
		return out->size <= MAX_IMAGE_BYTES;
	}
	if (memcmp(p, "\x7f" "ELF", 4) == 0) {
		if (p[4] != 2) /* ELFCLASS64 */
			return false;
		uint64_t section_table = read_u64(p + 0x28);
		size_t size = section_table + (size_t)read_u16(p + 0x3a) * read_u16(p + 0x3c);
		*out = (struct image){ p, size, true };
		return section_table && size <= MAX_IMAGE_BYTES;
	}
	size_t length = strnlen((const char *)p, MAX_IMAGE_BYTES);
	*out = (struct image){ p, length, true };
	return length < MAX_IMAGE_BYTES && memmem(p, length, ".version", 8) != NULL;
}

static bool is_identifier_char(unsigned char c) { return isalnum(c) || c == '_' || c == '$'; }

/* True if name occurs in the image as a whole identifier. */
static bool image_mentions(const struct image *image, const char *name)
{
	if (!image->names_visible)
		return true;
	size_t length = strlen(name);
	const unsigned char *at = image->bytes, *end = image->bytes + image->size;
	while ((at = memmem(at, (size_t)(end - at), name, length)) != NULL) {
		bool starts = at == image->bytes || !is_identifier_char(at[-1]);
		bool ends = at + length == end || !is_identifier_char(at[length]);
		if (starts && ends)
			return true;
		at++;
	}
	return false;
}

#define REUSED_VA_BYTES ((size_t)2 << 20)

static void module_free(struct td_module *m)
{
	if (m->reused_va)
		munmap((void *)m->reused_va, REUSED_VA_BYTES);
	for (size_t i = 0; i < MAX_CATALOGUE; i++)
		if (m->globals[i])
			td_free_device_range(m->globals[i]);
	memset(m, 0, sizeof *m);
	pthread_mutex_lock(&td_lock);
	struct td_module *old = spare;
	spare = m;
	pthread_mutex_unlock(&td_lock);
	free(old);
}

/* A zeroed module: the last one unloaded, else a new one. */
static struct td_module *module_alloc(void)
{
	pthread_mutex_lock(&td_lock);
	struct td_module *m = spare;
	spare = NULL;
	pthread_mutex_unlock(&td_lock);
	return m ? m : calloc(1, sizeof *m);
}

static CUresult module_load(struct td_context *ctx, const void *data, struct td_module **out)
{
	struct image image;
	if (!data)
		return CUDA_ERROR_INVALID_VALUE;
	if (!classify_image(data, &image))
		return CUDA_ERROR_INVALID_IMAGE;
	struct td_module *m = module_alloc();
	if (!m)
		return CUDA_ERROR_OUT_OF_MEMORY;
	m->magic = TD_MAGIC_MODULE;
	m->ctx = ctx;
	const struct td_kernel *k;
	size_t offered = 0;
	for (size_t i = 0; (k = td_kernel_at(i)) && i < MAX_CATALOGUE; i++) {
		if (!image_mentions(&image, k->name))
			continue;
		m->functions[offered++] = (struct td_function){
			.magic = TD_MAGIC_FUNCTION, .kernel = k, .module = m,
			.max_dynamic_shared = 49152 - (int)k->static_shared_bytes,
			.preferred_carveout = -1, .cache_config = CU_FUNC_CACHE_PREFER_NONE,
		};
	}
	for (size_t i = 0; i < TD_MODULE_REFS; i++) {
		bool surface;
		if (image_mentions(&image, td_module_ref_name(i, &surface)))
			td_texref_init(&m->refs[i], surface);
	}
	const struct td_global *g;
	for (size_t i = 0; (g = td_global_at(i)) && i < MAX_CATALOGUE; i++) {
		if (!image_mentions(&image, g->name) || (g->named_only && !image.names_visible))
			continue;
		CUresult rc = td_device_alloc(ctx, ctx ? ctx->device : 0, g->size, &m->globals[i]);
		if (rc != CUDA_SUCCESS) {
			module_free(m);
			return rc;
		}
		if (g->initial)
			memcpy((void *)(uintptr_t)m->globals[i], g->initial, g->size);
	}
	uintptr_t freed = td_freed_va_take();
	if (freed) {
		void *h = mmap((void *)freed, REUSED_VA_BYTES, PROT_NONE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
		if (h == (void *)freed)
			m->reused_va = freed;
		else if (h != MAP_FAILED)
			munmap(h, REUSED_VA_BYTES);
	}
	pthread_mutex_lock(&td_lock);
	m->next = modules;
	modules = m;
	pthread_mutex_unlock(&td_lock);
	*out = m;
	return CUDA_SUCCESS;
}

/* Unlinks m; false if it is not a loaded module. */
static bool module_unlink(struct td_module *m)
{
	bool found = false;
	pthread_mutex_lock(&td_lock);
	for (struct td_module **link = &modules; *link; link = &(*link)->next) {
		if (*link == m) {
			*link = m->next;
			found = true;
			break;
		}
	}
	pthread_mutex_unlock(&td_lock);
	return found;
}

void td_unload_context_modules(struct td_context *ctx)
{
	struct td_module *doomed = NULL;
	pthread_mutex_lock(&td_lock);
	for (struct td_module **link = &modules; *link;) {
		struct td_module *m = *link;
		if (m->ctx == ctx) {
			*link = m->next;
			m->next = doomed;
			doomed = m;
		} else {
			link = &m->next;
		}
	}
	pthread_mutex_unlock(&td_lock);
	while (doomed) {
		struct td_module *next = doomed->next;
		module_free(doomed);
		doomed = next;
	}
}

static struct td_module *module_from(const void *handle)
{
	const struct td_module *m = handle;
	return m && m->magic == TD_MAGIC_MODULE ? (struct td_module *)m : NULL;
}

static struct td_function *function_from(const void *handle)
{
	const struct td_function *f = handle;
	return f && f->magic == TD_MAGIC_FUNCTION ? (struct td_function *)f : NULL;
}

struct td_function *td_function_from(const void *handle) { return function_from(handle); }

static CUresult find_function(struct td_module *m, const char *name, struct td_function **out)
{
	if (!m)
		return CUDA_ERROR_INVALID_HANDLE;
	if (!name)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < MAX_CATALOGUE; i++) {
		if (m->functions[i].magic && strcmp(m->functions[i].kernel->name, name) == 0) {
			*out = &m->functions[i];
			return CUDA_SUCCESS;
		}
	}
	return CUDA_ERROR_NOT_FOUND;
}

static CUresult find_global(struct td_module *m, const char *name, CUdeviceptr *dptr, size_t *bytes)
{
	if (!m)
		return CUDA_ERROR_INVALID_HANDLE;
	if (!name)
		return CUDA_ERROR_INVALID_VALUE;
	const struct td_global *g;
	for (size_t i = 0; (g = td_global_at(i)) && i < MAX_CATALOGUE; i++) {
		if (m->globals[i] && strcmp(g->name, name) == 0) {
			if (dptr)
				*dptr = m->globals[i];
			if (bytes)
				*bytes = g->size;
			return CUDA_SUCCESS;
		}
	}
	return CUDA_ERROR_NOT_FOUND;
}

CUdeviceptr td_module_global(struct td_module *m, const char *name)
{
	CUdeviceptr p = 0;
	return m && find_global(m, name, &p, NULL) == CUDA_SUCCESS ? p : 0;
}

CUresult td_module_reference(CUmodule h, const char *name, bool surface, struct td_texref **out)
{
	struct td_module *m = module_from(h);
	if (!m)
		return CUDA_ERROR_INVALID_HANDLE;
	if (!name || !out)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < TD_MODULE_REFS; i++) {
		bool is_surface;
		if (m->refs[i].magic && m->refs[i].surface == surface && strcmp(td_module_ref_name(i, &is_surface), name) == 0) {
			*out = &m->refs[i];
			return CUDA_SUCCESS;
		}
	}
	return CUDA_ERROR_NOT_FOUND;
}

/* ---- module entry points ---- */

static CUresult load_in_current_context(CUmodule *pmod, const void *image)
{
	struct td_context *ctx;
	CUresult rc = td_require_context(&ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!pmod)
		return CUDA_ERROR_INVALID_VALUE;
	return module_load(ctx, image, (struct td_module **)pmod);
}

TD_EXPORT CUresult cuModuleLoadData(CUmodule *pmod, const void *image)
{
	return load_in_current_context(pmod, image);
}

TD_EXPORT CUresult cuModuleLoadFatBinary(CUmodule *pmod, const void *fatbin)
{
	return load_in_current_context(pmod, fatbin);
}

/* Answers the log options of a JIT option list: empty info log, and the
 * error log given message. */
static void answer_jit_logs(unsigned count, const CUjit_option *options, void **values, const char *message)
{
	if (!options || !values)
		return;
	size_t info_size = 0, error_size = 0;
	for (unsigned i = 0; i < count; i++) {
		if (options[i] == CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES)
			info_size = (size_t)(uintptr_t)values[i];
		if (options[i] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
			error_size = (size_t)(uintptr_t)values[i];
	}
	for (unsigned i = 0; i < count; i++) {
		if (options[i] == CU_JIT_INFO_LOG_BUFFER && values[i] && info_size)
			((char *)values[i])[0] = '\0';
		if (options[i] == CU_JIT_ERROR_LOG_BUFFER && values[i] && error_size)
			snprintf(values[i], error_size, "%s", message);
		if (options[i] == CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES)
			values[i] = (void *)(uintptr_t)0;
		if (options[i] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
			values[i] = (void *)(uintptr_t)(error_size && *message ? strlen(message) + 1 : 0);
	}
}

TD_EXPORT CUresult cuModuleLoadDataEx(CUmodule *pmod, const void *image, unsigned int count,
				      CUjit_option *options, void **values)
{
	CUresult rc = load_in_current_context(pmod, image);
	answer_jit_logs(count, options, values,
			rc == CUDA_ERROR_INVALID_IMAGE ? "remora test driver: not a PTX, cubin or fatbin image" : "");
	return rc;
}

TD_EXPORT CUresult cuModuleLoad(CUmodule *pmod, const char *path)
{
	struct td_context *ctx;
	CUresult rc = td_require_context(&ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!pmod || !path)
		return CUDA_ERROR_INVALID_VALUE;
	FILE *file = fopen(path, "rb");
	if (!file)
		return CUDA_ERROR_FILE_NOT_FOUND;
	unsigned char *bytes = NULL;
	size_t size = 0;
	rc = CUDA_ERROR_INVALID_IMAGE;
	if (fseek(file, 0, SEEK_END) == 0) {
		long length = ftell(file);
		if (length > 0 && (size_t)length < MAX_IMAGE_BYTES && (bytes = calloc(1, (size_t)length + 1)) &&
		    fseek(file, 0, SEEK_SET) == 0)
			size = fread(bytes, 1, (size_t)length, file);
		if (bytes && size == (size_t)length)
			rc = module_load(ctx, bytes, (struct td_module **)pmod);
	}
	free(bytes);
	fclose(file);
	return rc;
}

TD_EXPORT CUresult cuModuleUnload(CUmodule handle)
{
	struct td_module *m = module_from(handle);
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!m || !m->ctx || !module_unlink(m))
		return CUDA_ERROR_INVALID_HANDLE;
	td_context_synchronize(m->ctx);
	module_free(m);
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuModuleGetFunction(CUfunction *pfunc, CUmodule handle, const char *name)
{
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!pfunc)
		return CUDA_ERROR_INVALID_VALUE;
	return find_function(module_from(handle), name, (struct td_function **)pfunc);
}

TD_EXPORT CUresult cuModuleGetFunctionCount(unsigned int *count, CUmodule handle)
{
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	struct td_module *m = module_from(handle);
	if (!m)
		return CUDA_ERROR_INVALID_HANDLE;
	if (!count)
		return CUDA_ERROR_INVALID_VALUE;
	*count = 0;
	for (size_t i = 0; i < MAX_CATALOGUE; i++)
		*count += m->functions[i].magic != 0;
	return CUDA_SUCCESS;
}

/* Fills at most numFunctions handles, in catalogue order. */
TD_EXPORT CUresult cuModuleEnumerateFunctions(CUfunction *functions, unsigned int numFunctions, CUmodule handle)
{
	unsigned int count;
	CUresult rc = cuModuleGetFunctionCount(&count, handle);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!functions)
		return CUDA_ERROR_INVALID_VALUE;
	struct td_module *m = module_from(handle);
	unsigned int n = 0;
	for (size_t i = 0; i < MAX_CATALOGUE && n < numFunctions; i++)
		if (m->functions[i].magic)
			functions[n++] = (CUfunction)&m->functions[i];
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuModuleGetGlobal_v2(CUdeviceptr *dptr, size_t *bytes, CUmodule handle, const char *name)
{
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	return find_global(module_from(handle), name, dptr, bytes);
}

/* ---- library entry points ---- */

TD_EXPORT CUresult cuLibraryLoadData(CUlibrary *plib, const void *code, CUjit_option *jit_options,
				     void **jit_values, unsigned int jit_count,
				     CUlibraryOption *library_options, void **library_values,
				     unsigned int library_count)
{
	(void)library_options, (void)library_values, (void)library_count;
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!plib)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = module_load(NULL, code, (struct td_module **)plib);
	answer_jit_logs(jit_count, jit_options, jit_values, "");
	return rc;
}

TD_EXPORT CUresult cuLibraryUnload(CUlibrary handle)
{
	struct td_module *m = module_from(handle);
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!m || m->ctx || !module_unlink(m))
		return CUDA_ERROR_INVALID_HANDLE;
	/* Like CUDA: no queued kernel of the library's may still run (the current context's). */
	struct td_context *ctx = td_current_context();
	if (ctx)
		td_context_synchronize(ctx);
	module_free(m);
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuLibraryGetKernel(CUkernel *pkernel, CUlibrary handle, const char *name)
{
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!pkernel)
		return CUDA_ERROR_INVALID_VALUE;
	return find_function(module_from(handle), name, (struct td_function **)pkernel);
}

TD_EXPORT CUresult cuLibraryGetModule(CUmodule *pmod, CUlibrary handle)
{
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!pmod)
		return CUDA_ERROR_INVALID_VALUE;
	if (!module_from(handle))
		return CUDA_ERROR_INVALID_HANDLE;
	*pmod = (CUmodule)handle;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuLibraryGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUlibrary handle, const char *name)
{
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	return find_global(module_from(handle), name, dptr, bytes);
}

TD_EXPORT CUresult cuKernelGetFunction(CUfunction *pfunc, CUkernel kernel)
{
	struct td_context *ctx;
	CUresult rc = td_require_context(&ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!pfunc)
		return CUDA_ERROR_INVALID_VALUE;
	if (!function_from(kernel))
		return CUDA_ERROR_INVALID_HANDLE;
	*pfunc = (CUfunction)kernel;
	return CUDA_SUCCESS;
}
