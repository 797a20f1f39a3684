/* Dropping root (docs/security.md, "Running as a user"): remorad starts as root to bind
 * its ports and read its keys, then runs on as the user `user` names. The accepting
 * process drops once it has bound every listener, read its TLS keys and written its
 * ready file, before it serves anyone; the workers it starts afterwards are that user
 * from their first instruction. */
#ifndef REMORA_PRIVILEGES_H
#define REMORA_PRIVILEGES_H

#include <stddef.h>
#include <sys/types.h>

struct rm_identity {
	char name[64];
	uid_t uid;
	gid_t gid; /* the user's primary group */
};

/* Looks user up in the password database. 0, or -1 with why filled. */
int rm_identity_lookup(const char *user, struct rm_identity *out, char *why, size_t whylen);

/* Becomes id for good: the user's supplementary groups (initgroups: e.g. video, for
 * /dev/nvidia*), its group, then its user id, real, effective and saved; then checks
 * that root cannot be taken back. Every thread of the process changes with it (glibc
 * applies set*id to all of them). Already id: 0 and nothing done. 0, or -1 with why
 * filled: the caller must not go on. */
int rm_identity_assume(const struct rm_identity *id, char *why, size_t whylen);

#endif
