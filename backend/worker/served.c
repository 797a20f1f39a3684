/* The channels a worker serves (worker.h). */
#include "worker.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

static struct rm_channel **sessions;
static size_t nsessions, sessions_cap;
static pthread_mutex_t sessions_lock = PTHREAD_MUTEX_INITIALIZER;

static int add_locked(struct rm_channel *s)
{
	if (nsessions == sessions_cap) {
		size_t cap = sessions_cap ? 2 * sessions_cap : 64;
		struct rm_channel **p = realloc(sessions, cap * sizeof(*p));
		if (!p)
			return -1;
		sessions = p;
		sessions_cap = cap;
	}
	sessions[nsessions++] = s;
	return 0;
}

int rm_served_add(struct rm_channel *s)
{
	pthread_mutex_lock(&sessions_lock);
	int err = add_locked(s);
	pthread_mutex_unlock(&sessions_lock);
	return err;
}

void rm_served_each(void (*visit)(struct rm_channel *s))
{
	pthread_mutex_lock(&sessions_lock);
	for (size_t i = 0; i < nsessions; i++)
		visit(sessions[i]);
	pthread_mutex_unlock(&sessions_lock);
}

static void remove_locked(struct rm_channel *s)
{
	for (size_t i = 0; i < nsessions; i++)
		if (sessions[i] == s) {
			sessions[i] = sessions[--nsessions];
			break;
		}
}

void rm_served_remove(struct rm_channel *s)
{
	pthread_mutex_lock(&sessions_lock);
	remove_locked(s);
	pthread_mutex_unlock(&sessions_lock);
}

size_t rm_served_count(void)
{
	pthread_mutex_lock(&sessions_lock);
	size_t n = nsessions;
	pthread_mutex_unlock(&sessions_lock);
	return n;
}

int rm_served_main(uint64_t id, int (*visit)(struct rm_channel *s, void *arg), void *arg)
{
	int ret = -ESRCH;
	pthread_mutex_lock(&sessions_lock);
	for (size_t i = 0; i < nsessions; i++)
		if (sessions[i]->sh->id == id && !sessions[i]->chan) {
			ret = visit(sessions[i], arg);
			break;
		}
	pthread_mutex_unlock(&sessions_lock);
	return ret;
}
