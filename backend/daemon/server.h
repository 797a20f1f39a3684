/* remorad's two halves (docs/sharing.md): the accepting process, which greets and
 * admits clients and hands each connection to the worker process of its tenant, and
 * the workers, which own the GPU contexts and serve their clients. */
#ifndef REMORA_SERVER_H
#define REMORA_SERVER_H

#include <stdint.h>

#include "config.h"
#include "transport.h"

/* The accepting process: listens, admits clients and starts workers, each running
 * self_exe with argv and --worker-channel=FD added. On SIGHUP it calls reread to read the
 * configuration again (0, or -1 after a line saying why) and applies what can change
 * while serving (docs/configuration.md, Signals). Returns -errno once the listener fails. */
int rm_server_run(const struct rm_daemon_config *cfg, const char *self_exe, char **argv,
		  int (*reread)(struct rm_daemon_config *out));

/* The accepting process's configuration in force (the last SIGHUP's, else the first). */
const struct rm_daemon_config *rm_server_config(void);

/* A worker: serves the clients the accepting process passes on channel_fd until
 * that channel closes. Returns the process's exit status. */
int rm_worker_run(const struct rm_daemon_config *cfg, int channel_fd);

/* What the accepting process passes to a worker with each client's connection. */
struct rm_handoff {
	int slot;          /* the client's registry slot */
	int tenant;        /* configuration tenant index; -1: anonymous */
	int ndevices;
	int devices[64];   /* the host GPUs it sees, in its ordinal order */
	uint32_t hello_seq; /* the hello frame's sequence number, for the reply */
	uint32_t pid;
	uint32_t heartbeat_ms; /* how often the client wants a heartbeat during a long call; 0: ours */
	char name[64];
	char tenant_name[64]; /* the tenant's name, as the accepting process knows it now */
	/* A copy link (copy_links.h) or a client thread's channel (docs/protocol.md) instead
	 * of a client: the session it is for, as the client presented it; the accepting
	 * process has checked the key, the worker checks it again. */
	int attach;
	int channel;         /* a channel, numbered link_index; else a copy link */
	uint32_t link_index;
	uint64_t session_id;
	uint8_t key[16];     /* an attach's key; for a client, its session's (attach_keys.h) */
	/* Live migration (docs/pool.md): with attach, an admin's move of session_id to
	 * migrate_to with the admin's credential, waiting up to wait_s for the client's next
	 * call; without, a client moving in (its state comes first). */
	int migrate;
	uint32_t wait_s;
	char migrate_to[128];
	uint32_t credential_len;
	uint8_t credential[256];
	/* What the transport hands over with the descriptor (transport.h export_fd). */
	uint32_t transport_state_len;
	uint8_t transport_state[RM_TRANSPORT_STATE_MAX];
};

#endif
