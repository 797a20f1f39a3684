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
#include "migrate_state.h"
#include "migrate_wire.h"
#include "remora.pb-c.h"
#include "server.h"
#include "transport.h"
#include "worker.h"

#define DEFAULT_WAIT_S 30
#define DIAL_TIMEOUT_MS 10000
#define MOVED_AWAY 9 /* sh->migrate_in of a session that moved on */

/* Requests and the sessions' links to them; the requests' waits. */
static pthread_mutex_t mig_lock = PTHREAD_MUTEX_INITIALIZER;


static uint64_t now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* ---- the admin's request ---- */

static int link_target(struct rm_migration *m);
static int send_ranges_ahead(struct rm_migration *m);
static int send_images_ahead(struct rm_migration *m);
static void heartbeat_target(struct rm_migration *m);

static int link_request(struct rm_channel *s, void *arg)
{
	struct rm_migration *m = arg;
	int err = 0;
	pthread_mutex_lock(&mig_lock);
	if (s->sh->migration || s->sh->migrate_in)
		err = -EBUSY;
	else
		m->sh = s->sh, __atomic_store_n(&s->sh->migration, m, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&mig_lock);
	if (!err) { /* the greeting's fields, fixed for the session's life */
		struct rm_session *sh = s->sh;
		snprintf(m->name, sizeof(m->name), "%s", sh->name);
		snprintf(m->tenant_name, sizeof(m->tenant_name), "%s", sh->tenant_name);
		m->pid = sh->pid;
		m->heartbeat_ms = sh->heartbeat_ms;
		m->ndevices = sh->ndevices < 64 ? sh->ndevices : 64;
		memcpy(m->devices, sh->devices, sizeof(int) * (size_t)m->ndevices);
	}
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

/* Ends a move that the client's call has not taken (the greeting failed, or no call came):
 * the session forgets it. Under mig_lock. */
static void unlink_untaken(struct rm_migration *m)
{
	if (m->done)
		return; /* taken, or the session ended */
	m->sh->migration = NULL;
	m->done = 2;
}

void rm_migrate_request(struct rm_conn *conn, const struct rm_handoff *h)
{
	struct rm_migration m = {.result = CUDA_ERROR_NOT_READY};
	snprintf(m.target, sizeof(m.target), "%s", h->migrate_to);
	m.credential_len = h->credential_len <= sizeof(m.credential) ? h->credential_len : 0;
	memcpy(m.credential, h->credential, m.credential_len);
	pthread_cond_init(&m.cond, NULL);
	pthread_mutex_init(&m.link_lock, NULL);
	unsigned wait_s = h->wait_s ? h->wait_s : DEFAULT_WAIT_S;
	int err = rm_served_main(h->session_id, link_request, &m);
	if (err) {
		m.result = err == -EBUSY ? CUDA_ERROR_NOT_READY : CUDA_ERROR_NOT_FOUND;
		snprintf(m.error, sizeof(m.error), "%s", err == -EBUSY ? "the client is moving already"
							 : "no such session in its worker");
	} else {
		uint64_t t0 = now_us();
		struct timespec until;
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += wait_s;
		int greet_err = link_target(&m);
		uint64_t greeted = now_us() - t0;
		int ranges = greet_err ? 0 : send_ranges_ahead(&m);
		if (ranges < 0)
			greet_err = ranges;
		int ahead = greet_err ? 0 : send_images_ahead(&m);
		if (ahead < 0)
			greet_err = ahead;
		pthread_mutex_lock(&mig_lock);
		if (greet_err) {
			if (m.done == 2) /* the client ended meanwhile: that is the answer */
				greet_err = 0;
			else
				unlink_untaken(&m);
		} else if (!m.done) {
			m.ready = 1;
			rm_log(RM_LOG_INFO, "session %llu: target %s greeted in %llu us, as its session %llu; %d address "
			       "ranges reserved and %d images loaded there ahead by %llu us; moving at the client's next "
			       "synchronous call", (unsigned long long)h->session_id, m.target, (unsigned long long)greeted,
			       (unsigned long long)m.target_session, ranges, ahead, (unsigned long long)(now_us() - t0));
		}
		uint32_t beat_ms = m.target_heartbeat_ms ? m.target_heartbeat_ms : 1000;
		while (m.done != 2) { /* once under way, the move is waited for to its end */
			if (m.done == 1) {
				pthread_cond_wait(&m.cond, &mig_lock);
				continue;
			}
			struct timespec now, next;
			clock_gettime(CLOCK_REALTIME, &now);
			next = now;
			next.tv_sec += beat_ms / 1000;
			next.tv_nsec += (long)(beat_ms % 1000) * 1000000L;
			if (next.tv_nsec >= 1000000000L)
				next.tv_sec++, next.tv_nsec -= 1000000000L;
			int last = next.tv_sec > until.tv_sec || (next.tv_sec == until.tv_sec && next.tv_nsec >= until.tv_nsec);
			int late = pthread_cond_timedwait(&m.cond, &mig_lock, last ? &until : &next) == ETIMEDOUT;
			if (!late || m.done)
				continue;
			if (last) { /* no synchronous call came in time: the client stays */
				unlink_untaken(&m);
				m.result = CUDA_ERROR_TIMEOUT;
				snprintf(m.error, sizeof(m.error), "the client made no synchronous call within %u s; it stays",
					 wait_s);
				break;
			}
			pthread_mutex_unlock(&mig_lock);
			heartbeat_target(&m);
			pthread_mutex_lock(&mig_lock);
		}
		pthread_mutex_unlock(&mig_lock);
		/* A move that never took the link leaves the target's session to end with it. */
		pthread_mutex_lock(&m.link_lock);
		if (m.linked && !m.link_taken)
			rm_link_close(&m.link);
		m.linked = 0;
		pthread_mutex_unlock(&m.link_lock);
	}
	explicit_bzero(m.credential, sizeof(m.credential));
	explicit_bzero(m.target_key, sizeof(m.target_key));
	rm_log(m.result == CUDA_SUCCESS ? RM_LOG_INFO : RM_LOG_WARN, "session %llu: move to %s: %s",
	       (unsigned long long)h->session_id, m.target, m.result == CUDA_SUCCESS ? "done" : m.error);
	answer(conn, &m, 1);
	pthread_mutex_destroy(&m.link_lock);
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

/* Greets the target as a session of the client's tenant moving in: its id, attach key
 * and heartbeat interval. */
static int greet_target(struct rm_migration *m, struct rm_link *l, char *why, size_t n)
{
	Remora__Hello hello = REMORA__HELLO__INIT;
	int32_t devices[64];
	hello.protocol_version = RM_PROTOCOL_VERSION;
	hello.cuda_version = CUDA_VERSION;
	hello.credential.data = m->credential;
	hello.credential.len = m->credential_len;
	hello.client_name = m->name;
	hello.pid = m->pid;
	for (int i = 0; i < m->ndevices; i++)
		devices[i] = m->devices[i];
	hello.devices = devices;
	hello.n_devices = (size_t)m->ndevices;
	hello.heartbeat_ms = m->heartbeat_ms;
	hello.migrate_in = 1;
	hello.tenant = m->tenant_name;
	uint8_t buf[1024];
	size_t len = remora__hello__get_packed_size(&hello);
	if (len > sizeof(buf))
		return snprintf(why, n, "hello too long"), -EINVAL;
	remora__hello__pack(&hello, buf);
	struct rm_frame f = {.magic = RM_WIRE_MAGIC, .op = RM_OP_HELLO, .seq = m->seq = 1, .msg_len = (uint32_t)len}, rf;
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
	if (rf.result != CUDA_SUCCESS || rep->attach_key.len != 16) {
		err = -EACCES, snprintf(why, n, "the target refused the client: %s",
					rep->error && *rep->error ? rep->error : "no attach key");
	} else {
		m->target_session = rep->session_id;
		memcpy(m->target_key, rep->attach_key.data, 16);
		m->target_heartbeat_ms = rep->heartbeat_ms;
	}
	remora__hello_reply__free_unpacked(rep, NULL);
	return err;
}

/* Dials and greets the target, before the client's call: the target's worker makes its
 * contexts before it answers, so the pause waits for neither. 0, or -errno with m->error
 * said. */
static int link_target(struct rm_migration *m)
{
	const char *addr;
	const struct rm_transport *tp = rm_transport_for(m->target, &addr);
	struct rm_conn *conn = NULL;
	if (!tp)
		return snprintf(m->error, sizeof(m->error), "%s names an unknown transport", m->target), -EINVAL;
	if (tp->dial(addr, DIAL_TIMEOUT_MS, &conn))
		return snprintf(m->error, sizeof(m->error), "cannot reach the target %s", m->target), -EHOSTUNREACH;
	if (rm_link_init(&m->link, conn))
		return rm_conn_close(conn), snprintf(m->error, sizeof(m->error), "out of memory"), -ENOMEM;
	int timeout = rm_worker_config()->peer_timeout_s * 1000;
	rm_conn_set_liveness(conn, timeout, timeout);
	int err = greet_target(m, &m->link, m->error, sizeof(m->error));
	if (err)
		rm_link_close(&m->link);
	else
		m->linked = 1;
	return err;
}

/* A copy of the image kept for module (its kind and device said), while the move has not
 * ended: the session's thread may unload it meanwhile (NULL then). */
static uint8_t *copy_kept_image(struct rm_migration *m, uint64_t module, size_t *n, enum rm_handle_kind *kind,
				CUdevice *dev)
{
	uint8_t *copy = NULL;
	pthread_mutex_lock(&mig_lock); /* the session lives while the move is linked to it */
	if (!m->done) {
		struct rm_session *sh = m->sh;
		pthread_mutex_lock(&sh->lock);
		for (size_t k = 0; k < sh->nimages; k++)
			if (sh->images[k].module == module && (copy = malloc(sh->images[k].n))) {
				memcpy(copy, sh->images[k].image, sh->images[k].n);
				*n = sh->images[k].n, *kind = sh->images[k].kind, *dev = sh->images[k].dev;
				break;
			}
		pthread_mutex_unlock(&sh->lock);
	}
	pthread_mutex_unlock(&mig_lock);
	return copy;
}

/* One request of op with bulk to the greeted target, answered with an empty reply: 0 with
 * the reply's result, or -errno where the link failed or the reply was another. */
static int ask_target(struct rm_migration *m, uint32_t op, struct iovec *bulk, int nbulk, CUresult *result)
{
	uint64_t len = 0;
	for (int i = 0; i < nbulk; i++)
		len += bulk[i].iov_len;
	struct rm_frame f = {.magic = RM_WIRE_MAGIC, .op = op, .seq = ++m->seq, .bulk_len = len}, rf;
	int err = rm_link_send(&m->link, &f, NULL, bulk, nbulk);
	if (!err && !(err = read_answer(&m->link, &rf)) && (rf.op != op || rf.msg_len || rf.bulk_len))
		err = -EPROTO;
	*result = err ? CUDA_ERROR_UNKNOWN : (CUresult)rf.result;
	return err;
}

/* Sends the greeted target the address ranges the session's memory and reservations lie in
 * (RM_OP_MIGRATE_RANGES), before the images: the target reserves them first, so that what
 * it loads ahead does not land there. How many were sent, or -errno where the link failed. */
static int send_ranges_ahead(struct rm_migration *m)
{
	uint8_t *list = NULL;
	size_t count = 0;
	int err = 0;
	pthread_mutex_lock(&mig_lock);
	if (!m->done)
		err = rm_mig_ranges(m->sh, &list, &count);
	pthread_mutex_unlock(&mig_lock);
	if (err || !count) { /* without the list the move goes on, as before it was sent */
		free(list);
		return 0;
	}
	struct iovec bulk = {list, count * RM_MIG_RANGE_LEN};
	CUresult result;
	err = ask_target(m, RM_OP_MIGRATE_RANGES, &bulk, 1, &result);
	free(list);
	if (err)
		snprintf(m->error, sizeof(m->error), "the target failed while reserving the client's addresses ahead: %s",
			 strerror(-err));
	return err ? err : (int)count;
}

/* Sends the session's module and library images to the greeted target before the client's
 * call (RM_OP_MIGRATE_IMAGE), each loaded there at once; the state's of the same bytes then
 * take them, so the pause loads only what the client loaded since. The number the target
 * loaded, or -errno where the link failed. An image it could not load the state carries. */
static int send_images_ahead(struct rm_migration *m)
{
	uint64_t *modules = NULL;
	size_t count = 0;
	pthread_mutex_lock(&mig_lock);
	if (!m->done) {
		pthread_mutex_lock(&m->sh->lock);
		if ((modules = malloc((m->sh->nimages + 1) * sizeof(*modules))))
			for (count = 0; count < m->sh->nimages; count++)
				modules[count] = m->sh->images[count].module;
		pthread_mutex_unlock(&m->sh->lock);
	}
	pthread_mutex_unlock(&mig_lock);
	int loaded = 0, err = 0;
	for (size_t i = 0; i < count && !err; i++) {
		size_t n = 0;
		enum rm_handle_kind kind = RM_H_MODULE;
		CUdevice dev = -1;
		uint8_t *image = copy_kept_image(m, modules[i], &n, &kind, &dev);
		if (!image)
			continue;
		uint8_t head[RM_MIG_IMAGE_HEAD];
		uint32_t ordinal = 0;
		for (int d = 0; d < m->ndevices; d++)
			if (m->devices[d] == dev)
				ordinal = (uint32_t)d;
		rm_mig_image_head(head, kind == RM_H_LIBRARY ? RM_MIG_IMAGE_LIBRARY : RM_MIG_IMAGE_MODULE, ordinal);
		struct iovec bulk[2] = {{head, sizeof(head)}, {image, n}};
		CUresult result;
		err = ask_target(m, RM_OP_MIGRATE_IMAGE, bulk, 2, &result);
		loaded += !err && result == CUDA_SUCCESS;
		free(image);
	}
	free(modules);
	if (err)
		snprintf(m->error, sizeof(m->error), "the target failed while loading the client's images ahead: %s",
			 strerror(-err));
	return err ? err : loaded;
}

/* While the client has not come to its call: the greeted target hears from us as from an
 * idle client, so that it keeps the session. */
static void heartbeat_target(struct rm_migration *m)
{
	pthread_mutex_lock(&m->link_lock);
	if (m->linked && !m->link_taken) {
		struct rm_frame f = {.magic = RM_WIRE_MAGIC, .op = RM_OP_HEARTBEAT, .flags = RM_F_ASYNC};
		if (rm_link_send(&m->link, &f, NULL, NULL, 0))
			rm_log(RM_LOG_DEBUG, "move to %s: a heartbeat to the target failed", m->target);
	}
	pthread_mutex_unlock(&m->link_lock);
}

/* A move's phases, µs from its start, for its log line. */
struct phases {
	uint64_t t0, held, synced, sized, made;
};

/* Sends the state to the target (greeted) and waits for its answer. */
static int send_to_target(struct rm_mig_sender *x, struct rm_link *l, uint64_t seq, char *why, size_t n,
			  struct phases *ph)
{
	struct rm_mig_sender sizing = *x;
	sizing.count = 1;
	rm_mig_send_state(&sizing);
	ph->sized = now_us() - ph->t0;
	x->records_expected = sizing.records;
	struct rm_frame f = {.magic = RM_WIRE_MAGIC, .op = RM_OP_MIGRATE_STATE, .seq = seq, .bulk_len = sizing.total}, rf;
	int err = rm_link_send(l, &f, NULL, NULL, 0);
	if (!err)
		err = rm_mig_send_state(x);
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
	mv.heartbeat_ms = m->target_heartbeat_ms;
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

/* The move itself, on the target greeted before: 1 when the client was told to go, else 0
 * with m->error said. The link is closed here either way. */
static int move(struct rm_channel *s, struct rm_migration *m)
{
	pthread_mutex_lock(&m->link_lock); /* the request's thread sends no more heartbeats */
	m->link_taken = 1;
	pthread_mutex_unlock(&m->link_lock);
	struct rm_mig_collect c = {0};
	const char *no = rm_mig_refusal(s, &c);
	int moved = 0;
	struct rm_mig_sender x = {.s = s, .c = &c, .conn = m->link.conn};
	int held = 0;
	uint64_t t0 = now_us(); /* the pause: from here (the client's call done) to the client told */
	struct phases ph = {.t0 = t0};
	if (no)
		snprintf(m->error, sizeof(m->error), "the client cannot move: %s", no);
	else if (!(held = 1) || hold_channels(s, m->error, sizeof(m->error)))
		; /* said why */
	else if (free(c.h), c = (struct rm_mig_collect){0}, ph.held = now_us() - t0,
		 (no = rm_mig_refusal(s, &c))) /* again: its threads ran meanwhile */
		snprintf(m->error, sizeof(m->error), "the client cannot move: %s", no);
	else if (rm_session_synchronize_all(s) != CUDA_SUCCESS || (ph.synced = now_us() - t0, 0))
		snprintf(m->error, sizeof(m->error), "its streams did not finish cleanly; it stays");
	else if (!(x.chunk = malloc(RM_MIG_CHUNK)))
		snprintf(m->error, sizeof(m->error), "out of memory");
	else if (!send_to_target(&x, &m->link, ++m->seq, m->error, sizeof(m->error), &ph))
		moved = 1;
	ph.made = now_us() - t0;
	rm_link_close(&m->link); /* the target's session now waits for the client */
	if (moved && tell_client(s, m, m->target_session, m->target_key)) {
		/* The client cannot be told: it is gone, or its link broke; it gets a lost
		 * connection either way, and the target drops the state unclaimed. */
		snprintf(m->error, sizeof(m->error), "the client could not be told to move");
		moved = 0;
	}
	if (held && !moved)
		release_channels(s);
	if (moved) {
		m->result = CUDA_SUCCESS;
		m->session_id = m->target_session;
		m->bytes = x.total;
		m->pause_us = now_us() - t0;
		rm_session_log(s, RM_LOG_INFO, "moved to %s as session %llu: %llu bytes in %llu us (from the call's end, "
			       "in µs: threads held %llu, streams done %llu, state sized %llu, sent and made again %llu)",
			       m->target, (unsigned long long)m->session_id, (unsigned long long)x.total,
			       (unsigned long long)m->pause_us, (unsigned long long)ph.held, (unsigned long long)ph.synced,
			       (unsigned long long)ph.sized, (unsigned long long)ph.made);
	} else {
		m->result = no ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_NOT_READY;
		m->session_id = 0;
		rm_session_log(s, RM_LOG_WARN, "not moved to %s: %s; it goes on here", m->target, m->error);
	}
	free(x.chunk);
	free(c.h);
	rm_session_enter(s, 0);
	/* Its addresses free here before the admin hears the move is done, so that the client
	 * may be moved back at once (the driver keeps a freed range while the free is queued). */
	if (moved)
		rm_session_release_memory_now(s);
	return moved;
}

int rm_migrate_before_reply(struct rm_channel *s, const struct rm_request *rq)
{
	pthread_mutex_lock(&mig_lock);
	struct rm_migration *m = s->sh->migration;
	int go = m && m->ready && !m->done && s->chan == 0 && !(rq->frame.flags & RM_F_ASYNC) && rq->frame.op < RM_OP_LIMIT &&
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
