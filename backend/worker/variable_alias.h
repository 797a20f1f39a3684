/* Device variables of a session that moved in (docs/pool.md, "Live migration"). The target
 * loads each module anew, so a variable whose address the client took (cuModuleGetGlobal,
 * cuLibraryGetGlobal) lies at another address here. The client keeps the address it holds:
 * a request's device address inside such a variable (a copy's, a memset's, a word of a
 * kernel's arguments) is turned into the variable's address here, and the variable's
 * address going back to the client the other way. A session that never moved has none,
 * and pays one test. */
#ifndef REMORA_VARIABLE_ALIAS_H
#define REMORA_VARIABLE_ALIAS_H

#include <stddef.h>
#include <stdint.h>

struct rm_session;
struct rm_channel;

/* The client's [client, client + size) is the variable at real, of the module or library
 * parent (its real handle). */
struct rm_variable_alias {
	uint64_t client, real, size, parent;
};

/* Adds one (under sh->lock): 0, or -ENOMEM; -EADDRINUSE where the client's range overlaps
 * one already recorded. */
int rm_variable_alias_add_locked(struct rm_session *sh, uint64_t client, uint64_t real, uint64_t size, uint64_t parent);
/* Whether the client's client is the start of an alias (under sh->lock). */
int rm_variable_alias_at_locked(const struct rm_session *sh, uint64_t client);
/* The address here of the client's device address p (p itself outside every alias). */
uint64_t rm_session_real_dptr(struct rm_channel *s, uint64_t p);
/* The client's address of real, an address here (real itself outside every alias). */
uint64_t rm_session_client_dptr(struct rm_channel *s, uint64_t real);
/* A kernel's packed arguments (len bytes): each 8-byte word at an 8-byte offset that lies
 * inside an alias is turned into the address here (arguments are laid out at their natural
 * alignment, so a pointer argument, or a pointer field of a structure, is such a word). */
void rm_session_real_params(struct rm_channel *s, uint8_t *params, size_t len);
/* The other way, for arguments going back to the client (a graph kernel node's). */
void rm_session_client_params(struct rm_channel *s, uint8_t *params, size_t len);
/* Forgets the aliases of a module or library unloaded (its real handle). */
void rm_variable_alias_drop_parent(struct rm_session *sh, uint64_t parent);
void rm_variable_alias_free(struct rm_session *sh);

#endif
