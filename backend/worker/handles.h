/* What a session owns (proto/handle_kinds.def): a table of handles keyed by kind and
 * value, and the owned device memory sorted by base for range checks. */
#ifndef REMORA_HANDLES_H
#define REMORA_HANDLES_H

#include <cuda.h>
#include <stdint.h>

enum rm_handle_kind {
	RM_H_NONE = 0, /* an empty place of the table */
#define RM_HANDLE_KIND(name, ctype, step, release) name,
#include "handle_kinds.def"
#undef RM_HANDLE_KIND
};

struct rm_handle {
	uint64_t value;
	uint64_t size;   /* memory: its length; a module or library: its charge (image_charge.h); an event: its creation flags */
	uint64_t parent; /* the module of a function or global, else 0 */
	uint32_t kind;
	uint32_t ctx;    /* 1 + the slot of the session's context current when it was made; 0: none */
};

struct rm_channel;

/* Records that the client now owns h (size: bytes of memory; parent: owning module). */
void rm_session_own(struct rm_channel *s, enum rm_handle_kind kind, const void *h, uint64_t parent);
/* rm_session_own of a handle with no parent as one step with the check that the client
 * does not own it yet: 1, or 0 (nothing done) when it does. */
int rm_session_own_fresh(struct rm_channel *s, enum rm_handle_kind kind, const void *h);
void rm_session_own_memory(struct rm_channel *s, enum rm_handle_kind kind, uint64_t base, uint64_t size,
			   uint64_t parent);
/* Forgets h, and what h is the parent of. */
void rm_session_disown(struct rm_channel *s, enum rm_handle_kind kind, const void *h);
void rm_session_disown_value(struct rm_channel *s, enum rm_handle_kind kind, uint64_t v);
/* Copies an owned handle's record into out (may be NULL): 1, or 0 when not owned. */
int rm_session_find(struct rm_channel *s, enum rm_handle_kind kind, uint64_t v, struct rm_handle *out);
/* Calls visit on each owned handle of kind, under the session's lock (visit must not call
 * into the session), until one returns nonzero; returns that, or 0. */
int rm_session_each(struct rm_channel *s, enum rm_handle_kind kind, int (*visit)(const struct rm_handle *h, void *arg),
		    void *arg);
/* Sets an owned handle's parent field (a mark kinds without parents keep there): 1, or 0
 * when it is not owned. */
int rm_session_set_parent(struct rm_channel *s, enum rm_handle_kind kind, uint64_t v, uint64_t parent);
/* rm_session_set_parent where the parent is was: 1 when owned (changed or not), else 0. */
int rm_session_set_parent_if(struct rm_channel *s, enum rm_handle_kind kind, uint64_t v, uint64_t was, uint64_t parent);
/* rm_session_find with the session's lock held. */
int rm_session_find_locked(struct rm_channel *s, enum rm_handle_kind kind, uint64_t v, struct rm_handle *out);
/* Counts n references more (add) or fewer in an owned handle's size field, forgetting it
 * at none: 1, or 0 when not owned, or (fewer) it holds fewer than n. */
int rm_session_take_refs(struct rm_channel *s, enum rm_handle_kind kind, uint64_t v, uint64_t n, int add);
/* Sets an owned handle's size field, of a kind other than memory (whose size the range checks
 * and memory counts use): 1, or 0 when not owned. */
int rm_session_set_size(struct rm_channel *s, enum rm_handle_kind kind, uint64_t v, uint64_t size);
/* A graph's parent: 0 for the client's own graph (its to destroy); RM_GRAPH_OF_CAPTURE for
 * the graph of a capture under way (the driver's until the capture ends); else the node
 * that owns it (a conditional node's body, a child graph node's graph), gone with it. A
 * node that owns graphs has size RM_NODE_OWNS_GRAPHS, so that forgetting it forgets them. */
#define RM_GRAPH_OF_CAPTURE 1
#define RM_NODE_OWNS_GRAPHS 1

/* Forgets an owned handle as one step, copying its record into out: 1, or 0 when it was
 * not owned (another thread's call gave it up first). For a call that gives the handle
 * back to the driver: a handle only one call can take is freed once. */
int rm_session_take(struct rm_channel *s, enum rm_handle_kind kind, uint64_t v, struct rm_handle *out);
/* Gives the real handle of wire value v, if the client owns one of that kind. */
CUresult rm_session_use(struct rm_channel *s, enum rm_handle_kind kind, uint64_t v, void **out);
/* Checks that [ptr, ptr+len) lies inside one piece of memory the client owns. */
CUresult rm_session_check_range(struct rm_channel *s, uint64_t ptr, uint64_t len);
/* How many of the len bytes from ptr the client owns without a gap, across adjacent
 * allocations of its own (0: ptr is not its). */
uint64_t rm_session_owned_run(struct rm_channel *s, uint64_t ptr, uint64_t len);
/* rm_session_check_range for count elements of unit bytes: CUDA_ERROR_INVALID_VALUE
 * when count * unit overflows. */
CUresult rm_session_check_span(struct rm_channel *s, uint64_t ptr, uint64_t count, uint64_t unit);
/* The checks above refuse (CUDA_ERROR_NOT_SUPPORTED, with a line) a range inside a device
 * variable the client brought when it moved (variable_alias.h), whose address here differs.
 * These take it, for a caller that gives the driver the address here: check_dptr as
 * check_span (the generated handlers, which then call rm_session_real_dptr), check_real as
 * check_range, turning *ptr into the address here. */
CUresult rm_session_check_dptr(struct rm_channel *s, uint64_t ptr, uint64_t count, uint64_t unit);
CUresult rm_session_check_real(struct rm_channel *s, uint64_t *ptr, uint64_t len);
/* Whether a piece of usable memory (an allocation, global or mapping) the client owns
 * holds ptr, and if so a copy of its record in *out (may be NULL); quietly, for queries
 * that answer "not found" themselves. */
int rm_session_range_of(struct rm_channel *s, uint64_t ptr, struct rm_handle *out);

#endif
