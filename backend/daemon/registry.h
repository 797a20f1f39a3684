/* The daemon's registry: its GPUs, its clients and what they use, in memory shared by
 * the accepting process and its workers (docs/sharing.md). The accepting process admits
 * clients into slots; the worker serving a client keeps its slot's figures current and
 * frees the slot when the client leaves; the accepting process frees the slots of a
 * worker that died. Readers (status, pool registration) take snapshots. */
#ifndef REMORA_REGISTRY_H
#define REMORA_REGISTRY_H

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>

#include "config.h"

#define RM_MAX_GPUS 64
#define RM_MAX_CLIENTS 1024
#define RM_HISTORY 128 /* clients that left, kept for accounting (the newest) */
#define RM_MAX_RETIRED_WORKERS 64 /* faulted workers that still serve their clients */
/* A record for every worker that can be running: a tenant's (workers_per_tenant), the
 * anonymous one's, the retired ones. */
#define RM_MAX_WORKER_RECORDS ((RM_CONFIG_MAX_TENANTS + 1) * RM_CONFIG_MAX_WORKERS_PER_TENANT + RM_MAX_RETIRED_WORKERS)

/* Kinds of calls, for accounting (rm_call_kind). */
enum rm_call_kind {
	RM_CALL_LAUNCH, RM_CALL_COPY, RM_CALL_MEMORY, RM_CALL_SYNC, RM_CALL_MODULE, RM_CALL_STREAM,
	RM_CALL_QUERY, RM_CALL_OTHER, RM_CALL_KINDS
};
extern const char *const rm_call_kind_names[RM_CALL_KINDS];
/* The kind of a call with opcode op (proto/api.spec's, or a reserved one). */
enum rm_call_kind rm_call_kind(uint32_t op);

/* What a client used (docs/operations.md, Accounting). The counters only grow; the worker
 * serving the client adds to them without the lock (relaxed atomics: each is exact, a
 * snapshot of several may be a call apart). */
struct rm_usage {
	uint64_t calls[RM_CALL_KINDS];
	uint64_t errors;         /* calls that returned other than CUDA_SUCCESS */
	uint64_t bytes_htod;     /* copied host to device */
	uint64_t bytes_dtoh;
	uint64_t gpu_ns;         /* kernel time, measured with events on its streams */
	uint64_t queue_wait_ns;  /* calls held because a hardware queue was shared (stream_pool.h) */
	uint64_t peak_mem_bytes; /* the most device memory it held at once (under the lock) */
};

/* Adds n to a usage counter of the registry (any process, no lock). */
static inline void rm_usage_add(uint64_t *counter, uint64_t n)
{
	__atomic_fetch_add(counter, n, __ATOMIC_RELAXED);
}
/* into += what, counter by counter; the peak is the larger. */
void rm_usage_merge(struct rm_usage *into, const struct rm_usage *what);

struct rm_gpu_record {
	char name[128];
	char uuid[48];         /* GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx */
	uint64_t total_bytes;
	uint64_t free_bytes;   /* as a worker last saw it; total_bytes before any has */
	int clients;           /* admitted clients that may use this GPU */
};

struct rm_client_record {
	int in_use;
	pid_t worker;          /* the worker process serving it; 0 until handed over */
	uint64_t session_id;
	int tenant;            /* index into the configuration's tenants; -1: anonymous */
	char name[64];         /* the program's name, from its hello */
	char peer[64];
	uint32_t pid;          /* the program's pid on its own host */
	uint64_t devices;      /* bit i: the client may use GPU i */
	uint64_t mem_bytes;    /* device memory it holds now */
	int64_t since;         /* when it connected, seconds since the epoch */
	struct rm_usage usage;
};

/* A client that left, for accounting. */
struct rm_client_history {
	uint64_t session_id;
	int tenant;
	char name[64];
	uint32_t pid;
	int64_t since, until;  /* seconds since the epoch */
	struct rm_usage usage;
};

struct rm_tenant_usage {
	uint64_t mem_bytes;    /* device memory all its clients hold */
	int clients;
	/* Its quotas as the accepting process last read them (at start and at each SIGHUP),
	 * defaults resolved; 0: none. Charges are checked against them. */
	uint64_t memory_limit;        /* all its clients together */
	uint64_t client_memory_limit; /* each of its clients */
	uint64_t sessions;     /* clients ever admitted */
	uint64_t peak_mem_bytes; /* the most its clients held at once */
	struct rm_usage departed; /* what clients that left used, in all */
};

struct rm_registry {
	pthread_mutex_t lock;  /* process-shared and robust */
	int ngpus;
	int draining;          /* no new clients while set */
	uint64_t next_session_id;
	uint64_t daemon_id;    /* random at start: names this remorad in IPC tokens (backend/worker/ipc.c) */
	struct rm_gpu_record gpus[RM_MAX_GPUS];
	struct rm_tenant_usage tenants[RM_CONFIG_MAX_TENANTS + 1]; /* the last one is anonymous */
	struct rm_client_record clients[RM_MAX_CLIENTS];
	struct rm_client_history history[RM_HISTORY]; /* a ring: the oldest overwritten */
	uint64_t history_count; /* clients that ever left; history[(count-1) % RM_HISTORY] the last */
	/* What the accepting process needs to know of a worker before it hands the worker a
	 * client: a sticky error broke its contexts (fault.h: the client goes to a fresh worker),
	 * or clients that left still have work running in it. worker 0: a free entry. */
	struct rm_worker_record {
		pid_t worker;
		int fault;    /* the sticky error; 0: none */
		int draining; /* departed clients whose work is still being waited for */
	} worker_records[RM_MAX_WORKER_RECORDS];
};

/* Creates the registry in new shared memory; returns its descriptor (for workers), or -errno. */
int rm_registry_create(void);
/* Maps the registry a parent created (a worker's start). */
int rm_registry_attach(int fd);
struct rm_registry *rm_registry(void);

void rm_registry_lock(void);
void rm_registry_unlock(void);

/* Index into rm_registry()->tenants of configuration tenant t (-1: anonymous). */
int rm_registry_tenant_slot(int t);

/* Takes a free client slot for a new client of tenant t using the GPUs in mask devices,
 * unless a GPU of it already has max_per_gpu clients (0: no limit) or the daemon is
 * draining. Returns the slot, or -1 with why filled in. */
int rm_registry_admit(int tenant, uint64_t devices, int max_per_gpu, char *why, size_t whylen);
/* Frees a client's slot. */
void rm_registry_leave(int slot);
/* Frees slot if it still holds session session_id (else it was freed already, and may
 * be another client's by now); its admission place and charges go with it. */
void rm_registry_leave_session(int slot, uint64_t session_id);
/* How many admitted clients worker serves. */
int rm_registry_worker_clients(pid_t worker);
/* Frees every slot worker served (it died), and its record; returns how many. */
int rm_registry_reap_worker(pid_t worker);
/* Marks worker as faulted with error (the worker itself; fault.h). Where every record is
 * taken the last one is overwritten: a faulted worker is never left unmarked, since it can
 * never serve a new client. */
void rm_registry_mark_faulted(pid_t worker, int error);
/* Counts a client of worker that has left while its work is waited for (+1), and its end
 * (-1): until then a fault of that work may still break the worker (worker.c). */
void rm_registry_worker_draining(pid_t worker, int delta);
/* worker's record: its sticky error (0: none) and its departing clients still draining. */
void rm_registry_worker_state(pid_t worker, int *fault, int *draining);

/* Sets tenant t's quotas (0: none), for charges from now on. */
void rm_registry_set_limits(int t, uint64_t memory_limit, uint64_t client_memory_limit);
/* Charges bytes of device memory to session session_id in slot and its tenant unless that
 * passes the tenant's quotas; returns 0, or -1 (nothing charged; also when the slot no
 * longer holds that session), with the quotas in force in *client_limit and *tenant_limit.
 * Uncharging a slot the session has left does nothing: its charges went when it left. */
int rm_registry_charge(int slot, uint64_t session_id, uint64_t bytes, uint64_t *client_limit, uint64_t *tenant_limit);
void rm_registry_uncharge(int slot, uint64_t session_id, uint64_t bytes);
/* Adds ns of kernel time to session session_id's usage, unless slot holds another by now. */
void rm_registry_add_gpu_time(int slot, uint64_t session_id, uint64_t ns);
/* The quotas of slot's tenant, its client's and its tenant's usage (one snapshot). */
void rm_registry_usage(int slot, uint64_t *client_limit, uint64_t *tenant_limit, uint64_t *client_bytes,
		       uint64_t *tenant_bytes);

#endif
