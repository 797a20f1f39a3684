/* A client's state as it moves from one remorad to another (docs/pool.md, "Live
 * migration"): the bulk of RM_OP_MIGRATE_STATE, a run of records, each a 16-byte header
 * (type, 0, payload length; little-endian) and its payload, the last one RM_MIG_END.
 * The decoder is the target's only reader of it: every length is checked against what
 * is left and against the bounds below before anything is allocated or read. */
#ifndef REMORA_MIGRATE_WIRE_H
#define REMORA_MIGRATE_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define RM_MIG_MAGIC 0x32474d52u /* "RMG2" */
#define RM_MIG_HEADER_LEN 16
#define RM_MIG_MAX_RECORDS (1u << 20)
#define RM_MIG_MAX_IMAGE (1ull << 31)   /* a module's image */
#define RM_MIG_MAX_NAME 4096            /* a function's name */
#define RM_MIG_MAX_CTX 64               /* context slots (RM_SESSION_MAX_CTX) */

enum rm_mig_type {
	RM_MIG_END = 0,
	RM_MIG_BEGIN = 1,    /* u32 magic, u32 record count (END excluded) */
	RM_MIG_CTX = 2,      /* u64 the client's handle, i32 its device ordinal, u32 0 */
	RM_MIG_MEMORY = 3,   /* u64 base, u64 size, u32 context slot, u32 0, then size bytes of contents */
	RM_MIG_MODULE = 4,   /* u64 the client's handle, u32 its context slot, u32 0, the image */
	RM_MIG_FUNCTION = 5, /* u64 the client's handle, u64 its module's, i32 its maximum dynamic shared
			      * memory, i32 its shared memory carveout (-1: default), the name (no NUL) */
	RM_MIG_STREAM = 6,   /* u64 the client's handle, u32 context slot, u32 flags, i32 priority, u32 0 */
	RM_MIG_EVENT = 7,    /* u64 the client's handle, u32 context slot, u32 flags */
	RM_MIG_LIBRARY = 9,  /* u64 the client's handle, u64 0, the image */
	RM_MIG_KERNEL = 10,  /* u64 the client's handle, u64 its library's, i32 maximum dynamic shared
			      * memory, i32 carveout (-1: default) on the client's first device, the name */
	RM_MIG_KERNEL_FUNCTION = 11, /* u64 the client's handle, u64 its kernel's, u32 context slot, u32 0 */
	RM_MIG_GLOBAL = 12,  /* u64 its module's or library's handle, u32 name length, u32 1 for a library's,
			      * u64 the variable's address as the client holds it (0: it never asked),
			      * the name (no NUL), then the variable's contents */
	RM_MIG_VA_RANGE = 13, /* u64 base, u64 size: an address range the client reserved
			       * (cuMemAddressReserve) with nothing mapped in it */
	RM_MIG_SPAN = 8,     /* u64 base, u64 size, u32 context slot, u32 0: granules the memory records
			      * that follow lie in, mapped as one range (before those records) */
};

/* What the decoder calls, in the order of the records; each returns 0 or -errno (which
 * ends the decoding). read gives the next len bytes of the state. memory must itself
 * read the size bytes of contents that follow (in pieces of its choosing). The image and
 * name given are the decoder's, valid during the call; name is NUL-terminated. */
struct rm_mig_sink {
	int (*read)(void *arg, void *buf, size_t len);
	int (*ctx)(void *arg, uint64_t handle, int ordinal);
	int (*span)(void *arg, uint64_t base, uint64_t size, uint32_t ctx);
	int (*memory)(void *arg, uint64_t base, uint64_t size, uint32_t ctx);
	int (*module)(void *arg, uint64_t handle, uint32_t ctx, const uint8_t *image, size_t n);
	int (*function)(void *arg, uint64_t handle, uint64_t module, int32_t smem, int32_t carveout, const char *name);
	int (*stream)(void *arg, uint64_t handle, uint32_t ctx, uint32_t flags, int32_t priority);
	int (*event)(void *arg, uint64_t handle, uint32_t ctx, uint32_t flags);
	int (*library)(void *arg, uint64_t handle, const uint8_t *image, size_t n);
	int (*kernel)(void *arg, uint64_t handle, uint64_t library, int32_t smem, int32_t carveout, const char *name);
	int (*kernel_function)(void *arg, uint64_t handle, uint64_t kernel, uint32_t ctx);
	int (*va_range)(void *arg, uint64_t base, uint64_t size);
	/* global must itself read the size bytes of contents that follow; held: the address the
	 * client holds for it, or 0. */
	int (*global)(void *arg, uint64_t image, int library, const char *name, uint64_t held, uint64_t size);
};

/* Decodes a state of total bytes through sink: 0, or -errno with why (n bytes) said. */
int rm_mig_decode(const struct rm_mig_sink *sink, void *arg, uint64_t total, char *why, size_t n);

/* Encoding: a header for a record of type with a payload of len bytes, into out. */
void rm_mig_header(uint8_t out[RM_MIG_HEADER_LEN], uint32_t type, uint64_t len);
/* Little-endian fields of a payload. */
void rm_mig_put64(uint8_t *p, uint64_t v);
void rm_mig_put32(uint8_t *p, uint32_t v);

/* RM_OP_MIGRATE_IMAGE's bulk, an image sent ahead of the state while the client still runs:
 * u32 its kind, u32 the client's ordinal of a module's device (0 for a library), then the
 * image. The target loads it, and the state's module or library of the same bytes takes it. */
#define RM_MIG_IMAGE_HEAD 8
enum rm_mig_image_kind { RM_MIG_IMAGE_MODULE = 1, RM_MIG_IMAGE_LIBRARY = 2 };
void rm_mig_image_head(uint8_t out[RM_MIG_IMAGE_HEAD], uint32_t kind, uint32_t ordinal);
/* 0, or -EPROTO for a kind that is neither. */
int rm_mig_image_head_read(const uint8_t head[RM_MIG_IMAGE_HEAD], uint32_t *kind, uint32_t *ordinal);

/* RM_OP_MIGRATE_RANGES's bulk, before the images: the address ranges the moving client's
 * memory and reservations lie in, each u64 base and u64 size, at most RM_MIG_MAX_RANGES.
 * The target reserves them before it loads anything for the client, so that nothing it
 * loads lands where the client's memory is to go. */
#define RM_MIG_RANGE_LEN 16
#define RM_MIG_MAX_RANGES 65536u
void rm_mig_range_put(uint8_t out[RM_MIG_RANGE_LEN], uint64_t base, uint64_t size);
/* 0, or -EPROTO for an empty range or one past the end of the address space. */
int rm_mig_range_read(const uint8_t in[RM_MIG_RANGE_LEN], uint64_t *base, uint64_t *size);

#endif
