/* The attach keys of the sessions the daemon serves, kept by the accepting process
 * alone (the registry is shared with every worker, so it holds none): made at
 * admission and handed to the worker with the client, checked when a copy link or a
 * channel attaches. A wrong key and an unknown session take the same path and get the
 * same answer, so that session ids cannot be probed (docs/protocol.md, "Copy links"). */
#ifndef REMORA_ATTACH_KEYS_H
#define REMORA_ATTACH_KEYS_H

#include <stdint.h>

#define RM_ATTACH_KEY_LEN 16

/* Makes a fresh random key for session_id, admitted in registry slot slot, into key.
 * Returns 0, or -errno when no randomness could be had. */
int rm_attach_key_issue(int slot, uint64_t session_id, uint8_t key[RM_ATTACH_KEY_LEN]);

/* Whether key is session_id's, which slot holds (-1: no slot holds it). Compared in
 * full against a decoy when there is no such session: no early exit to time. */
int rm_attach_key_matches(int slot, uint64_t session_id, const uint8_t key[RM_ATTACH_KEY_LEN]);

#endif
