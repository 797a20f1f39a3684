/* Opening and closing the client's connections (connection.h): settings read first,
 * then the link, the batch, the hello, the copy links and the flusher, released in
 * reverse through one ladder; a channel or a copy link is dialled and attached by one
 * function. */
#include "connection.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "compress.h"
#include "copy_links.h"
#ifdef RM_HAVE_TLS
#include "tls.h"
#endif
#include "remora.pb-c.h"
#include "text.h"

#define CONNECT_TIMEOUT_MS 5000
#define SHED_PAUSE_MIN_MS 50    /* the first pause before dialling a shed connection again */
#define SHED_PAUSE_MAX_MS 2000  /* the longest */

int rm_peer_timeout_ms(const char *text)
{
	if (!text || !*text)
		return RM_DEFAULT_PEER_TIMEOUT_MS;
	char *end;
	long s = strtol(text, &end, 10);
	if (*end || s < 1 || s > 3600)
		return -EINVAL;
	return (int)s * 1000;
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

/* What the hello says of this client, from its environment: 0, or -1 after a line. */
static int describe_client(Remora__Hello *hello, char *name, size_t namecap, int32_t *devices)
{
	snprintf(name, namecap, "?");
	FILE *f = fopen("/proc/self/comm", "r");
	if (f) {
		if (fgets(name, (int)namecap, f))
			name[strcspn(name, "\n")] = 0;
		fclose(f);
	}
	hello->protocol_version = RM_PROTOCOL_VERSION;
	hello->cuda_version = CUDA_VERSION;
	hello->client_name = name;
	hello->pid = (uint32_t)getpid();
	const char *token = getenv("REMORA_TOKEN");
	if (token) {
		hello->credential.data = (uint8_t *)token;
		hello->credential.len = strlen(token);
	}
	hello->devices = devices;
	if (rm_visible_devices(getenv("REMORA_VISIBLE_DEVICES"), devices, RM_MAX_VISIBLE_DEVICES, &hello->n_devices)) {
		rm_log(RM_LOG_ERROR, "REMORA_VISIBLE_DEVICES must be a comma-separated list of GPU ordinals");
		return -1;
	}
	return 0;
}

/* Whether the daemon closed the connection without answering the hello, as it sheds a
 * connection; a refusal has a reason (a reply, or a TLS alert: link.c). */
static int closed_unanswered(const struct rm_client_conn *c, const Remora__HelloReply *rep)
{
	return !rep && !c->connected && (c->lost_err == -ECONNRESET || c->lost_err == -EPIPE);
}

/* Sends the hello and reads the daemon's answer into c. */
static CUresult greet(struct rm_client_conn *c, const char *server, Remora__Hello *hello,
		      Remora__HelloReply **rep)
{
	struct rm_rpc_call call = {.op = RM_OP_HELLO, .req = &hello->base, .rep_desc = &remora__hello_reply__descriptor};
	CUresult r = rm_client_call(c, &call);
	*rep = (Remora__HelloReply *)call.rep;
	if (r != CUDA_SUCCESS && closed_unanswered(c, *rep))
		return r; /* the opener dials again or says so */
	if (r != CUDA_SUCCESS && !*rep && c->lost_err == -ETIMEDOUT) {
		rm_log(RM_LOG_ERROR, "the GPU server at %s was silent for longer than REMORA_PEER_TIMEOUT while this "
		       "client waited on its answer to the hello: it is frozen or unreachable", server);
		return CUDA_ERROR_NO_DEVICE;
	}
	if (r != CUDA_SUCCESS) {
		char why[256];
		rm_log(RM_LOG_ERROR, "the GPU server at %s refused this client: %s", server,
		       *rep && (*rep)->error && *(*rep)->error ? rm_text_escape(why, sizeof(why), (*rep)->error)
		       : *rm_transport_last_why()		 ? rm_transport_last_why()
		       : c->lost_err				 ? strerror(-c->lost_err)
								 : "handshake failed");
		return r == CUDA_ERROR_DEVICE_UNAVAILABLE ? CUDA_ERROR_NO_DEVICE : r;
	}
	if (!*rep)
		return CUDA_ERROR_NO_DEVICE;
	c->session_id = (*rep)->session_id;
	c->driver_version = (*rep)->driver_version > 0 ? (*rep)->driver_version : 0;
	c->heartbeat_ms = rm_client_heartbeat_of((*rep)->heartbeat_ms);
	return CUDA_SUCCESS;
}

/* Dials addr with the liveness timeout set and a link around the connection: 0 or -errno. */
static int dial_link(struct rm_link *l, const struct rm_transport *tp, const char *addr, int timeout_ms)
{
	struct rm_conn *conn;
	int err = tp->dial(addr, CONNECT_TIMEOUT_MS, &conn);
	if (err)
		return err;
	/* Sends wait as long as the daemon's host answers: the daemon rightly stops reading a
	 * copy's bytes while the GPU works through what the copy waits for. */
	if (rm_conn_set_liveness(conn, timeout_ms, 0))
		rm_log(RM_LOG_WARN, "a connection to %s has no liveness timeout", addr);
	if ((err = rm_link_init(l, conn)))
		rm_conn_close(conn);
	return err;
}

/* The batch and the fence marks of a connection: 0 or -ENOMEM (then neither). */
static int batch_alloc(struct rm_client_conn *c)
{
	c->batch = malloc(RM_CLIENT_BATCH_CAP);
	c->fenced = c->batch ? calloc(RM_MAX_CHANNELS + 1, sizeof(*c->fenced)) : NULL;
	if (!c->fenced) {
		free(c->batch);
		c->batch = NULL;
		return -ENOMEM;
	}
	c->batch_len = 0;
	c->flush_delay_ns = RM_FLUSH_DELAY_NS;
	return 0;
}

static void batch_free(struct rm_client_conn *c)
{
	free(c->fenced);
	c->fenced = NULL;
	free(c->batch);
	c->batch = NULL;
	c->batch_len = 0;
}

/* What later connections need to attach to the session just greeted. */
static void keep_attach(struct rm_attach_to *to, const struct rm_transport *tp, const char *addr,
			const Remora__HelloReply *rep, int timeout_ms)
{
	to->tp = tp;
	snprintf(to->addr, sizeof(to->addr), "%s", addr);
	to->session_id = rep->session_id;
	to->keylen = rep->attach_key.len == sizeof(to->key) && strlen(addr) < sizeof(to->addr) ? sizeof(to->key) : 0;
	if (to->keylen)
		memcpy(to->key, rep->attach_key.data, sizeof(to->key));
	to->timeout_ms = timeout_ms;
}

/* Dials, greets and keeps what the hello reply says in c. CUDA_SUCCESS; *shed set when the
 * daemon closed the connection without an answer to the hello (a burst of connections past
 * its bounds on pending handshakes, or its hello_timeout passed while it was busy: worth
 * another try). Over TLS such a connection is closed before the TLS handshake, which a dial
 * cannot tell from a TLS client at a plaintext port: that is not tried again. */
static CUresult dial_and_greet(struct rm_client_conn *c, const struct rm_transport *tp, const char *addr,
			       const char *server, Remora__Hello *hello, int timeout_ms, int *shed)
{
	*shed = 0;
	int err = dial_link(&c->link, tp, addr, timeout_ms);
	if (err == -ENOMEM)
		return CUDA_ERROR_OUT_OF_MEMORY;
	/* Shared memory's set-up is an exchange before the hello: a daemon shedding connections
	 * closes it there (seen under attack-soak's burst). Over TLS that is not told apart. */
	if ((err == -EPIPE || err == -ECONNRESET) && !(tp->flags & RM_TRANSPORT_ENCRYPTS)) {
		*shed = 1;
		return CUDA_ERROR_NO_DEVICE;
	}
	if (err) {
		/* A reason the transport recorded (a name that does not resolve, a TLS refusal) carries
		 * its own remedy; only an address that refuses or does not answer is told to start remorad. */
		const char *why = rm_transport_why(err);
		if (why == rm_transport_last_why())
			rm_log(RM_LOG_ERROR, "cannot connect to the GPU server at %s: %s", server, why);
		else
			rm_log(RM_LOG_ERROR, "cannot reach the GPU server at %s (%s); start remorad there or set "
			       "REMORA_SERVER=host:port", server, why);
		return CUDA_ERROR_NO_DEVICE;
	}
	Remora__HelloReply *rep = NULL;
	CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
	if (batch_alloc(c))
		goto fail_batch;
	c->connected = 1;
	c->greeting = 1;
	c->lost_err = 0;
	r = greet(c, server, hello, &rep);
	*shed = r != CUDA_SUCCESS && closed_unanswered(c, rep);
	c->greeting = 0;
	if (r != CUDA_SUCCESS)
		goto fail_hello;
	rm_log(RM_LOG_INFO, "connected to %s, session %llu, driver %d", server, (unsigned long long)c->session_id,
	       c->driver_version);
	keep_attach(&c->attach, tp, addr, rep, timeout_ms);
	rm_compress_peer(rep->compression, tp->scheme, addr);
	rm_rpc_free(&rep->base);
	return CUDA_SUCCESS;

fail_hello:
	rm_rpc_free(rep ? &rep->base : NULL);
	c->connected = 0;
	batch_free(c);
fail_batch:
	rm_link_close(&c->link);
	return r;
}

CUresult rm_client_conn_open(struct rm_client_conn *c, const char *server)
{
	Remora__Hello hello = REMORA__HELLO__INIT;
	char name[64];
	int32_t devices[RM_MAX_VISIBLE_DEVICES];
	int timeout_ms = rm_peer_timeout_ms(getenv("REMORA_PEER_TIMEOUT")); /* checked (environment.h) */
	if (timeout_ms < 0 || describe_client(&hello, name, sizeof(name), devices))
		return CUDA_ERROR_INVALID_VALUE;
	hello.heartbeat_ms = (uint32_t)timeout_ms / 6; /* six chances before a timeout */
	const char *addr;
	const struct rm_transport *tp = rm_transport_for(server, &addr);
	if (!tp) {
		rm_log(RM_LOG_ERROR, "REMORA_SERVER=%s names an unknown transport", server);
		return CUDA_ERROR_NO_DEVICE;
	}

	/* A shed connection is dialled again after a pause that doubles, with jitter so that a
	 * burst of clients spreads out, for up to REMORA_PEER_TIMEOUT in all. */
	CUresult r;
	int shed, tries = 0;
	uint64_t start_ns = rm_now_ns();
	unsigned seed = (unsigned)getpid() ^ (unsigned)start_ns;
	for (int pause_ms = SHED_PAUSE_MIN_MS;; pause_ms = pause_ms * 2 < SHED_PAUSE_MAX_MS ? pause_ms * 2
											      : SHED_PAUSE_MAX_MS) {
		rm_transport_set_why(0, "%s", ""); /* a reason recorded from here on is this attempt's */
		tries++;
		if ((r = dial_and_greet(c, tp, addr, server, &hello, timeout_ms, &shed)) == CUDA_SUCCESS || !shed)
			break;
		int jittered = pause_ms / 2 + (int)(rand_r(&seed) % (unsigned)(pause_ms / 2 + 1));
		if ((rm_now_ns() - start_ns) / 1000000 + (uint64_t)jittered > (uint64_t)timeout_ms) {
			rm_log(RM_LOG_ERROR, "the GPU server at %s closed all %d connection(s) of this client before "
			       "answering its hello, for %d s: it is overloaded (its max_pending_hellos, "
			       "hello_timeout) or not a Remora daemon", server, tries, timeout_ms / 1000);
			return CUDA_ERROR_NO_DEVICE;
		}
		if (tries == 1)
			rm_log(RM_LOG_INFO, "the GPU server at %s closed the connection before answering the hello "
			       "(busy with other clients' handshakes); dialling again", server);
		struct timespec ts = {jittered / 1000, (long)(jittered % 1000) * 1000000L};
		while (nanosleep(&ts, &ts) && errno == EINTR)
			;
	}
	if (r != CUDA_SUCCESS)
		return r;
	if (tries > 1)
		rm_log(RM_LOG_INFO, "greeted the GPU server at %s at attempt %d", server, tries);
#ifdef RM_HAVE_TLS
	if (c->attach.tp->flags & RM_TRANSPORT_ENCRYPTS) { /* after the handshake: the kernel's part known */
		int k = rm_tls_last_ktls();
		rm_log(RM_LOG_INFO, "TLS records to %s: %s", server,
		       k == 3 ? "by the kernel (kTLS) both ways" : k ? "by the kernel (kTLS) one way, here the other"
		       : "sealed in this process (no kernel TLS: modprobe tls)");
	}
#endif
	c->copy_links = rm_copy_links_open(&c->attach, c->heartbeat_ms);
	int err = rm_client_flusher_start(c);
	if (err)
		rm_log(RM_LOG_WARN, "no flusher thread (%s): async calls go out at the next synchronizing call",
		       strerror(-err));
	return CUDA_SUCCESS;
}

/* The errno that a refused Attach's result stands for. */
static int attach_refusal(uint32_t result)
{
	switch (result) {
	case CUDA_ERROR_TOO_MANY_PEERS:
		return -EUSERS;
	case CUDA_ERROR_NOT_PERMITTED:
		return -EACCES;
	case CUDA_ERROR_OUT_OF_MEMORY:
		return -ENOMEM;
	default:
		return -EPROTO;
	}
}

int rm_client_attach(struct rm_link *l, const struct rm_attach_to *to, uint32_t index, int channel)
{
	Remora__Attach a = REMORA__ATTACH__INIT;
	a.session_id = to->session_id;
	a.key.data = (uint8_t *)to->key;
	a.key.len = to->keylen;
	a.index = index;
	a.channel = channel;
	uint8_t msg[128];
	size_t len = remora__attach__get_packed_size(&a);
	if (len > sizeof(msg))
		return -EINVAL;
	remora__attach__pack(&a, msg);
	int err = dial_link(l, to->tp, to->addr, to->timeout_ms);
	if (err)
		return err;
	struct rm_frame f = {.magic = RM_WIRE_MAGIC, .op = RM_OP_ATTACH, .seq = 1, .msg_len = (uint32_t)len};
	struct rm_frame rf;
	if (!(err = rm_link_send(l, &f, msg, NULL, 0)) && !(err = rm_link_read_frame(l, &rf))) {
		if (rf.op != RM_OP_ATTACH || !(rf.flags & RM_F_REPLY) || rf.msg_len || rf.bulk_len)
			err = -EPROTO;
		else if (rf.result)
			err = attach_refusal(rf.result);
	}
	if (err)
		rm_link_close(l);
	return err;
}

CUresult rm_client_channel_open(struct rm_client_conn *c, const struct rm_client_conn *main, uint32_t chan)
{
	if (!main->attach.keylen)
		return CUDA_ERROR_TOO_MANY_PEERS; /* a daemon without attaching: share the main one */
	if (batch_alloc(c))
		return CUDA_ERROR_OUT_OF_MEMORY;
	int err = rm_client_attach(&c->link, &main->attach, chan, 1);
	if (err) {
		batch_free(c);
		if (err == -EUSERS)
			return CUDA_ERROR_TOO_MANY_PEERS;
		rm_log(RM_LOG_ERROR, "a thread's channel to %s not opened (%s); the thread shares the main connection",
		       main->attach.addr, rm_transport_why(err));
		return err == -ENOMEM ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_DEVICE_UNAVAILABLE;
	}
	c->chan = chan;
	c->session_id = main->session_id;
	c->driver_version = main->driver_version;
	c->heartbeat_ms = main->heartbeat_ms;
	c->connected = 1;
	if ((err = rm_client_flusher_start(c)))
		rm_log(RM_LOG_WARN, "a thread's channel has no flusher thread (%s)", strerror(-err));
	return CUDA_SUCCESS;
}

void rm_client_conn_end(struct rm_client_conn *c)
{
	pthread_mutex_lock(&c->lock);
	rm_client_conn_stop_locked(c);
	pthread_mutex_unlock(&c->lock);
	if (c->flusher_running)
		pthread_join(c->flusher, NULL);
	c->flusher_running = 0;
	rm_copy_links_end(c->copy_links);
	pthread_mutex_lock(&c->lock); /* stopped: nobody reads or writes the link any more */
	rm_link_close(&c->link);
	c->ended = 1;
	pthread_mutex_unlock(&c->lock);
}

void rm_client_conn_close(struct rm_client_conn *c)
{
	if (!c->ended)
		rm_client_conn_end(c);
	rm_copy_links_close(c->copy_links);
	c->copy_links = NULL;
	batch_free(c);
	c->ended = 0;
}
