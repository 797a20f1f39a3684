/* The source of a move (migrate.h): the admin's request, the checks, the state sent to
 * the target, and the client told where its session went. */
#include "migrate.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dispatch.h"
#include "driver_table.h"
#include "handle_alias.h"
#include "ipc.h"
#include "log.h"
#include "migrate_wire.h"
#include "remora.pb-c.h"
#include "server.h"
#include "transport.h"
#include "worker.h"

#define DEFAULT_WAIT_S 30
#define DIAL_TIMEOUT_MS 10000
#define CHUNK (8u << 20)
#define MOVED_AWAY 9 /* sh->migrate_in of a session that moved on */

/* Requests and the sessions' links to them; the requests' waits. */
static pthread_mutex_t mig_lock = PTHREAD_MUTEX_INITIALIZER;

static const char *const kind_names[] = {
	"none",
#define RM_HANDLE_KIND(name, ctype, step, release) #name,
#include "handle_kinds.def"
#undef RM_HANDLE_KIND
};

static uint64_t now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* ---- the admin's request ---- */

static int link_request(struct rm_channel *s, void *arg)
{
	struct rm_migration *m = arg;
	int err = 0;
	pthread_mutex_lock(&mig_lock);
	if (s->sh->migration || s->sh->migrate_in)
		err = -EBUSY;
	else
		s->sh->migration = m, m->sh = s->sh;
	pthread_mutex_unlock(&mig_lock);
	return err;
}

static void answer(struct rm_conn *conn, const struct rm_migration *m, uint64_t seq)
{
	struct rm_link l;
	Remora__MigrateReply rep = REMORA__MIGRATE_REPLY__INIT;
	rep.error = (char *)m->error;
	rep.session_id = m->result == CUDA_SUCCESS ? m->session_id : 0;
	rep.bytes_moved = m->bytes;
	rep.pause_us = m->pause_us;
	uint8_t buf[512];
	size_t len = remora__migrate_reply__get_packed_size(&rep);
	struct rm_frame f = {.magic = RM_WIRE_MAGIC, .op = RM_OP_MIGRATE, .seq = seq, .flags = RM_F_REPLY,
			     .result = (int32_t)m->result, .msg_len = (uint32_t)len};
	if (len <= sizeof(buf) && !rm_link_init(&l, conn)) {
		remora__migrate_reply__pack(&rep, buf);
		rm_link_send(&l, &f, buf, NULL, 0);
		rm_link_close(&l);
	} else {
		rm_conn_close(conn);
	}
}

void rm_migrate_request(struct rm_conn *conn, const struct rm_handoff *h)
{
	struct rm_migration m = {.result = CUDA_ERROR_NOT_READY};
	snprintf(m.target, sizeof(m.target), "%s", h->migrate_to);
	m.credential_len = h->credential_len <= sizeof(m.credential) ? h->credential_len : 0;
	memcpy(m.credential, h->credential, m.credential_len);
	pthread_cond_init(&m.cond, NULL);
	int err = rm_served_main(h->session_id, link_request, &m);
	if (err) {
		m.result = err == -EBUSY ? CUDA_ERROR_NOT_READY : CUDA_ERROR_NOT_FOUND;
		snprintf(m.error, sizeof(m.error), "%s", err == -EBUSY ? "the client is moving already"
							 : "no such session in its worker");
	} else {
		struct timespec until;
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += h->wait_s ? h->wait_s : DEFAULT_WAIT_S;
		pthread_mutex_lock(&mig_lock);
		while (m.done != 2 && (pthread_cond_timedwait(&m.cond, &mig_lock, &until) == 0 || m.done == 1))
			;
		if (m.done != 2) { /* no synchronous call came in time: the client stays */
			m.sh->migration = NULL;
			m.result = CUDA_ERROR_TIMEOUT;
			snprintf(m.error, sizeof(m.error), "the client made no synchronous call within %u s; it stays",
				 h->wait_s ? h->wait_s : DEFAULT_WAIT_S);
		}
		pthread_mutex_unlock(&mig_lock);
	}
	explicit_bzero(m.credential, sizeof(m.credential));
	rm_log(m.result == CUDA_SUCCESS ? RM_LOG_INFO : RM_LOG_WARN, "session %llu: move to %s: %s",
	       (unsigned long long)h->session_id, m.target, m.result == CUDA_SUCCESS ? "done" : m.error);
	answer(conn, &m, 1);
	pthread_cond_destroy(&m.cond);
}

void rm_migrate_abandon(struct rm_channel *s)
{
	pthread_mutex_lock(&mig_lock);
	struct rm_migration *m = s->sh->migration;
	if (m) {
		m->done = 2;
		m->result = CUDA_ERROR_NOT_FOUND;
		snprintf(m->error, sizeof(m->error), "the client ended before its next call");
		s->sh->migration = NULL;
		pthread_cond_broadcast(&m->cond);
	}
	pthread_mutex_unlock(&mig_lock);
}

int rm_migrate_moved(const struct rm_channel *s)
{
	return s->sh->migrate_in == MOVED_AWAY;
}

/* ---- what moves ---- */

struct collect {
	struct rm_handle *h;
	size_t n, cap;
	char why[200];
};

static int gather(const struct rm_handle *h, void *arg)
{
	struct collect *c = arg;
	if (c->n == c->cap) {
		size_t cap = c->cap ? c->cap * 2 : 64;
		struct rm_handle *g = realloc(c->h, cap * sizeof(*g));
		if (!g) {
			snprintf(c->why, sizeof(c->why), "out of memory");
			return 1;
		}
		c->h = g, c->cap = cap;
	}
	c->h[c->n++] = *h;
	return 0;
}

static const enum rm_handle_kind movable[] = {RM_H_MEMORY, RM_H_MOVED_MEMORY, RM_H_MODULE, RM_H_LIBRARY,
					      RM_H_KERNEL, RM_H_FUNCTION, RM_H_STREAM, RM_H_EVENT};

/* Why s cannot move, or NULL; its handles of the kinds that move gathered into c, in the
 * order they are made again (memory and modules before functions, streams, events). */
static const char *refusal(struct rm_channel *s, struct collect *c)
{
	struct rm_session *sh = s->sh;
	for (int i = 1; i <= RM_MAX_CHANNELS; i++)
		if (sh->channels[i] && sh->channels[i]->callbacks)
			return "it runs host functions (a callback channel), which do not move";
	if (sh->nshared)
		return "it shares pinned memory with the worker (unix:); set REMORA_SHARE_PINNED=0 or use tcp:";
	if (rm_ipc_session_shares(s))
		return "it shares memory or events with other clients over CUDA IPC";
	for (int i = 0; i < sh->nctx; i++) {
		if (sh->ctxs[i].created)
			return "it created contexts of its own (cuCtxCreate), which do not move";
		if (__atomic_load_n(&sh->ctxs[i].captures, __ATOMIC_ACQUIRE))
			return "a stream capture is under way";
		if (sh->ctxs[i].pool)
			return "it uses stream-ordered allocation (a memory pool), which does not move";
		if (sh->ctxs[i].limits_set)
			return "it set context limits (cuCtxSetLimit), which do not move";
		if (sh->peer_enabled[i])
			return "it enabled peer access between GPUs, which does not move";
	}
	for (uint32_t k = 1; k < sizeof(kind_names) / sizeof(*kind_names); k++) {
		int moves = k == RM_H_CONTEXT;
		for (size_t j = 0; j < sizeof(movable) / sizeof(*movable); j++)
			moves |= movable[j] == (enum rm_handle_kind)k;
		struct collect none = {0};
		if (!moves && rm_session_each(s, (enum rm_handle_kind)k, gather, &none)) {
			free(none.h);
			return "out of memory";
		}
		free(none.h);
		if (none.n) {
			snprintf(c->why, sizeof(c->why), "it holds %zu handle(s) of kind %s, which do not move (docs/pool.md)",
				 none.n, kind_names[k]);
			return c->why;
		}
	}
	for (size_t j = 0; j < sizeof(movable) / sizeof(*movable); j++)
		if (rm_session_each(s, movable[j], gather, c))
			return c->why;
	for (size_t i = 0; i < c->n; i++) {
		const struct rm_handle *h = &c->h[i];
		unsigned int managed = 0;
		if (h->kind == RM_H_MEMORY && rm_drv.cuPointerGetAttribute)
			rm_drv_cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, h->value);
		if (managed)
			return "it holds managed memory, which does not move";
		if ((h->kind == RM_H_MEMORY || h->kind == RM_H_MOVED_MEMORY) && (!h->ctx || h->ctx > (uint32_t)sh->nctx))
			return "it holds memory of no context of its own";
		if (h->kind == RM_H_FUNCTION && !rm_session_find(s, RM_H_MODULE, h->parent, NULL) &&
		    !rm_session_find(s, RM_H_KERNEL, h->parent, NULL))
			return "it holds a function of neither a module nor a kernel of its own";
		if (h->kind == RM_H_MODULE && h->parent)
			return "it holds a library's module (cuLibraryGetModule), which does not move";
	}
	return NULL;
}

/* ---- the state on the wire ---- */

struct sender {
	struct rm_channel *s;
	struct rm_conn *conn;
	struct collect *c;
	uint64_t total;
	int count; /* 1: sizing (nothing sent) */
	uint32_t records, records_expected;
	uint8_t *chunk;
	const char *why;
};

static int emit(struct sender *x, uint32_t type, const uint8_t *fixed, size_t nfixed, const void *rest, uint64_t nrest)
{
	uint8_t h[RM_MIG_HEADER_LEN];
	x->records += type != RM_MIG_END && type != RM_MIG_BEGIN;
	x->total += sizeof(h) + nfixed + nrest;
	if (x->count)
		return 0;
	rm_mig_header(h, type, nfixed + nrest);
	struct iovec v[3] = {{h, sizeof(h)}, {(void *)fixed, nfixed}, {(void *)rest, (size_t)nrest}};
	return rm_conn_sendv(x->conn, v, rest ? 3 : 2);
}

static int send_memory(struct sender *x, const struct rm_handle *h)
{
	uint8_t f[24];
	rm_mig_put64(f, h->value);
	rm_mig_put64(f + 8, h->size);
	rm_mig_put32(f + 16, h->ctx - 1);
	rm_mig_put32(f + 20, 0);
	int err = emit(x, RM_MIG_MEMORY, f, sizeof(f), NULL, h->size); /* the contents follow */
	if (err || x->count)
		return err;
	if (rm_session_enter(x->s, x->s->sh->ctxs[h->ctx - 1].handle) != CUDA_SUCCESS)
		return -EIO;
	for (uint64_t done = 0; done < h->size && !err;) {
		size_t n = h->size - done < CHUNK ? (size_t)(h->size - done) : CHUNK;
		if (rm_drv_cuMemcpyDtoH_v2(x->chunk, h->value + done, n) != CUDA_SUCCESS) {
			x->why = "its memory could not be read";
			return -EIO;
		}
		struct iovec v = {x->chunk, n};
		err = rm_conn_sendv(x->conn, &v, 1);
		done += n;
	}
	return err;
}

static int slot_of(const struct rm_handle *h)
{
	return h->ctx ? (int)h->ctx - 1 : 0;
}

/* The image kept for a module or library (NULL: none); only the session's thread changes
 * the list while it moves. */
static const uint8_t *kept_image(struct rm_session *sh, uint64_t handle, size_t *n)
{
	const uint8_t *image = NULL;
	pthread_mutex_lock(&sh->lock);
	for (size_t k = 0; k < sh->nimages && !image; k++)
		if (sh->images[k].module == handle)
			image = sh->images[k].image, *n = sh->images[k].n;
	pthread_mutex_unlock(&sh->lock);
	return image;
}

static int by_base(const void *a, const void *b)
{
	const struct rm_handle *x = a, *y = b;
	return x->value < y->value ? -1 : x->value > y->value;
}

/* The spans the memory lies in: its allocations' granules, those that touch merged, so
 * that each allocation lies in one span the target maps as one range. */
static int send_spans(struct sender *x)
{
	struct rm_session *sh = x->s->sh;
	size_t n = 0;
	struct rm_handle *mem = malloc((x->c->n + 1) * sizeof(*mem));
	if (!mem)
		return -ENOMEM;
	for (size_t i = 0; i < x->c->n; i++)
		if (x->c->h[i].kind == RM_H_MEMORY || x->c->h[i].kind == RM_H_MOVED_MEMORY)
			mem[n++] = x->c->h[i];
	qsort(mem, n, sizeof(*mem), by_base);
	int err = 0;
	for (size_t i = 0; i < n && !err;) {
		const struct rm_session_ctx *k = &sh->ctxs[mem[i].ctx - 1];
		CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
					    .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = k->dev}};
		size_t gran = 0;
		if (rm_drv_cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS ||
		    !gran || (gran & (gran - 1))) {
			x->why = "the GPU's granularity is unknown";
			err = -EIO;
			break;
		}
		uint64_t base = mem[i].value & ~(uint64_t)(gran - 1), end = mem[i].value + mem[i].size;
		uint32_t slot = mem[i].ctx - 1;
		for (i++; i < n && (mem[i].value & ~(uint64_t)(gran - 1)) <= ((end + gran - 1) & ~(uint64_t)(gran - 1)); i++)
			end = mem[i].value + mem[i].size > end ? mem[i].value + mem[i].size : end;
		end = (end + gran - 1) & ~(uint64_t)(gran - 1);
		uint8_t f[24];
		rm_mig_put64(f, base);
		rm_mig_put64(f + 8, end - base);
		rm_mig_put32(f + 16, slot);
		rm_mig_put32(f + 20, 0);
		err = emit(x, RM_MIG_SPAN, f, sizeof(f), NULL, 0);
	}
	free(mem);
	return err;
}

/* The whole state, sent (or, counting, sized). */
static int send_state(struct sender *x)
{
	struct rm_channel *s = x->s;
	struct rm_session *sh = s->sh;
	uint8_t f[24];
	int err;
	x->records = 0, x->total = 0;
	rm_mig_put32(f, RM_MIG_MAGIC);
	rm_mig_put32(f + 4, x->records_expected);
	if ((err = emit(x, RM_MIG_BEGIN, f, 8, NULL, 0)))
		return err;
	for (int i = 0; i < sh->nctx && !err; i++) {
		rm_mig_put64(f, sh->ctxs[i].handle);
		rm_mig_put32(f + 8, 0);
		CUdevice dev = sh->ctxs[i].dev;
		for (int d = 0; d < sh->ndevices; d++) /* the client's ordinal of its device */
			if (sh->devices[d] == dev)
				rm_mig_put32(f + 8, (uint32_t)d);
		rm_mig_put32(f + 12, 0);
		err = emit(x, RM_MIG_CTX, f, 16, NULL, 0);
	}
	if (!err)
		err = send_spans(x);
	for (size_t i = 0; i < x->c->n && !err; i++) {
		const struct rm_handle *h = &x->c->h[i];
		uint64_t client = rm_session_out_value(s, (enum rm_handle_kind)h->kind, h->value);
		switch (h->kind) {
		case RM_H_MEMORY:
		case RM_H_MOVED_MEMORY:
			err = send_memory(x, h);
			break;
		case RM_H_LIBRARY:
		case RM_H_MODULE: {
			size_t n = 0;
			const uint8_t *image = kept_image(sh, h->value, &n);
			if (!image) {
				x->why = "a module's or library's image was not kept";
				return -ENOENT;
			}
			if (h->kind == RM_H_LIBRARY) {
				rm_mig_put64(f, client);
				rm_mig_put64(f + 8, 0);
				err = emit(x, RM_MIG_LIBRARY, f, 16, image, n);
				break;
			}
			rm_mig_put64(f, client);
			rm_mig_put32(f + 8, (uint32_t)slot_of(h));
			rm_mig_put32(f + 12, 0);
			err = emit(x, RM_MIG_MODULE, f, 16, image, n);
			break;
		}
		case RM_H_KERNEL: {
			const char *name = NULL;
			if (rm_drv_cuKernelGetName(&name, (CUkernel)(uintptr_t)h->value) != CUDA_SUCCESS || !name || !*name ||
			    strlen(name) > RM_MIG_MAX_NAME) {
				x->why = "a kernel's name is unknown";
				return -ENOENT;
			}
			int smem = 0, carveout = -1;
			if (sh->nctx) {
				rm_drv_cuKernelGetAttribute(&smem, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
							    (CUkernel)(uintptr_t)h->value, sh->ctxs[0].dev);
				rm_drv_cuKernelGetAttribute(&carveout, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
							    (CUkernel)(uintptr_t)h->value, sh->ctxs[0].dev);
			}
			rm_mig_put64(f, client);
			rm_mig_put64(f + 8, rm_session_out_value(s, RM_H_LIBRARY, h->parent));
			rm_mig_put32(f + 16, (uint32_t)smem);
			rm_mig_put32(f + 20, (uint32_t)carveout);
			err = emit(x, RM_MIG_KERNEL, f, 24, name, strlen(name));
			break;
		}
		case RM_H_FUNCTION: {
			const char *name = NULL;
			if (rm_session_find(s, RM_H_KERNEL, h->parent, NULL)) { /* cuKernelGetFunction's */
				rm_mig_put64(f, client);
				rm_mig_put64(f + 8, rm_session_out_value(s, RM_H_KERNEL, h->parent));
				rm_mig_put32(f + 16, (uint32_t)slot_of(h));
				rm_mig_put32(f + 20, 0);
				err = emit(x, RM_MIG_KERNEL_FUNCTION, f, 24, NULL, 0);
				break;
			}
			if (rm_drv_cuFuncGetName(&name, (CUfunction)(uintptr_t)h->value) != CUDA_SUCCESS || !name ||
			    !*name || strlen(name) > RM_MIG_MAX_NAME) {
				x->why = "a function's name is unknown";
				return -ENOENT;
			}
			/* What the client may have set: the dynamic shared memory a launch may ask for,
			 * the carveout (cuFuncSetAttribute). */
			int smem = 0, carveout = -1;
			rm_drv_cuFuncGetAttribute(&smem, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
						  (CUfunction)(uintptr_t)h->value);
			rm_drv_cuFuncGetAttribute(&carveout, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
						  (CUfunction)(uintptr_t)h->value);
			rm_mig_put64(f, client);
			rm_mig_put64(f + 8, rm_session_out_value(s, RM_H_MODULE, h->parent));
			rm_mig_put32(f + 16, (uint32_t)smem);
			rm_mig_put32(f + 20, (uint32_t)carveout);
			err = emit(x, RM_MIG_FUNCTION, f, 24, name, strlen(name));
			break;
		}
		case RM_H_STREAM: {
			int prio = 0, blocking = 0;
			struct rm_session_ctx *k = &sh->ctxs[slot_of(h)];
			rm_drv_cuStreamGetPriority((CUstream)(uintptr_t)h->value, &prio);
			pthread_mutex_lock(&k->order_lock);
			for (int b = 0; b < k->nblocking; b++)
				blocking |= k->blocking[b].stream == (CUstream)(uintptr_t)h->value;
			pthread_mutex_unlock(&k->order_lock);
			rm_mig_put64(f, client);
			rm_mig_put32(f + 8, (uint32_t)slot_of(h));
			rm_mig_put32(f + 12, blocking ? 0 : CU_STREAM_NON_BLOCKING);
			rm_mig_put32(f + 16, (uint32_t)prio);
			rm_mig_put32(f + 20, 0);
			err = emit(x, RM_MIG_STREAM, f, 24, NULL, 0);
			break;
		}
		case RM_H_EVENT:
			rm_mig_put64(f, client);
			rm_mig_put32(f + 8, (uint32_t)slot_of(h));
			rm_mig_put32(f + 12, (uint32_t)h->size);
			err = emit(x, RM_MIG_EVENT, f, 16, NULL, 0);
			break;
		}
	}
	return err ? err : emit(x, RM_MIG_END, f, 0, NULL, 0);
}

/* ---- thread channels ----
 * A client's other threads may be in calls of their own on their channels. Before the
 * move the client is asked to hold them still (RM_OP_MOVE_PREPARE): it takes each
 * channel's lock, so that every call under way ends and none begins, sends what each
 * has queued, and answers with the last request each sent (RM_OP_MOVE_READY); the move
 * waits until each channel's thread has run that far. Nothing is then in flight on any
 * channel; after RM_OP_MOVED the client attaches each channel to the target. */

static uint64_t channel_done(struct rm_session *sh, uint32_t chan)
{
	return sh->channels[chan] ? __atomic_load_n(&sh->channels[chan]->done_seq, __ATOMIC_ACQUIRE) : 0;
}

/* 0 once every channel has run what the client sent on it, or -errno with why said. */
static int hold_channels(struct rm_channel *s, char *why, size_t n)
{
	struct rm_session *sh = s->sh;
	pthread_mutex_lock(&sh->lock);
	int any = 0;
	for (int i = 1; i <= RM_MAX_CHANNELS; i++)
		any |= sh->channels[i] != NULL;
	sh->closing = any; /* no channel attaches meanwhile: a thread refused one shares the main connection */
	pthread_mutex_unlock(&sh->lock);
	if (!any)
		return 0;
	struct rm_frame f = {.magic = RM_WIRE_MAGIC, .op = RM_OP_MOVE_PREPARE, .flags = RM_F_REPLY}, rf;
	pthread_mutex_lock(&s->send_lock);
	int err = rm_link_send(&s->link, &f, NULL, NULL, 0);
	pthread_mutex_unlock(&s->send_lock);
	uint8_t msg[4096];
	Remora__MoveReady *m = NULL;
	while (!err && !(err = rm_link_read_frame(&s->link, &rf)) && rf.op == RM_OP_HEARTBEAT && !rf.msg_len && !rf.bulk_len)
		;
	if (!err && (rf.op != RM_OP_MOVE_READY || rf.bulk_len || rf.msg_len > sizeof(msg) ||
		     rm_link_read(&s->link, msg, rf.msg_len) || !(m = remora__move_ready__unpack(NULL, rf.msg_len, msg)) ||
		     m->n_channel != m->n_seq))
		err = -EPROTO;
	if (err) {
		snprintf(why, n, "the client did not hold its threads' channels (%s)", strerror(-err));
		goto out;
	}
	int named[RM_MAX_CHANNELS + 1] = {0};
	for (size_t i = 0; i < m->n_channel && !err; i++)
		if (m->channel[i] < 1 || m->channel[i] > RM_MAX_CHANNELS)
			err = -EPROTO;
		else
			named[m->channel[i]] = 1;
	for (int i = 1; i <= RM_MAX_CHANNELS && !err; i++)
		if (sh->channels[i] && !named[i])
			err = -ESRCH;
	if (err) {
		snprintf(why, n, "the client's channels are not the worker's");
		goto out;
	}
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += rm_worker_config()->peer_timeout_s;
	pthread_mutex_lock(&sh->lock);
	sh->fence_waiters++;
	for (size_t i = 0; i < m->n_channel && !err; i++)
		while (!err && channel_done(sh, m->channel[i]) < m->seq[i] && sh->channels[m->channel[i]])
			err = -pthread_cond_timedwait(&sh->progress, &sh->lock, &until);
	sh->fence_waiters--;
	pthread_mutex_unlock(&sh->lock);
	if (err)
		snprintf(why, n, "the client's threads' calls did not end in time");
out:
	if (m)
		remora__move_ready__free_unpacked(m, NULL);
	return err;
}

static void release_channels(struct rm_channel *s)
{
	pthread_mutex_lock(&s->sh->lock);
	s->sh->closing = 0;
	pthread_mutex_unlock(&s->sh->lock);
}

/* ---- the target ---- */

/* Reads the next frame that is not a heartbeat (the target covers a long call with them). */
static int read_answer(struct rm_link *l, struct rm_frame *f)
{
	int err;
	while (!(err = rm_link_read_frame(l, f)) && f->op == RM_OP_HEARTBEAT && !f->msg_len && !f->bulk_len)
		;
	return err;
}

/* Greets the target as a session of s's tenant moving in: its id and attach key. */
static int greet_target(struct rm_channel *s, struct rm_migration *m, struct rm_link *l, uint64_t *id,
			uint8_t key[16], char *why, size_t n)
{
	struct rm_session *sh = s->sh;
	Remora__Hello hello = REMORA__HELLO__INIT;
	int32_t devices[64];
	hello.protocol_version = RM_PROTOCOL_VERSION;
	hello.cuda_version = CUDA_VERSION;
	hello.credential.data = m->credential;
	hello.credential.len = m->credential_len;
	hello.client_name = sh->name;
	hello.pid = sh->pid;
	for (int i = 0; i < sh->ndevices && i < 64; i++)
		devices[i] = sh->devices[i];
	hello.devices = devices;
	hello.n_devices = (size_t)sh->ndevices;
	hello.heartbeat_ms = sh->heartbeat_ms;
	hello.migrate_in = 1;
	hello.tenant = sh->tenant_name;
	uint8_t buf[1024];
	size_t len = remora__hello__get_packed_size(&hello);
	if (len > sizeof(buf))
		return snprintf(why, n, "hello too long"), -EINVAL;
	remora__hello__pack(&hello, buf);
	struct rm_frame f = {.magic = RM_WIRE_MAGIC, .op = RM_OP_HELLO, .seq = 1, .msg_len = (uint32_t)len}, rf;
	int err = rm_link_send(l, &f, buf, NULL, 0);
	explicit_bzero(buf, sizeof(buf));
	if (!err)
		err = read_answer(l, &rf);
	if (err)
		return snprintf(why, n, "the target did not answer the hello: %s", strerror(-err)), err;
	Remora__HelloReply *rep = NULL;
	if (rf.op != RM_OP_HELLO || rf.msg_len > sizeof(buf) || rf.bulk_len || rm_link_read(l, buf, rf.msg_len) ||
	    !(rep = remora__hello_reply__unpack(NULL, rf.msg_len, buf)))
		return snprintf(why, n, "malformed hello reply from the target"), -EPROTO;
	if (rf.result != CUDA_SUCCESS || rep->attach_key.len != 16)
		err = -EACCES, snprintf(why, n, "the target refused the client: %s",
					rep->error && *rep->error ? rep->error : "no attach key");
	else
		*id = rep->session_id, memcpy(key, rep->attach_key.data, 16);
	remora__hello_reply__free_unpacked(rep, NULL);
	return err;
}

/* Sends the state to the target (greeted) and waits for its answer. */
static int send_to_target(struct sender *x, struct rm_link *l, char *why, size_t n)
{
	struct sender sizing = *x;
	sizing.count = 1;
	send_state(&sizing);
	x->records_expected = sizing.records;
	struct rm_frame f = {.magic = RM_WIRE_MAGIC, .op = RM_OP_MIGRATE_STATE, .seq = 2, .bulk_len = sizing.total}, rf;
	int err = rm_link_send(l, &f, NULL, NULL, 0);
	if (!err)
		err = send_state(x);
	if (err)
		return snprintf(why, n, "sending the state failed: %s", x->why ? x->why : strerror(-err)), err;
	if ((err = read_answer(l, &rf)) || rf.op != RM_OP_MIGRATE_STATE || rf.msg_len || rf.bulk_len)
		return snprintf(why, n, "no answer from the target: %s", err ? strerror(-err) : "malformed"), err ? err : -EPROTO;
	if (rf.result != CUDA_SUCCESS)
		return snprintf(why, n, "the target could not make the state again (%s; its log says more)",
				rf.result == CUDA_ERROR_ALREADY_MAPPED ? "an address the client holds is taken there"
				: rf.result == CUDA_ERROR_OUT_OF_MEMORY ? "out of memory" : "refused"), -EIO;
	return 0;
}

/* Tells the client where its session went, just before the reply. */
static int tell_client(struct rm_channel *s, const struct rm_migration *m, uint64_t id, const uint8_t key[16])
{
	Remora__Moved mv = REMORA__MOVED__INIT;
	mv.target = (char *)m->target;
	mv.session_id = id;
	mv.key.data = (uint8_t *)key;
	mv.key.len = 16;
	uint8_t buf[256];
	size_t len = remora__moved__get_packed_size(&mv);
	if (len > sizeof(buf))
		return -EINVAL;
	remora__moved__pack(&mv, buf);
	struct rm_frame f = {.magic = RM_WIRE_MAGIC, .op = RM_OP_MOVED, .flags = RM_F_REPLY, .msg_len = (uint32_t)len};
	pthread_mutex_lock(&s->send_lock);
	int err = rm_link_send(&s->link, &f, buf, NULL, 0);
	pthread_mutex_unlock(&s->send_lock);
	return err;
}

/* The move itself: 1 when the client was told to go, else 0 with m->error said. */
static int move(struct rm_channel *s, struct rm_migration *m)
{
	struct collect c = {0};
	const char *no = refusal(s, &c);
	struct rm_link l;
	int linked = 0, moved = 0;
	uint64_t id = 0, t0 = 0;
	uint8_t key[16];
	const char *addr;
	const struct rm_transport *tp = rm_transport_for(m->target, &addr);
	struct sender x = {.s = s, .c = &c};
	struct rm_conn *conn = NULL;
	int held = 0;
	if (no)
		snprintf(m->error, sizeof(m->error), "the client cannot move: %s", no);
	else if (!tp)
		snprintf(m->error, sizeof(m->error), "%s names an unknown transport", m->target);
	else if (!(held = 1) || hold_channels(s, m->error, sizeof(m->error)))
		; /* said why */
	else if (free(c.h), c = (struct collect){0}, (no = refusal(s, &c))) /* again: its threads ran meanwhile */
		snprintf(m->error, sizeof(m->error), "the client cannot move: %s", no);
	else if (rm_session_synchronize_all(s) != CUDA_SUCCESS)
		snprintf(m->error, sizeof(m->error), "its streams did not finish cleanly; it stays");
	else if (!(x.chunk = malloc(CHUNK)))
		snprintf(m->error, sizeof(m->error), "out of memory");
	else if (tp->dial(addr, DIAL_TIMEOUT_MS, &conn))
		snprintf(m->error, sizeof(m->error), "cannot reach the target %s", m->target);
	else if (rm_link_init(&l, conn))
		rm_conn_close(conn), snprintf(m->error, sizeof(m->error), "out of memory");
	else
		linked = 1;
	if (linked) {
		int timeout = rm_worker_config()->peer_timeout_s * 1000;
		rm_conn_set_liveness(conn, timeout, timeout);
		x.conn = conn;
		t0 = now_us();
		if (!greet_target(s, m, &l, &id, key, m->error, sizeof(m->error)) &&
		    !send_to_target(&x, &l, m->error, sizeof(m->error)))
			moved = 1;
		rm_link_close(&l); /* the target's session now waits for the client */
	}
	if (moved && tell_client(s, m, id, key)) {
		/* The client cannot be told: it is gone, or its link broke; it gets a lost
		 * connection either way, and the target drops the state unclaimed. */
		snprintf(m->error, sizeof(m->error), "the client could not be told to move");
		moved = 0;
	}
	if (held && !moved)
		release_channels(s);
	if (moved) {
		m->result = CUDA_SUCCESS;
		m->session_id = id;
		m->bytes = x.total;
		m->pause_us = now_us() - t0;
		rm_session_log(s, RM_LOG_INFO, "moved to %s as session %llu: %llu bytes in %llu us", m->target,
			       (unsigned long long)id, (unsigned long long)x.total, (unsigned long long)m->pause_us);
	} else {
		m->result = no ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_NOT_READY;
		m->session_id = 0;
		rm_session_log(s, RM_LOG_WARN, "not moved to %s: %s; it goes on here", m->target, m->error);
	}
	explicit_bzero(key, sizeof(key));
	free(x.chunk);
	free(c.h);
	rm_session_enter(s, 0);
	return moved;
}

int rm_migrate_before_reply(struct rm_channel *s, const struct rm_request *rq)
{
	pthread_mutex_lock(&mig_lock);
	struct rm_migration *m = s->sh->migration;
	int go = m && !m->done && s->chan == 0 && !(rq->frame.flags & RM_F_ASYNC) && rq->frame.op < RM_OP_LIMIT &&
		 rq->result == CUDA_SUCCESS && !rq->bulk_left;
	if (go)
		m->done = 1; /* under way: the request waits for it */
	pthread_mutex_unlock(&mig_lock);
	if (!go)
		return 0;
	CUcontext prev = s->thread_ctx;
	int moved = move(s, m);
	if (prev != s->thread_ctx && rm_drv_cuCtxSetCurrent(prev) == CUDA_SUCCESS)
		s->thread_ctx = prev;
	pthread_mutex_lock(&mig_lock);
	m->done = 2;
	s->sh->migration = NULL;
	if (moved)
		s->sh->migrate_in = MOVED_AWAY;
	pthread_cond_broadcast(&m->cond);
	pthread_mutex_unlock(&mig_lock);
	return moved;
}
