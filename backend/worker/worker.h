/* A worker process's parts (server.h, rm_worker_run): the channels it serves, the loop
 * that serves one, the attaching of copy links and channels, and the watch over its GPUs. */
#ifndef REMORA_WORKER_H
#define REMORA_WORKER_H

#include "config.h"
#include "server.h"
#include "session.h"

/* The worker's configuration (rm_worker_run's). */
const struct rm_daemon_config *rm_worker_config(void);

/* The channels being served, main ones and client threads' (the heartbeat thread visits
 * each); an attach looks for a session's main one. rm_served_add: 0, or -1 (no memory). */
int rm_served_add(struct rm_channel *s);
void rm_served_remove(struct rm_channel *s);
void rm_served_each(void (*visit)(struct rm_channel *s));
/* How many channels are served. */
size_t rm_served_count(void);
/* Calls visit on the main channel of session id, under the list's lock (visit must not
 * block on the session): what visit returns, or -ESRCH where there is no such session. */
int rm_served_main(uint64_t id, int (*visit)(struct rm_channel *s, void *arg), void *arg);

/* Answers the hello the accepting process read for the client: 0, or -EPIPE. */
int rm_serve_welcome(struct rm_channel *s, uint32_t seq);
/* Reads the channel's frames and runs its calls, in order, until it closes. */
void rm_serve(struct rm_channel *s);

/* Makes conn the copy link or channel of the session h names, if it presents that
 * session's key; answers the Attach either way. Takes conn. */
void rm_attach(struct rm_conn *conn, const struct rm_handoff *h);

/* Starts the thread that watches the worker's GPUs (faults, free memory) and its clients'
 * kernels against kernel_time_limit. */
int rm_gpu_watch_start(void);
/* A faulted worker whose clients have all left does not exit: for a program that runs a
 * worker in its own process and resets the driver after a fault itself (the request fuzz
 * target, tests/fuzz/fuzz_request.c, which runs every input in one process). Before
 * rm_worker_run. */
void rm_gpu_watch_keep_faulted(void);

#endif
