/* Attach keys, private to the accepting process (attach_keys.h). */
#include "attach_keys.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/random.h>

#include "registry.h"

static struct {
	uint64_t session_id; /* 0: none (session ids start at 1) */
	uint8_t key[RM_ATTACH_KEY_LEN];
} keys[RM_MAX_CLIENTS];
static uint8_t decoy[RM_ATTACH_KEY_LEN]; /* what a key for no session is compared with */
static int decoy_made;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static int random_key(uint8_t key[RM_ATTACH_KEY_LEN])
{
	ssize_t n = getrandom(key, RM_ATTACH_KEY_LEN, 0);
	return n == RM_ATTACH_KEY_LEN ? 0 : n < 0 ? -errno : -EIO;
}

int rm_attach_key_issue(int slot, uint64_t session_id, uint8_t key[RM_ATTACH_KEY_LEN])
{
	if (slot < 0 || slot >= RM_MAX_CLIENTS || !session_id)
		return -EINVAL;
	int err = random_key(key);
	if (err)
		return err;
	pthread_mutex_lock(&lock);
	keys[slot].session_id = session_id;
	memcpy(keys[slot].key, key, RM_ATTACH_KEY_LEN);
	pthread_mutex_unlock(&lock);
	return 0;
}

int rm_attach_key_matches(int slot, uint64_t session_id, const uint8_t key[RM_ATTACH_KEY_LEN])
{
	pthread_mutex_lock(&lock);
	if (!decoy_made) { /* zeros if no randomness came: it only ever answers no */
		decoy_made = 1;
		(void)random_key(decoy);
	}
	int known = slot >= 0 && slot < RM_MAX_CLIENTS && session_id && keys[slot].session_id == session_id;
	const uint8_t *want = known ? keys[slot].key : decoy;
	uint8_t diff = 0;
	for (int i = 0; i < RM_ATTACH_KEY_LEN; i++)
		diff |= want[i] ^ key[i];
	pthread_mutex_unlock(&lock);
	return known && !diff;
}
