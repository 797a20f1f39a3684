/* Device variables of a session that moved in, at other addresses here (variable_alias.h):
 * a short array (a program takes the address of few variables), walked. */
#include "variable_alias.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "session.h"

int rm_variable_alias_add_locked(struct rm_session *sh, uint64_t client, uint64_t real, uint64_t size, uint64_t parent)
{
	if (!size || client + size < client || real + size < real)
		return -EINVAL;
	for (size_t i = 0; i < sh->nvariable_aliases; i++) {
		const struct rm_variable_alias *a = &sh->variable_aliases[i];
		if (client < a->client + a->size && a->client < client + size)
			return -EADDRINUSE;
	}
	struct rm_variable_alias *v = realloc(sh->variable_aliases, (sh->nvariable_aliases + 1) * sizeof(*v));
	if (!v)
		return -ENOMEM;
	sh->variable_aliases = v;
	v[sh->nvariable_aliases] = (struct rm_variable_alias){client, real, size, parent};
	__atomic_store_n(&sh->nvariable_aliases, sh->nvariable_aliases + 1, __ATOMIC_RELEASE);
	return 0;
}

int rm_variable_alias_at_locked(const struct rm_session *sh, uint64_t client)
{
	for (size_t i = 0; i < sh->nvariable_aliases; i++)
		if (sh->variable_aliases[i].client == client)
			return 1;
	return 0;
}

/* The alias whose range on the from side (client or real) holds p: its other side's
 * address of p, or p. Under sh->lock. */
static uint64_t translate_locked(const struct rm_session *sh, uint64_t p, int to_real)
{
	for (size_t i = 0; i < sh->nvariable_aliases; i++) {
		const struct rm_variable_alias *a = &sh->variable_aliases[i];
		uint64_t from = to_real ? a->client : a->real, to = to_real ? a->real : a->client;
		if (p - from < a->size)
			return to + (p - from);
	}
	return p;
}

static uint64_t translate(struct rm_channel *s, uint64_t p, int to_real)
{
	if (!__atomic_load_n(&s->sh->nvariable_aliases, __ATOMIC_ACQUIRE))
		return p;
	pthread_mutex_lock(&s->sh->lock);
	p = translate_locked(s->sh, p, to_real);
	pthread_mutex_unlock(&s->sh->lock);
	return p;
}

uint64_t rm_session_real_dptr(struct rm_channel *s, uint64_t p)
{
	return translate(s, p, 1);
}

uint64_t rm_session_client_dptr(struct rm_channel *s, uint64_t real)
{
	return translate(s, real, 0);
}

static void translate_params(struct rm_channel *s, uint8_t *params, size_t len, int to_real)
{
	if (!params || len < 8 || !__atomic_load_n(&s->sh->nvariable_aliases, __ATOMIC_ACQUIRE))
		return;
	pthread_mutex_lock(&s->sh->lock);
	for (size_t off = 0; off + 8 <= len; off += 8) {
		uint64_t w;
		memcpy(&w, params + off, 8);
		uint64_t r = translate_locked(s->sh, w, to_real);
		if (r != w)
			memcpy(params + off, &r, 8);
	}
	pthread_mutex_unlock(&s->sh->lock);
}

void rm_session_real_params(struct rm_channel *s, uint8_t *params, size_t len)
{
	translate_params(s, params, len, 1);
}

void rm_session_client_params(struct rm_channel *s, uint8_t *params, size_t len)
{
	translate_params(s, params, len, 0);
}

void rm_variable_alias_drop_parent(struct rm_session *sh, uint64_t parent)
{
	pthread_mutex_lock(&sh->lock);
	size_t kept = 0;
	for (size_t i = 0; i < sh->nvariable_aliases; i++)
		if (sh->variable_aliases[i].parent != parent)
			sh->variable_aliases[kept++] = sh->variable_aliases[i];
	__atomic_store_n(&sh->nvariable_aliases, kept, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&sh->lock);
}

void rm_variable_alias_free(struct rm_session *sh)
{
	free(sh->variable_aliases);
	sh->variable_aliases = NULL;
	sh->nvariable_aliases = 0;
}
