/* A presented credential checked against the configuration's tenants and admin token
 * (config.h): by its token id where it has one, in constant time (credential.h). */
#include "config.h"

#include <string.h>

#include "credential.h"

int rm_config_credential_key(const struct rm_daemon_config *c, const void *token, size_t len)
{
	char want[RM_TOKEN_ID_MAX + 1], id[RM_TOKEN_ID_MAX + 1];
	if (!rm_credential_token_id(token, len, want))
		return RM_CREDENTIAL_OTHER;
	for (int i = 0; i < c->ntenants; i++)
		if (!c->tenants[i].retired && rm_credential_stored_id(c->tenants[i].token, id) && !strcmp(id, want))
			return i;
	if (rm_credential_stored_id(c->admin_token, id) && !strcmp(id, want))
		return RM_CREDENTIAL_ADMIN;
	return RM_CREDENTIAL_OTHER;
}

/* Every stored credential without an id is tried, so that the time taken does not say
 * which one matched (hashes take long; a plain token is compared in constant time). */
int rm_config_verify(const struct rm_daemon_config *c, int key, const void *token, size_t len)
{
	char id[RM_TOKEN_ID_MAX + 1];
	if (!len)
		return -1;
	if (key >= 0)
		return key < c->ntenants && !c->tenants[key].retired &&
			       rm_credential_matches(c->tenants[key].token, token, len) ? key : -1;
	if (key == RM_CREDENTIAL_ADMIN)
		return c->admin_token[0] && rm_credential_matches(c->admin_token, token, len) ? RM_CREDENTIAL_ADMIN : -1;
	int found = -1;
	for (int i = 0; i < c->ntenants; i++) {
		const struct rm_tenant_config *t = &c->tenants[i];
		if (!t->retired && t->token[0] && !rm_credential_stored_id(t->token, id) &&
		    rm_credential_matches(t->token, token, len) && found == -1)
			found = i;
	}
	if (c->admin_token[0] && !rm_credential_stored_id(c->admin_token, id) &&
	    rm_credential_matches(c->admin_token, token, len) && found == -1)
		found = RM_CREDENTIAL_ADMIN;
	return found;
}

int rm_config_hashes_without_id(const struct rm_daemon_config *c)
{
	char id[RM_TOKEN_ID_MAX + 1];
	int n = rm_credential_is_hash(c->admin_token) && !rm_credential_stored_id(c->admin_token, id);
	for (int i = 0; i < c->ntenants; i++)
		n += !c->tenants[i].retired && rm_credential_is_hash(c->tenants[i].token) &&
		     !rm_credential_stored_id(c->tenants[i].token, id);
	return n;
}

const struct rm_tenant_config *rm_config_tenant(const struct rm_daemon_config *c, const void *token, size_t len)
{
	if (!len)
		return c->allow_anonymous ? &c->anonymous : NULL;
	int found = rm_config_verify(c, rm_config_credential_key(c, token, len), token, len);
	return found >= 0 ? &c->tenants[found] : NULL;
}

const struct rm_tenant_config *rm_config_tenant_by_cn(const struct rm_daemon_config *c, const char *cn)
{
	for (int i = 0; cn && i < c->ntenants; i++)
		if (!c->tenants[i].retired && !strcmp(c->tenants[i].name, cn))
			return &c->tenants[i];
	return NULL;
}

int rm_config_is_admin(const struct rm_daemon_config *c, const void *token, size_t len, const char *cn)
{
	char id[RM_TOKEN_ID_MAX + 1];
	int key = len ? rm_config_credential_key(c, token, len) : 0;
	if (len)
		return (key == RM_CREDENTIAL_ADMIN || (key == RM_CREDENTIAL_OTHER && !rm_credential_stored_id(c->admin_token, id))) &&
		       c->admin_token[0] && rm_credential_matches(c->admin_token, token, len);
	return cn && c->admin_cn[0] && !strcmp(cn, c->admin_cn);
}

void rm_config_drop_credentials(struct rm_daemon_config *c)
{
	for (int i = 0; i < c->ntenants; i++)
		explicit_bzero(c->tenants[i].token, sizeof(c->tenants[i].token));
	explicit_bzero(c->admin_token, sizeof(c->admin_token));
}
