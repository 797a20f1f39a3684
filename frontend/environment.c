/* Checking the client's environment (environment.h). Each check uses the parser of the
 * code that reads the variable, so the two cannot disagree. */
#include "environment.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "address.h"
#include "client.h"
#include "connection.h"
#include "copy_links.h"
#include "copy_profile.h"
#include "etcd.h"
#include "placement.h"
#include "size.h"
#include "text.h"
#include "zchunk.h"

static int check_log(const char *v, char *why, size_t whylen)
{
	int level;
	if (rm_log_level_parse(v, &level)) {
		snprintf(why, whylen, "not a log level (%s)", RM_LOG_LEVELS);
		return -EINVAL;
	}
	return 0;
}

static int check_trace(const char *v, char *why, size_t whylen)
{
	if (strcmp(v, "1")) {
		snprintf(why, whylen, "set it to 1 to trace calls, or unset it");
		return -EINVAL;
	}
	return 0;
}

static int check_stats(const char *v, char *why, size_t whylen)
{
	if (!strcmp(v, "0")) {
		snprintf(why, whylen, "set it to 1 (a line at exit) or a file's path, or unset it");
		return -EINVAL;
	}
	return 0;
}

static int check_servers(const char *v, char *why, size_t whylen)
{
	char list[2048];
	int n = 0;
	if (snprintf(list, sizeof(list), "%s", v) >= (int)sizeof(list)) {
		snprintf(why, whylen, "longer than %zu bytes", sizeof(list) - 1);
		return -EINVAL;
	}
	for (char *save, *tok = strtok_r(list, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save), n++)
		if (rm_address_check(tok, 0, why, whylen))
			return -EINVAL;
	if (n == 0 || n > RM_PLACEMENT_MAX) {
		snprintf(why, whylen, "expected 1 to %d servers, HOST:PORT each, separated by commas",
		         RM_PLACEMENT_MAX);
		return -EINVAL;
	}
	return 0;
}

static int check_pool(const char *v, char *why, size_t whylen)
{
	struct rm_etcd e;
	if (rm_etcd_init(&e, v)) {
		snprintf(why, whylen, "%s", e.error);
		return -EINVAL;
	}
	return 0;
}

static int check_min_free(const char *v, char *why, size_t whylen)
{
	uint64_t bytes;
	if (rm_parse_size(v, &bytes)) {
		snprintf(why, whylen, "not a size (e.g. 512M, 8G)");
		return -EINVAL;
	}
	return 0;
}

static int check_visible_devices(const char *v, char *why, size_t whylen)
{
	int32_t devices[RM_MAX_VISIBLE_DEVICES];
	size_t n;
	if (rm_visible_devices(v, devices, RM_MAX_VISIBLE_DEVICES, &n)) {
		snprintf(why, whylen, "must be a comma-separated list of GPU ordinals (0 to 1023, at most %d)",
		         RM_MAX_VISIBLE_DEVICES);
		return -EINVAL;
	}
	return 0;
}

static int check_peer_timeout(const char *v, char *why, size_t whylen)
{
	if (rm_peer_timeout_ms(v) < 0) {
		snprintf(why, whylen, "expected whole seconds, 1 to 3600");
		return -EINVAL;
	}
	return 0;
}

static int check_copy_links(const char *v, char *why, size_t whylen)
{
	uint32_t links;
	if (rm_copy_links_parse_count(v, &links)) {
		snprintf(why, whylen, "expected a number of connections, 1 to %d (1: no copy links)",
		         RM_MAX_COPY_LINKS);
		return -EINVAL;
	}
	return 0;
}

static int check_stripe_min(const char *v, char *why, size_t whylen)
{
	uint64_t bytes;
	if (rm_copy_links_parse_stripe_min(v, &bytes)) {
		snprintf(why, whylen, "not a size of at least 1 byte (e.g. 16M, 1048576)");
		return -EINVAL;
	}
	return 0;
}

static int check_flush_delay_max(const char *v, char *why, size_t whylen)
{
	uint64_t ns;
	if (rm_flush_delay_parse(v, &ns)) {
		snprintf(why, whylen, "not whole microseconds from %u to 10000", RM_FLUSH_DELAY_NS / 1000);
		return -EINVAL;
	}
	return 0;
}

static int check_compress(const char *v, char *why, size_t whylen)
{
	enum rm_compress_mode m;
	if (rm_compress_mode_parse(v, &m)) {
		snprintf(why, whylen, "not auto, off or always");
		return -EINVAL;
	}
	return 0;
}

static int check_token(const char *v, char *why, size_t whylen)
{
	if (!*v) {
		snprintf(why, whylen, "set but empty: unset it to connect as the anonymous tenant");
		return -EINVAL;
	}
	return 0;
}

static int check_pool_cache(const char *v, char *why, size_t whylen)
{
	if (strlen(v) >= 4096 || strchr(v, '\n')) {
		snprintf(why, whylen, "not a file name");
		return -EINVAL;
	}
	return 0;
}

/* A file the TLS transport will read: it must be readable now. */
static int check_tls_file(const char *v, char *why, size_t whylen)
{
	FILE *f = fopen(v, "r");
	if (!f) {
		snprintf(why, whylen, "cannot read it: %s", strerror(errno));
		return -EINVAL;
	}
	fclose(f);
#ifndef RM_HAVE_TLS
	snprintf(why, whylen, "this client library was built without TLS (meson option tls)");
	return -EINVAL;
#endif
	return 0;
}

/* A client certificate needs its key, and the key its certificate. */
static int check_tls_pair(const char *v, char *why, size_t whylen)
{
	const char *cert = getenv("REMORA_TLS_CERT"), *key = getenv("REMORA_TLS_KEY");
	if ((cert && *cert) != (key && *key)) {
		snprintf(why, whylen, "a client certificate needs both REMORA_TLS_CERT and REMORA_TLS_KEY");
		return -EINVAL;
	}
	return check_tls_file(v, why, whylen);
}

static int check_profile(const char *v, char *why, size_t whylen)
{
	uint64_t min;
	int calls;
	if (rm_profile_parse(v, &min, &calls)) {
		snprintf(why, whylen, "expected a comma-separated list of copies, copies:SIZE (e.g. copies:256M) and calls");
		return -EINVAL;
	}
	return 0;
}

static int check_host_alias(const char *v, char *why, size_t whylen)
{
	if (strcmp(v, "0") && strcmp(v, "1")) {
		snprintf(why, whylen, "0 leaves pinned memory where this process allocates it, 1 (the default) "
			 "places it at addresses the GPU host reserved");
		return -EINVAL;
	}
	return 0;
}

/* Every variable the library reads. An empty value means unset, except where
 * empty_checked says the check decides. A secret's value is never printed. */
static const struct setting {
	const char *name;
	int (*check)(const char *value, char *why, size_t whylen);
	int empty_checked;
	int secret;
} settings[] = {
	{.name = "REMORA_LOG", .check = check_log},
	{.name = "REMORA_TRACE", .check = check_trace, .empty_checked = 1},
	{.name = "REMORA_STATS", .check = check_stats},
	{.name = "REMORA_SERVER", .check = check_servers},
	{.name = "REMORA_POOL", .check = check_pool},
	{.name = "REMORA_MIN_FREE_MEMORY", .check = check_min_free},
	{.name = "REMORA_POOL_CACHE", .check = check_pool_cache},
	{.name = "REMORA_TOKEN", .check = check_token, .empty_checked = 1, .secret = 1},
	{.name = "REMORA_VISIBLE_DEVICES", .check = check_visible_devices},
	{.name = "REMORA_PEER_TIMEOUT", .check = check_peer_timeout},
	{.name = "REMORA_COPY_LINKS", .check = check_copy_links},
	{.name = "REMORA_STRIPE_MIN", .check = check_stripe_min},
	{.name = "REMORA_COMPRESS", .check = check_compress},
	{.name = "REMORA_FLUSH_DELAY_MAX_US", .check = check_flush_delay_max},
	{.name = "REMORA_PROFILE", .check = check_profile},
	{.name = "REMORA_HOST_ALIAS", .check = check_host_alias},
	{.name = "REMORA_TLS_CA", .check = check_tls_file},
	{.name = "REMORA_TLS_CERT", .check = check_tls_pair},
	{.name = "REMORA_TLS_KEY", .check = check_tls_pair},
};

int rm_client_environment_check(void)
{
	int err = 0;
	for (size_t i = 0; i < sizeof(settings) / sizeof(settings[0]); i++) {
		const struct setting *s = &settings[i];
		const char *v = getenv(s->name);
		char why[300], shown[128];
		if (!v || (!*v && !s->empty_checked) || !s->check(v, why, sizeof(why)))
			continue;
		if (s->secret)
			rm_log(RM_LOG_ERROR, "%s: %s", s->name, why);
		else
			rm_log(RM_LOG_ERROR, "%s=%s: %s", s->name, rm_text_escape(shown, sizeof(shown), v), why);
		err = -EINVAL;
	}
	return err;
}
