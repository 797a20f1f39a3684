/* Copy links and client threads' channels attaching to their session (worker.h). */
#include "worker.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>

#include "copy_links.h"
#include "host_functions.h"
#include "log.h"
#include "migrate.h"

/* A client thread's channel: serves it until it closes, then frees what it alone held.
 * Its end leaves the session and its other channels be. */
static void *channel_main(void *arg)
{
	struct rm_channel *ch = arg;
	struct rm_session *sh = ch->sh;
	prctl(PR_SET_TIMERSLACK, 1000UL);
	rm_serve(ch);
	rm_session_log(ch, RM_LOG_INFO, "channel %d closed", ch->chan);
	rm_hostfn_channel_gone(ch); /* waiting host functions go on without it */
	rm_served_remove(ch);
	pthread_mutex_lock(&sh->lock);
	sh->channels[ch->chan] = NULL;
	pthread_cond_broadcast(&sh->progress);
	pthread_mutex_unlock(&sh->lock);
	rm_session_channel_close(ch);
	pthread_mutex_lock(&sh->lock);
	sh->nchannels--;
	pthread_cond_broadcast(&sh->channel_gone);
	pthread_mutex_unlock(&sh->lock);
	return NULL;
}

/* Makes conn channel index of session s (its main channel), with a thread of its own,
 * once the Attach's answer ok is sent on it. The caller holds s (attach_hold): the hold
 * passes to the channel's thread. The slot is taken before ok goes, so that a session
 * closing meanwhile shuts conn down, and ok is sent under no lock (transport.h).
 * 0 (the thread owns conn), or -errno (-EPIPE: ok was not sent). */
static int channel_attach(struct rm_channel *s, struct rm_conn *conn, uint32_t index, const struct iovec *ok)
{
	struct rm_session *sh = s->sh;
	struct rm_channel *ch = NULL;
	int err = 0;
	pthread_mutex_lock(&sh->lock);
	if (sh->closing)
		err = -ESHUTDOWN;
	else if (index < 1 || index > (uint32_t)sh->max_channels)
		err = -ERANGE;
	else if (sh->channels[index])
		err = -EBUSY;
	else if (!(ch = rm_session_channel_new(s, conn, (int)index)))
		err = -ENOMEM;
	else
		sh->channels[index] = ch;
	pthread_mutex_unlock(&sh->lock);
	if (err)
		return err;
	if (rm_conn_sendv(conn, ok, 1)) {
		err = -EPIPE;
		goto fail_sent;
	}
	if (rm_served_add(ch)) {
		err = -ENOMEM;
		goto fail_sent;
	}
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_t t;
	err = -pthread_create(&t, &attr, channel_main, ch);
	pthread_attr_destroy(&attr);
	if (err)
		goto fail_listed;
	return 0;

fail_listed:
	rm_served_remove(ch);
fail_sent:
	pthread_mutex_lock(&sh->lock);
	sh->channels[index] = NULL;
	pthread_mutex_unlock(&sh->lock);
	ch->link.conn = NULL; /* the caller still owns conn */
	rm_session_channel_close(ch);
	return err;
}

/* Holds the session of a main channel against its end while a link attaches to it: counted
 * as a channel (client_main waits for those), so that no lock need be held meanwhile. 0, or
 * -ESHUTDOWN where it is closing. */
static int attach_hold(struct rm_channel *s)
{
	pthread_mutex_lock(&s->sh->lock);
	int err = s->sh->closing ? -ESHUTDOWN : 0;
	if (!err)
		s->sh->nchannels++;
	pthread_mutex_unlock(&s->sh->lock);
	return err;
}

static void attach_release(struct rm_channel *s)
{
	struct rm_session *sh = s->sh;
	pthread_mutex_lock(&sh->lock);
	sh->nchannels--;
	pthread_cond_broadcast(&sh->channel_gone);
	pthread_mutex_unlock(&sh->lock);
}

/* The session an attach names, found under the served list's lock: the key compared in
 * full (no early exit to time), a hold taken where it matches, the name copied (the
 * session may go once the lock is let go). */
struct attach_find {
	const struct rm_handoff *h;
	struct rm_channel *s;
	int diff, err;
	char name[64];
};

static int find_session(struct rm_channel *s, void *arg)
{
	struct attach_find *x = arg;
	uint8_t d = 0;
	for (size_t k = 0; k < sizeof(s->sh->attach_key); k++)
		d |= s->sh->attach_key[k] ^ x->h->key[k];
	x->s = s;
	x->diff = d != 0;
	x->err = x->diff ? -EACCES : attach_hold(s);
	snprintf(x->name, sizeof(x->name), "%s", s->sh->name);
	return 0;
}

/* The served list's lock is held only to find the session: the answers go to a peer that
 * may read nothing (transport.h). */
void rm_attach(struct rm_conn *conn, const struct rm_handoff *h)
{
	const char *what = h->channel ? "channel" : "copy link";
	struct attach_find found = {.h = h};
	if (rm_served_main(h->session_id, find_session, &found) == -ESRCH) {
		rm_conn_close(conn);
		return;
	}
	struct rm_channel *s = found.s;
	int err = found.err, diff = found.diff;
	const char *name = found.name;
	struct rm_frame f = {.magic = RM_WIRE_MAGIC, .op = RM_OP_ATTACH, .flags = RM_F_REPLY,
			     .result = diff ? CUDA_ERROR_NOT_PERMITTED : CUDA_SUCCESS};
	uint8_t hdr[RM_FRAME_LEN];
	rm_frame_encode(&f, hdr);
	struct iovec v = {hdr, sizeof(hdr)};
	int held = !err; /* a hold on s: given to a channel's thread, else released below */
	/* A refused channel or copy link is told so before its connection closes (a channel's
	 * thread then shares the main connection; a copy needs no link). */
	if (!err && h->channel && h->link_index == 0) { /* a moved client's main connection (migrate.h) */
		what = "moved client's connection";
		err = rm_migrate_resume(s, conn, &v);
	} else if (!err && h->channel) {
		err = channel_attach(s, conn, h->link_index, &v);
		held = err != 0;
	} else if (!err) {
		err = rm_copy_link_attach(s, conn, h->link_index, &v);
	}
	if (err && err != -EPIPE && !diff) {
		f.result = h->channel ? CUDA_ERROR_TOO_MANY_PEERS
			 : err == -EPROTO ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_OUT_OF_MEMORY;
		rm_frame_encode(&f, hdr);
		rm_conn_sendv(conn, &v, 1);
	}
	if (err)
		rm_log(RM_LOG_WARN, "session %llu (%s): %s %u refused: %s", (unsigned long long)h->session_id, name, what,
		       h->link_index, err == -EACCES ? "wrong key"
		       : err == -EDQUOT ? "the client holds its client_host_memory_limit of host memory"
		       : strerror(-err));
	else
		rm_log(RM_LOG_INFO, "session %llu (%s): %s %u attached", (unsigned long long)h->session_id, name, what,
		       h->link_index);
	if (diff)
		rm_conn_sendv(conn, &v, 1);
	if (held)
		attach_release(s);
	if (err)
		rm_conn_close(conn);
}
