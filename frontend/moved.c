/* A session that moved to another remorad (docs/pool.md, "Live migration"): the daemon
 * says so in an RM_OP_MOVED frame just before a synchronous call's reply, having made the
 * session again there; the client attaches its connection to it (an Attach of index 0)
 * and its copy links anew, then goes on as before, its handles and addresses unchanged. */
#include "client_object.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "copy_links.h"
#include "remora.pb-c.h"

int rm_client_moved_note_locked(struct rm_client_conn *c, const struct rm_frame *rf)
{
	uint8_t msg[512];
	Remora__Moved *m = NULL;
	int err = rf->msg_len > sizeof(msg) ? -EPROTO : rm_link_read(&c->link, msg, rf->msg_len);
	if (!err && !(m = remora__moved__unpack(NULL, rf->msg_len, msg)))
		err = -EPROTO;
	if (!err && (!m->target || !*m->target || strlen(m->target) >= sizeof(c->moved_to) ||
		     m->key.len != sizeof(c->moved_key) || c != &rm_process_client.main))
		err = -EPROTO;
	if (!err) {
		snprintf(c->moved_to, sizeof(c->moved_to), "%s", m->target);
		c->moved_session = m->session_id;
		c->moved_heartbeat_ms = rm_client_heartbeat_of(m->heartbeat_ms);
		memcpy(c->moved_key, m->key.data, sizeof(c->moved_key));
		c->moved = 1;
	}
	if (m)
		remora__moved__free_unpacked(m, NULL);
	explicit_bzero(msg, sizeof(msg));
	if (err)
		rm_client_lost_locked(c, "a malformed move notice", err);
	return err ? err : 1;
}

int rm_client_move_locked(struct rm_client_conn *c)
{
	struct rm_attach_to to = c->attach;
	const char *addr;
	c->moved = 0;
	to.tp = rm_transport_for(c->moved_to, &addr);
	int err = to.tp ? 0 : -EINVAL;
	if (!err) {
		snprintf(to.addr, sizeof(to.addr), "%s", addr);
		to.session_id = c->moved_session;
		memcpy(to.key, c->moved_key, sizeof(c->moved_key));
		to.keylen = sizeof(c->moved_key);
	}
	explicit_bzero(c->moved_key, sizeof(c->moved_key));
	/* The copy links go with the old session; new ones attach to the new one. */
	rm_copy_links_close(c->copy_links);
	c->copy_links = NULL;
	struct rm_link l;
	if (!err)
		err = rm_client_attach(&l, &to, 0, 1);
	if (err) {
		rm_log(RM_LOG_ERROR, "the GPU server moved this client to %s, which could not be reached (%s)",
		       c->moved_to, rm_transport_why(err));
		rm_client_lost_locked(c, "moving to another GPU server", err);
		return err;
	}
	rm_link_close(&c->link);
	c->link = l;
	c->attach = to;
	c->session_id = to.session_id;
	if (c->moved_heartbeat_ms) /* the target's peer timeout may be shorter */
		rm_client_set_heartbeat(c, c->moved_heartbeat_ms);
	c->copy_links = rm_copy_links_open(&c->attach, __atomic_load_n(&c->heartbeat_ms, __ATOMIC_RELAXED));
	rm_log(RM_LOG_INFO, "moved to the GPU server at %s (session %llu)", c->moved_to,
	       (unsigned long long)c->session_id);
	return 0;
}

int rm_client_move_prepare_locked(struct rm_client_conn *c, const struct rm_frame *rf)
{
	struct rm_client *cl = &rm_process_client;
	if (c != &cl->main || c->holding || rf->msg_len) {
		rm_client_lost_locked(c, "a malformed move notice", -EPROTO);
		return -EPROTO;
	}
	/* The channel table first (no channel opens or closes meanwhile), then each channel's
	 * lock: a call under way on it ends first (its daemon thread runs it meanwhile). */
	pthread_rwlock_wrlock(&cl->channels.lock);
	c->holding = 1;
	uint32_t chans[RM_MAX_CHANNELS];
	uint64_t seqs[RM_MAX_CHANNELS];
	size_t n = 0;
	for (int i = 1; i <= RM_MAX_CHANNELS; i++) {
		struct rm_client_conn *x = cl->channels.tab[i];
		if (!x)
			continue;
		pthread_mutex_lock(&x->lock);
		if (x->connected && x->batch_len) {
			int err = rm_client_flush_locked(x, NULL, 0);
			if (err)
				rm_client_lost_locked(x, "send", err);
		}
		uint64_t a = __atomic_load_n(&x->last_async_seq, __ATOMIC_ACQUIRE),
			 s = __atomic_load_n(&x->synced_seq, __ATOMIC_ACQUIRE);
		chans[n] = (uint32_t)i;
		seqs[n++] = a > s ? a : s;
	}
	Remora__MoveReady m = REMORA__MOVE_READY__INIT;
	m.channel = chans, m.n_channel = n;
	m.seq = seqs, m.n_seq = n;
	uint8_t buf[1024];
	size_t len = remora__move_ready__get_packed_size(&m);
	struct rm_frame f = {.magic = RM_WIRE_MAGIC, .op = RM_OP_MOVE_READY, .flags = RM_F_ASYNC,
			     .seq = __atomic_add_fetch(&cl->seq, 1, __ATOMIC_RELAXED), .msg_len = (uint32_t)len};
	int err = len > sizeof(buf) ? -EMSGSIZE : 0;
	if (!err) {
		remora__move_ready__pack(&m, buf);
		err = rm_link_send(&c->link, &f, buf, NULL, 0);
	}
	if (err) {
		rm_client_lost_locked(c, "holding the channels for a move", err);
		return err;
	}
	return 1;
}

void rm_client_channels_release_locked(struct rm_client_conn *c, int moved)
{
	struct rm_client *cl = &rm_process_client;
	for (int i = 1; i <= RM_MAX_CHANNELS; i++) {
		struct rm_client_conn *x = cl->channels.tab[i];
		if (!x)
			continue;
		struct rm_link l;
		int err = moved && x->connected ? rm_client_attach(&l, &c->attach, x->chan, 1) : 0;
		if (moved && x->connected && !err) {
			rm_link_close(&x->link);
			x->link = l;
			x->session_id = c->session_id;
			/* The source ran all it was sent; the target's channel has run nothing yet, and
			 * a fence or the next move's hold waits only for what it is sent. */
			__atomic_store_n(&x->last_async_seq, 0, __ATOMIC_RELEASE);
			__atomic_store_n(&x->synced_seq, 0, __ATOMIC_RELEASE);
			rm_client_set_heartbeat(x, c->heartbeat_ms);
		} else if (moved && x->connected) {
			rm_log(RM_LOG_ERROR, "a thread's channel could not follow the client to %s (%s)", c->moved_to,
			       rm_transport_why(err));
			rm_client_lost_locked(x, "moving to another GPU server", err);
		}
		pthread_mutex_unlock(&x->lock);
	}
	c->holding = 0;
	pthread_rwlock_unlock(&cl->channels.lock);
}
