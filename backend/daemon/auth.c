/* Credentials, certificates and failures (auth.h). One lock guards the address table,
 * the budgets and the count of verifications running; one condition, on the monotonic
 * clock, wakes whoever waits for any of them. A check takes, in this order and releasing
 * in reverse: its address entry (a use count that keeps it from being reused), its pair's
 * turn, a token of its credential's budget, its address's turn, a verification slot. */
#include "auth.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "credential.h"
#include "handshakes.h"
#include "log.h"

#define AUTH_DELAY_MIN_MS 100
#define AUTH_DELAY_MAX_MS 3000
#define AUTH_FORGET_S 300        /* a pair quiet this long starts again from nothing */
#define ADDRESS_DECAY_MS 30000   /* an address's failures are forgotten one per this */
#define PAIRS 8                  /* credentials remembered per address; a new one takes the stalest */
#define PROBE 64                 /* table slots an address may take, from its hash on */
#define WAIT_MAX_MS 4000         /* the longest a check waits its turn; within the hello's deadline */
#define VERIFY_SLOTS 2           /* verifications (PBKDF2) at once in the whole process */
#define BUDGET_BURST 32          /* failed checks of one credential, from all addresses... */
#define BUDGET_PER_S 8           /* ... and how many more each second */
#define KEYS (RM_CONFIG_MAX_TENANTS + 2) /* every tenant's credential, the admin's, any other */

struct pair {
	uint64_t key; /* a keyed hash of the presented credential (never the credential); 0: free */
	int busy;
	uint32_t fails;
	uint64_t until_ms, last_ms;
};

struct address {
	char name[64]; /* the peer's host without its port, or local.uidN; "": free */
	int users;     /* checks holding or waiting for it: it is not reused meanwhile */
	int busy;
	uint32_t fails; /* recent failures of any credential, one forgotten each ADDRESS_DECAY_MS */
	uint64_t until_ms, last_ms;
	struct pair pairs[PAIRS];
};

struct budget {
	double tokens;
	uint64_t last_ms;
};

static struct address table[RM_AUTH_ADDRESSES];
static struct address overflow = {.name = "(addresses beyond the table)"};
static struct budget budgets[KEYS];
static int verifying;
static int healthy_waiting; /* checks of credentials with few recent failures waiting for a slot */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static uint32_t seed; /* of the table's hash: where an address lands is not the peer's choice */
static uint64_t pair_seed; /* of a credential's pair key: the key says nothing without it */

static uint64_t now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

static uint64_t now_ms_raw(void)
{
	struct timespec t;
	clock_gettime(CLOCK_REALTIME, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* The pair key of a presented credential: a keyed hash (FNV-1a over the seed and the
 * bytes, then mixed), never 0; the credential itself is not kept. */
static uint64_t pair_key(const void *bytes, size_t len)
{
	uint64_t h = 14695981039346656037ull;
	for (int i = 0; i < 8; i++)
		h = (h ^ (uint8_t)(pair_seed >> (8 * i))) * 1099511628211ull;
	for (size_t i = 0; i < len; i++)
		h = (h ^ ((const uint8_t *)bytes)[i]) * 1099511628211ull;
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdull;
	h ^= h >> 33;
	return h ? h : 1;
}

static void init_once(void)
{
	if (getrandom(&seed, sizeof(seed), GRND_NONBLOCK) != sizeof(seed))
		seed = (uint32_t)time(NULL) ^ (uint32_t)getpid();
	if (getrandom(&pair_seed, sizeof(pair_seed), GRND_NONBLOCK) != sizeof(pair_seed))
		pair_seed = ((uint64_t)seed << 32) ^ (uint64_t)now_ms_raw();
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&changed, &ca);
	pthread_condattr_destroy(&ca);
	for (int i = 0; i < KEYS; i++)
		budgets[i].tokens = BUDGET_BURST;
}


/* Waits for a change until ms (monotonic); under lock. */
static void wait_until(uint64_t ms)
{
	struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
	pthread_cond_timedwait(&changed, &lock, &ts);
}

static uint64_t delay_ms(uint32_t fails)
{
	uint64_t d = (uint64_t)AUTH_DELAY_MIN_MS << (fails - 1 < 5 ? fails - 1 : 5);
	return d > AUTH_DELAY_MAX_MS ? AUTH_DELAY_MAX_MS : d;
}

/* The address entries and budgets count credentials by slot: a tenant's index, then the
 * admin's, then every other. */
static int key_slot(int key)
{
	return key >= 0 ? key : key == RM_CREDENTIAL_ADMIN ? RM_CONFIG_MAX_TENANTS : RM_CONFIG_MAX_TENANTS + 1;
}

/* The address a credential is counted against: a Unix-socket peer's user (the transport
 * names it local.uidN:PID), else the host of "host:port" or "[v6]:port". */
static void address_of(struct rm_conn *conn, char *out, size_t cap)
{
	const char *peer = rm_conn_peer(conn), *colon = strrchr(peer, ':');
	size_t n = colon ? (size_t)(colon - peer) : strlen(peer);
	snprintf(out, cap, "%.*s", (int)n, peer);
}

static void decay(struct address *a, uint64_t now)
{
	uint64_t n = (now - a->last_ms) / ADDRESS_DECAY_MS;
	if (!n)
		return;
	a->fails = n >= a->fails ? 0 : a->fails - (uint32_t)n;
	a->last_ms += n * ADDRESS_DECAY_MS;
}

static int pair_live(const struct pair *p, uint64_t now)
{
	return p->key && (p->busy || (p->fails && now - p->last_ms < AUTH_FORGET_S * 1000ull));
}

/* Whether a holds nothing to remember: no check, no failure still counted. */
static int address_idle(struct address *a, uint64_t now)
{
	if (a->users || a->busy)
		return 0;
	decay(a, now);
	if (a->fails || a->until_ms > now)
		return 0;
	for (int i = 0; i < PAIRS; i++)
		if (pair_live(&a->pairs[i], now))
			return 0;
	return 1;
}

static uint32_t hash_of(const char *s)
{
	uint32_t h = 2166136261u ^ seed;
	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 16777619u;
	return h;
}

/* The entry of name, taken (users + 1): its own, a free or idle one of its probe window,
 * else the overflow entry that every address without room shares. Under lock. */
static struct address *address_take(const char *name, uint64_t now)
{
	uint32_t h = hash_of(name);
	struct address *room = NULL;
	for (uint32_t i = 0; i < PROBE; i++) {
		struct address *a = &table[(h + i) % RM_AUTH_ADDRESSES];
		if (a->name[0] && !strcmp(a->name, name)) {
			a->users++;
			return a;
		}
		if (!room && (!a->name[0] || address_idle(a, now)))
			room = a;
	}
	if (!room)
		room = &overflow;
	else {
		memset(room, 0, sizeof(*room));
		snprintf(room->name, sizeof(room->name), "%s", name);
		room->last_ms = now;
	}
	room->users++;
	return room;
}

static void address_put(struct address *a, uint64_t now)
{
	a->users--;
	if (a != &overflow && address_idle(a, now))
		a->name[0] = 0;
}

/* The pair of the credential key at a: its own, a free or forgotten one, else the one
 * not in a check that failed longest ago (its failures are dropped: a credential's
 * failures never slow another's; the address's bound still counts them), else, all in
 * checks, the last, shared. Under lock. */
static struct pair *pair_of(struct address *a, uint64_t key, uint64_t now)
{
	struct pair *room = NULL, *stalest = NULL;
	for (int i = 0; i < PAIRS; i++)
		if (a->pairs[i].key == key)
			return &a->pairs[i];
	for (int i = 0; i < PAIRS && !room; i++)
		if (!pair_live(&a->pairs[i], now))
			room = &a->pairs[i];
	for (int i = 0; i < PAIRS && !room; i++)
		if (!a->pairs[i].busy && (!stalest || a->pairs[i].last_ms < stalest->last_ms))
			stalest = &a->pairs[i];
	if (!room)
		room = stalest;
	if (!room)
		return &a->pairs[PAIRS - 1];
	memset(room, 0, sizeof(*room));
	room->key = key;
	return room;
}

static void refill(struct budget *b, uint64_t now)
{
	b->tokens += (double)(now - b->last_ms) * BUDGET_PER_S / 1000.0;
	if (b->tokens > BUDGET_BURST)
		b->tokens = BUDGET_BURST;
	b->last_ms = now;
}

/* One check's place: what it holds, released in reverse. */
struct turn {
	struct address *a;
	struct pair *p;
	uint64_t key; /* the pair's (pair_key) */
	int slot;
	int pair, budget, address, verifying; /* what it holds */
	int healthy_waiting; /* it is counted in healthy_waiting */
};

/* Waits for the check's turn (auth.h), at most until deadline: 0, or -1 with why said. */
static int take_turn(struct turn *t, const char *name, uint64_t key, int slot, uint64_t deadline, char *why,
		     size_t whylen)
{
	pthread_mutex_lock(&lock);
	uint64_t now = now_ms();
	*t = (struct turn){.a = address_take(name, now), .key = key, .slot = slot};
	struct address *a = t->a;
	/* The pair: one check at a time, after its back-off. */
	while ((t->p = pair_of(a, key, now))->busy) {
		if (now >= deadline)
			goto busy;
		wait_until(deadline);
		now = now_ms();
	}
	t->p->busy = 1;
	t->pair = 1;
	while (now < t->p->until_ms) {
		if (t->p->until_ms > deadline)
			goto slowed;
		wait_until(t->p->until_ms);
		now = now_ms();
	}
	/* The credential's budget of failures, across all addresses: a token taken now (in
	 * advance of the refill, waiting for it in turn; refused at once when the turn comes
	 * past the deadline), given back unless the check fails. */
	struct budget *b = &budgets[slot];
	refill(b, now);
	uint64_t ready = b->tokens >= 1 ? now : now + (uint64_t)((1 - b->tokens) * 1000 / BUDGET_PER_S) + 1;
	if (ready > deadline)
		goto busy;
	b->tokens -= 1;
	t->budget = 1;
	while (now < ready) {
		wait_until(ready);
		now = now_ms();
	}
	/* The address: one verification at a time, after its own back-off. Not for the entry
	 * addresses beyond the table share: an honest newcomer would wait behind, and be slowed
	 * down for, the failures of thousands of others; the pair's and the credential's bounds
	 * still hold there. */
	while (a->busy && a != &overflow) {
		if (now >= deadline)
			goto busy;
		wait_until(deadline);
		now = now_ms();
	}
	a->busy = a != &overflow;
	t->address = 1;
	decay(a, now);
	while (now < a->until_ms && a != &overflow) {
		if (a->until_ms > deadline)
			goto slowed;
		wait_until(a->until_ms);
		now = now_ms();
	}
	/* A verification slot in the whole process. A credential with few recent failures (at
	 * least half its budget left) goes before every one under attack: guesses of other
	 * credentials cannot keep its clients out. */
	int healthy = b->tokens >= BUDGET_BURST / 2;
	if (healthy) {
		healthy_waiting++;
		t->healthy_waiting = 1;
	}
	while (verifying >= VERIFY_SLOTS || (!healthy && healthy_waiting)) {
		if (now >= deadline)
			goto busy;
		wait_until(deadline);
		now = now_ms();
	}
	if (healthy) {
		healthy_waiting--;
		t->healthy_waiting = 0;
	}
	verifying++;
	t->verifying = 1;
	pthread_mutex_unlock(&lock);
	return 0;
busy:
	if (t->healthy_waiting) {
		healthy_waiting--;
		t->healthy_waiting = 0;
		pthread_cond_broadcast(&changed);
	}
	snprintf(why, whylen, "too many credential checks waiting (from %s, or for this credential); try again later",
		 name);
	pthread_mutex_unlock(&lock);
	return -1;
slowed:
	snprintf(why, whylen, "credentials from %s are being slowed down after failures; try again in a few seconds",
		 name);
	pthread_mutex_unlock(&lock);
	return -1;
}

enum outcome { NEITHER, SUCCEEDED, FAILED };

/* Ends the check of t: releases what it holds and counts its outcome; the pair's and the
 * address's failures since go to *pair_fails and *address_fails (for the log line). */
static void end_turn(struct turn *t, enum outcome o, uint32_t *pair_fails, uint32_t *address_fails)
{
	pthread_mutex_lock(&lock);
	uint64_t now = now_ms();
	struct address *a = t->a;
	struct pair *p = t->pair ? t->p : NULL;
	if (t->verifying)
		verifying--;
	if (t->address)
		a->busy = 0;
	if (o == SUCCEEDED) {
		if (t->budget)
			budgets[t->slot].tokens += 1;
		if (p)
			p->fails = 0, p->until_ms = 0;
	} else if (o == FAILED) {
		if (!p)
			p = pair_of(a, t->key, now);
		if (now - p->last_ms >= AUTH_FORGET_S * 1000ull)
			p->fails = 0;
		p->fails++;
		p->last_ms = now;
		p->until_ms = now + delay_ms(p->fails);
		decay(a, now);
		if (!a->fails)
			a->last_ms = now;
		a->fails++;
		if (a->fails > RM_AUTH_ADDRESS_GRACE)
			a->until_ms = now + delay_ms(a->fails - RM_AUTH_ADDRESS_GRACE);
		if (!t->budget) { /* a failure that took no turn (rm_auth_failed) spends the budget still */
			refill(&budgets[t->slot], now);
			budgets[t->slot].tokens -= 1;
		}
	} else if (t->budget) {
		budgets[t->slot].tokens += 1;
	}
	*pair_fails = p ? p->fails : 0;
	*address_fails = a->fails;
	if (t->pair)
		t->p->busy = 0;
	address_put(a, now);
	pthread_cond_broadcast(&changed);
	pthread_mutex_unlock(&lock);
}

/* The failure's log line, a few a second at most (handshakes.h). */
static void log_failure(struct rm_conn *conn, const char *name, const char *what, uint32_t pair_fails,
			uint32_t address_fails)
{
	if (rm_handshakes_log_allows(RM_REFUSAL_CREDENTIAL))
		rm_log(RM_LOG_WARN, "client %s: %s (failure %u of this credential from %s, %u of any; its next attempts "
		       "are slowed down)", rm_conn_peer(conn), what, pair_fails, name, address_fails);
}

void rm_auth_failed(struct rm_conn *conn, const char *what)
{
	char name[64];
	uint32_t pf, af;
	pthread_once(&once, init_once);
	address_of(conn, name, sizeof(name));
	pthread_mutex_lock(&lock);
	const char *cn = rm_conn_identity(conn);
	struct turn t = {.a = address_take(name, now_ms()), .key = pair_key(cn ? cn : "", cn ? strlen(cn) : 0),
			 .slot = key_slot(RM_CREDENTIAL_OTHER)};
	pthread_mutex_unlock(&lock);
	end_turn(&t, FAILED, &pf, &af);
	log_failure(conn, name, what, pf, af);
}

/* A token's check: its turn, then one verification against the stored credential its id
 * names. The tenant's index, RM_CREDENTIAL_ADMIN, or -1 with why said. */
static int check_token(const struct rm_daemon_config *cfg, struct rm_conn *conn, const void *token, size_t len,
		       char *why, size_t whylen)
{
	char name[64];
	struct turn t;
	uint32_t pf, af;
	address_of(conn, name, sizeof(name));
	int key = rm_config_credential_key(cfg, token, len);
	uint64_t wait = (uint64_t)cfg->hello_timeout_s * 800; /* the hello's deadline, less a margin */
	uint64_t deadline = now_ms() + (wait < WAIT_MAX_MS ? wait : WAIT_MAX_MS);
	if (take_turn(&t, name, pair_key(token, len), key_slot(key), deadline, why, whylen)) {
		end_turn(&t, NEITHER, &pf, &af);
		if (rm_handshakes_log_allows(RM_REFUSAL_CREDENTIAL))
			rm_log(RM_LOG_WARN, "client %s: credential not checked: %s", rm_conn_peer(conn), why);
		return -1;
	}
	unsigned long before = rm_credential_hashes_computed();
	int found = rm_config_verify(cfg, key, token, len);
	rm_log(RM_LOG_DEBUG, "client %s: credential checked, %lu hash(es) computed (%lu in all)", rm_conn_peer(conn),
	       rm_credential_hashes_computed() - before, rm_credential_hashes_computed());
	end_turn(&t, found == -1 ? FAILED : SUCCEEDED, &pf, &af);
	if (found == -1) {
		snprintf(why, whylen, "unknown credential");
		log_failure(conn, name, why, pf, af);
	}
	return found;
}

const struct rm_tenant_config *rm_auth_tenant(const struct rm_daemon_config *cfg, struct rm_conn *conn,
					      const void *token, size_t len, char *why, size_t whylen, int *admin)
{
	const char *cn = rm_conn_identity(conn);
	const struct rm_tenant_config *t = NULL;
	pthread_once(&once, init_once);
	if (admin)
		*admin = 0;
	if (len) {
		int found = check_token(cfg, conn, token, len, why, whylen);
		if (found >= 0)
			t = &cfg->tenants[found];
		else if (found == RM_CREDENTIAL_ADMIN && admin)
			*admin = 1;
		else if (found == RM_CREDENTIAL_ADMIN)
			snprintf(why, whylen, "the admin credential names no tenant: give the client a tenant's token");
	} else if (cn) {
		if (!(t = rm_config_tenant_by_cn(cfg, cn))) {
			snprintf(why, whylen, "its certificate (CN %s) names no tenant", cn);
			rm_auth_failed(conn, why);
		}
	} else if (!(t = rm_config_tenant(cfg, "", 0))) {
		snprintf(why, whylen, "this daemon needs a credential (REMORA_TOKEN or a client certificate)");
	}
	return t;
}

int rm_auth_admin_certificate(const struct rm_daemon_config *cfg, struct rm_conn *conn)
{
	return rm_config_is_admin(cfg, "", 0, rm_conn_identity(conn));
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

void rm_auth_warn_credentials(const struct rm_daemon_config *cfg)
{
	int serving = cfg->allow_anonymous;
	for (int i = 0; i < cfg->ntenants; i++)
		serving |= !cfg->tenants[i].retired;
	if (!serving)
		rm_log(RM_LOG_WARN, "WARNING: no [tenant] section and allow_anonymous = no: every client will be refused; "
		       "add a [tenant NAME] with a token from `remora hash-token`, or set allow_anonymous = yes on a "
		       "trusted network (remorad.conf(5), docs/operations.md)");
	int n = rm_config_hashes_without_id(cfg);
	if (n)
		rm_log(RM_LOG_WARN, "%d stored token hash(es) without a token id: every token presented without a known "
		       "id costs one hash for each; give each tenant a token ID.SECRET and hash it again with "
		       "`remora hash-token` (docs/security.md, Credentials)", n);
}
