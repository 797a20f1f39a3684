/* Administrative requests on the client port (docs/pool.md): a connection whose first
 * frame is not a hello but RM_OP_STATUS gets one answer and is closed. */
#ifndef REMORA_ADMIN_H
#define REMORA_ADMIN_H

#include "config.h"
#include "link.h"

/* Who asks (auth.h): RM_VIEW_ALL for the admin, else the tenant whose clients it sees
 * (-1: the anonymous tenant's); RM_VIEW_NONE: refused; RM_VIEW_MALFORMED: no request. */
#define RM_VIEW_ALL (-2)
#define RM_VIEW_NONE (-3)
#define RM_VIEW_MALFORMED (-4)

/* Reads the message of the RM_OP_STATUS frame f (its header read) from l and decides,
 * by its credential or else conn's certificate, who asks under cfg. A refusal of a
 * request that named a credential is logged and slows its sender down (auth.h). */
int rm_admin_status_view(struct rm_link *l, const struct rm_frame *f, const struct rm_daemon_config *cfg);

/* Answers the RM_OP_STATUS frame f (its header and its message read: the caller decided
 * who asks) on l with a remora.StatusReply snapshot of the registry holding the clients
 * view may see. The caller closes l. Returns 0 or -errno. */
int rm_admin_answer_status(struct rm_link *l, const struct rm_frame *f, const struct rm_daemon_config *cfg,
			   int view);
/* Refuses a status request: result CUDA_ERROR_NOT_PERMITTED. */
int rm_admin_refuse_status(struct rm_link *l, const struct rm_frame *f);

#endif
