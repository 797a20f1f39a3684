/* Hashed and plain credentials (credential.h). */
#include "credential.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef RM_HAVE_TLS
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#endif

#define SALT_LEN 16
#define HASH_LEN 32

static unsigned long hashes_computed; /* atomics */

unsigned long rm_credential_hashes_computed(void)
{
	return __atomic_load_n(&hashes_computed, __ATOMIC_RELAXED);
}

static int id_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

/* The length of a token id at the start of s (n bytes), ended by end; 0 for none. */
static size_t id_length(const char *s, size_t n, char end)
{
	size_t i = 0;
	while (i < n && i <= RM_TOKEN_ID_MAX && id_char(s[i]))
		i++;
	return i > 0 && i <= RM_TOKEN_ID_MAX && i < n && s[i] == end ? i : 0;
}

size_t rm_credential_token_id(const void *token, size_t len, char *id)
{
	size_t n = id_length(token, len, '.');
	memcpy(id, token, n);
	id[n] = 0;
	return n;
}

size_t rm_credential_stored_id(const char *stored, char *id)
{
	if (!rm_credential_is_hash(stored))
		return rm_credential_token_id(stored, strlen(stored), id);
	/* The fifth field of a hash line, after the fourth '$'. */
	const char *p = stored;
	for (int fields = 0; p && fields < 4; fields++)
		p = strchr(p, '$') ? strchr(p, '$') + 1 : NULL;
	size_t n = p ? strlen(p) : 0;
	if (n == 0 || n > RM_TOKEN_ID_MAX || id_length(p, n + 1, 0) != n)
		n = 0;
	memcpy(id, p ? p : "", n);
	id[n] = 0;
	return n;
}

int rm_credential_is_hash(const char *stored)
{
	return !strncmp(stored, RM_TOKEN_HASH_PREFIX, sizeof(RM_TOKEN_HASH_PREFIX) - 1);
}

/* Constant time for equal lengths; unequal lengths differ (the length of a stored
 * token is not a secret worth a timing channel: hashes all have one length). */
static int same(const void *a, const void *b, size_t n)
{
#ifdef RM_HAVE_TLS
	return CRYPTO_memcmp(a, b, n) == 0;
#else
	unsigned diff = 0;
	for (size_t i = 0; i < n; i++)
		diff |= (unsigned)(((const uint8_t *)a)[i] ^ ((const uint8_t *)b)[i]);
	return diff == 0;
#endif
}

#ifdef RM_HAVE_TLS
/* The parts of a hash line: 0, or -EINVAL. */
static int parse(const char *stored, int *iterations, uint8_t *salt, int *salt_len, uint8_t *hash)
{
	if (!rm_credential_is_hash(stored))
		return -EINVAL;
	const char *p = stored + sizeof(RM_TOKEN_HASH_PREFIX) - 1;
	char *end;
	long it = strtol(p, &end, 10);
	if (end == p || *end != '$' || it < 1000 || it > 10000000)
		return -EINVAL;
	const char *s = end + 1, *h = strchr(s, '$');
	if (!h)
		return -EINVAL;
	/* The hash, then $ID or nothing. */
	const char *idf = strchr(h + 1, '$');
	char id[RM_TOKEN_ID_MAX + 1];
	size_t hl = idf ? (size_t)(idf - (h + 1)) : strlen(h + 1);
	if (h - s > 64 || hl > 64 || hl == 0 || h == s || (idf && !rm_credential_stored_id(stored, id)))
		return -EINVAL;
	uint8_t tmp[64];
	int n = EVP_DecodeBlock(tmp, (const unsigned char *)s, (int)(h - s));
	if (n < 0 || (h - s) % 4)
		return -EINVAL;
	n -= (int)((h[-1] == '=') + (h[-2] == '='));
	if (n < 8 || n > SALT_LEN * 2)
		return -EINVAL;
	memcpy(salt, tmp, (size_t)n);
	*salt_len = n;
	int m = hl % 4 ? -1 : EVP_DecodeBlock(tmp, (const unsigned char *)h + 1, (int)hl);
	if (m < 0)
		return -EINVAL;
	m -= (int)((h[hl] == '=') + (h[hl - 1] == '='));
	if (m != HASH_LEN)
		return -EINVAL;
	memcpy(hash, tmp, HASH_LEN);
	*iterations = (int)it;
	return 0;
}
#endif

int rm_credential_check_hash(const char *stored)
{
#ifdef RM_HAVE_TLS
	int it, sl;
	uint8_t salt[SALT_LEN * 2], hash[HASH_LEN];
	return parse(stored, &it, salt, &sl, hash);
#else
	(void)stored;
	return -ENOTSUP;
#endif
}

int rm_credential_hash(const void *token, size_t len, char *out, size_t cap)
{
#ifdef RM_HAVE_TLS
	uint8_t salt[SALT_LEN], hash[HASH_LEN];
	char s64[32], h64[48], id[RM_TOKEN_ID_MAX + 1];
	size_t idlen = rm_credential_token_id(token, len, id);
	if (RAND_bytes(salt, sizeof(salt)) != 1 ||
	    PKCS5_PBKDF2_HMAC(token, (int)len, salt, sizeof(salt), RM_TOKEN_HASH_ITERATIONS, EVP_sha256(),
			      sizeof(hash), hash) != 1)
		return -EIO;
	EVP_EncodeBlock((unsigned char *)s64, salt, sizeof(salt));
	EVP_EncodeBlock((unsigned char *)h64, hash, sizeof(hash));
	int n = snprintf(out, cap, "%s%d$%s$%s%s%s", RM_TOKEN_HASH_PREFIX, RM_TOKEN_HASH_ITERATIONS, s64, h64,
			 idlen ? "$" : "", id);
	explicit_bzero(hash, sizeof(hash));
	return n < 0 || (size_t)n >= cap ? -ENOSPC : 0;
#else
	(void)token, (void)len, (void)out, (void)cap;
	return -ENOTSUP;
#endif
}

int rm_credential_matches(const char *stored, const void *token, size_t len)
{
	if (!rm_credential_is_hash(stored)) {
		size_t sl = strlen(stored);
		return sl == len && sl > 0 && same(stored, token, len);
	}
#ifdef RM_HAVE_TLS
	int it, sl;
	uint8_t salt[SALT_LEN * 2], want[HASH_LEN], got[HASH_LEN];
	if (parse(stored, &it, salt, &sl, want))
		return 0;
	__atomic_add_fetch(&hashes_computed, 1, __ATOMIC_RELAXED);
	if (PKCS5_PBKDF2_HMAC(token, (int)len, salt, sl, it, EVP_sha256(), sizeof(got), got) != 1)
		return 0;
	int r = same(want, got, sizeof(got));
	explicit_bzero(got, sizeof(got));
	return r;
#else
	return 0;
#endif
}
