/* Fuzz target `request`: the daemon's request path, in process, on the CPU test driver.
 *
 * A worker (rm_worker_run, backend/worker/worker.c) runs on a thread of this process with the
 * test driver loaded. Each input is one client: this file admits it in the registry and
 * hands the worker one end of a socketpair over its channel, as the accepting process
 * does after a hello (backend/daemon/supervisor.c); the worker answers the hello and serves the
 * client on a thread of its own. This file plays the client on the other end: it reads
 * the hello's reply, writes the input, reads every reply, closes, and waits for the
 * worker to free the client's registry slot. Then nothing the session made may be left:
 * its device memory, pinned host buffers and events released (unless its kernel faulted
 * the GPU's context, which takes them with it), its host memory given back. Meanwhile
 * every copy or memset the daemon asks of the driver must lie inside one allocation
 * (the test driver refuses others itself, where a GPU would not).
 *
 * The input is the bytes after the hello. Where they start with whole frames, those are
 * sent one at a time, each synchronous one after the reply to the one before, so that a
 * frame may name a handle the daemon gave out earlier in the session, which no fixed
 * input could know: a uint64 0xA11A'NNNN'OOOO'OOOO (in the header's ctx, a varint or
 * fixed64 field of the message, or an 8-byte-aligned word of a bytes field such as kernel
 * parameters) stands for the NNNN-th handle-like value (2^32 .. 2^63) the daemon's
 * replies carried, counted from 0 and modulo how many there were, plus OOOOOOOO. The
 * first bytes that are not a whole frame, and all after them, are sent as they are.
 *
 * An input whose first frame is RM_OP_MIGRATE_RANGES or RM_OP_MIGRATE_IMAGE is a move's
 * source instead: its session is greeted as a move's target (migrate.h), which takes the
 * address ranges and images sent ahead before the state; its RM_OP_MIGRATE_STATE frames are left out (a state made again would wait
 * 30 s for its client), and what it preloaded must be released at its end as the rest. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "config.h"
#include "driver_table.h"
#include "driver_watch.h"
#include "nccl_comms.h"
#include "host_memory.h"
#include "log.h"
#include "registry.h"
#include "server.h"
#include "stream_pool.h"
#include "worker.h"
#include "wire.h"
#include "varint.h"

#define ALIAS_TAG 0xA11Au
#define MAX_HANDLES 256

static void fail(const char *why)
{
	fprintf(stderr, "fuzz-request: %s\n", why);
	abort();
}

/* ---- The worker ---- */

static struct rm_daemon_config config;
static int channel = -1; /* this side of the worker's channel */
static int ngpus;

static void *run_worker(void *arg)
{
	rm_worker_run(&config, (int)(intptr_t)arg);
	fail("the worker stopped");
	return NULL;
}

/* As remorad does for a worker (backend/daemon/main.c), on the test driver. */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	rm_config_defaults(&config);
	rm_log_init("fuzz-request", RM_LOG_ERROR); /* REMORA_LOG=debug shows the session */
	char queues[16];
	snprintf(queues, sizeof(queues), "%d", config.hardware_queues);
	setenv("CUDA_DEVICE_MAX_CONNECTIONS", queues, 1);
	setenv("CUDA_MODULE_LOADING", "EAGER", 1);
	/* Small, so that a large allocation fails fast, and below 2^32, so that no size
	 * a reply carries is taken for a handle. */
	setenv("REMORA_TESTDRIVER_MEM_MB", "64", 1);
	/* One process runs every input: a faulting one must not leave the rest faulted
	 * (driver_watch_check_released resets the contexts after it). */
	setenv("REMORA_TESTDRIVER_RECOVERABLE", "1", 1);
	rm_stream_pool_configure(config.hardware_queues, config.queue_sharing_wait, config.queue_idle_after);
	const char *driver = getenv("REMORA_FUZZ_DRIVER") ? getenv("REMORA_FUZZ_DRIVER") : FUZZ_TESTDRIVER;
	/* NCCL's calls on the test NCCL, which the test driver serves; a wait for peers ends in 1 s. */
	setenv("TESTNCCL_CUDA", driver, 1);
	rm_nccl_configure(FUZZ_TESTNCCL, 1, 1);
	void *lib = dlopen(driver, RTLD_NOW | RTLD_LOCAL);
	if (!lib || rm_driver_table_load(lib) <= 0 || !rm_drv.cuInit || rm_drv.cuInit(0) != CUDA_SUCCESS ||
	    rm_drv.cuDeviceGetCount(&ngpus) != CUDA_SUCCESS || ngpus < 1) {
		fprintf(stderr, "fuzz-request: cannot use the test driver %s (%s); set REMORA_FUZZ_DRIVER\n", driver,
			lib ? "no device" : dlerror());
		exit(1);
	}
	driver_watch_start();
	/* Its faults are reset after each input (driver_watch_check_released); a worker that
	 * exited a while after one, between inputs, ended the whole run (status 75). */
	rm_gpu_watch_keep_faulted();
	if (rm_registry_create() < 0)
		fail("cannot create the registry");
	rm_registry()->ngpus = ngpus < RM_MAX_GPUS ? ngpus : RM_MAX_GPUS;
	int sv[2];
	pthread_t t;
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv))
		fail("cannot make the worker's channel");
	if (pthread_create(&t, NULL, run_worker, (void *)(intptr_t)sv[1]))
		fail("cannot start the worker");
	pthread_detach(t);
	channel = sv[0];
	return 0;
}

/* Admits a client and passes the worker its end of a new connection; returns ours. */
static int hand_over_client(int *slot, int moving)
{
	char why[200];
	uint64_t mask = 0;
	struct rm_handoff h = {.tenant = -1, .hello_seq = 1, .pid = (uint32_t)getpid(), .migrate = moving};
	snprintf(h.name, sizeof(h.name), "fuzz");
	for (int g = 0; g < rm_registry()->ngpus; g++) {
		h.devices[h.ndevices++] = g;
		mask |= 1ull << g;
	}
	h.slot = *slot = rm_registry_admit(h.tenant, mask, 0, why, sizeof(why));
	int sv[2];
	if (h.slot < 0 || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
		fail(h.slot < 0 ? why : "socketpair");
	char cbuf[CMSG_SPACE(sizeof(int))] = {0};
	struct iovec iov = {.iov_base = &h, .iov_len = sizeof(h)};
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof(cbuf)};
	struct cmsghdr *c = CMSG_FIRSTHDR(&m);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &sv[1], sizeof(int));
	if (sendmsg(channel, &m, MSG_NOSIGNAL) != (ssize_t)sizeof(h))
		fail("cannot hand the client over");
	close(sv[1]); /* the worker has its own descriptor now */
	fcntl(sv[0], F_SETFL, O_NONBLOCK);
	return sv[0];
}

/* ---- The client ---- */

struct client {
	int fd;
	int closed; /* the daemon closed the connection */
	uint64_t handles[MAX_HANDLES];
	size_t nhandles;
	/* The reply being read. */
	uint8_t head[RM_FRAME_LEN];
	size_t head_got;
	struct rm_frame reply;
	uint8_t *msg; /* RM_MAX_MSG_LEN bytes */
	size_t msg_got;
	uint64_t bulk_left;
	/* The synchronous request waited for. */
	uint64_t awaited_seq;
	int answered;
};

static int read_varint(const uint8_t *p, size_t len, size_t *at, uint64_t *v)
{
	*v = 0;
	for (int shift = 0; shift < 70 && *at < len; shift += 7) {
		uint8_t b = p[(*at)++];
		*v |= (uint64_t)(b & 0x7f) << shift;
		if (!(b & 0x80))
			return 0;
	}
	return -1;
}


static uint64_t get64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static int is_alias(uint64_t v)
{
	return v >> 48 == ALIAS_TAG;
}

static uint64_t resolve(const struct client *c, uint64_t v)
{
	return is_alias(v) && c->nhandles ? c->handles[(v >> 32 & 0xffff) % c->nhandles] + (uint32_t)v : v;
}

/* Copies message in (len bytes) to out with its aliases resolved; returns the new
 * length, never more than len. A message that is not protobuf is copied as it is. */
static size_t resolve_message(const struct client *c, const uint8_t *in, size_t len, uint8_t *out)
{
	size_t i = 0, o = 0;
	while (i < len) {
		size_t start = i;
		uint64_t key, v;
		if (read_varint(in, len, &i, &key))
			goto verbatim;
		memcpy(out + o, in + start, i - start);
		o += i - start;
		start = i;
		switch (key & 7) {
		case 0:
			if (read_varint(in, len, &i, &v))
				goto verbatim;
			if (is_alias(v) && c->nhandles) {
				o += rm_varint_put(out + o, resolve(c, v));
			} else {
				memcpy(out + o, in + start, i - start);
				o += i - start;
			}
			break;
		case 1:
			if (len - i < 8)
				goto verbatim;
			put64(out + o, resolve(c, get64(in + i)));
			i += 8;
			o += 8;
			break;
		case 2:
			if (read_varint(in, len, &i, &v) || v > len - i)
				goto verbatim;
			memcpy(out + o, in + start, i - start);
			o += i - start;
			for (uint64_t k = 0; k < v; k++)
				out[o + k] = in[i + k];
			for (uint64_t k = 0; k + 8 <= v; k += 8)
				put64(out + o + k, resolve(c, get64(in + i + k)));
			i += v;
			o += v;
			break;
		case 5:
			if (len - i < 4)
				goto verbatim;
			memcpy(out + o, in + i, 4);
			i += 4;
			o += 4;
			break;
		default:
			goto verbatim;
		}
	}
	return o;
verbatim:
	memcpy(out, in, len);
	return len;
}

/* Skips the value of a field of wire type type at *at; -1 when it runs past len. */
static int skip_value(const uint8_t *p, size_t len, size_t *at, unsigned type)
{
	uint64_t n;
	switch (type) {
	case 0: return read_varint(p, len, at, &n);
	case 1: n = 8; break;
	case 2:
		if (read_varint(p, len, at, &n))
			return -1;
		break;
	case 5: n = 4; break;
	default: return -1;
	}
	if (n > len - *at)
		return -1;
	*at += n;
	return 0;
}

/* Keeps the handle-like values (varints from 2^32 to 2^63) of a reply's message. */
static void keep_handles(struct client *c, const uint8_t *msg, size_t len)
{
	size_t i = 0;
	uint64_t key, v;
	while (i < len && !read_varint(msg, len, &i, &key)) {
		size_t value_at = i;
		if (skip_value(msg, len, &i, key & 7))
			return;
		if ((key & 7) != 0 || read_varint(msg, len, &value_at, &v) || v >> 32 == 0 || v >> 63)
			continue;
		int known = 0;
		for (size_t k = 0; k < c->nhandles && !known; k++)
			known = c->handles[k] == v;
		if (!known && c->nhandles < MAX_HANDLES)
			c->handles[c->nhandles++] = v;
	}
}

/* Takes n bytes the daemon sent: header, message and bulk of one reply after another. */
static void take_replies(struct client *c, const uint8_t *p, size_t n)
{
	for (;;) {
		if (c->head_got < RM_FRAME_LEN) {
			size_t k = n < RM_FRAME_LEN - c->head_got ? n : RM_FRAME_LEN - c->head_got;
			memcpy(c->head + c->head_got, p, k);
			c->head_got += k;
			p += k;
			n -= k;
			if (c->head_got < RM_FRAME_LEN)
				return;
			if (rm_frame_decode(c->head, &c->reply) || !(c->reply.flags & RM_F_REPLY))
				fail("the daemon sent a malformed reply");
			c->msg_got = 0;
			c->bulk_left = c->reply.bulk_len;
		}
		size_t k = n < c->reply.msg_len - c->msg_got ? n : c->reply.msg_len - c->msg_got;
		memcpy(c->msg + c->msg_got, p, k);
		c->msg_got += k;
		p += k;
		n -= k;
		k = n < c->bulk_left ? n : (size_t)c->bulk_left;
		c->bulk_left -= k;
		p += k;
		n -= k;
		if (c->msg_got < c->reply.msg_len || c->bulk_left)
			return;
		keep_handles(c, c->msg, c->msg_got);
		if (c->reply.seq == c->awaited_seq)
			c->answered = 1;
		c->head_got = 0;
	}
}

/* Sends out (len bytes) while taking replies; then, if await, reads until the reply to
 * the frame of sequence number seq has come; or, if closing, until the daemon closes. */
static void exchange(struct client *c, const uint8_t *out, size_t len, int await, uint64_t seq, int closing)
{
	static uint8_t in[1 << 16];
	c->awaited_seq = seq;
	c->answered = 0;
	while (!c->closed && (len || (await && !c->answered) || closing)) {
		struct pollfd p = {.fd = c->fd, .events = POLLIN | (len ? POLLOUT : 0)};
		if (poll(&p, 1, -1) < 0) {
			if (errno == EINTR)
				continue;
			fail("poll");
		}
		if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
			ssize_t n = recv(c->fd, in, sizeof(in), 0);
			if (n > 0)
				take_replies(c, in, (size_t)n);
			else if (n == 0 || (errno != EAGAIN && errno != EINTR))
				c->closed = 1;
		}
		if (len && !c->closed && (p.revents & POLLOUT)) {
			ssize_t n = send(c->fd, out, len, MSG_NOSIGNAL);
			if (n > 0) {
				out += n;
				len -= (size_t)n;
			} else if (n < 0 && errno != EAGAIN && errno != EINTR) {
				c->closed = 1;
			}
		}
	}
}

/* Sends the input: whole frames one by one with their aliases resolved, the rest as it is. */
static void send_input(struct client *c, const uint8_t *data, size_t size, int moving)
{
	uint8_t *frame = malloc(size ? size : 1);
	if (!frame)
		fail("out of memory");
	size_t at = 0;
	while (at < size && !c->closed) {
		struct rm_frame f;
		size_t left = size - at;
		if (left < RM_FRAME_LEN || rm_frame_decode(data + at, &f) || f.msg_len > left - RM_FRAME_LEN ||
		    f.bulk_len > left - RM_FRAME_LEN - f.msg_len) {
			exchange(c, data + at, left, 0, 0, 0);
			break;
		}
		if (moving && f.op == RM_OP_MIGRATE_STATE) {
			at += RM_FRAME_LEN + f.msg_len + f.bulk_len;
			continue;
		}
		size_t msg_len = resolve_message(c, data + at + RM_FRAME_LEN, f.msg_len, frame + RM_FRAME_LEN);
		memcpy(frame + RM_FRAME_LEN + msg_len, data + at + RM_FRAME_LEN + f.msg_len, f.bulk_len);
		struct rm_frame sent = f;
		sent.msg_len = (uint32_t)msg_len;
		sent.ctx = resolve(c, f.ctx);
		rm_frame_encode(&sent, frame);
		exchange(c, frame, RM_FRAME_LEN + msg_len + f.bulk_len, !(f.flags & RM_F_ASYNC), f.seq, 0);
		at += RM_FRAME_LEN + f.msg_len + f.bulk_len;
	}
	free(frame);
}

/* Until the session has left its slot and been released (the worker counts a departed
 * client as draining until then, registry.h). */
static void wait_for_leave(int slot)
{
	for (;;) {
		rm_registry_lock();
		int in_use = rm_registry()->clients[slot].in_use;
		rm_registry_unlock();
		int fault, draining;
		rm_registry_worker_state(getpid(), &fault, &draining);
		if (!in_use && !draining)
			return;
		usleep(50);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint8_t reply_msg[RM_MAX_MSG_LEN];
	if (channel < 0)
		LLVMFuzzerInitialize(NULL, NULL);
	int slot;
	struct rm_frame first;
	int moving = size >= RM_FRAME_LEN && !rm_frame_decode(data, &first) &&
		     (first.op == RM_OP_MIGRATE_RANGES || first.op == RM_OP_MIGRATE_IMAGE);
	struct client c = {.fd = hand_over_client(&slot, moving), .msg = reply_msg};
	exchange(&c, NULL, 0, 1, 1, 0); /* the hello's reply */
	send_input(&c, data, size, moving);
	shutdown(c.fd, SHUT_WR);
	exchange(&c, NULL, 0, 0, 0, 1);
	close(c.fd);
	wait_for_leave(slot);

	driver_watch_check_released(ngpus);
	if (rm_host_memory_held()) {
		fprintf(stderr, "fuzz-request: the session ended with %llu bytes of host memory counted\n",
			(unsigned long long)rm_host_memory_held());
		abort();
	}
	return 0;
}
