/* tenant_isolation = mps: every tenant's worker is a client of an NVIDIA MPS control daemon
 * that remorad starts with pipe and log directories of its own and supervises
 * (docs/sharing.md, "Isolation modes"). Tenants' workers then run concurrently on each GPU,
 * each in an address space of its own, within its tenant's compute share and memory limit. */
#ifndef REMORA_MPS_H
#define REMORA_MPS_H

#include <sys/types.h>

#include "config.h"

/* Starts the control daemon (the configuration's mps_control) in foreground mode, its
 * pipe directory and log directory under mps_directory, unless it runs: called before each
 * worker starts, so one that ended is started again. 0, or -errno with a logged line. */
int rm_mps_ensure(void);

/* Whether pid was the control daemon (it has been reaped: rm_mps_ensure starts another). */
int rm_mps_reaped(pid_t pid);

/* The environment entries a worker of tenant t (NULL: anonymous) is started with, each
 * "NAME=value", written into env[0..cap) as pointers into buf; returns how many, or -1 when
 * they do not fit. Entries: the pipe and log directories, the tenant's compute share
 * (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE), priority (CUDA_MPS_CLIENT_PRIORITY) and device
 * memory limit on every GPU (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT). */
int rm_mps_worker_env(const struct rm_tenant_config *t, int ngpus, char **env, int cap, char *buf, size_t buflen);

/* Asks the control daemon to quit (which ends its servers once their clients are gone),
 * waits for it at most timeout_s, then kills it. */
void rm_mps_stop(int timeout_s);

#endif
