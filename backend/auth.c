/* Credentials, certificates and failures (auth.h). */
#include "auth.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

#define AUTH_DELAY_MIN_MS 100
#define AUTH_DELAY_MAX_MS 3000
#define AUTH_FORGET_S 300 /* an address quiet this long starts again from nothing */

struct failures {
	char address[64]; /* the peer's host, without its port */
	uint32_t count;
	uint64_t until_ms;  /* its next check waits until then */
	uint64_t last_ms;
};

static struct failures table[RM_AUTH_ADDRESSES];
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t log_second, log_lines, log_quiet;

static uint64_t now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

/* host of "host:port" or "[v6]:port". */
static void host_of(const char *peer, char *out, size_t cap)
{
	const char *colon = strrchr(peer, ':');
	size_t n = colon ? (size_t)(colon - peer) : strlen(peer);
	if (n >= cap)
		n = cap - 1;
	memcpy(out, peer, n);
	out[n] = 0;
}

/* The entry of address, or a new one in place of an unused or the oldest; under table_lock. */
static struct failures *entry(const char *address, int create)
{
	struct failures *oldest = &table[0];
	for (size_t i = 0; i < RM_AUTH_ADDRESSES; i++) {
		if (table[i].address[0] && !strcmp(table[i].address, address))
			return &table[i];
		if (table[i].last_ms < oldest->last_ms)
			oldest = &table[i];
	}
	if (!create)
		return NULL;
	memset(oldest, 0, sizeof(*oldest));
	snprintf(oldest->address, sizeof(oldest->address), "%s", address);
	return oldest;
}

/* Waits while conn's address is being slowed down (at most AUTH_DELAY_MAX_MS). */
static void wait_turn(struct rm_conn *conn)
{
	char address[64];
	host_of(rm_conn_peer(conn), address, sizeof(address));
	pthread_mutex_lock(&table_lock);
	struct failures *f = entry(address, 0);
	uint64_t now = now_ms(), until = f ? f->until_ms : 0;
	if (f && now - f->last_ms > AUTH_FORGET_S * 1000ull)
		memset(f, 0, sizeof(*f)), until = 0;
	pthread_mutex_unlock(&table_lock);
	if (until > now)
		usleep((useconds_t)((until - now > AUTH_DELAY_MAX_MS ? AUTH_DELAY_MAX_MS : until - now) * 1000));
}

static void succeeded(struct rm_conn *conn)
{
	char address[64];
	host_of(rm_conn_peer(conn), address, sizeof(address));
	pthread_mutex_lock(&table_lock);
	struct failures *f = entry(address, 0);
	if (f)
		memset(f, 0, sizeof(*f));
	pthread_mutex_unlock(&table_lock);
}

void rm_auth_failed(struct rm_conn *conn, const char *what)
{
	char address[64];
	host_of(rm_conn_peer(conn), address, sizeof(address));
	pthread_mutex_lock(&table_lock);
	struct failures *f = entry(address, 1);
	uint64_t now = now_ms();
	f->count++;
	f->last_ms = now;
	uint64_t delay = AUTH_DELAY_MIN_MS << (f->count - 1 < 5 ? f->count - 1 : 5);
	f->until_ms = now + (delay > AUTH_DELAY_MAX_MS ? AUTH_DELAY_MAX_MS : delay);
	uint32_t count = f->count;
	/* One line each, up to five a second; past that one line a second counts them. */
	int say = 0;
	uint64_t quiet = 0;
	if (now / 1000 != log_second) {
		quiet = log_quiet;
		log_second = now / 1000, log_lines = 0, log_quiet = 0;
	}
	if (log_lines < 5)
		log_lines++, say = 1;
	else
		log_quiet++;
	pthread_mutex_unlock(&table_lock);
	if (quiet)
		rm_log(RM_LOG_WARN, "%llu more failed credentials not logged", (unsigned long long)quiet);
	if (say)
		rm_log(RM_LOG_WARN, "client %s: %s (failure %u from %s; its next attempts are slowed down)",
		       rm_conn_peer(conn), what, count, address);
}

const struct rm_tenant_config *rm_auth_tenant(const struct rm_daemon_config *cfg, struct rm_conn *conn,
					      const void *token, size_t len, char *why, size_t whylen)
{
	const char *cn = rm_conn_identity(conn);
	const struct rm_tenant_config *t = NULL;
	wait_turn(conn);
	if (len) {
		if (!(t = rm_config_tenant(cfg, token, len)))
			snprintf(why, whylen, "unknown credential");
	} else if (cn) {
		if (!(t = rm_config_tenant_by_cn(cfg, cn)))
			snprintf(why, whylen, "its certificate (CN %s) names no tenant", cn);
	} else if (!(t = rm_config_tenant(cfg, "", 0))) {
		snprintf(why, whylen, "this daemon needs a credential (REMORA_TOKEN or a client certificate)");
	}
	if (t)
		succeeded(conn);
	else if (len || cn)
		rm_auth_failed(conn, why);
	return t;
}

int rm_auth_admin(const struct rm_daemon_config *cfg, struct rm_conn *conn, const void *token, size_t len)
{
	return rm_config_is_admin(cfg, token, len, len ? NULL : rm_conn_identity(conn));
}

void rm_auth_warn_exposure(const struct rm_daemon_config *cfg, const char *bound)
{
	int loopback = !strncmp(bound, "127.", 4) || !strncmp(bound, "[::1]", 5) || !strncmp(bound, "localhost:", 10) ||
		       !strncmp(cfg->listen, "unix:", 5); /* a Unix socket: this host only */
	if (loopback)
		return;
	int tls = !strncmp(cfg->listen, "tls://", 6);
	int credentials = !cfg->allow_anonymous;
	if (!tls)
		rm_log(RM_LOG_WARN, "WARNING: listening on %s beyond loopback WITHOUT TLS: tokens, copy-link keys and "
		       "every byte of data cross the network in the clear (docs/security.md: --tls-cert, --tls-key)", bound);
	if (!credentials)
		rm_log(RM_LOG_WARN, "WARNING: listening on %s beyond loopback WITHOUT CREDENTIALS: allow_anonymous = yes "
		       "serves anyone who can reach this port (docs/security.md)", bound);
}
