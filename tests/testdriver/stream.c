/* Streams and events.
 *
 * Each stream is a FIFO of operations run in order by its own worker thread.
 * Operation n of a stream has ticket n; the stream counts tickets handed out
 * (enqueued) and finished (completed), so "has the stream reached ticket t"
 * is the one question behind synchronize, query, events and cross-stream
 * waits.  An event remembers the stream and ticket of its last record.
 *
 * Legacy default stream semantics: work put on the NULL stream first waits
 * for all work already queued on the context's blocking streams, and work put
 * on a blocking stream first waits for the NULL stream.
 *
 * A stream struct is reference counted: the context holds one reference
 * until cuStreamDestroy (which drains and joins the worker), and events and
 * queued waits hold one while they name the stream.
 *
 * Hardware queues, only when CUDA_DEVICE_MAX_CONNECTIONS is set (see
 * td_hardware_queues): a context has that many channels and its streams take
 * them round-robin in creation order.  An op still gets its ticket when it is
 * submitted, but goes first to its stream's channel, an in-order queue with
 * one dispatcher thread.  The dispatcher hands the op at its head to the
 * stream's worker once it depends on no unfinished work (its stream's earlier
 * tickets and, for a wait, the awaited ticket), and only then looks at the
 * next op: so an op that depends on a running kernel holds up every stream
 * queued behind it in the channel, as on the GPU.  A record of a
 * CU_EVENT_DISABLE_TIMING event is handed on at once.  Queries need nothing
 * more: an op still in a channel holds a ticket not yet completed.
 */
#include "testdriver.h"

#include <unistd.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PRIORITY_LEAST 0
#define PRIORITY_GREATEST (-5)


static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void stream_ref(struct td_stream *s) { __atomic_add_fetch(&s->refs, 1, __ATOMIC_ACQ_REL); }
void td_stream_ref(struct td_stream *s) { stream_ref(s); }

void td_stream_unref(struct td_stream *s)
{
	if (__atomic_sub_fetch(&s->refs, 1, __ATOMIC_ACQ_REL) != 0)
		return;
	pthread_cond_destroy(&s->changed);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

static void event_unref(struct td_event *e)
{
	if (__atomic_sub_fetch(&e->refs, 1, __ATOMIC_ACQ_REL) != 0)
		return;
	if (e->stream)
		td_stream_unref(e->stream);
	td_capture_event_clear(e);
	if (e->ipc_fd >= 0) /* its page stays mapped: a queued op may name it (ipc.c) */
		close(e->ipc_fd);
	pthread_mutex_destroy(&e->lock);
	free(e);
}

struct td_op *td_op_new(enum td_op_kind kind)
{
	struct td_op *op = calloc(1, sizeof *op);
	if (op)
		op->kind = kind;
	return op;
}

static void fill(void *dst, uint32_t value, unsigned width, size_t count)
{
	if (width == 1) {
		memset(dst, (int)value, count);
	} else if (width == 2) {
		uint16_t *p = dst;
		for (size_t i = 0; i < count; i++)
			p[i] = (uint16_t)value;
	} else {
		uint32_t *p = dst;
		for (size_t i = 0; i < count; i++)
			p[i] = value;
	}
}

static void run_op(struct td_stream *s, struct td_op *op)
{
	bool broken = td_sticky_error() != CUDA_SUCCESS;
	switch (op->kind) {
	case TD_OP_COPY:
		if (!broken)
			memmove(op->u.copy.dst, op->u.copy.src, op->u.copy.bytes);
		break;
	case TD_OP_SET:
		if (!broken)
			fill(op->u.set.dst, op->u.set.value, op->u.set.width, op->u.set.count);
		break;
	case TD_OP_KERNEL:
		if (!broken) {
			CUresult rc = op->u.launch.kernel->run(&op->u.launch.shape, op->u.launch.args);
			if (rc != CUDA_SUCCESS)
				td_fault(rc);
		}
		break;
	case TD_OP_RECORD: {
		struct td_event *e = op->u.record.event;
		td_timed_record_delay(e);
		pthread_mutex_lock(&e->lock);
		if (e->record_id == op->u.record.record_id) {
			e->timestamp_ns = now_ns();
			e->timestamped = true;
		}
		pthread_mutex_unlock(&e->lock);
		event_unref(e);
		break;
	}
	case TD_OP_WAIT:
		td_wait_ticket(op->u.wait.stream, op->u.wait.ticket);
		td_stream_unref(op->u.wait.stream);
		break;
	case TD_OP_HOST:
		/* As CUDA: not run once the context is broken; run on the stream's own thread,
		 * so the stream's later work waits until it returns. */
		if (!broken)
			op->u.host.fn(op->u.host.data);
		break;
	case TD_OP_WRITE32: /* as the GPU's: not once the context is broken */
		if (!broken)
			__atomic_store_n(op->u.write32.dst, op->u.write32.value, __ATOMIC_RELEASE);
		break;
	case TD_OP_COND:
		if (!broken)
			td_graph_run_conditional(op->u.cond.node);
		break;
	case TD_OP_EVENT_WAIT:
	case TD_OP_NOTHING:
		break;
	}
}

void td_run_op_now(struct td_op *op)
{
	run_op(NULL, op);
}

/* Caller holds s->lock. */
static void hand_to_worker_locked(struct td_stream *s, struct td_op *op)
{
	op->next = NULL;
	if (s->tail)
		s->tail->next = op;
	else
		s->head = op;
	s->tail = op;
	/* Not a signal: with ops in a channel, others may wait on changed while the worker sleeps. */
	pthread_cond_broadcast(&s->changed);
}

/* ---- hardware queues ---- */

struct td_channel {
	pthread_mutex_t lock;
	pthread_cond_t changed;      /* signalled on push and on stop */
	struct td_op *head, *tail;   /* submitted, not yet handed to their stream's worker */
	bool started, stopping;
	pthread_t dispatcher;
};

/* Blocks while op depends on unfinished work. */
static void wait_until_independent(const struct td_op *op)
{
	bool untimed_record = op->kind == TD_OP_RECORD && (op->u.record.event->flags & CU_EVENT_DISABLE_TIMING);
	if (!untimed_record)
		td_wait_ticket(op->stream, op->ticket - 1);
	if (op->kind == TD_OP_WAIT)
		td_wait_ticket(op->u.wait.stream, op->u.wait.ticket);
}

static void *channel_dispatcher(void *arg)
{
	struct td_channel *c = arg;
	pthread_mutex_lock(&c->lock);
	for (;;) {
		while (!c->head && !c->stopping)
			pthread_cond_wait(&c->changed, &c->lock);
		if (!c->head)
			break;
		struct td_op *op = c->head;
		pthread_mutex_unlock(&c->lock);
		wait_until_independent(op);
		pthread_mutex_lock(&c->lock);
		c->head = op->next;
		if (!c->head)
			c->tail = NULL;
		pthread_mutex_unlock(&c->lock);
		/* The stream outlives its unfinished ops: stream_stop waits for them. */
		pthread_mutex_lock(&op->stream->lock);
		hand_to_worker_locked(op->stream, op);
		pthread_mutex_unlock(&op->stream->lock);
		pthread_mutex_lock(&c->lock);
	}
	pthread_mutex_unlock(&c->lock);
	return NULL;
}

/* Caller holds op->stream's lock, so that a stream's ops enter the channel in ticket order. */
static void channel_push(struct td_channel *c, struct td_op *op)
{
	pthread_mutex_lock(&c->lock);
	op->next = NULL;
	if (c->tail)
		c->tail->next = op;
	else
		c->head = op;
	c->tail = op;
	pthread_cond_signal(&c->changed);
	pthread_mutex_unlock(&c->lock);
}

/* The channel of the context's next stream, its dispatcher running; *out is
 * NULL without the model.  Caller holds td_lock. */
static int channel_for_new_stream_locked(struct td_context *ctx, struct td_channel **out)
{
	int count = td_hardware_queues();
	*out = NULL;
	if (count == 0)
		return 0;
	if (!ctx->channels && !(ctx->channels = calloc((size_t)count, sizeof *ctx->channels)))
		return -ENOMEM;
	struct td_channel *c = &ctx->channels[ctx->streams_created % (unsigned)count];
	if (!c->started) {
		pthread_mutex_init(&c->lock, NULL);
		pthread_cond_init(&c->changed, NULL);
		int err = pthread_create(&c->dispatcher, NULL, channel_dispatcher, c);
		if (err) {
			pthread_cond_destroy(&c->changed);
			pthread_mutex_destroy(&c->lock);
			return -err;
		}
		c->started = true;
	}
	*out = c;
	return 0;
}

/* Stops and frees the context's channels, once its streams are gone (so the channels are empty). */
static void channels_stop(struct td_context *ctx)
{
	pthread_mutex_lock(&td_lock);
	struct td_channel *channels = ctx->channels;
	ctx->channels = NULL;
	ctx->streams_created = 0;
	pthread_mutex_unlock(&td_lock);
	for (int i = 0; channels && i < td_hardware_queues(); i++) {
		struct td_channel *c = &channels[i];
		if (!c->started)
			continue;
		pthread_mutex_lock(&c->lock);
		c->stopping = true;
		pthread_cond_broadcast(&c->changed);
		pthread_mutex_unlock(&c->lock);
		pthread_join(c->dispatcher, NULL);
		pthread_cond_destroy(&c->changed);
		pthread_mutex_destroy(&c->lock);
	}
	free(channels);
}

/* ---- streams ---- */

static void *stream_worker(void *arg)
{
	struct td_stream *s = arg;
	pthread_mutex_lock(&s->lock);
	for (;;) {
		while (!s->head && !s->stopping)
			pthread_cond_wait(&s->changed, &s->lock);
		if (!s->head)
			break;
		struct td_op *op = s->head;
		pthread_mutex_unlock(&s->lock);
		run_op(s, op);
		pthread_mutex_lock(&s->lock);
		s->head = op->next;
		if (!s->head)
			s->tail = NULL;
		s->completed++;
		pthread_cond_broadcast(&s->changed);
		free(op);
	}
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

/* Caller holds td_lock. */
static uint64_t append(struct td_stream *s, struct td_op *op);

static struct td_stream *stream_new_locked(struct td_context *ctx, unsigned flags, int priority)
{
	struct td_channel *channel;
	if (channel_for_new_stream_locked(ctx, &channel) != 0)
		return NULL;
	struct td_stream *s = calloc(1, sizeof *s);
	if (!s)
		return NULL;
	s->magic = TD_MAGIC_STREAM;
	s->ctx = ctx;
	s->flags = flags;
	s->priority = priority;
	s->refs = 1;
	s->channel = channel;
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->changed, NULL);
	if (pthread_create(&s->worker, NULL, stream_worker, s) != 0) {
		pthread_cond_destroy(&s->changed);
		pthread_mutex_destroy(&s->lock);
		free(s);
		return NULL;
	}
	s->next_in_context = ctx->streams;
	ctx->streams = s;
	ctx->streams_created++;
	if (ctx->record_stream && ctx->wait_ticket) { /* cuCtxWaitEvent: later streams wait too */
		struct td_op *wait = td_op_new(TD_OP_WAIT);
		if (wait) {
			stream_ref(ctx->record_stream);
			wait->u.wait.stream = ctx->record_stream;
			wait->u.wait.ticket = ctx->wait_ticket;
			append(s, wait);
		}
	}
	return s;
}

struct td_stream *td_stream_new_locked(struct td_context *ctx)
{
	return stream_new_locked(ctx, CU_STREAM_NON_BLOCKING, 0);
}

/* Unlinks s from its context so nothing new finds it; caller holds td_lock. */
static void stream_unlink_locked(struct td_stream *s)
{
	for (struct td_stream **link = &s->ctx->streams; *link; link = &(*link)->next_in_context) {
		if (*link == s) {
			*link = s->next_in_context;
			break;
		}
	}
	if (s->ctx->legacy_stream == s)
		s->ctx->legacy_stream = NULL;
	s->magic = 0;
}

/* Lets the worker drain the queue, joins it and drops the context's reference.
 * Called without td_lock: queued kernels take it to check pointers. */
static void stream_stop(struct td_stream *s)
{
	if (s->channel)
		td_stream_synchronize(s);   /* its last ops may still sit in the channel */
	pthread_mutex_lock(&s->lock);
	s->stopping = true;
	pthread_cond_broadcast(&s->changed);
	pthread_mutex_unlock(&s->lock);
	pthread_join(s->worker, NULL);
	td_stream_unref(s);
}

void td_destroy_context_streams(struct td_context *ctx)
{
	for (;;) {
		pthread_mutex_lock(&td_lock);
		struct td_stream *s = ctx->streams;
		if (s)
			stream_unlink_locked(s);
		pthread_mutex_unlock(&td_lock);
		if (!s)
			break;
		stream_stop(s);
	}
	channels_stop(ctx);
}

CUresult td_resolve_stream(CUstream handle, struct td_stream **out)
{
	struct td_context *ctx;
	CUresult rc = td_require_context(&ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (handle && handle != CU_STREAM_LEGACY && handle != CU_STREAM_PER_THREAD) {
		struct td_stream *s = (struct td_stream *)handle;
		if (s->magic != TD_MAGIC_STREAM)
			return CUDA_ERROR_INVALID_HANDLE;
		*out = s;
		return td_sticky_error();
	}
	struct td_stream *s = NULL;
	pthread_mutex_lock(&td_lock);
	if (handle == CU_STREAM_PER_THREAD) {
		for (s = ctx->streams; s; s = s->next_in_context)
			if (s->per_thread && pthread_equal(s->owner_thread, pthread_self()))
				break;
		if (!s && (s = stream_new_locked(ctx, CU_STREAM_DEFAULT, 0))) {
			s->per_thread = true;
			s->owner_thread = pthread_self();
		}
	} else {
		if (!ctx->legacy_stream && (ctx->legacy_stream = stream_new_locked(ctx, CU_STREAM_DEFAULT, 0)))
			ctx->legacy_stream->legacy = true;
		s = ctx->legacy_stream;
	}
	pthread_mutex_unlock(&td_lock);
	if (!s)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*out = s;
	return CUDA_SUCCESS;
}

static uint64_t append(struct td_stream *s, struct td_op *op)
{
	pthread_mutex_lock(&s->lock);
	uint64_t ticket = ++s->enqueued;
	op->stream = s;
	op->ticket = ticket;
	if (s->channel)
		channel_push(s->channel, op);
	else
		hand_to_worker_locked(s, op);
	pthread_mutex_unlock(&s->lock);
	return ticket;
}

/* Makes s wait for everything queued so far on other. */
static void append_wait_for(struct td_stream *s, struct td_stream *other)
{
	pthread_mutex_lock(&other->lock);
	uint64_t ticket = other->enqueued;
	bool pending = other->completed < ticket;
	pthread_mutex_unlock(&other->lock);
	if (!pending)
		return;
	struct td_op *wait = td_op_new(TD_OP_WAIT);
	if (!wait)
		return;
	stream_ref(other);
	wait->u.wait.stream = other;
	wait->u.wait.ticket = ticket;
	append(s, wait);
}

void td_stream_wait_for(struct td_stream *s, struct td_stream *other)
{
	append_wait_for(s, other);
}

uint64_t td_enqueue(struct td_stream *s, struct td_op *op)
{
	if (__atomic_load_n(&s->capture, __ATOMIC_ACQUIRE) && td_capture_take(s, op))
		return 0;
	if (!(s->flags & CU_STREAM_NON_BLOCKING)) {
		pthread_mutex_lock(&td_lock);
		if (s->legacy) {
			for (struct td_stream *other = s->ctx->streams; other; other = other->next_in_context)
				if (other != s && !(other->flags & CU_STREAM_NON_BLOCKING))
					append_wait_for(s, other);
		} else if (s->ctx->legacy_stream) {
			append_wait_for(s, s->ctx->legacy_stream);
		}
		pthread_mutex_unlock(&td_lock);
	}
	return append(s, op);
}

void td_wait_ticket(struct td_stream *s, uint64_t ticket)
{
	pthread_mutex_lock(&s->lock);
	while (s->completed < ticket)
		pthread_cond_wait(&s->changed, &s->lock);
	pthread_mutex_unlock(&s->lock);
}

static bool reached(struct td_stream *s, uint64_t ticket)
{
	pthread_mutex_lock(&s->lock);
	bool done = s->completed >= ticket;
	pthread_mutex_unlock(&s->lock);
	return done;
}

void td_stream_synchronize(struct td_stream *s)
{
	pthread_mutex_lock(&s->lock);
	uint64_t ticket = s->enqueued;
	pthread_mutex_unlock(&s->lock);
	td_wait_ticket(s, ticket);
}

CUresult td_context_synchronize(struct td_context *ctx)
{
	for (;;) {
		/* Collect references under td_lock, wait without it. */
		struct td_stream *pending[64];
		size_t count = 0;
		pthread_mutex_lock(&td_lock);
		for (struct td_stream *s = ctx->streams; s && count < 64; s = s->next_in_context) {
			pthread_mutex_lock(&s->lock);
			bool busy = s->completed < s->enqueued;
			pthread_mutex_unlock(&s->lock);
			if (busy) {
				stream_ref(s);
				pending[count++] = s;
			}
		}
		pthread_mutex_unlock(&td_lock);
		if (count == 0)
			break;
		for (size_t i = 0; i < count; i++) {
			td_stream_synchronize(pending[i]);
			td_stream_unref(pending[i]);
		}
	}
	return td_sticky_error();
}

/* ---- stream entry points ---- */

static CUresult stream_create(CUstream *ph, unsigned flags, int priority)
{
	struct td_context *ctx;
	CUresult rc = td_require_context(&ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!ph || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING))
		return CUDA_ERROR_INVALID_VALUE;
	if (priority > PRIORITY_LEAST)
		priority = PRIORITY_LEAST;
	if (priority < PRIORITY_GREATEST)
		priority = PRIORITY_GREATEST;
	pthread_mutex_lock(&td_lock);
	struct td_stream *s = stream_new_locked(ctx, flags, priority);
	pthread_mutex_unlock(&td_lock);
	if (!s)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*ph = (CUstream)s;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuStreamCreate(CUstream *ph, unsigned int flags)
{
	return stream_create(ph, flags, 0);
}

TD_EXPORT CUresult cuStreamCreateWithPriority(CUstream *ph, unsigned int flags, int priority)
{
	return stream_create(ph, flags, priority);
}

TD_EXPORT CUresult cuCtxGetStreamPriorityRange(int *least, int *greatest)
{
	struct td_context *ctx;
	CUresult rc = td_require_context(&ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (least)
		*least = PRIORITY_LEAST;
	if (greatest)
		*greatest = PRIORITY_GREATEST;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuStreamDestroy_v2(CUstream handle)
{
	struct td_stream *s = NULL;
	CUresult rc = td_resolve_stream(handle, &s);
	if ((rc != CUDA_SUCCESS && rc != CUDA_ERROR_ILLEGAL_ADDRESS) || !s)
		return rc; /* a broken context may refuse before the stream is found */
	if (!handle || handle == CU_STREAM_LEGACY || handle == CU_STREAM_PER_THREAD)
		return CUDA_ERROR_INVALID_HANDLE;
	pthread_mutex_lock(&td_lock);
	stream_unlink_locked(s);
	pthread_mutex_unlock(&td_lock);
	stream_stop(s);
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuStreamDestroy(CUstream handle)
{
	return cuStreamDestroy_v2(handle);
}

TD_EXPORT CUresult cuStreamSynchronize(CUstream handle)
{
	struct td_stream *s;
	CUresult rc = td_resolve_stream(handle, &s);
	if (rc != CUDA_SUCCESS)
		return rc;
	if ((rc = td_capture_forbid(s)) != CUDA_SUCCESS)
		return rc;
	td_stream_synchronize(s);
	return td_sticky_error();
}

TD_EXPORT CUresult cuStreamQuery(CUstream handle)
{
	struct td_stream *s;
	CUresult rc = td_resolve_stream(handle, &s);
	if (rc != CUDA_SUCCESS)
		return rc;
	if ((rc = td_capture_forbid(s)) != CUDA_SUCCESS)
		return rc;
	pthread_mutex_lock(&s->lock);
	bool idle = s->completed == s->enqueued;
	pthread_mutex_unlock(&s->lock);
	/* As CUDA: a stream whose work is done answers the context's fault, if any. */
	return idle ? td_sticky_error() : CUDA_ERROR_NOT_READY;
}

TD_EXPORT CUresult cuStreamGetFlags(CUstream handle, unsigned int *flags)
{
	struct td_stream *s;
	CUresult rc = td_resolve_stream(handle, &s);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!flags)
		return CUDA_ERROR_INVALID_VALUE;
	*flags = s->flags;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuStreamGetPriority(CUstream handle, int *priority)
{
	struct td_stream *s;
	CUresult rc = td_resolve_stream(handle, &s);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!priority)
		return CUDA_ERROR_INVALID_VALUE;
	*priority = s->priority;
	return CUDA_SUCCESS;
}

/* ---- events ---- */

static struct td_event *event_from(CUevent handle)
{
	struct td_event *e = (struct td_event *)handle;
	return e && e->magic == TD_MAGIC_EVENT ? e : NULL;
}

CUresult td_event_new(CUevent *ph, unsigned flags, struct td_ipc_event *page)
{
	struct td_context *ctx;
	CUresult rc = td_require_context(&ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	struct td_event *e = calloc(1, sizeof *e);
	if (!e)
		return CUDA_ERROR_OUT_OF_MEMORY;
	e->ipc = page;
	e->ipc_fd = -1;
	if ((flags & CU_EVENT_INTERPROCESS) && !page && !(e->ipc = td_ipc_event_new(&e->ipc_fd))) {
		free(e);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	e->magic = TD_MAGIC_EVENT;
	e->flags = flags;
	e->ctx = ctx;
	e->refs = 1;
	pthread_mutex_init(&e->lock, NULL);
	*ph = (CUevent)e;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuEventCreate(CUevent *ph, unsigned int flags)
{
	if (td_fail_now(TD_FAIL_EVENT_CREATE))
		return CUDA_ERROR_OUT_OF_MEMORY;
	struct td_context *ctx;
	CUresult rc = td_require_context(&ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	const unsigned known = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
	if (!ph || (flags & ~known))
		return CUDA_ERROR_INVALID_VALUE;
	if ((flags & CU_EVENT_INTERPROCESS) && !(flags & CU_EVENT_DISABLE_TIMING))
		return CUDA_ERROR_INVALID_VALUE;
	return td_event_new(ph, flags, NULL);
}

TD_EXPORT CUresult cuEventRecordWithFlags(CUevent handle, CUstream stream, unsigned int flags)
{
	(void)flags;
	struct td_event *e = event_from(handle);
	struct td_stream *s;
	CUresult rc = td_resolve_stream(stream, &s);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!e || (e->ctx && s->ctx != e->ctx)) /* a stream of another context: as natively */
		return CUDA_ERROR_INVALID_HANDLE;
	if ((rc = td_capture_usable(s)) != CUDA_SUCCESS)
		return rc;
	if (e->ipc) /* its state is shared with other processes */
		return td_ipc_event_record(e->ipc, s);
	if (td_capture_record(e, s) == 0)
		return CUDA_SUCCESS;
	td_capture_event_clear(e);
	struct td_op *op = td_op_new(TD_OP_RECORD);
	if (!op)
		return CUDA_ERROR_OUT_OF_MEMORY;
	__atomic_add_fetch(&e->refs, 1, __ATOMIC_ACQ_REL);
	pthread_mutex_lock(&e->lock);
	op->u.record.event = e;
	op->u.record.record_id = ++e->record_id;
	e->timestamped = false;
	uint64_t ticket = td_enqueue(s, op);
	stream_ref(s);
	if (e->stream)
		td_stream_unref(e->stream);
	e->stream = s;
	e->ticket = ticket;
	pthread_mutex_unlock(&e->lock);
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuEventRecord(CUevent handle, CUstream stream)
{
	return cuEventRecordWithFlags(handle, stream, 0);
}

/* Snapshot of an event's last record; *stream gets a reference. */
static bool last_record(struct td_event *e, struct td_stream **stream, uint64_t *ticket)
{
	pthread_mutex_lock(&e->lock);
	*stream = e->stream;
	*ticket = e->ticket;
	if (*stream)
		stream_ref(*stream);
	pthread_mutex_unlock(&e->lock);
	return *stream != NULL;
}

TD_EXPORT CUresult cuEventQuery(CUevent handle)
{
	struct td_event *e = event_from(handle);
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!e)
		return CUDA_ERROR_INVALID_HANDLE;
	if (e->ipc)
		return td_ipc_event_query(e->ipc);
	struct td_stream *s;
	uint64_t ticket;
	if (!last_record(e, &s, &ticket))
		return td_sticky_error();
	bool done = reached(s, ticket);
	td_stream_unref(s);
	/* As CUDA: an event whose work is done answers the context's fault, if any. */
	return done ? td_sticky_error() : CUDA_ERROR_NOT_READY;
}

TD_EXPORT CUresult cuEventSynchronize(CUevent handle)
{
	struct td_event *e = event_from(handle);
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!e)
		return CUDA_ERROR_INVALID_HANDLE;
	if (e->ipc)
		return td_ipc_event_synchronize(e->ipc);
	struct td_stream *s;
	uint64_t ticket;
	if (!last_record(e, &s, &ticket))
		return CUDA_SUCCESS;
	td_wait_ticket(s, ticket);
	CUresult rc = td_sticky_error();
	td_stream_unref(s);
	return rc;
}

TD_EXPORT CUresult cuStreamWaitEvent(CUstream stream, CUevent handle, unsigned int flags)
{
	(void)flags;
	struct td_event *e = event_from(handle);
	struct td_stream *s;
	CUresult rc = td_resolve_stream(stream, &s);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!e)
		return CUDA_ERROR_INVALID_HANDLE;
	if (e->ipc)
		return td_ipc_event_wait(e->ipc, s);
	if (td_capture_wait(s, e, &rc) == 0)
		return rc;
	struct td_stream *source;
	uint64_t ticket;
	if (!last_record(e, &source, &ticket))
		return CUDA_SUCCESS;
	if (source == s) {
		td_stream_unref(source);
		return CUDA_SUCCESS;
	}
	struct td_op *op = td_op_new(TD_OP_WAIT);
	if (!op) {
		td_stream_unref(source);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	op->u.wait.stream = source;      /* the op owns this reference */
	op->u.wait.ticket = ticket;
	td_enqueue(s, op);
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuEventElapsedTime_v2(float *ms, CUevent start_handle, CUevent end_handle)
{
	struct td_event *start = event_from(start_handle), *end = event_from(end_handle);
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!ms)
		return CUDA_ERROR_INVALID_VALUE;
	if (!start || !end || ((start->flags | end->flags) & CU_EVENT_DISABLE_TIMING))
		return CUDA_ERROR_INVALID_HANDLE;
	struct td_event *pair[2] = { start, end };
	uint64_t stamps[2];
	for (int i = 0; i < 2; i++) {
		struct td_stream *s;
		uint64_t ticket;
		if (!last_record(pair[i], &s, &ticket))
			return CUDA_ERROR_INVALID_HANDLE;
		bool done = reached(s, ticket);
		td_stream_unref(s);
		if (!done)
			return CUDA_ERROR_NOT_READY;
		pthread_mutex_lock(&pair[i]->lock);
		bool stamped = pair[i]->timestamped;
		stamps[i] = pair[i]->timestamp_ns;
		pthread_mutex_unlock(&pair[i]->lock);
		if (!stamped)
			return CUDA_ERROR_NOT_READY;
	}
	*ms = (float)((double)(int64_t)(stamps[1] - stamps[0]) / 1e6);
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuEventElapsedTime(float *ms, CUevent start, CUevent end)
{
	return cuEventElapsedTime_v2(ms, start, end);
}

TD_EXPORT CUresult cuEventDestroy_v2(CUevent handle)
{
	struct td_event *e = event_from(handle);
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!e)
		return CUDA_ERROR_INVALID_HANDLE;
	e->magic = 0;
	event_unref(e);
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuEventDestroy(CUevent handle)
{
	return cuEventDestroy_v2(handle);
}

TD_EXPORT CUresult cuLaunchHostFunc(CUstream stream, CUhostFn fn, void *userData)
{
	struct td_stream *s;
	if (!fn)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = td_resolve_stream(stream, &s);
	if (rc == CUDA_SUCCESS)
		rc = td_capture_usable(s);
	if (rc != CUDA_SUCCESS)
		return rc;
	struct td_op *op = td_op_new(TD_OP_HOST);
	if (!op)
		return CUDA_ERROR_OUT_OF_MEMORY;
	op->u.host.fn = fn;
	op->u.host.data = userData;
	td_enqueue(s, op);
	return CUDA_SUCCESS;
}

struct td_callback {
	CUstreamCallback cb;
	CUstream stream;
	void *data;
};

static void CUDA_CB run_callback(void *arg)
{
	struct td_callback *c = arg;
	c->cb(c->stream, CUDA_SUCCESS, c->data);
	free(c);
}

TD_EXPORT CUresult cuStreamAddCallback(CUstream stream, CUstreamCallback callback, void *userData, unsigned int flags)
{
	if (!callback || flags)
		return CUDA_ERROR_INVALID_VALUE;
	struct td_callback *c = malloc(sizeof(*c));
	if (!c)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*c = (struct td_callback){callback, stream, userData};
	CUresult rc = cuLaunchHostFunc(stream, run_callback, c);
	if (rc != CUDA_SUCCESS)
		free(c);
	return rc;
}

/* Stream memory operations: a write of 4 bytes to memory of this driver's (device or
 * mapped host memory) once the stream's earlier work has run. Not captured: refused
 * while the stream captures. */
TD_EXPORT CUresult cuStreamWriteValue32_v2(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags)
{
	struct td_stream *s;
	CUresult rc = td_resolve_stream(stream, &s);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (s->capture)
		return CUDA_ERROR_NOT_SUPPORTED;
	if ((flags & ~(unsigned)CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER) || addr % 4 ||
	    !td_device_range_ok((const void *)(uintptr_t)addr, 4))
		return CUDA_ERROR_INVALID_VALUE;
	rc = td_sticky_error();
	if (rc != CUDA_SUCCESS)
		return rc;
	struct td_op *op = td_op_new(TD_OP_WRITE32);
	if (!op)
		return CUDA_ERROR_OUT_OF_MEMORY;
	op->u.write32.dst = (uint32_t *)(uintptr_t)addr;
	op->u.write32.value = value;
	td_enqueue(s, op);
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuStreamWriteValue32(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags)
{
	return cuStreamWriteValue32_v2(stream, addr, value, flags);
}
