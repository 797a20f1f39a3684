/* Credentials for a secured etcd from files and the environment (etcd.h). */
#include "etcd.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int rm_etcd_read_password(const char *path, char *out, size_t len, char *why, size_t whylen)
{
	FILE *f = fopen(path, "re");
	if (!f) {
		int err = -errno;
		snprintf(why, whylen, "cannot read the etcd password file %s: %s", path, strerror(-err));
		return err;
	}
	char line[512];
	int err = 0;
	if (!fgets(line, sizeof(line), f))
		line[0] = 0;
	fclose(f);
	line[strcspn(line, "\r\n")] = 0;
	if (!line[0]) {
		snprintf(why, whylen, "the etcd password file %s is empty", path);
		err = -EINVAL;
	} else if (strlen(line) >= len) {
		snprintf(why, whylen, "the password in %s is longer than %zu bytes", path, len - 1);
		err = -ENAMETOOLONG;
	} else {
		memcpy(out, line, strlen(line) + 1);
	}
	explicit_bzero(line, sizeof(line));
	return err;
}

/* Copies the environment variable name, when set, into dst. */
static int from_env(const char *name, char *dst, size_t cap, char *why, size_t whylen)
{
	const char *v = getenv(name);
	if (!v || !*v)
		return 0;
	if (strlen(v) >= cap) {
		snprintf(why, whylen, "%s is longer than %zu bytes", name, cap - 1);
		return -ENAMETOOLONG;
	}
	memcpy(dst, v, strlen(v) + 1);
	return 0;
}

int rm_etcd_credentials_from_env(struct rm_etcd_credentials *c, char *why, size_t whylen)
{
	memset(c, 0, sizeof(*c));
	int err = from_env("REMORA_POOL_CA", c->ca_file, sizeof(c->ca_file), why, whylen);
	if (!err)
		err = from_env("REMORA_POOL_CERT", c->cert_file, sizeof(c->cert_file), why, whylen);
	if (!err)
		err = from_env("REMORA_POOL_KEY", c->key_file, sizeof(c->key_file), why, whylen);
	if (!err)
		err = from_env("REMORA_POOL_USER", c->user, sizeof(c->user), why, whylen);
	const char *file = getenv("REMORA_POOL_PASSWORD_FILE");
	if (!err && c->user[0] && file && *file)
		err = rm_etcd_read_password(file, c->password, sizeof(c->password), why, whylen);
	else if (!err && c->user[0])
		err = from_env("REMORA_POOL_PASSWORD", c->password, sizeof(c->password), why, whylen);
	if (!err && c->user[0] && !c->password[0]) {
		snprintf(why, whylen, "REMORA_POOL_USER needs REMORA_POOL_PASSWORD_FILE (or REMORA_POOL_PASSWORD)");
		err = -EINVAL;
	}
	return err;
}
