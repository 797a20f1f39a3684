/* Module images: the client finds each image's length and ships it whole; the
 * GPU host's driver picks the code (JIT-compiling PTX where it must). */
#include "client.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "remora.pb-c.h"

#define FATBIN_MAGIC 0xBA55ED50u
#define FATBIN_WRAPPER_MAGIC 0x466243b1u

enum image_kind { IMAGE_UNKNOWN = 0, IMAGE_ELF = 1, IMAGE_PTX = 2, IMAGE_FATBIN = 3 };

struct fatbin_wrapper {
	uint32_t magic;
	uint32_t version;
	const void *data;
	void *unused;
};

/* Length of an ELF64 image: the furthest of its section data and header tables. */
static size_t elf_length(const uint8_t *p)
{
	uint64_t shoff, phoff;
	uint16_t shentsize, shnum, phentsize, phnum;
	memcpy(&phoff, p + 0x20, 8);
	memcpy(&shoff, p + 0x28, 8);
	memcpy(&phentsize, p + 0x36, 2);
	memcpy(&phnum, p + 0x38, 2);
	memcpy(&shentsize, p + 0x3a, 2);
	memcpy(&shnum, p + 0x3c, 2);
	uint64_t end = 0x40;
	if (phoff + (uint64_t)phnum * phentsize > end)
		end = phoff + (uint64_t)phnum * phentsize;
	if (shoff + (uint64_t)shnum * shentsize > end)
		end = shoff + (uint64_t)shnum * shentsize;
	for (uint16_t i = 0; i < shnum; i++) {
		const uint8_t *sh = p + shoff + (uint64_t)i * shentsize;
		uint32_t type;
		uint64_t off, size;
		memcpy(&type, sh + 4, 4);
		memcpy(&off, sh + 0x18, 8);
		memcpy(&size, sh + 0x20, 8);
		if (type != 8 /* SHT_NOBITS */ && off + size > end)
			end = off + size;
	}
	return (size_t)end;
}

/* Finds what to send for image: its start, length and kind. */
static enum image_kind image_extent(const void *image, const void **start, size_t *len)
{
	const uint8_t *p = image;
	uint32_t magic;
	memcpy(&magic, p, 4);
	if (magic == FATBIN_WRAPPER_MAGIC) {
		const struct fatbin_wrapper *w = image;
		p = w->data;
		memcpy(&magic, p, 4);
	}
	*start = p;
	if (magic == FATBIN_MAGIC) {
		uint16_t header_size;
		uint64_t body_size;
		memcpy(&header_size, p + 6, 2);
		memcpy(&body_size, p + 8, 8);
		*len = header_size + (size_t)body_size;
		return IMAGE_FATBIN;
	}
	if (!memcmp(p, "\x7f" "ELF", 4) && p[4] == 2) {
		*len = elf_length(p);
		return IMAGE_ELF;
	}
	*len = strlen((const char *)p) + 1;
	return IMAGE_PTX;
}

static CUresult load_image(uint32_t op, void **handle, const void *image)
{
	if (!handle || !image)
		return CUDA_ERROR_INVALID_VALUE;
	const void *start;
	size_t len;
	Remora__ModuleLoad req = REMORA__MODULE_LOAD__INIT;
	req.image_kind = image_extent(image, &start, &len);
	if (len > RM_MAX_IMAGE_LEN)
		return CUDA_ERROR_INVALID_IMAGE;
	struct iovec data = {(void *)start, len};
	struct rm_rpc_call c = {.op = op, .req = &req.base, .bulk_out = &data, .nbulk_out = 1,
				.rep_desc = &remora__module_load_reply__descriptor};
	CUresult r = rm_rpc(&c);
	if (r == CUDA_SUCCESS && c.rep)
		*handle = (void *)(uintptr_t)((Remora__ModuleLoadReply *)c.rep)->module;
	rm_rpc_free(c.rep);
	return r;
}

RM_EXPORT CUresult CUDAAPI cuModuleLoadData(CUmodule *module, const void *image)
{
	return load_image(RM_OP_cuModuleLoadData, (void **)module, image);
}

RM_EXPORT CUresult CUDAAPI cuModuleLoadFatBinary(CUmodule *module, const void *fatCubin)
{
	return load_image(RM_OP_cuModuleLoadData, (void **)module, fatCubin);
}

/* JIT options are not forwarded: the GPU host's driver uses its defaults. Log
 * buffers the program passes are given empty logs. */
RM_EXPORT CUresult CUDAAPI cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions,
					       CUjit_option *options, void **optionValues)
{
	for (unsigned int i = 0; options && optionValues && i < numOptions; i++) {
		if ((options[i] == CU_JIT_INFO_LOG_BUFFER || options[i] == CU_JIT_ERROR_LOG_BUFFER) && optionValues[i])
			*(char *)optionValues[i] = 0;
		if (options[i] == CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES || options[i] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
			optionValues[i] = (void *)(uintptr_t)0;
	}
	return load_image(RM_OP_cuModuleLoadData, (void **)module, image);
}

/* Library options (e.g. CU_LIBRARY_BINARY_IS_PRESERVED) and JIT options are
 * not forwarded; the image travels whole, so nothing depends on the program
 * keeping it. */
RM_EXPORT CUresult CUDAAPI cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jitOptions,
					      void **jitOptionsValues, unsigned int numJitOptions,
					      CUlibraryOption *libraryOptions, void **libraryOptionValues,
					      unsigned int numLibraryOptions)
{
	(void)jitOptions, (void)jitOptionsValues, (void)numJitOptions;
	(void)libraryOptions, (void)libraryOptionValues, (void)numLibraryOptions;
	return load_image(RM_OP_cuLibraryLoadData, (void **)library, code);
}

/* The program's image file fname, read whole (at most RM_MAX_IMAGE_LEN) and ended with a
 * NUL, as a PTX image must be: *image is the caller's to free. */
CUresult rm_read_image_file(const char *fname, uint8_t **image_out)
{
	FILE *f = fopen(fname, "rb");
	if (!f)
		return CUDA_ERROR_FILE_NOT_FOUND;
	uint8_t *image = NULL;
	size_t len = 0, cap = 0;
	CUresult r = CUDA_SUCCESS;
	for (;;) {
		if (len + 65536 + 1 > cap) {
			cap = cap ? cap * 2 : 1 << 20;
			uint8_t *p = cap <= RM_MAX_IMAGE_LEN ? realloc(image, cap) : NULL;
			if (!p) {
				r = CUDA_ERROR_INVALID_IMAGE;
				break;
			}
			image = p;
		}
		size_t n = fread(image + len, 1, cap - len - 1, f);
		len += n;
		if (n == 0)
			break;
	}
	fclose(f);
	if (r == CUDA_SUCCESS && len < 4)
		r = CUDA_ERROR_INVALID_IMAGE;
	if (r != CUDA_SUCCESS) {
		free(image);
		return r;
	}
	image[len] = 0;
	*image_out = image;
	return CUDA_SUCCESS;
}

RM_EXPORT CUresult CUDAAPI cuModuleLoad(CUmodule *module, const char *fname)
{
	if (!module || !fname)
		return CUDA_ERROR_INVALID_VALUE;
	uint8_t *image = NULL;
	CUresult r = rm_read_image_file(fname, &image);
	if (r == CUDA_SUCCESS)
		r = load_image(RM_OP_cuModuleLoadData, (void **)module, image);
	free(image);
	return r;
}

/* The program's environment decides, as it would with a local driver. */
RM_EXPORT CUresult CUDAAPI cuModuleGetLoadingMode(CUmoduleLoadingMode *mode)
{
	if (!mode)
		return CUDA_ERROR_INVALID_VALUE;
	const char *env = getenv("CUDA_MODULE_LOADING");
	*mode = env && !strcmp(env, "EAGER") ? CU_MODULE_EAGER_LOADING : CU_MODULE_LAZY_LOADING;
	return CUDA_SUCCESS;
}
