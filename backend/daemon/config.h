/* remorad's configuration: built-in defaults, then the configuration file, then
 * command-line flags. The file format is in docs/configuration.md. */
#ifndef REMORA_CONFIG_H
#define REMORA_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#define RM_CONFIG_MAX_TENANTS 64
#define RM_CONFIG_MAX_ENDPOINTS 8
#define RM_CONFIG_MAX_WORKERS_PER_TENANT 8

/* How tenants (clients presenting different credentials) are kept apart. */
enum rm_tenant_isolation {
	RM_ISOLATE_PROCESS, /* a worker process, with its own contexts, per tenant */
	RM_ISOLATE_SHARED,  /* every tenant in one worker: one context per GPU for all */
	RM_ISOLATE_MPS,     /* a worker per tenant, each a client of NVIDIA MPS (mps.h) */
};

struct rm_tenant_config {
	char name[64];
	char token[256];       /* in the clear or hashed (credential.h); "": certificate only */
	uint64_t memory_limit; /* device bytes for all its clients together; 0: the default */
	uint64_t client_memory_limit; /* per client of this tenant; 0: the default */
	int kernel_time_limit_s; /* a kernel running longer recycles the worker (kernel_watch.h);
				  * 0: the default */
	int compute_share;     /* percent of each GPU's SMs its worker may use (tenant_isolation = mps); 0: all */
	int priority;          /* MPS client priority of its worker: 0 normal, 1 below normal */
	int retired;           /* gone from the file at a reload: admits no one, its clients go on */
};

struct rm_daemon_config {
	char listen[256];       /* transport address, e.g. tcp://0.0.0.0:7700 */
	char driver[512];       /* the driver library dlopened */
	char nccl_library[512]; /* the NCCL a worker dlopens at its first NCCL call (backend/worker/nccl_comms.h) */
	int nccl_timeout_s;     /* how long an NCCL call may wait for its peers before its communicator is aborted */
	int nccl_twins;         /* collectives on a blocking twin of each communicator (nccl_comms.h) */
	char ready_file[512];   /* written with the bound address once listening; "" for none */
	char user[64];          /* run as this user once listening (privileges.h); "": as started */

	int max_clients_per_gpu;      /* 0: no limit */
	uint64_t client_memory_limit; /* device bytes per client; 0: no limit */
	uint64_t tenant_memory_limit; /* device bytes per tenant unless its section says; 0: no limit */
	int kernel_time_limit_s;      /* seconds a kernel may run unless its tenant says; 0: no limit */
	enum rm_tenant_isolation isolation;
	int workers_per_tenant;       /* worker processes a tenant's clients are placed among (1..8) */
	char mps_control[512];        /* tenant_isolation = mps: the MPS control program */
	char mps_directory[512];      /* ... its pipe and log directories' parent; "": a fresh one in /tmp */
	char module_loading[16];      /* when workers load code: "context" (default), "eager" or "lazy" */
	int hardware_queues;          /* CUDA_DEVICE_MAX_CONNECTIONS for workers, 1..32; 0: 32, or 2 under MPS */
	int queue_sharing_wait;       /* queue_sharing = wait (1, default) | direct (0): stream_pool.h */
	int queue_idle_after;         /* seconds after its last call a client stream stops counting as in use */
	int gpu_wait_spin_us;         /* how long a stream wait watches a word the GPU writes, µs; -1: 60 on 4+ CPUs, else 0 */
	char gpu_sync[16];            /* how the daemon's threads wait in the driver: auto (default), spin, yield, block */
	uint64_t gpu_malloc_heap;     /* bytes of device malloc heap a worker's shared context is made with; 0: the driver's */
	int allow_anonymous;          /* serve clients presenting no credential, as tenant "anonymous" (default no) */
	int compress_copies;          /* take and send copies' bytes compressed where clients ask (default yes) */
	int migratable_memory;        /* cuMemAlloc from this worker's own address window (memory_window.h; default no) */
	char admin_token[256];        /* the operator's credential: sees every tenant's clients; "": none */
	char admin_cn[64];            /* ... or a client certificate of this common name */
	/* TLS (docs/security.md): a tls:// listen address needs tls_cert and tls_key; with
	 * tls_client_ca every client presents a certificate signed by it. */
	char tls_cert[512], tls_key[512], tls_client_ca[512];
	uint64_t worker_host_memory_limit; /* host bytes a worker holds for its clients: images being
					    * received, staging buffers (host_memory.h); 0: no limit */
	uint64_t client_host_memory_limit; /* ... and one client of it (host_memory.h); 0: no limit */
	struct rm_tenant_config anonymous;
	struct rm_tenant_config tenants[RM_CONFIG_MAX_TENANTS];
	int ntenants;

	/* Pool membership (docs/pool.md); no endpoints: no pool. */
	char pool_endpoints[RM_CONFIG_MAX_ENDPOINTS][256];
	int npool_endpoints;
	char advertise[256];  /* the address clients are told to use; "" derives it from listen */
	char host_name[128];  /* the member's name in the pool; "" uses the host name */
	int lease_ttl_s;
	/* A secured etcd (docs/pool.md): pool_ca verifies its certificate, pool_cert and
	 * pool_key are this daemon's, pool_user is one of etcd's users whose password is
	 * the first line of pool_password_file (read when the registration starts). */
	char pool_ca[512], pool_cert[512], pool_key[512], pool_user[128], pool_password_file[512];

	/* Before the hello (handshakes.h), and stopping (docs/configuration.md, Signals). */
	int hello_timeout_s;                /* a connection that has not said hello by then is closed */
	int max_pending_hellos;             /* connections waiting for their hello, in all */
	int max_pending_hellos_per_address; /* ... from one peer address */
	int shutdown_grace_s;               /* on SIGTERM, how long workers get before SIGKILL */

	int peer_timeout_s;   /* a client silent this long is taken for gone (docs/protocol.md) */
	int max_channels;     /* client threads' channels per session (docs/protocol.md); 0: none */
	uint64_t shared_pinned_limit; /* bytes of pinned memory a session may share (docs/hotpath.md); 0: none */
	uint64_t shm_ring_max; /* the largest ring a unix: client may make (transport/shm/shm.h) */

	/* Operations (docs/operations.md). */
	char host_nvml[512];      /* the host's NVML library, for utilization, temperature, power; "": none */
	char metrics_listen[256]; /* where Prometheus scrapes /metrics, "host:port"; "": no metrics */
	int kernel_timing;        /* bracket each launch with events for its client's GPU time */
	int launch_replay;        /* make repeated runs of launches as graphs (launch_replay.h) */
};

/* Fills c with the built-in defaults. */
void rm_config_defaults(struct rm_daemon_config *c);
/* Reads a configuration file over c; returns 0, or -1 after logging file:line and why. */
int rm_config_load(struct rm_daemon_config *c, const char *path);
/* Applies one "key = value" setting (the file's syntax, also used for flags); 0 or -1. */
int rm_config_set(struct rm_daemon_config *c, const char *key, const char *value, char *why, int whylen);
/* What a whole configuration must hold together (after the file and the flags): 0, or -1
 * with why filled. */
int rm_config_check(const struct rm_daemon_config *c, char *why, int whylen);
/* The stored credential a presented token is checked against (credential.h): the tenant
 * (its index) or the admin whose stored credential carries the token's id; else
 * RM_CREDENTIAL_OTHER: the token is checked against every stored credential without an
 * id (none once every one has one). Cheap: nothing is verified, nothing secret compared. */
#define RM_CREDENTIAL_ADMIN (-2)
#define RM_CREDENTIAL_OTHER (-1)
int rm_config_credential_key(const struct rm_daemon_config *c, const void *token, size_t len);
/* Verifies token (len > 0) against what key names: the tenant's index or
 * RM_CREDENTIAL_ADMIN when it matches, else -1 (RM_CREDENTIAL_OTHER: against every stored
 * credential without an id, all tried whatever matched). */
int rm_config_verify(const struct rm_daemon_config *c, int key, const void *token, size_t len);
/* How many stored credentials are hashes without a token id (each costs one hash for every
 * token presented without a known id: docs/security.md says how to give them one). */
int rm_config_hashes_without_id(const struct rm_daemon_config *c);
/* The tenant presenting token, or NULL; a zero-length token is the anonymous tenant (NULL
 * unless allow_anonymous). Tokens are compared in full, in constant time. */
const struct rm_tenant_config *rm_config_tenant(const struct rm_daemon_config *c, const void *token,
						size_t len);
/* The tenant a verified client certificate's common name names (the tenant's name), or NULL. */
const struct rm_tenant_config *rm_config_tenant_by_cn(const struct rm_daemon_config *c, const char *cn);
/* Whether token, or else a verified certificate's common name cn (NULL for none), is the
 * admin credential. */
int rm_config_is_admin(const struct rm_daemon_config *c, const void *token, size_t len, const char *cn);
/* Forgets every credential (a worker needs none: the accepting process checks them). */
void rm_config_drop_credentials(struct rm_daemon_config *c);

#endif
