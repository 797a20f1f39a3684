/* Fuzz target `migrate_state` (backend/worker/migrate_wire.c), over the state a source
 * remorad sends when a client moves in (RM_OP_MIGRATE_STATE's bulk): any bytes decode or
 * are refused with a reason, and no sink is called with a length the bytes do not hold. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "migrate_wire.h"

struct input {
	const uint8_t *p;
	size_t left;
};

static int take(void *arg, void *buf, size_t len)
{
	struct input *in = arg;
	if (len > in->left)
		return -1;
	memcpy(buf, in->p, len);
	in->p += len;
	in->left -= len;
	return 0;
}

static int on_ctx(void *arg, uint64_t handle, int ordinal) { (void)arg; return !handle || ordinal < 0 ? (abort(), 0) : 0; }
static int on_memory(void *arg, uint64_t base, uint64_t size, uint32_t ctx)
{
	if (ctx >= RM_MIG_MAX_CTX)
		abort();
	struct input *in = arg;
	uint8_t chunk[4096];
	(void)base;
	if (size > in->left) /* the decoder checked it against the state's length */
		abort();
	for (uint64_t done = 0; done < size;) {
		size_t n = size - done < sizeof(chunk) ? (size_t)(size - done) : sizeof(chunk);
		if (take(in, chunk, n))
			return -1;
		done += n;
	}
	return 0;
}
static int on_span(void *arg, uint64_t base, uint64_t size, uint32_t ctx)
{
	(void)arg;
	return !base || !size || base + size < base || ctx >= RM_MIG_MAX_CTX ? (abort(), 0) : 0;
}
static int on_module(void *arg, uint64_t h, uint32_t ctx, const uint8_t *image, size_t n)
{
	(void)arg, (void)h;
	if (ctx >= RM_MIG_MAX_CTX || !n || n > RM_MIG_MAX_IMAGE)
		abort();
	volatile uint8_t x = image[0] ^ image[n - 1];
	(void)x;
	return 0;
}
static int on_function(void *arg, uint64_t h, uint64_t m, int32_t smem, int32_t carveout, const char *name)
{
	(void)arg, (void)h, (void)m, (void)smem, (void)carveout;
	return strlen(name) > RM_MIG_MAX_NAME ? (abort(), 0) : 0;
}
static int on_stream(void *arg, uint64_t h, uint32_t ctx, uint32_t flags, int32_t prio)
{
	(void)arg, (void)h, (void)flags, (void)prio;
	return ctx >= RM_MIG_MAX_CTX ? (abort(), 0) : 0;
}
static int on_event(void *arg, uint64_t h, uint32_t ctx, uint32_t flags)
{
	(void)arg, (void)h, (void)flags;
	return ctx >= RM_MIG_MAX_CTX ? (abort(), 0) : 0;
}

static int on_library(void *arg, uint64_t h, const uint8_t *image, size_t n)
{
	(void)arg, (void)h;
	if (!n || n > RM_MIG_MAX_IMAGE)
		abort();
	volatile uint8_t x = image[0] ^ image[n - 1];
	(void)x;
	return 0;
}
static int on_kernel(void *arg, uint64_t h, uint64_t lib, int32_t smem, int32_t carveout, const char *name)
{
	(void)arg, (void)h, (void)lib, (void)smem, (void)carveout;
	return strlen(name) > RM_MIG_MAX_NAME ? (abort(), 0) : 0;
}
static int on_kernel_function(void *arg, uint64_t h, uint64_t k, uint32_t ctx)
{
	(void)arg, (void)h, (void)k;
	return ctx >= RM_MIG_MAX_CTX ? (abort(), 0) : 0;
}

static int on_va_range(void *arg, uint64_t base, uint64_t size)
{
	(void)arg;
	return !base || !size || base + size < base ? (abort(), 0) : 0;
}

static int on_global(void *arg, uint64_t h, int library, const char *name, uint64_t held, uint64_t size)
{
	(void)h, (void)library;
	if (held && held + size < held)
		abort(); /* the decoder lets no held range wrap */
	if (strlen(name) > RM_MIG_MAX_NAME)
		abort();
	return on_memory(arg, 1, size ? size : 0, 0) ? -1 : 0; /* reads its contents */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t *copy = malloc(size ? size : 1); /* exactly size bytes, so that a read past them is seen */
	if (!copy)
		return 0;
	memcpy(copy, data, size);
	struct input in = {copy, size};
	const struct rm_mig_sink sink = {take, on_ctx, on_span, on_memory, on_module, on_function, on_stream, on_event,
				       on_library, on_kernel, on_kernel_function, on_va_range, on_global};
	char why[256] = "";
	if (rm_mig_decode(&sink, &in, size, why, sizeof(why)) && !why[0])
		abort(); /* a refusal always says why */
	free(copy);
	return 0;
}
