/* Credentials kept in remorad's configuration: a token in the clear, or its salted hash
 *   pbkdf2-sha256$ITERATIONS$SALT$HASH   (SALT and HASH in base64, HASH 32 bytes)
 * as `remora hash-token` prints it. Comparisons take the same time whatever matches. */
#ifndef REMORA_CREDENTIAL_H
#define REMORA_CREDENTIAL_H

#include <stddef.h>

#define RM_TOKEN_HASH_PREFIX "pbkdf2-sha256$"
#define RM_TOKEN_HASH_ITERATIONS 20000
#define RM_TOKEN_HASH_MAX 160 /* the longest hash line written, with its NUL */

/* Whether stored is a hash line (else a token in the clear). */
int rm_credential_is_hash(const char *stored);
/* Checks a stored hash line's form: 0, or -EINVAL. */
int rm_credential_check_hash(const char *stored);
/* Writes the hash line of token (fresh random salt) into out: 0, or -errno (-ENOTSUP
 * where built without OpenSSL). */
int rm_credential_hash(const void *token, size_t len, char *out, size_t cap);
/* 1 when token matches stored (a hash line or a token in the clear), else 0. */
int rm_credential_matches(const char *stored, const void *token, size_t len);

#endif
