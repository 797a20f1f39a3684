/* Administrative requests on the client port (docs/pool.md): a connection whose first
 * frame is not a hello but RM_OP_STATUS gets one answer and is closed. */
#ifndef REMORA_ADMIN_H
#define REMORA_ADMIN_H

#include "config.h"
#include "link.h"

/* Answers the RM_OP_STATUS frame f (its header read, its message not yet) on l with a
 * remora.StatusReply snapshot of the registry. The caller closes l. Returns 0 or -errno. */
int rm_admin_answer_status(struct rm_link *l, const struct rm_frame *f, const struct rm_daemon_config *cfg);

#endif
