/* Shared helpers of the driver-API test programs.
 *
 * Programs print a deterministic summary to stdout (lines starting "time_"
 * carry timings and are ignored when outputs are compared), errors to
 * stderr, and exit 0 only if every result matched its CPU reference.
 */
#ifndef REMORA_DRV_COMMON_H
#define REMORA_DRV_COMMON_H

#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static inline const char *drv_error_name(CUresult rc)
{
	const char *name = NULL;
	if (cuGetErrorName(rc, &name) != CUDA_SUCCESS || !name)
		return "unknown CUresult";
	return name;
}

/* Any unexpected CUresult ends the program. */
#define CHECK(call)                                                                         \
	do {                                                                                \
		CUresult check_rc_ = (call);                                                \
		if (check_rc_ != CUDA_SUCCESS) {                                            \
			fprintf(stderr, "%s:%d: %s failed: %s (%d)\n", __FILE__, __LINE__,  \
				#call, drv_error_name(check_rc_), (int)check_rc_);          \
			exit(1);                                                            \
		}                                                                           \
	} while (0)

/* A call that must fail with a given CUresult. */
#define EXPECT_RESULT(call, expected)                                                       \
	do {                                                                                \
		CUresult check_rc_ = (call);                                                \
		if (check_rc_ != (expected)) {                                              \
			fprintf(stderr, "%s:%d: %s gave %s, expected %s\n", __FILE__, __LINE__,  \
				#call, drv_error_name(check_rc_), drv_error_name(expected)); \
			exit(1);                                                            \
		}                                                                           \
	} while (0)

static int drv_failures;

/* Records a mismatch; the program goes on and exits 1 at the end. */
#define EXPECT(cond, ...)                                                   \
	do {                                                                \
		if (!(cond)) {                                              \
			fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
			fprintf(stderr, __VA_ARGS__);                       \
			fputc('\n', stderr);                                \
			drv_failures++;                                     \
		}                                                           \
	} while (0)

static inline int drv_exit_status(void)
{
	if (drv_failures)
		fprintf(stderr, "%d check(s) failed\n", drv_failures);
	return drv_failures ? 1 : 0;
}

static inline double drv_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static inline uint64_t drv_fnv1a(const void *data, size_t bytes)
{
	const unsigned char *p = data;
	uint64_t hash = 0xcbf29ce484222325ull;
	for (size_t i = 0; i < bytes; i++)
		hash = (hash ^ p[i]) * 0x100000001b3ull;
	return hash;
}

/* Reads a whole file, NUL-terminated (a PTX image must be). */
static inline void *drv_read_file(const char *path, size_t *size)
{
	FILE *file = fopen(path, "rb");
	if (!file) {
		perror(path);
		exit(1);
	}
	fseek(file, 0, SEEK_END);
	long length = ftell(file);
	fseek(file, 0, SEEK_SET);
	char *bytes = length >= 0 ? malloc((size_t)length + 1) : NULL;
	if (!bytes || fread(bytes, 1, (size_t)length, file) != (size_t)length) {
		fprintf(stderr, "%s: cannot read\n", path);
		exit(1);
	}
	bytes[length] = '\0';
	fclose(file);
	if (size)
		*size = (size_t)length;
	return bytes;
}

/* cuInit and the primary context of device 0, made current (as cudart does). */
static inline CUcontext drv_open_device0(void)
{
	CUdevice dev;
	CUcontext ctx;
	CHECK(cuInit(0));
	CHECK(cuDeviceGet(&dev, 0));
	CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CHECK(cuCtxSetCurrent(ctx));
	return ctx;
}

static inline void drv_close_device0(void)
{
	CHECK(cuCtxSetCurrent(NULL));
	CHECK(cuDevicePrimaryCtxRelease(0));
}

/* Loads the image file with cuModuleLoadData. */
static inline CUmodule drv_load_module(const char *path)
{
	CUmodule module;
	void *image = drv_read_file(path, NULL);
	CHECK(cuModuleLoadData(&module, image));
	free(image);
	return module;
}

#endif
