/* Live migration of one client to another remorad (docs/pool.md, "Live migration").
 *
 * Source: an admin's RM_OP_MIGRATE reaches the client's worker (rm_migrate_request),
 * which marks its session and greets the target as a session of the same tenant
 * (Hello.migrate_in, the admin's credential; the target makes its contexts before it
 * answers), sends it the address ranges the session's memory lies in to reserve
 * (RM_OP_MIGRATE_RANGES) and the images of its modules and libraries to load ahead
 * (RM_OP_MIGRATE_IMAGE), then keeps that link alive with heartbeats. The session's main
 * thread moves it at the end of the client's next synchronous call, before its reply
 * (rm_migrate_before_reply): what the client asked before has run, and it sends nothing
 * until the reply. The thread checks that the session holds nothing that cannot move,
 * waits for its streams, sends its state (migrate_wire.h) and, once the target has made
 * it again, sends the client RM_OP_MOVED and the reply, and ends the session here. Any failure before RM_OP_MOVED leaves the
 * client where it was, with the admin told why.
 *
 * Target: the session greeted with migrate_in reserves the ranges and loads the images sent
 * ahead (rm_handle_migrate_ranges, rm_handle_migrate_image), then takes the state
 * (rm_handle_migrate_state):
 * contexts, memory mapped at the addresses the client holds, modules from their images,
 * functions by name, streams and events, each handle of the client mapped to the new one
 * (handle_alias.h); then it waits for the client's attach (rm_migrate_resume) and serves
 * it as its main connection. */
#ifndef REMORA_MIGRATE_H
#define REMORA_MIGRATE_H

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>

#include "link.h"
#include "session.h"

struct rm_handoff;
struct rm_request;
struct iovec;

/* A move asked for (under sh->lock while linked to the session). */
struct rm_migration {
	char target[128];
	uint8_t credential[256];
	size_t credential_len;
	struct rm_session *sh; /* whose move it is (while linked) */
	int ready;       /* the target greeted: the client's next synchronous call moves it */
	int done;        /* 1: under way; 2: tried, result and error say how */
	CUresult result;
	char error[256];
	uint64_t session_id, bytes, pause_us; /* pause: from the call's end to the client told */
	pthread_cond_t cond;
	/* The greeting, copied from the session when the move is linked to it. */
	char name[64], tenant_name[64];
	uint32_t pid, heartbeat_ms;
	int ndevices, devices[64];
	/* The target, greeted when the move is asked for (its worker and contexts are made
	 * while the client still runs): the link, the session and key it gave, and how often
	 * it wants a heartbeat until the state comes. The request's thread owns the link until
	 * the move takes it (link_taken, under link_lock). */
	struct rm_link link;
	int linked, link_taken;
	pthread_mutex_t link_lock;
	uint64_t target_session;
	uint8_t target_key[16];
	uint32_t target_heartbeat_ms;
	uint64_t seq; /* the last request's on the link */
};

/* A module's image, kept to send it on, and its device variables' names once read
 * (rm_image_variables: each move reads them several times, and a library such as cuBLAS
 * takes a while). */
struct rm_kept_image {
	uint64_t module;
	enum rm_handle_kind kind; /* RM_H_MODULE or RM_H_LIBRARY */
	CUdevice dev;             /* a module's context's GPU; -1 for a library */
	uint8_t *image;
	size_t n;
	int vars_read, vars_result; /* vars_result: rm_image_variables's */
	char **vars;
	size_t nvars;
};

/* Target: an image the source sent ahead of the state (RM_OP_MIGRATE_IMAGE), loaded while
 * the client still ran; the state's module or library of the same bytes takes it. */
struct rm_preloaded {
	enum rm_handle_kind kind;
	CUdevice dev; /* a module's GPU (its shared context acquired); -1 for a library */
	uint8_t *image; /* n bytes and RM_IMAGE_PAD zeros: kept by the module that takes it */
	size_t n;
	void *handle;
	struct rm_preloaded *next;
};

/* Zeros after a received image: PTX ends in NUL, and a driver reading a short image's
 * header stays inside the buffer. */
#define RM_IMAGE_PAD 64

/* Granules mapped for moved memory, within one reservation block: allocations that share
 * a granule share its run; one that crosses a block's edge lies in two runs. */
struct rm_moved_run {
	uint64_t base, span;
	CUmemGenericAllocationHandle phys;
	uint32_t users; /* moved allocations lying in it */
	int reserved_alone; /* in a reservation of its own, not a block's */
	int in_window;      /* in this worker's window of addresses (memory_window.h): no reservation */
};

/* A reservation of RM_MOVED_BLOCK bytes at a multiple of it, for the runs that lie in it,
 * where the driver does not honour a run's own address: an H100's honours a reservation's
 * address only for whole 32 MiB blocks at a 32 MiB boundary (any other hint was moved
 * elsewhere, measured). */
#define RM_MOVED_BLOCK (32ull << 20)
/* 2 MiB: a multiple of any GPU's allocation granularity here (the window's unit,
 * memory_window.c; the ranges held for a client's return). */
#define RM_GRANULE (2ull << 20)
/* The bytes a client's address range [base, base + size) is reserved in at a target: one at
 * a block's start in whole blocks (a window's: memory_window.h); 0 where that overflows. */
static inline uint64_t rm_mig_va_range_whole(uint64_t base, uint64_t size)
{
	uint64_t whole = base % RM_MOVED_BLOCK ? size : (size + RM_MOVED_BLOCK - 1) / RM_MOVED_BLOCK * RM_MOVED_BLOCK;
	return whole < size ? 0 : whole;
}
struct rm_moved_block {
	uint64_t base;
	uint32_t runs;
};

/* Target: reserves [base, base + size) (whole granules) at that address on dev and maps
 * new memory there, charged to the client: a span the moved allocations lie in. */
CUresult rm_migrate_map_span(struct rm_channel *s, CUdevice dev, uint64_t base, uint64_t size);
/* Records the moved allocation [base, base + size), which must lie in one span. */
CUresult rm_migrate_own(struct rm_channel *s, uint64_t base, uint64_t size);
/* Both as one step (memory_window.c): span bytes mapped at base, the first size of them the
 * client's allocation; undone where either fails. */
CUresult rm_migrate_map_owned(struct rm_channel *s, CUdevice dev, uint64_t base, uint64_t span, uint64_t size);
/* Target: an address range a client reserved, reserved at its address (one at a block's
 * start in whole blocks: RM_MOVED_BLOCK); given up, it stays reserved in the worker
 * (parked) for the client's return, as the spans and blocks its moved memory was mapped in
 * do: an H100's driver laid modules loaded later into such ranges once given back. */
CUresult rm_migrate_reserve_range(uint64_t base, uint64_t size);
void rm_migrate_park_range(uint64_t base, uint64_t size);
/* Target, before it loads anything for a moving client: [base, base + size) reserved and
 * parked (RM_OP_MIGRATE_RANGES), or in this worker's window: 1; 0 where it is taken. */
int rm_migrate_hold_range(uint64_t base, uint64_t size);
/* Source: the addresses of memory just freed because its client moved away, reserved and
 * parked where the driver gives exactly them (whole RM_GRANULEs from an aligned base), so
 * that the client finds them free when it comes back. */
void rm_migrate_hold_freed(uint64_t base, uint64_t size);
/* Unmaps the spans no allocation lies in (a state that failed part-way). */
void rm_migrate_drop_unused(struct rm_channel *s);

/* The admin's request (the accepting process checked the admin's credential): waits until
 * the session has moved or why not, answers on conn and closes it. */
void rm_migrate_request(struct rm_conn *conn, const struct rm_handoff *h);
/* Before the reply to a synchronous call of s (its main channel): moves the session when a
 * move is asked for. 1 when it moved (RM_OP_MOVED sent: the reply follows, then the session
 * ends), else 0. */
int rm_migrate_before_reply(struct rm_channel *s, const struct rm_request *rq);
/* At the session's end: a move still asked for is answered (the client went first). */
void rm_migrate_abandon(struct rm_channel *s);
/* Whether the session moved away (its thread ends it after the reply). */
int rm_migrate_moved(const struct rm_channel *s);

/* Target, before the hello's answer to a move's greeting: makes the worker's contexts on
 * the session's GPUs, so that the state, sent at the client's call, waits for none. */
void rm_migrate_make_contexts(struct rm_channel *s);
/* Target: the client's attach (index 0 of a session that took a state). ok is the attach's
 * answer, sent here. 0 (conn is the session's), or -errno. */
int rm_migrate_resume(struct rm_channel *s, struct rm_conn *conn, const struct iovec *ok);
/* Target, the main thread once its connection ended: 1 when the moved client attached
 * meanwhile (its connection is now s's: serve it), else 0. */
int rm_migrate_wait_resume(struct rm_channel *s);

/* Frees a kept image's record's contents. */
void rm_migrate_kept_image_free(struct rm_kept_image *k);
/* A module's or library's image, now the session's (image freed with it); forgotten at its
 * unload. A module is the current context's. */
void rm_migrate_keep_image(struct rm_channel *s, enum rm_handle_kind kind, uint64_t module, uint8_t *image, size_t n);
/* Target: the preloaded image of kind on dev (-1: a library) whose bytes are image's, taken
 * out of the session's list (NULL: none); the caller owns it and frees the record. */
struct rm_preloaded *rm_migrate_take_preloaded(struct rm_session *sh, enum rm_handle_kind kind, CUdevice dev,
					       const uint8_t *image, size_t n);
/* Target: unloads and frees what was preloaded and not taken (the state's end, the
 * session's end). */
void rm_migrate_drop_preloaded(struct rm_session *sh);
void rm_migrate_forget_image(struct rm_channel *s, uint64_t module);
/* Frees an allocation the client brought (RM_H_MOVED_MEMORY, taken from the session). */
CUresult rm_migrate_free_moved(struct rm_channel *s, const struct rm_handle *h);
/* Releases it at the session's end (its work drained). */
void rm_migrate_release_moved(struct rm_channel *s, const struct rm_handle *h);
/* Whether allocation h of s's is a mapping of the window (memory_window.h) of its own,
 * which it may share over CUDA IPC. */
int rm_migrate_owns_run(struct rm_channel *s, const struct rm_handle *h);
/* An allocation of the window (memory_window.h) that s exported over CUDA IPC, let go of by
 * s (freed, or its session's end) while another client has it open: its mapping becomes the
 * worker's, no longer charged to s. 0, or -ENOENT where it is not such an allocation. */
int rm_migrate_orphan_moved(struct rm_channel *s, const struct rm_handle *h);
/* Unmaps (in the background) the worker's mapping at base that the last client holding it
 * closed: 0, or -ENOENT where base is none. */
int rm_migrate_free_orphan(uint64_t base);
/* Frees the session's migration records at its end. */
void rm_migrate_session_free(struct rm_session *sh);

#endif
