/* Handles a client brought with it when it moved in from another remorad (docs/pool.md,
 * "Live migration"): the values it holds, given by the source's driver, mapped to this
 * worker's. A request's handle is mapped where the generated handlers check it
 * (rm_session_use); a handle going back to the client the other way
 * (rm_session_out_value). A session that never moved has none, and pays one test. */
#ifndef REMORA_HANDLE_ALIAS_H
#define REMORA_HANDLE_ALIAS_H

#include <stdint.h>

#include "handles.h"

struct rm_alias {
	uint64_t client, real;
	uint32_t kind;
};

struct rm_session;
struct rm_channel;

/* The bit of the client values given to handles whose own value the client holds for
 * another handle since it moved (handles.c). */
#define RM_ALIAS_FRESH (1ull << 63)

/* Adds client -> real for kind (under sh->lock): 0 or -ENOMEM. */
int rm_alias_add_locked(struct rm_session *sh, uint32_t kind, uint64_t client, uint64_t real);
/* The real value of the client's v of kind (v itself when not an alias), under sh->lock. */
uint64_t rm_alias_real_locked(const struct rm_session *sh, uint32_t kind, uint64_t v);
/* Whether v of kind is a client value of an alias (another real handle behind it). */
int rm_alias_is_client_locked(const struct rm_session *sh, uint32_t kind, uint64_t v);
/* Forgets the alias whose real value is real, of kind. */
void rm_alias_drop_locked(struct rm_session *sh, uint32_t kind, uint64_t real);
/* The value the client knows for real of kind: its alias's, a context's handle, or real. */
uint64_t rm_session_out_value(struct rm_channel *s, enum rm_handle_kind kind, uint64_t real);
void rm_alias_free(struct rm_session *sh);

#endif
