/* Admission (docs/security.md): a new connection's first frame, read on a thread of its
 * own within the handshake's bounds (handshakes.h). A hello is checked (protocol,
 * credential, devices, the registry's room) and the client handed to its tenant's worker
 * (supervisor.h), or refused with a reason; a copy link's or channel's attach is checked
 * against its session's key and handed to the session's worker; a status request is
 * answered here (admin.h). */
#ifndef REMORA_ADMISSION_H
#define REMORA_ADMISSION_H

#include "handshakes.h"
#include "transport.h"

/* Greets conn, whose handshake hs has begun, on a detached thread that owns both from
 * now on. 0, or -errno: then the caller still owns them. The new thread starts with the
 * caller's signal mask. */
int rm_admission_begin(struct rm_conn *conn, struct rm_handshake *hs);

#endif
