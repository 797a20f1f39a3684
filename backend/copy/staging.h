/* Staging: the two pinned buffers a copy's bytes pass through between a connection and
 * the GPU, each with an event recorded after the DMA that used it last. Each channel of a
 * session and each copy link has one, opened at its first copy, charged to the client's
 * host-memory account (host_memory.h) while open, and closed again once it is idle (a
 * channel: at a heartbeat, which the client sends only after a silent interval; a copy
 * link: RM_STAGING_IDLE_MS after its last copy), so that an idle client holds none. */
#ifndef REMORA_STAGING_H
#define REMORA_STAGING_H

#include <cuda.h>
#include <stddef.h>

#define RM_STAGING_BUFS 2
/* The smallest buffers a staging opens with where the worker's host memory is short. */
#define RM_STAGING_MIN (256u << 10)

struct rm_host_account;

struct rm_staging {
	struct rm_host_account *account; /* what it is charged to while open */
	size_t size; /* each buffer's bytes while open (copies are cut to it); never 0 */
	size_t full; /* the largest size it opens with (a large copy's), where the worker's host
		      * memory allows */
	void *buf[RM_STAGING_BUFS];
	CUevent done[RM_STAGING_BUFS];
	CUcontext done_ctx[RM_STAGING_BUFS]; /* done[b]'s context: recorded only on its streams */
	int idle[RM_STAGING_BUFS]; /* its last copy's stream was synchronized since: done[b] is not waited for */
	int open;
	int shrunk; /* opened smaller than wanted at the worker's bound: not grown until closed */
};

/* A closed staging of buffers of size bytes (size > 0), charged to account when open. */
void rm_staging_init(struct rm_staging *st, size_t size, struct rm_host_account *account);
/* Allocates every buffer and event in the current context, all or nothing, within the
 * client's account and the worker's host-memory bound (host_memory.h). Where the worker's
 * bound, which all its clients share, refuses the full size, smaller buffers are taken
 * (halved down to RM_STAGING_MIN): copies go in smaller pieces rather than fail because
 * of other clients. CUDA_ERROR_OUT_OF_MEMORY (and a log line) past the client's own
 * account, or the worker's at the smallest size; else the driver's error. Does nothing
 * when open. */
CUresult rm_staging_open(struct rm_staging *st);
/* The same, sized for a copy of bytes: buffers of the next power of two within
 * RM_STAGING_MIN and the full size, so that a client of small copies holds little. An open
 * staging too small for it is reopened larger where its buffers are idle, else kept (the
 * copy goes in smaller pieces). */
CUresult rm_staging_open_for(struct rm_staging *st, uint64_t bytes);
/* Buffer b once the copy that used it last is done, opening the staging first if needed. */
CUresult rm_staging_wait(struct rm_staging *st, int b, void **buf);
/* Records b's event on stream, a stream of any of the worker's contexts: an event is
 * recorded only on streams of the context it was made in (CUDA_ERROR_INVALID_HANDLE), so one
 * of another context is made again in the stream's (a client copying on each of its GPUs). */
CUresult rm_staging_record(struct rm_staging *st, int b, CUstream stream);
/* Buffer b's last copy is known done: its stream was synchronized after it. */
static inline void rm_staging_idle(struct rm_staging *st, int b) { st->idle[b] = st->open; }
/* Waits for every copy through it and frees it; it may be opened again. */
void rm_staging_close(struct rm_staging *st);
/* Closes it if every copy through it is done already, waiting for none. */
void rm_staging_release_idle(struct rm_staging *st);

/* How long a copy link's staging stays open after its last copy. */
#define RM_STAGING_IDLE_MS 2000

/* A blocking host-to-device copy of at most this many bytes in one piece goes to the
 * driver from pageable memory (the session's small_in, rm_copy_in), not a pinned staging buffer: the
 * driver carries a few KiB in its own commands faster than its copy engine reads them
 * from pinned memory (H100, natively: 4 KiB in 7.3 us from pageable memory, 8.3 from
 * pinned). */
#define RM_SMALL_HTOD 16384

#endif
