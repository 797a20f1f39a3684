/* remora bench --link rtt=T,rate=R: the whole bench runs again inside the emulated link
 * (bench/link-emu.sh beside the workers, scripts/link-emu.sh in the source tree), where
 * remorad is started in the server's namespace (bench/workers.c) and the figures name the
 * link as measured (docs/performance.md "The emulated link"). */
#include "bench.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Whether text is NUMBER followed by one of units (a NULL-ended list). */
static bool number_with_unit(const char *text, size_t len, const char *const *units)
{
	char buf[64];
	if (len == 0 || len >= sizeof buf)
		return false;
	memcpy(buf, text, len);
	buf[len] = 0;
	char *end;
	double v = strtod(buf, &end);
	if (end == buf || !(v > 0))
		return false;
	for (; *units; units++)
		if (!strcmp(end, *units))
			return true;
	return false;
}

int bench_link_check(const char *spec)
{
	static const char *const times[] = { "ns", "us", "ms", "s", NULL };
	static const char *const rates[] = { "kbit", "mbit", "gbit", NULL };
	bool rtt = false, rate = false;
	for (const char *p = spec; *p;) {
		size_t len = strcspn(p, ",");
		if (!strncmp(p, "rtt=", 4) && !rtt)
			rtt = number_with_unit(p + 4, len - 4, times);
		else if (!strncmp(p, "rate=", 5) && !rate)
			rate = number_with_unit(p + 5, len - 5, rates);
		else
			rtt = rate = false, p = "";
		p += len + (p[len] == ',');
	}
	if (rtt && rate)
		return 0;
	fprintf(stderr, "remora bench: --link wants a round trip and a rate, both, e.g. --link rtt=50us,rate=25gbit "
			"(times in ns, us, ms, s; rates in kbit, mbit, gbit); got '%s'\n", spec);
	return -1;
}

int bench_link_enter(const struct bench_config *cfg, int argc, char **argv)
{
	const char *inside = getenv("REMORA_LINK");
	if (inside && !strcmp(inside, cfg->link))
		return 0; /* already on the link: link-emu.sh ran this */
	for (int t = 0; t < cfg->ntransports; t++)
		if (cfg->transports[t] != BENCH_TCP && cfg->transports[t] != BENCH_TLS) {
			fprintf(stderr, "remora bench: --link carries tcp and tls only, not %s\n",
				bench_transport_names[cfg->transports[t]]);
			return -1;
		}
	char script[PATH_MAX + 32], self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
	if (n < 0 || !cfg->workers)
		return -1;
	self[n] = 0;
	snprintf(script, sizeof script, "%s/link-emu.sh", cfg->workers);
	char **args = calloc((size_t)argc + 8, sizeof *args);
	if (!args)
		return -1;
	int k = 0;
	args[k++] = script;
	args[k++] = (char *)cfg->link;
	args[k++] = "--";
	args[k++] = self;
	for (int i = 0; i < argc; i++)
		args[k++] = argv[i];
	args[k] = NULL;
	fflush(NULL);
	execv(script, args);
	fprintf(stderr, "remora bench: cannot run %s: %s\n", script, strerror(errno));
	free(args);
	return -1;
}

void bench_link_facts(struct bench_run *run)
{
	const char *spec = getenv("REMORA_LINK"), *rtt = getenv("REMORA_LINK_RTT_US"), *gbps = getenv("REMORA_LINK_GBPS");
	if (!run->cfg->link || !spec)
		return;
	bench_add_fact(&run->results, "link", false, "%s", spec);
	bench_add_fact(&run->results, "link_rtt_us", true, "%s", rtt && *rtt ? rtt : "null");
	bench_add_fact(&run->results, "link_gbps", true, "%s", gbps && *gbps ? gbps : "null");
	fprintf(stderr, "remora bench: over the emulated link %s: measured round trip %s us, one TCP stream %s Gbit/s\n",
		spec, rtt ? rtt : "?", gbps ? gbps : "?");
}
