/* query_cache.c - answers to fixed queries kept in the client (query_cache.h).
 *
 * A hash table of (opcode, current context, packed request) -> packed reply under one lock;
 * for a setting, (opcode, current context, packed request with the value zeroed) -> the
 * packed request that set it. It holds at most
 * MAX_ENTRIES answers; past that it starts again empty, which costs round trips, never a wrong
 * answer. A hit unpacks a fresh reply, so callers free it as they free the daemon's.
 *
 * Objects made of answers are a second hash table, of (opcode, key) -> object, under a
 * read-write lock: read for as long as a caller uses one, written to keep or forget. */
#include "query_cache.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "varint.h"

#define BUCKETS 4096
#define OBJECT_BUCKETS 1024
#define MAX_ENTRIES 65536
#define MAX_REQUEST 1024 /* bytes of packed request: larger ones are not kept */
#define MAX_KEY (sizeof(uint64_t) + MAX_REQUEST)

struct entry {
	struct entry *next;
	uint32_t op;
	uint32_t key_len, value_len;
	uint8_t *value;  /* packed reply */
	uint8_t key[];   /* packed request */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct entry *buckets[BUCKETS];
static size_t entries;
static uint64_t epochs[RM_OP_LIMIT]; /* [op]: times op's answers were forgotten (atomic) */

struct object {
	struct object *next;
	uint32_t op;
	uint64_t key, epoch; /* epoch: op's when the answers it was made of were asked for */
	void *obj;
	void (*free_obj)(void *);
};

static pthread_rwlock_t objects_lock = PTHREAD_RWLOCK_INITIALIZER;
static struct object *objects[OBJECT_BUCKETS];

static uint32_t hash(uint32_t op, const uint8_t *key, size_t len)
{
	uint32_t h = 2166136261u ^ op;
	for (size_t i = 0; i < len; i++)
		h = (h ^ key[i]) * 16777619u;
	return h % BUCKETS;
}

/* The pattern a narrowed forget matches: a varint field's tag and value, as packed. */
struct naming {
	uint8_t bytes[20];
	size_t len;
};

/* Forgets every entry match(entry, op, naming) accepts. Under lock. */
static void forget_where(int (*match)(const struct entry *, uint32_t, const struct naming *), uint32_t op,
			 const struct naming *naming)
{
	for (size_t b = 0; b < BUCKETS; b++) {
		struct entry **link = &buckets[b];
		while (*link) {
			struct entry *e = *link;
			if (match(e, op, naming)) {
				*link = e->next;
				free(e->value);
				free(e);
				entries--;
			} else {
				link = &e->next;
			}
		}
	}
}

static int of_op(const struct entry *e, uint32_t op, const struct naming *n) { return (void)n, e->op == op; }
static int any(const struct entry *e, uint32_t op, const struct naming *n) { return (void)e, (void)op, (void)n, 1; }

static size_t object_bucket(uint32_t op, uint64_t key)
{
	return (size_t)((key >> 4) ^ op) % OBJECT_BUCKETS;
}

/* Frees the objects of op, or all (op RM_OP_LIMIT); called with objects_lock written. */
static void forget_objects(uint32_t op)
{
	for (size_t b = 0; b < OBJECT_BUCKETS; b++)
		for (struct object **link = &objects[b]; *link;) {
			struct object *o = *link;
			if (op == RM_OP_LIMIT || o->op == op) {
				*link = o->next;
				o->free_obj(o->obj);
				free(o);
			} else {
				link = &o->next;
			}
		}
}

void rm_query_cache_forget(uint32_t op)
{
	pthread_mutex_lock(&lock);
	if (entries)
		forget_where(of_op, op, NULL);
	pthread_rwlock_wrlock(&objects_lock);
	if (op < RM_OP_LIMIT) {
		__atomic_add_fetch(&epochs[op], 1, __ATOMIC_RELEASE);
		forget_objects(op);
	}
	pthread_rwlock_unlock(&objects_lock);
	pthread_mutex_unlock(&lock);
}

static int names(const struct entry *e, uint32_t op, const struct naming *naming)
{
	if (e->op != op || e->key_len < sizeof(uint64_t) + naming->len)
		return 0;
	const uint8_t *req = e->key + sizeof(uint64_t);
	size_t len = e->key_len - sizeof(uint64_t);
	for (size_t i = 0; i + naming->len <= len; i++) /* a match inside another field forgets one more */
		if (req[i] == naming->bytes[0] && !memcmp(req + i, naming->bytes, naming->len))
			return 1;
	return 0;
}

void rm_query_cache_forget_naming(uint32_t op, uint32_t field, uint64_t value)
{
	if (!value || !field || field > (1u << 28)) { /* a field of value 0 is not packed at all */
		rm_query_cache_forget(op);
		return;
	}
	struct naming naming;
	naming.len = rm_varint_put(naming.bytes, (uint64_t)field << 3); /* wire type 0: a varint */
	naming.len += rm_varint_put(naming.bytes + naming.len, value);
	pthread_mutex_lock(&lock);
	if (entries)
		forget_where(names, op, &naming);
	pthread_rwlock_wrlock(&objects_lock);
	if (op < RM_OP_LIMIT) { /* objects made of op's answers are few: all made again */
		__atomic_add_fetch(&epochs[op], 1, __ATOMIC_RELEASE);
		forget_objects(op);
	}
	pthread_rwlock_unlock(&objects_lock);
	pthread_mutex_unlock(&lock);
}

void rm_query_cache_clear(void)
{
	pthread_mutex_lock(&lock);
	forget_where(any, 0, NULL);
	pthread_rwlock_wrlock(&objects_lock);
	for (uint32_t op = 0; op < RM_OP_LIMIT; op++)
		__atomic_add_fetch(&epochs[op], 1, __ATOMIC_RELEASE);
	forget_objects(RM_OP_LIMIT);
	pthread_rwlock_unlock(&objects_lock);
	pthread_mutex_unlock(&lock);
}

uint64_t rm_query_cache_epoch(uint32_t op)
{
	return op < RM_OP_LIMIT ? __atomic_load_n(&epochs[op], __ATOMIC_ACQUIRE) : 0;
}

const void *rm_query_cache_hold(uint32_t op, uint64_t key)
{
	uint64_t epoch = rm_query_cache_epoch(op);
	pthread_rwlock_rdlock(&objects_lock);
	for (struct object *o = objects[object_bucket(op, key)]; o; o = o->next)
		if (o->op == op && o->key == key && o->epoch == epoch)
			return o->obj;
	pthread_rwlock_unlock(&objects_lock);
	return NULL;
}

const void *rm_query_cache_keep(uint32_t op, uint64_t key, uint64_t epoch, void *obj, void (*free_obj)(void *))
{
	struct object *o = malloc(sizeof(*o));
	if (!o) {
		free_obj(obj);
		return NULL;
	}
	*o = (struct object){.op = op, .key = key, .epoch = epoch, .obj = obj, .free_obj = free_obj};
	size_t b = object_bucket(op, key);
	pthread_rwlock_wrlock(&objects_lock);
	for (struct object **link = &objects[b]; *link; link = &(*link)->next)
		if ((*link)->op == op && (*link)->key == key) { /* a stale one, or another thread's as fresh */
			struct object *old = *link;
			*link = old->next;
			old->free_obj(old->obj);
			free(old);
			break;
		}
	o->next = objects[b];
	objects[b] = o;
	return obj; /* held: objects_lock stays written until rm_query_cache_release */
}

void rm_query_cache_release(void)
{
	pthread_rwlock_unlock(&objects_lock);
}

/* A copy of the kept reply for (op, key), unpacked; NULL if none. */
static ProtobufCMessage *lookup(uint32_t op, const uint8_t *key, size_t len, const ProtobufCMessageDescriptor *desc,
				int *found)
{
	ProtobufCMessage *rep = NULL;
	*found = 0;
	pthread_mutex_lock(&lock);
	for (struct entry *e = buckets[hash(op, key, len)]; e; e = e->next) {
		if (e->op == op && e->key_len == len && memcmp(e->key, key, len) == 0) {
			*found = 1;
			if (desc)
				rep = protobuf_c_message_unpack(desc, NULL, e->value_len, e->value);
			break;
		}
	}
	pthread_mutex_unlock(&lock);
	return rep;
}

/* Keeps value for (op, key), in place of what was kept for it. */
static void keep(uint32_t op, const uint8_t *key, size_t len, const uint8_t *value, size_t value_len)
{
	struct entry *e = malloc(sizeof *e + len);
	uint8_t *copy = malloc(value_len ? value_len : 1);
	if (!e || !copy) {
		free(e);
		free(copy);
		return;
	}
	e->op = op;
	e->key_len = (uint32_t)len;
	e->value_len = (uint32_t)value_len;
	memcpy(e->key, key, len);
	memcpy(copy, value, value_len);
	e->value = copy;
	pthread_mutex_lock(&lock);
	if (entries >= MAX_ENTRIES)
		forget_where(any, 0, NULL);
	uint32_t b = hash(op, key, len);
	for (struct entry **link = &buckets[b]; *link; link = &(*link)->next) {
		struct entry *old = *link;
		if (old->op == op && old->key_len == len && memcmp(old->key, key, len) == 0) {
			*link = old->next;
			free(old->value);
			free(old);
			entries--;
			break;
		}
	}
	e->next = buckets[b];
	buckets[b] = e;
	entries++;
	pthread_mutex_unlock(&lock);
}

/* The key of req: the current context, then the packed request; 0 when too large. */
static size_t make_key(const ProtobufCMessage *req, uint8_t key[MAX_KEY])
{
	size_t len = protobuf_c_message_get_packed_size(req);
	if (len > MAX_REQUEST)
		return 0;
	uint64_t ctx = (uint64_t)(uintptr_t)rm_ctx_current();
	memcpy(key, &ctx, sizeof(ctx));
	protobuf_c_message_pack(req, key + sizeof(ctx));
	return sizeof(ctx) + len;
}

CUresult rm_rpc_cached(uint32_t op, const ProtobufCMessage *req, const ProtobufCMessageDescriptor *rep_desc,
		       ProtobufCMessage **rep)
{
	uint8_t key[MAX_KEY];
	size_t len = make_key(req, key);
	if (!len)
		return rm_rpc_simple(op, req, rep_desc, rep);
	int found;
	ProtobufCMessage *kept = lookup(op, key, len, rep_desc, &found);
	if (found && (kept || !rep_desc)) {
		if (rep)
			*rep = kept;
		else
			rm_rpc_free(kept);
		return CUDA_SUCCESS;
	}
	ProtobufCMessage *fresh = NULL;
	CUresult r = rm_rpc_simple(op, req, rep_desc, &fresh);
	if (r == CUDA_SUCCESS) {
		uint8_t small[256], *value = small;
		size_t value_len = fresh ? protobuf_c_message_get_packed_size(fresh) : 0;
		if (value_len > sizeof(small))
			value = malloc(value_len);
		if (value) {
			if (fresh)
				protobuf_c_message_pack(fresh, value);
			keep(op, key, len, value, value_len);
		}
		if (value != small)
			free(value);
	}
	if (rep)
		*rep = fresh;
	else
		rm_rpc_free(fresh);
	return r;
}

/* Whether (op, key) holds exactly the packed request set (a lookup's byte compare). */
static int holds(uint32_t op, const uint8_t *key, size_t len, const uint8_t *set, size_t set_len)
{
	int same = 0;
	pthread_mutex_lock(&lock);
	for (struct entry *e = buckets[hash(op, key, len)]; e; e = e->next)
		if (e->op == op && e->key_len == len && memcmp(e->key, key, len) == 0) {
			same = e->value_len == set_len && memcmp(e->value, set, set_len) == 0;
			break;
		}
	pthread_mutex_unlock(&lock);
	return same;
}

CUresult rm_rpc_setting(uint32_t op, ProtobufCMessage *req, void *value, size_t size, int *sent)
{
	uint8_t key[MAX_KEY], set[MAX_REQUEST], saved[16];
	size_t set_len = protobuf_c_message_get_packed_size(req), len = 0;
	*sent = 1;
	if (set_len <= sizeof(set) && size <= sizeof(saved)) {
		protobuf_c_message_pack(req, set);
		memcpy(saved, value, size); /* the target: the request without its value */
		memset(value, 0, size);
		len = make_key(req, key);
		memcpy(value, saved, size);
	}
	if (len && holds(op, key, len, set, set_len)) {
		*sent = 0;
		return CUDA_SUCCESS;
	}
	CUresult r = rm_rpc_simple(op, req, NULL, NULL);
	if (len && r == CUDA_SUCCESS)
		keep(op, key, len, set, set_len);
	return r;
}
