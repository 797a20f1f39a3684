/* The client object: what the client library keeps per process about its daemon, with one
 * lifecycle (client.c).
 *   open      at the first call (rm_connect_once): settings checked, a server chosen
 *             (placement.h), the main connection opened and greeted (connection.h) by the
 *             calling thread, the opener, whose calls then use it;
 *   channels  each other thread, at its first call, attaches a channel of its own to the
 *             session (channels.c), closed when the thread exits; a thread the daemon
 *             refuses one shares the main connection;
 *   close     at process exit, where that is safe (client.c, "Closing at exit"); a call
 *             after it returns CUDA_ERROR_DEINITIALIZED, as the driver's do once torn down.
 * What is per thread (its channel, its per-thread default stream bracket) is thread-local
 * beside it. */
#ifndef REMORA_FRONTEND_CLIENT_OBJECT_H
#define REMORA_FRONTEND_CLIENT_OBJECT_H

#include <pthread.h>
#include <sys/types.h>

#include "connection.h"

enum rm_client_state {
	RM_CLIENT_NEW,    /* not opened yet */
	RM_CLIENT_OPENED, /* opened once: open_result says how */
	RM_CLIENT_CLOSED, /* closed at exit */
};

/* The open channels, for fences (rpc.c), and the channel numbers in use. */
struct rm_channels {
	struct rm_client_conn *tab[RM_MAX_CHANNELS + 1]; /* [0]: the main connection once open */
	uint8_t taken[RM_MAX_CHANNELS + 1];              /* numbers in use, spare channels' too */
	int hi;                 /* the highest number ever opened (atomic); 0: none, no fences */
	int sharers;            /* threads besides the opener that share the main connection (atomic) */
	pthread_rwlock_t lock;  /* tab and taken: written by opening and closing, read by every
				 * call's fence scan while thread channels exist */
	pthread_key_t key;      /* a thread's channel, closed by the key's destructor */
	pthread_once_t key_once;
	int key_failed;
};

struct rm_client {
	struct rm_client_conn main; /* the session's connection: the opener's */
	pthread_mutex_t open_lock;  /* open, reset and close, one at a time */
	int state;                  /* enum rm_client_state (atomic) */
	CUresult open_result;       /* the open's outcome; CUDA_ERROR_DEVICE_UNAVAILABLE once main is lost */
	pthread_t opener;
	pid_t opener_pid;           /* a forked child is not the opener */
	uint64_t seq;               /* the last frame's seq (atomic): seqs are unique in the process */
	int trace;                  /* REMORA_TRACE set: every call's result logged at debug level */
	struct rm_channels channels;
};

/* The process's client. */
extern struct rm_client rm_process_client;

/* The calling thread's connection: its channel, opened at its first call, or the main
 * one. (channels.c) */
struct rm_client_conn *rm_client_thread_conn(struct rm_client *cl);
/* Whether no thread but the opener holds a channel or shares the main connection (0 too
 * while a channel opens or closes). */
int rm_channels_none(struct rm_client *cl);

#endif
