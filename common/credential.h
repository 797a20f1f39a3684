/* Credentials kept in remorad's configuration: a token in the clear, or its salted hash
 *   pbkdf2-sha256$ITERATIONS$SALT$HASH$ID   (SALT and HASH in base64, HASH 32 bytes)
 * as `remora hash-token` prints it. A token ID.SECRET carries a token id: ID, 1 to
 * RM_TOKEN_ID_MAX letters, digits, '_' or '-', before its first '.'. The id is no secret:
 * it names the one stored credential a presented token is checked against, so that a
 * check costs one hash whatever the number of tenants (docs/security.md). A hash line
 * without $ID (written before token ids) still works, but every presented token without
 * a known id is checked against each such line. Comparisons take the same time whatever
 * matches. */
#ifndef REMORA_CREDENTIAL_H
#define REMORA_CREDENTIAL_H

#include <stddef.h>

#define RM_TOKEN_HASH_PREFIX "pbkdf2-sha256$"
#define RM_TOKEN_HASH_ITERATIONS 20000
#define RM_TOKEN_HASH_MAX 160 /* the longest hash line written, with its NUL */
#define RM_TOKEN_ID_MAX 32

/* The token id of a presented token (ID.SECRET) into id (RM_TOKEN_ID_MAX + 1 bytes):
 * its length, or 0 when the token carries none. */
size_t rm_credential_token_id(const void *token, size_t len, char *id);
/* The token id of a stored credential (a hash line's $ID, or a plain token's own id) into
 * id (RM_TOKEN_ID_MAX + 1 bytes): its length, or 0 for none. */
size_t rm_credential_stored_id(const char *stored, char *id);

/* Whether stored is a hash line (else a token in the clear). */
int rm_credential_is_hash(const char *stored);
/* Checks a stored hash line's form: 0, or -EINVAL. */
int rm_credential_check_hash(const char *stored);
/* Writes the hash line of token (fresh random salt; the token's id, if it carries one,
 * as $ID) into out: 0, or -errno (-ENOTSUP where built without OpenSSL). */
int rm_credential_hash(const void *token, size_t len, char *out, size_t cap);
/* 1 when token matches stored (a hash line or a token in the clear), else 0. */
/* How many PBKDF2 hashes rm_credential_matches has computed in this process (for tests
 * and the debug log: a check costs one, whatever the number of tenants). */
unsigned long rm_credential_hashes_computed(void);
int rm_credential_matches(const char *stored, const void *token, size_t len);

#endif
