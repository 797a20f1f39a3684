/* The accepting process's workers (docs/sharing.md): one per tenant, or one for all when
 * isolation is shared, started on a tenant's first client; a worker that faulted is
 * retired and a fresh one takes the tenant's new clients (fault.h); a worker that dies
 * takes only its own clients with it. */
#ifndef REMORA_SUPERVISOR_H
#define REMORA_SUPERVISOR_H

#include <sys/types.h>

#include "server.h"

/* Workers run self_exe with argv, --worker-channel and --config-fd added. Starts the
 * thread that reaps them. 0, or -errno. */
int rm_workers_start(const char *self_exe, char **argv);
/* Hands an admitted client (h) to its tenant's worker, starting a fresh one where there is
 * none or it faulted; its registry record then names the worker. 0, or -ESHUTDOWN (the
 * daemon is stopping), -EAGAIN (every place for a retired worker taken), -errno. */
int rm_workers_admit(struct rm_conn *conn, struct rm_handoff *h, const char *tenant_name);
/* Hands a copy link's or channel's attach (h) to worker pid: 0, or -ESRCH (no such
 * worker), -ESHUTDOWN, -errno. */
int rm_workers_attach(pid_t pid, struct rm_conn *conn, struct rm_handoff *h);
/* Asks every worker to end, gives them shutdown_grace seconds, then kills the rest;
 * no worker starts and no client is handed over from now on. */
void rm_workers_stop(void);

#endif
