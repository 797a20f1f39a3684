/* The source's side of a move's state (migrate.h): what may move, and the state sent
 * (migrate_wire.h). */
#ifndef REMORA_MIGRATE_STATE_H
#define REMORA_MIGRATE_STATE_H

#include "session.h"

#define RM_MIG_CHUNK (8u << 20) /* memory contents are copied in pieces of this */

/* The bytes of memory contents at address at (left of them to go) copied as one piece: at
 * most RM_MIG_CHUNK, never across a multiple of it, so that no piece crosses the blocks
 * moved memory is mapped in apart (migrate.h). */
static inline size_t rm_mig_piece(uint64_t at, uint64_t left)
{
	uint64_t room = RM_MIG_CHUNK - at % RM_MIG_CHUNK;
	return (size_t)(left < room ? left : room);
}

/* The session's handles of the kinds that move, in the order they are made again. */
struct rm_mig_collect {
	struct rm_handle *h;
	size_t n, cap;
	char why[200];
};

/* The state being sent on conn (or, count set, sized: total and records). */
struct rm_mig_sender {
	struct rm_channel *s;
	struct rm_conn *conn;
	struct rm_mig_collect *c;
	uint64_t total;
	int count; /* 1: sizing (nothing sent) */
	uint32_t records, records_expected;
	uint32_t held; /* variables whose address the client holds, found in its modules */
	uint8_t *chunk;
	const char *why;
};

/* Why s cannot move, or NULL; its handles of the kinds that move gathered into c. */
const char *rm_mig_refusal(struct rm_channel *s, struct rm_mig_collect *c);
/* Sends (or sizes) the whole state: 0, or -errno (x->why may say why). */
int rm_mig_send_state(struct rm_mig_sender *x);
/* Source, while the client still runs: the address ranges its memory and reservations lie
 * in (RM_OP_MIGRATE_RANGES's list, count of them): 0, or -ENOMEM. */
int rm_mig_ranges(struct rm_session *sh, uint8_t **out, size_t *count);

#endif
