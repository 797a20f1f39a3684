/* Calls to the daemon: one connection per process, async calls batched. */
#include "client.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "copy_links.h"
#include "link.h"
#include "placement.h"
#include "remora.pb-c.h"
#include "text.h"

#define CONNECT_TIMEOUT_MS 5000
#define BATCH_CAP (1u << 20)
#define BATCH_FLUSH_AT (64u << 10)  /* flush async calls once this much is queued */
#define BATCH_INLINE_BULK (16u << 10) /* async bulk up to this size is copied into the batch */
#define FLUSH_DELAY_NS 50000          /* async calls wait at most this long for company */
#define FLUSHER_LINGER_NS 2000000     /* the flusher stays armed this long after the last async call */

static pthread_mutex_t rpc_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t connect_once = PTHREAD_ONCE_INIT;
static struct rm_link conn_link;
static int connected;
static CUresult connect_result = CUDA_ERROR_NOT_INITIALIZED;
static int driver_version;
static uint64_t next_seq = 1;
static uint8_t *batch;
static size_t batch_len;
/* Async calls queued in the batch go out with the next call that sends, at
 * BATCH_FLUSH_AT, or once the oldest has waited FLUSH_DELAY_NS: checked by the
 * next call, and by the flusher thread for a program that makes none. Waking a
 * thread costs a futex call and a context switch, and a flusher that takes
 * rpc_lock while a synchronous call holds it costs two more (together 8 us of a
 * 20 us launch plus synchronize here, docs/hotpath.md). So the flusher is woken
 * only when disarmed; armed, it sleeps on its own, looks at the batch's age
 * without the lock and takes the lock only to flush an overdue batch; it
 * disarms once nothing was queued for FLUSHER_LINGER_NS.
 * The three words below are written under rpc_lock and read by the flusher
 * without it (atomics); flusher_armed is set under flusher_lock. */
static uint64_t batch_since_ns; /* when the oldest queued call was queued; 0: none queued */
static uint64_t last_async_ns;  /* when the last async call was queued */
static int flusher_armed;
static pthread_mutex_t flusher_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t flusher_cond = PTHREAD_COND_INITIALIZER;
static __thread int per_thread_depth;
static int trace_calls; /* REMORA_TRACE set: log every call's result at debug level */

static void client_init_once(void)
{
	rm_log_init("remora", RM_LOG_ERROR);
	trace_calls = getenv("REMORA_TRACE") != NULL;
}

int rm_visible_devices(const char *text, int32_t *out, size_t cap, size_t *n)
{
	*n = 0;
	if (!text || !*text)
		return 0;
	for (const char *p = text; *p;) {
		char *end;
		long v = strtol(p, &end, 10);
		if (end == p || v < 0 || v > 1023 || *n == cap || (*end && *end != ','))
			return -1;
		out[(*n)++] = (int32_t)v;
		p = *end ? end + 1 : end;
	}
	return 0;
}

void rm_client_init(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, client_init_once);
}

void rm_per_thread_enter(void) { per_thread_depth++; }
void rm_per_thread_leave(void) { per_thread_depth--; }
int rm_per_thread_active(void) { return per_thread_depth > 0; }

int rm_remote_driver_version(void) { return driver_version; }

CUresult rm_unsupported(const char *name)
{
	/* One line per name: a small set of names seen, guarded by a lock. */
	static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	static const char *seen[256];
	static int nseen;
	rm_client_init();
	pthread_mutex_lock(&lock);
	int known = 0;
	for (int i = 0; i < nseen && !known; i++)
		known = seen[i] == name;
	if (!known && nseen < 256)
		seen[nseen++] = name;
	pthread_mutex_unlock(&lock);
	if (!known)
		rm_log(RM_LOG_WARN, "%s is not supported by Remora: returning CUDA_ERROR_NOT_SUPPORTED", name);
	return CUDA_ERROR_NOT_SUPPORTED;
}

/* Drops the connection after a transport error; every later call fails fast. */
static CUresult lost(const char *what, int err)
{
	if (connected) {
		fprintf(stderr, "remora: connection to the GPU server lost (%s: %s)\n", what, strerror(-err));
		rm_conn_shutdown(conn_link.conn);
	}
	__atomic_store_n(&connected, 0, __ATOMIC_SEQ_CST);
	connect_result = CUDA_ERROR_DEVICE_UNAVAILABLE;
	pthread_mutex_lock(&flusher_lock); /* lets the flusher see it and end */
	pthread_cond_broadcast(&flusher_cond);
	pthread_mutex_unlock(&flusher_lock);
	return CUDA_ERROR_DEVICE_UNAVAILABLE;
}

static int flush_locked(const struct iovec *extra, int nextra)
{
	struct iovec iov[8];
	int n = 0, i = 0;
	if (batch_len)
		iov[n++] = (struct iovec){batch, batch_len};
	for (; i < nextra && n < 8; i++)
		if (extra[i].iov_len)
			iov[n++] = extra[i];
	if (!n && i == nextra)
		return 0;
	batch_len = 0;
	__atomic_store_n(&batch_since_ns, 0, __ATOMIC_SEQ_CST);
	int err = n ? rm_conn_sendv(conn_link.conn, iov, n) : 0;
	if (!err && i < nextra) /* a striped copy's share: many pieces */
		err = rm_conn_sendv(conn_link.conn, extra + i, nextra - i);
	return err;
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Disarms the flusher unless a call was queued meanwhile (its caller saw the
 * flusher armed and did not wake it, so the flusher must see the call). */
static void flusher_disarm(void)
{
	pthread_mutex_lock(&flusher_lock);
	__atomic_store_n(&flusher_armed, 0, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&batch_since_ns, __ATOMIC_SEQ_CST))
		__atomic_store_n(&flusher_armed, 1, __ATOMIC_SEQ_CST);
	pthread_mutex_unlock(&flusher_lock);
}

/* Called under rpc_lock after an async call was queued. */
static void flusher_arm(void)
{
	if (__atomic_load_n(&flusher_armed, __ATOMIC_SEQ_CST))
		return;
	pthread_mutex_lock(&flusher_lock);
	__atomic_store_n(&flusher_armed, 1, __ATOMIC_SEQ_CST);
	pthread_cond_signal(&flusher_cond);
	pthread_mutex_unlock(&flusher_lock);
}

static void *flusher_main(void *arg)
{
	(void)arg;
	for (;;) {
		pthread_mutex_lock(&flusher_lock);
		while (__atomic_load_n(&connected, __ATOMIC_SEQ_CST) && !__atomic_load_n(&flusher_armed, __ATOMIC_SEQ_CST))
			pthread_cond_wait(&flusher_cond, &flusher_lock);
		pthread_mutex_unlock(&flusher_lock);
		if (!__atomic_load_n(&connected, __ATOMIC_SEQ_CST))
			break;
		uint64_t since = __atomic_load_n(&batch_since_ns, __ATOMIC_SEQ_CST);
		uint64_t now = now_ns();
		if (since && now - since >= FLUSH_DELAY_NS) {
			pthread_mutex_lock(&rpc_lock);
			since = batch_since_ns;
			if (connected && since && now_ns() - since >= FLUSH_DELAY_NS) {
				int err = flush_locked(NULL, 0);
				if (err)
					lost("send", err);
			}
			pthread_mutex_unlock(&rpc_lock);
			continue;
		}
		if (!since && now - __atomic_load_n(&last_async_ns, __ATOMIC_SEQ_CST) > FLUSHER_LINGER_NS) {
			flusher_disarm();
			continue;
		}
		uint64_t due = (since ? since : now) + FLUSH_DELAY_NS;
		struct timespec ts = {(time_t)(due / 1000000000u), (long)(due % 1000000000u)};
		clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
	}
	return NULL;
}

/* Appends a frame with its message (and, when it fits, its bulk) to the batch. */
static int append_locked(const struct rm_frame *f, const ProtobufCMessage *req, const struct iovec *bulk,
			 int nbulk, int inline_bulk)
{
	size_t need = RM_FRAME_LEN + f->msg_len + (inline_bulk ? f->bulk_len : 0);
	if (batch_len + need > BATCH_CAP) {
		int err = flush_locked(NULL, 0);
		if (err)
			return err;
	}
	if (need > BATCH_CAP)
		return -EMSGSIZE;
	rm_frame_encode(f, batch + batch_len);
	batch_len += RM_FRAME_LEN;
	if (req)
		batch_len += protobuf_c_message_pack(req, batch + batch_len);
	if (inline_bulk)
		for (int i = 0; i < nbulk; i++) {
			memcpy(batch + batch_len, bulk[i].iov_base, bulk[i].iov_len);
			batch_len += bulk[i].iov_len;
		}
	return 0;
}

/* Connects to one server and says hello; on failure nothing is left open. */
static CUresult connect_to(const char *server)
{
	const char *addr;
	const struct rm_transport *tp = rm_transport_for(server, &addr);
	if (!tp) {
		fprintf(stderr, "remora: REMORA_SERVER=%s names an unknown transport\n", server);
		return CUDA_ERROR_NO_DEVICE;
	}
	struct rm_conn *conn;
	int err = tp->dial(addr, CONNECT_TIMEOUT_MS, &conn);
	if (err) {
		fprintf(stderr, "remora: cannot reach the GPU server at %s (%s); start remorad there or set REMORA_SERVER=host:port\n",
			server, strerror(-err));
		return CUDA_ERROR_NO_DEVICE;
	}
	if (rm_link_init(&conn_link, conn)) {
		rm_conn_close(conn);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	batch = malloc(BATCH_CAP);
	if (!batch) {
		rm_link_close(&conn_link);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}

	char name[64] = "?";
	FILE *f = fopen("/proc/self/comm", "r");
	if (f) {
		if (fgets(name, sizeof(name), f))
			name[strcspn(name, "\n")] = 0;
		fclose(f);
	}
	const char *token = getenv("REMORA_TOKEN");
	Remora__Hello hello = REMORA__HELLO__INIT;
	hello.protocol_version = RM_PROTOCOL_VERSION;
	hello.cuda_version = CUDA_VERSION;
	hello.client_name = name;
	hello.pid = (uint32_t)getpid();
	if (token) {
		hello.credential.data = (uint8_t *)token;
		hello.credential.len = strlen(token);
	}
	int32_t devices[64];
	hello.devices = devices;
	if (rm_visible_devices(getenv("REMORA_VISIBLE_DEVICES"), devices, 64, &hello.n_devices)) {
		fprintf(stderr, "remora: REMORA_VISIBLE_DEVICES must be a comma-separated list of GPU ordinals\n");
		return CUDA_ERROR_INVALID_VALUE;
	}
	connected = 1;
	Remora__HelloReply *rep = NULL;
	CUresult r = rm_rpc_simple(RM_OP_HELLO, &hello.base, &remora__hello_reply__descriptor, (ProtobufCMessage **)&rep);
	if (r != CUDA_SUCCESS) {
		char why[256];
		fprintf(stderr, "remora: the GPU server at %s refused this client: %s\n", server,
			rep && rep->error && *rep->error ? rm_text_escape(why, sizeof(why), rep->error) : "handshake failed");
		rm_rpc_free(rep ? &rep->base : NULL);
		connected = 0;
		rm_link_close(&conn_link);
		free(batch);
		batch = NULL;
		batch_len = 0;
		return r == CUDA_ERROR_DEVICE_UNAVAILABLE ? CUDA_ERROR_NO_DEVICE : r;
	}
	driver_version = rep->driver_version;
	rm_log(RM_LOG_INFO, "connected to %s, session %llu, driver %d", server,
	       (unsigned long long)rep->session_id, driver_version);
	rm_copy_links_open(tp, addr, rep->session_id, rep->attach_key.data, rep->attach_key.len);
	rm_rpc_free(&rep->base);
	pthread_t t;
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&t, &attr, flusher_main, NULL))
		rm_log(RM_LOG_WARN, "no flusher thread: async calls go out at the next synchronizing call");
	pthread_attr_destroy(&attr);
	return CUDA_SUCCESS;
}

/* Tries each candidate (frontend/placement.h) until one accepts this client. */
static CUresult do_connect(void)
{
	struct rm_candidates *c = malloc(sizeof(*c));
	CUresult r = CUDA_ERROR_NO_DEVICE;
	if (!c)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (rm_placement_candidates(c) == 0)
		for (int i = 0; i < c->n && r != CUDA_SUCCESS; i++)
			if ((r = connect_to(c->addr[i])) != CUDA_SUCCESS && i + 1 < c->n)
				fprintf(stderr, "remora: trying the next GPU server of %s\n", c->from);
	free(c);
	return r;
}

static void connect_body(void)
{
	rm_client_init();
	connect_result = do_connect();
}

CUresult rm_connect_once(void)
{
	pthread_once(&connect_once, connect_body);
	return connect_result;
}

CUresult rm_rpc(struct rm_rpc_call *c)
{
	if (c->op != RM_OP_HELLO) {
		CUresult r = rm_connect_once();
		if (r != CUDA_SUCCESS)
			return r;
	}
	uint64_t bulk_len = 0;
	for (int i = 0; i < c->nbulk_out; i++)
		bulk_len += c->bulk_out[i].iov_len;
	uint32_t flags = c->op < RM_OP_LIMIT ? rm_op_flags[c->op] & RM_OPF_ASYNC : 0;
	struct rm_frame f = {
		.magic = RM_WIRE_MAGIC,
		.op = c->op,
		.msg_len = c->req ? (uint32_t)protobuf_c_message_get_packed_size(c->req) : 0,
		.flags = flags | (rm_per_thread_active() ? RM_F_PER_THREAD : 0),
		.bulk_len = bulk_len,
		.ctx = (uint64_t)(uintptr_t)rm_ctx_current(),
	};
	c->rep = NULL;
	if (f.msg_len > RM_MAX_MSG_LEN)
		return CUDA_ERROR_INVALID_VALUE;

	pthread_mutex_lock(&rpc_lock);
	CUresult result;
	if (!connected) {
		result = CUDA_ERROR_DEVICE_UNAVAILABLE;
		goto out;
	}
	f.seq = next_seq++;
	int inline_bulk = bulk_len <= BATCH_INLINE_BULK;
	int err = append_locked(&f, c->req, c->bulk_out, c->nbulk_out, inline_bulk);
	uint64_t now = 0;
	if (!err && (flags & RM_F_ASYNC)) {
		now = now_ns();
		__atomic_store_n(&last_async_ns, now, __ATOMIC_SEQ_CST);
		if (!batch_since_ns)
			__atomic_store_n(&batch_since_ns, now, __ATOMIC_SEQ_CST);
	}
	if (!err && (!(flags & RM_F_ASYNC) || !inline_bulk || batch_len >= BATCH_FLUSH_AT ||
		     now - batch_since_ns >= FLUSH_DELAY_NS))
		err = flush_locked(inline_bulk ? NULL : c->bulk_out, inline_bulk ? 0 : c->nbulk_out);
	if (err) {
		result = lost("send", err);
		goto out;
	}
	if (flags & RM_F_ASYNC) {
		if (batch_len)
			flusher_arm();
		result = CUDA_SUCCESS;
		goto out;
	}

	struct rm_frame rf;
	err = rm_link_read_frame(&conn_link, &rf);
	if (err) {
		result = lost("receive", err);
		goto out;
	}
	if (!(rf.flags & RM_F_REPLY) || rf.seq != f.seq || rf.op != f.op) {
		result = lost("reply out of order", -EPROTO);
		goto out;
	}
	uint8_t small[512];
	uint8_t *msg = rf.msg_len <= sizeof(small) ? small : malloc(rf.msg_len);
	if (!msg || (err = rm_link_read(&conn_link, msg, rf.msg_len))) {
		if (msg != small)
			free(msg);
		result = lost("receive", err ? err : -ENOMEM);
		goto out;
	}
	uint64_t want = c->bulk_in_len;
	for (int i = 0; i < c->nbulk_in_vec; i++)
		want += c->bulk_in_vec[i].iov_len;
	if (rf.bulk_len || (want && rf.result == CUDA_SUCCESS)) { /* a success brings all that was asked */
		if (rf.bulk_len != want || (!c->bulk_in && !c->nbulk_in_vec)) {
			err = -EPROTO;
		} else {
			if (c->before_bulk_in)
				c->before_bulk_in(c->before_bulk_in_arg);
			if (c->bulk_in)
				err = rm_link_read(&conn_link, c->bulk_in, c->bulk_in_len);
			for (int i = 0; !err && i < c->nbulk_in_vec; i++)
				err = rm_link_read(&conn_link, c->bulk_in_vec[i].iov_base, c->bulk_in_vec[i].iov_len);
		}
		if (err) {
			if (msg != small)
				free(msg);
			result = lost("receive bulk", err);
			goto out;
		}
	}
	if (c->rep_desc) {
		c->rep = protobuf_c_message_unpack(c->rep_desc, NULL, rf.msg_len, msg);
		if (!c->rep) {
			if (msg != small)
				free(msg);
			result = lost("malformed reply", -EPROTO);
			goto out;
		}
	}
	if (msg != small)
		free(msg);
	result = (CUresult)rf.result;
	if (result == CUDA_SUCCESS && rf.async_result)
		result = (CUresult)rf.async_result;
out:
	pthread_mutex_unlock(&rpc_lock);
	if (result != CUDA_SUCCESS || trace_calls)
		rm_log(RM_LOG_DEBUG, "%s returned %d", c->op < RM_OP_LIMIT ? rm_op_names[c->op] : "?", result);
	return result;
}

void rm_rpc_fail(const char *what, int err)
{
	pthread_mutex_lock(&rpc_lock);
	lost(what, err);
	pthread_mutex_unlock(&rpc_lock);
}

CUresult rm_rpc_bad_reply(const char *fmt, ...)
{
	char what[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	rm_rpc_fail(what, -EPROTO);
	return CUDA_ERROR_DEVICE_UNAVAILABLE;
}

CUresult rm_rpc_simple(uint32_t op, const ProtobufCMessage *req,
		       const ProtobufCMessageDescriptor *rep_desc, ProtobufCMessage **rep)
{
	struct rm_rpc_call c = {.op = op, .req = req, .rep_desc = rep_desc};
	CUresult r = rm_rpc(&c);
	if (rep)
		*rep = c.rep;
	else
		rm_rpc_free(c.rep);
	return r;
}

void rm_rpc_free(ProtobufCMessage *rep)
{
	if (rep)
		protobuf_c_message_free_unpacked(rep, NULL);
}
