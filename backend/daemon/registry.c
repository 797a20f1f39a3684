/* The registry in shared memory (memfd), guarded by one robust process-shared mutex:
 * a worker that dies holding it leaves it consistent enough to go on, since every
 * update under the lock is a few stores. */
#include "registry.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "api_ops.h"
#include "log.h"
#include "wire.h"

static struct rm_registry *reg;

static int map(int fd)
{
	void *p = mmap(NULL, sizeof(*reg), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return -errno;
	reg = p;
	return 0;
}

int rm_registry_create(void)
{
	int fd = memfd_create("remorad-registry", 0);
	if (fd < 0)
		return -errno;
	int err = ftruncate(fd, sizeof(*reg)) ? -errno : map(fd);
	if (err) {
		close(fd);
		return err;
	}
	pthread_mutexattr_t a;
	pthread_mutexattr_init(&a);
	pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
	pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
	pthread_mutex_init(&reg->lock, &a);
	pthread_mutexattr_destroy(&a);
	reg->next_session_id = 1;
	if (getrandom(&reg->daemon_id, sizeof(reg->daemon_id), 0) != sizeof(reg->daemon_id))
		reg->daemon_id = ((uint64_t)getpid() << 32) ^ (uint64_t)time(NULL);
	return fd;
}

int rm_registry_attach(int fd) { return map(fd); }

struct rm_registry *rm_registry(void) { return reg; }

void rm_registry_lock(void)
{
	if (pthread_mutex_lock(&reg->lock) == EOWNERDEAD)
		pthread_mutex_consistent(&reg->lock);
}

void rm_registry_unlock(void) { pthread_mutex_unlock(&reg->lock); }

int rm_registry_tenant_slot(int t) { return t < 0 ? RM_CONFIG_MAX_TENANTS : t; }

int rm_registry_admit(int tenant, uint64_t devices, int max_per_gpu, char *why, size_t whylen)
{
	int slot = -1;
	rm_registry_lock();
	if (reg->draining) {
		snprintf(why, whylen, "this GPU host is draining: it takes no new clients");
		goto out;
	}
	for (int g = 0; g < reg->ngpus && max_per_gpu; g++)
		if ((devices >> g & 1) && reg->gpus[g].clients >= max_per_gpu) {
			snprintf(why, whylen, "GPU %d already serves its maximum of %d clients", g, max_per_gpu);
			goto out;
		}
	for (int i = 0; i < RM_MAX_CLIENTS && slot < 0; i++)
		if (!reg->clients[i].in_use)
			slot = i;
	if (slot < 0) {
		snprintf(why, whylen, "the daemon serves its maximum of %d clients", RM_MAX_CLIENTS);
		goto out;
	}
	struct rm_client_record *c = &reg->clients[slot];
	memset(c, 0, sizeof(*c));
	c->in_use = 1;
	c->tenant = tenant;
	c->devices = devices;
	c->session_id = reg->next_session_id++;
	c->since = (int64_t)time(NULL);
	for (int g = 0; g < reg->ngpus; g++)
		if (devices >> g & 1)
			reg->gpus[g].clients++;
	reg->tenants[rm_registry_tenant_slot(tenant)].clients++;
	reg->tenants[rm_registry_tenant_slot(tenant)].sessions++;
out:
	rm_registry_unlock();
	return slot;
}

/* Called with the lock held. */
static void leave_locked(int slot)
{
	struct rm_client_record *c = &reg->clients[slot];
	if (!c->in_use)
		return;
	for (int g = 0; g < reg->ngpus; g++)
		if ((c->devices >> g & 1) && reg->gpus[g].clients > 0)
			reg->gpus[g].clients--;
	struct rm_tenant_usage *t = &reg->tenants[rm_registry_tenant_slot(c->tenant)];
	t->clients--;
	t->mem_bytes -= c->mem_bytes < t->mem_bytes ? c->mem_bytes : t->mem_bytes;
	rm_usage_merge(&t->departed, &c->usage);
	struct rm_client_history *h = &reg->history[reg->history_count++ % RM_HISTORY];
	memset(h, 0, sizeof(*h));
	h->session_id = c->session_id;
	h->tenant = c->tenant;
	memcpy(h->name, c->name, sizeof(h->name));
	h->name[sizeof(h->name) - 1] = 0;
	h->pid = c->pid;
	h->since = c->since;
	h->until = (int64_t)time(NULL);
	h->usage = c->usage;
	memset(c, 0, sizeof(*c));
}

void rm_registry_leave(int slot)
{
	if (slot < 0 || slot >= RM_MAX_CLIENTS)
		return;
	rm_registry_lock();
	leave_locked(slot);
	rm_registry_unlock();
}

void rm_registry_leave_session(int slot, uint64_t session_id)
{
	if (slot < 0 || slot >= RM_MAX_CLIENTS)
		return;
	rm_registry_lock();
	if (reg->clients[slot].in_use && reg->clients[slot].session_id == session_id)
		leave_locked(slot);
	rm_registry_unlock();
}

int rm_registry_worker_clients(pid_t worker)
{
	int n = 0;
	rm_registry_lock();
	for (int i = 0; i < RM_MAX_CLIENTS; i++)
		n += reg->clients[i].in_use && reg->clients[i].worker == worker;
	rm_registry_unlock();
	return n;
}

int rm_registry_reap_worker(pid_t worker)
{
	int n = 0;
	rm_registry_lock();
	for (int i = 0; i < RM_MAX_CLIENTS; i++)
		if (reg->clients[i].in_use && reg->clients[i].worker == worker) {
			leave_locked(i);
			n++;
		}
	for (int i = 0; i < RM_MAX_WORKER_RECORDS; i++)
		if (reg->worker_records[i].worker == worker)
			reg->worker_records[i] = (struct rm_worker_record){0};
	rm_registry_unlock();
	return n;
}

/* worker's record, made where it has none. There is one for every worker that can run
 * (RM_MAX_WORKER_RECORDS); should they all be taken, the last is taken over. */
static struct rm_worker_record *worker_record_locked(pid_t worker)
{
	struct rm_worker_record *r = reg->worker_records, *free_one = NULL;
	for (int i = 0; i < RM_MAX_WORKER_RECORDS; i++) {
		if (r[i].worker == worker)
			return &r[i];
		if (!r[i].worker && !free_one)
			free_one = &r[i];
	}
	if (!free_one)
		free_one = &r[RM_MAX_WORKER_RECORDS - 1];
	*free_one = (struct rm_worker_record){.worker = worker};
	return free_one;
}

void rm_registry_mark_faulted(pid_t worker, int error)
{
	rm_registry_lock();
	worker_record_locked(worker)->fault = error;
	rm_registry_unlock();
}

void rm_registry_worker_draining(pid_t worker, int delta)
{
	rm_registry_lock();
	struct rm_worker_record *r = worker_record_locked(worker);
	r->draining = r->draining + delta > 0 ? r->draining + delta : 0;
	rm_registry_unlock();
}

void rm_registry_worker_state(pid_t worker, int *fault, int *draining)
{
	*fault = *draining = 0;
	rm_registry_lock();
	for (int i = 0; i < RM_MAX_WORKER_RECORDS; i++)
		if (reg->worker_records[i].worker == worker) {
			*fault = reg->worker_records[i].fault;
			*draining = reg->worker_records[i].draining;
		}
	rm_registry_unlock();
}

void rm_registry_set_limits(int t, uint64_t memory_limit, uint64_t client_memory_limit)
{
	rm_registry_lock();
	struct rm_tenant_usage *u = &reg->tenants[rm_registry_tenant_slot(t)];
	u->memory_limit = memory_limit;
	u->client_memory_limit = client_memory_limit;
	rm_registry_unlock();
}

int rm_registry_charge(int slot, uint64_t session_id, uint64_t bytes, uint64_t *client_limit, uint64_t *tenant_limit)
{
	int err = 0;
	rm_registry_lock();
	struct rm_client_record *c = &reg->clients[slot];
	struct rm_tenant_usage *t = &reg->tenants[rm_registry_tenant_slot(c->tenant)];
	uint64_t cl = t->client_memory_limit, tl = t->memory_limit;
	if (!c->in_use || c->session_id != session_id)
		err = -1;
	else if ((cl && (bytes > cl || c->mem_bytes > cl - bytes)) || (tl && (bytes > tl || t->mem_bytes > tl - bytes)))
		err = -1;
	else {
		c->mem_bytes += bytes;
		t->mem_bytes += bytes;
		if (c->mem_bytes > c->usage.peak_mem_bytes)
			c->usage.peak_mem_bytes = c->mem_bytes;
		if (t->mem_bytes > t->peak_mem_bytes)
			t->peak_mem_bytes = t->mem_bytes;
	}
	rm_registry_unlock();
	*client_limit = cl;
	*tenant_limit = tl;
	return err;
}

void rm_registry_usage(int slot, uint64_t *client_limit, uint64_t *tenant_limit, uint64_t *client_bytes,
		       uint64_t *tenant_bytes)
{
	rm_registry_lock();
	const struct rm_client_record *c = &reg->clients[slot];
	const struct rm_tenant_usage *t = &reg->tenants[rm_registry_tenant_slot(c->tenant)];
	*client_limit = t->client_memory_limit;
	*tenant_limit = t->memory_limit;
	*client_bytes = c->mem_bytes;
	*tenant_bytes = t->mem_bytes;
	rm_registry_unlock();
}

void rm_registry_uncharge(int slot, uint64_t session_id, uint64_t bytes)
{
	rm_registry_lock();
	struct rm_client_record *c = &reg->clients[slot];
	struct rm_tenant_usage *t = &reg->tenants[rm_registry_tenant_slot(c->tenant)];
	if (!c->in_use || c->session_id != session_id) {
		rm_registry_unlock();
		return;
	}
	c->mem_bytes -= bytes < c->mem_bytes ? bytes : c->mem_bytes;
	t->mem_bytes -= bytes < t->mem_bytes ? bytes : t->mem_bytes;
	rm_registry_unlock();
}

void rm_registry_add_gpu_time(int slot, uint64_t session_id, uint64_t ns)
{
	if (slot < 0 || slot >= RM_MAX_CLIENTS)
		return;
	rm_registry_lock();
	struct rm_client_record *c = &reg->clients[slot];
	if (c->in_use && c->session_id == session_id)
		rm_usage_add(&c->usage.gpu_ns, ns);
	rm_registry_unlock();
}

void rm_usage_merge(struct rm_usage *into, const struct rm_usage *what)
{
	for (int k = 0; k < RM_CALL_KINDS; k++)
		into->calls[k] += what->calls[k];
	into->errors += what->errors;
	into->bytes_htod += what->bytes_htod;
	into->bytes_dtoh += what->bytes_dtoh;
	into->gpu_ns += what->gpu_ns;
	into->queue_wait_ns += what->queue_wait_ns;
	if (what->peak_mem_bytes > into->peak_mem_bytes)
		into->peak_mem_bytes = what->peak_mem_bytes;
}

const char *const rm_call_kind_names[RM_CALL_KINDS] = {
	[RM_CALL_LAUNCH] = "launch", [RM_CALL_COPY] = "copy", [RM_CALL_MEMORY] = "memory",
	[RM_CALL_SYNC] = "sync", [RM_CALL_MODULE] = "module", [RM_CALL_STREAM] = "stream",
	[RM_CALL_QUERY] = "query", [RM_CALL_OTHER] = "other",
};

/* From the call's name: the first rule that matches. */
static enum rm_call_kind kind_of_name(const char *n)
{
	static const struct {
		const char *part;
		enum rm_call_kind kind;
	} rules[] = {
		{"Launch", RM_CALL_LAUNCH}, {"Memcpy", RM_CALL_COPY}, {"Synchronize", RM_CALL_SYNC},
		{"Query", RM_CALL_SYNC}, {"ElapsedTime", RM_CALL_SYNC}, {"Memset", RM_CALL_MEMORY},
		{"cuMem", RM_CALL_MEMORY}, {"Pointer", RM_CALL_MEMORY}, {"GetGlobal", RM_CALL_MEMORY},
		{"Module", RM_CALL_MODULE}, {"Library", RM_CALL_MODULE}, {"Kernel", RM_CALL_MODULE},
		{"Func", RM_CALL_MODULE}, {"Occupancy", RM_CALL_MODULE}, {"Stream", RM_CALL_STREAM},
		{"Event", RM_CALL_STREAM}, {"cuDevice", RM_CALL_QUERY}, {"cuCtx", RM_CALL_QUERY},
		{"cuInit", RM_CALL_QUERY},
	};
	for (size_t i = 0; i < sizeof(rules) / sizeof(rules[0]); i++)
		if (strstr(n, rules[i].part))
			return rules[i].kind;
	return RM_CALL_OTHER;
}

static uint8_t kinds[RM_OP_LIMIT];

static void make_kinds(void)
{
	for (uint32_t i = 0; i < RM_OP_LIMIT; i++)
		kinds[i] = (uint8_t)(rm_op_names[i] ? kind_of_name(rm_op_names[i]) : RM_CALL_OTHER);
}

enum rm_call_kind rm_call_kind(uint32_t op)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	if (op >= RM_OP_LIMIT)
		return op == RM_OP_DEVICE_STATE ? RM_CALL_QUERY : RM_CALL_OTHER;
	pthread_once(&once, make_kinds);
	return (enum rm_call_kind)kinds[op];
}
