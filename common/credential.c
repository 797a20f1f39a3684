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
	if (!h || h - s > 64 || strlen(h + 1) > 64 || strlen(h + 1) == 0 || h == s)
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
	size_t hl = strlen(h + 1);
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
	char s64[32], h64[48];
	if (RAND_bytes(salt, sizeof(salt)) != 1 ||
	    PKCS5_PBKDF2_HMAC(token, (int)len, salt, sizeof(salt), RM_TOKEN_HASH_ITERATIONS, EVP_sha256(),
			      sizeof(hash), hash) != 1)
		return -EIO;
	EVP_EncodeBlock((unsigned char *)s64, salt, sizeof(salt));
	EVP_EncodeBlock((unsigned char *)h64, hash, sizeof(hash));
	int n = snprintf(out, cap, "%s%d$%s$%s", RM_TOKEN_HASH_PREFIX, RM_TOKEN_HASH_ITERATIONS, s64, h64);
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
	if (parse(stored, &it, salt, &sl, want) ||
	    PKCS5_PBKDF2_HMAC(token, (int)len, salt, sl, it, EVP_sha256(), sizeof(got), got) != 1)
		return 0;
	return same(want, got, sizeof(got));
#else
	return 0;
#endif
}
