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
 * goes to a queue with the fewest client streams on it. While no other client stream
 * of its queue is in use (named by its client in a call within queue_idle_after),
 * calls are issued at once; while one is, a call to a stream with unfinished work is
 * held in the daemon (the calling client's thread waits) until that work is done, so
 * it never holds up another client's work. Streams made and left idle (PyTorch's
 * libraries make a dozen per process) thus share a queue with a busy one at no cost.
 */
#ifndef REMORA_STREAM_POOL_H
#define REMORA_STREAM_POOL_H

#include <cuda.h>
#include <stdint.h>

/* Sets the hardware queue count the workers' driver was given, whether calls wait in
 * the daemon when another client stream of their queue is in use (queue_sharing =
 * wait), and how long a client stream counts as in use after its client last named
 * it in a call (queue_idle_after): longer than the gaps between the calls of a client
 * of long kernels, and than the start-up skew of clients started together. */
void rm_stream_pool_configure(int hardware_queues, int wait_when_shared, int idle_after_s);
/* The queues a context was made with after fewer than configured were asked for (gpus.c). */
void rm_stream_pool_set_queues(int hardware_queues);

/* A non-blocking driver stream of priority for a client, in context ctx (current
 * on the calling thread), on a least-used queue, with no unfinished work of a
 * previous user. */
CUresult rm_stream_pool_take(CUcontext ctx, int priority, CUstream *out);
/* The client is done with st (its work may still run). */
void rm_stream_pool_give(CUstream st);

/* The client named st in a call that gives it no work (a synchronize, a query). */
void rm_stream_pool_named(CUstream st);
/* Before a call is issued to st: when another client stream of st's queue is in use
 * and st has unfinished work, waits until that work is done. */
CUresult rm_stream_pool_before_submit(CUstream st);
/* Before st is made to wait for ev: the same, waiting until ev is done. */
CUresult rm_stream_pool_before_wait(CUstream st, CUevent ev);
/* How long the calling thread's calls were held by the two above (for a shared queue)
 * since it last asked, in nanoseconds; the count starts again at 0. */
uint64_t rm_stream_pool_take_waited_ns(void);

/* Whether another client stream of st's hardware queue is in use now (whatever
 * queue_sharing says): where a timed event record after a kernel would hold up others. */
int rm_stream_pool_contended(CUstream st);

/* Whether no stream of ctx's pool has unfinished work (a query of each): 0 for a context
 * the pool does not know. */
int rm_stream_pool_idle(CUcontext ctx);

/* Forgets ctx's streams (its context is being reset). */
void rm_stream_pool_forget_context(CUcontext ctx);

#endif
