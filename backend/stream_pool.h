/* The driver streams behind clients' streams, and the hardware queues they share.
 *
 * A context has a fixed number of hardware work queues (CUDA_DEVICE_MAX_CONNECTIONS,
 * at most 32), handed to streams round-robin in creation order, and each queue runs
 * in order: a call that must wait for its own stream's unfinished work (a kernel or
 * copy after a running kernel, a timed event record after one, a wait on an
 * unfinished event) holds up every other stream's work queued behind it in that
 * queue. On an H200, 128 streams each given [timed record, 224 ms kernel, timed
 * record] one stream after another over 32 queues took 4x one kernel; 1x when the
 * second records came after all kernels (docs/sharing.md).
 *
 * So every driver stream of a worker comes from here: made in batches of one per
 * queue and never destroyed, so that each one's queue is known (its creation number
 * modulo the queue count) and streams clients give back are reused. A client stream
 * goes to a queue with the fewest client streams on it. While a queue serves one
 * client stream, calls are issued at once; once it serves several, a call to a
 * stream with unfinished work is held in the daemon (the calling client's thread
 * waits) until that work is done, so it never holds up another client's work.
 */
#ifndef REMORA_STREAM_POOL_H
#define REMORA_STREAM_POOL_H

#include <cuda.h>
#include <stdint.h>

/* Sets the hardware queue count the workers' driver was given, and whether calls
 * wait in the daemon when their stream's queue is shared (queue_sharing = wait). */
void rm_stream_pool_configure(int hardware_queues, int wait_when_shared);

/* A non-blocking driver stream of priority for a client, in context ctx (current
 * on the calling thread), on a least-used queue, with no unfinished work of a
 * previous user. */
CUresult rm_stream_pool_take(CUcontext ctx, int priority, CUstream *out);
/* The client is done with st (its work may still run). */
void rm_stream_pool_give(CUstream st);

/* Before a call is issued to st: when st's queue is shared and st has unfinished
 * work, waits until that work is done. */
CUresult rm_stream_pool_before_submit(CUstream st);
/* Before st is made to wait for ev: when st's queue is shared, waits until ev is done. */
CUresult rm_stream_pool_before_wait(CUstream st, CUevent ev);
/* How long the calling thread's calls were held by the two above (for a shared queue)
 * since it last asked, in nanoseconds; the count starts again at 0. */
uint64_t rm_stream_pool_take_waited_ns(void);

/* Whether st's hardware queue serves more than one client stream now (whatever
 * queue_sharing says): where a timed event record after a kernel would hold up others. */
int rm_stream_pool_queue_shared(CUstream st);

/* Forgets ctx's streams (its context is being reset). */
void rm_stream_pool_forget_context(CUcontext ctx);

#endif
