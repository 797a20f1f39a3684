/* Handle aliases of a session that moved in (handle_alias.h): a sorted array by (kind,
 * client value), searched by halves; the other way, a walk (replies of getters, and
 * forgetting one, only). */
#include "handle_alias.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "session.h"

static int before(const struct rm_alias *a, uint32_t kind, uint64_t client)
{
	return a->kind < kind || (a->kind == kind && a->client < client);
}

static size_t lower_bound(const struct rm_session *sh, uint32_t kind, uint64_t client)
{
	size_t lo = 0, hi = sh->naliases;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (before(&sh->aliases[mid], kind, client))
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

int rm_alias_add_locked(struct rm_session *sh, uint32_t kind, uint64_t client, uint64_t real)
{
	size_t i = lower_bound(sh, kind, client);
	if (i < sh->naliases && sh->aliases[i].kind == kind && sh->aliases[i].client == client) {
		sh->aliases[i].real = real;
		return 0;
	}
	if (sh->naliases == sh->aliases_cap) {
		size_t cap = sh->aliases_cap ? sh->aliases_cap * 2 : 64;
		struct rm_alias *a = realloc(sh->aliases, cap * sizeof(*a));
		if (!a)
			return -ENOMEM;
		sh->aliases = a;
		sh->aliases_cap = cap;
	}
	memmove(&sh->aliases[i + 1], &sh->aliases[i], (sh->naliases - i) * sizeof(*sh->aliases));
	sh->aliases[i] = (struct rm_alias){.client = client, .real = real, .kind = kind};
	sh->naliases++;
	return 0;
}

uint64_t rm_alias_real_locked(const struct rm_session *sh, uint32_t kind, uint64_t v)
{
	if (!sh->naliases)
		return v;
	size_t i = lower_bound(sh, kind, v);
	return i < sh->naliases && sh->aliases[i].kind == kind && sh->aliases[i].client == v ? sh->aliases[i].real : v;
}

int rm_alias_is_client_locked(const struct rm_session *sh, uint32_t kind, uint64_t v)
{
	if (!sh->naliases)
		return 0;
	size_t i = lower_bound(sh, kind, v);
	return i < sh->naliases && sh->aliases[i].kind == kind && sh->aliases[i].client == v;
}

void rm_alias_drop_locked(struct rm_session *sh, uint32_t kind, uint64_t real)
{
	for (size_t i = 0; i < sh->naliases; i++)
		if (sh->aliases[i].kind == kind && sh->aliases[i].real == real) {
			memmove(&sh->aliases[i], &sh->aliases[i + 1], (sh->naliases - i - 1) * sizeof(*sh->aliases));
			sh->naliases--;
			return;
		}
}

uint64_t rm_session_out_value(struct rm_channel *s, enum rm_handle_kind kind, uint64_t real)
{
	if (kind == RM_H_CONTEXT) { /* a primary context: the client's value of it */
		struct rm_session_ctx *c;
		for (int i = 0; real && (c = rm_session_ctx_at(s, i)); i++)
			if ((uint64_t)(uintptr_t)c->ctx == real && !c->created)
				return c->handle;
		return real;
	}
	if (!__atomic_load_n(&s->sh->naliases, __ATOMIC_ACQUIRE))
		return real;
	uint64_t v = real;
	pthread_mutex_lock(&s->sh->lock);
	for (size_t i = 0; i < s->sh->naliases; i++)
		if (s->sh->aliases[i].kind == (uint32_t)kind && s->sh->aliases[i].real == real) {
			v = s->sh->aliases[i].client;
			break;
		}
	pthread_mutex_unlock(&s->sh->lock);
	return v;
}

void rm_alias_free(struct rm_session *sh)
{
	free(sh->aliases);
	sh->aliases = NULL;
	sh->naliases = sh->aliases_cap = 0;
}
