/* remora bench: what a run records besides its sections: loopback TCP, the bound of any
 * TCP transport, the host's facts, and kTLS (bench.h). */
#include "bench.h"

#include "commit.h"
#include "loopback.h"
#ifdef RM_HAVE_TLS
#include "tls.h"
#include "transport.h"
#endif

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Context for the copy targets, which stay against loopback_tcp_gbps: the same
 * writes moving a buffer that is not cache resident into another, as a large
 * copy does, over 1, 2 and 4 streams at once (what striping a copy over several
 * connections could give). */
static int measure_tcp_cold(struct bench_run *run)
{
	static const int streams[] = { 1, 2, 4 };
	static const char *const keys[] = { "loopback_tcp_cold_gbps", "loopback_tcp_cold_2_streams_gbps",
					    "loopback_tcp_cold_4_streams_gbps" };
	bool quick = run->cfg->quick;
	struct bench_tcp_cold b;
	size_t span = quick ? 64 * MIB : (size_t)1 << 30;
	int rc = bench_tcp_cold_init(&b, span);
	bench_add_fact(&run->results, "loopback_tcp_cold_mib", true, "%zu", span / MIB);
	for (size_t i = 0; i < sizeof streams / sizeof streams[0]; i++) {
		double gbps = NAN, seconds = quick ? 0.2 : streams[i] == 1 ? 1.0 : 0.5;
		if (!rc)
			rc = bench_tcp_throughput_cold(&b, streams[i], seconds, 4 * MIB, &gbps);
		if (isfinite(gbps))
			bench_add_fact(&run->results, keys[i], true, "%.4f", gbps);
		else
			bench_add_fact(&run->results, keys[i], true, "null");
	}
	bench_tcp_cold_free(&b);
	if (rc)
		fprintf(stderr, "remora bench: loopback TCP, cold buffers: %s\n", strerror(-rc));
	return rc;
}

int bench_measure_tcp(struct bench_run *run)
{
	bool quick = run->cfg->quick;
	int rc;
	fprintf(stderr, "remora bench: loopback TCP\n");
	if ((rc = bench_tcp_throughput(quick ? 0.2 : 1.0, 4 * MIB, &run->tcp_gbps)) ||
	    (rc = bench_tcp_round_trip(quick ? 2000 : 10000, 64, &run->tcp_rtt_us))) {
		fprintf(stderr, "remora bench: loopback TCP: %s\n", strerror(-rc));
		bench_set_section(&run->results, "tcp", "failed", strerror(-rc));
		run->tcp_gbps = run->tcp_rtt_us = NAN;
		return -1;
	}
	bench_add_fact(&run->results, "loopback_tcp_gbps", true, "%.4f", run->tcp_gbps);
	bench_add_fact(&run->results, "loopback_tcp_rtt_us", true, "%.4f", run->tcp_rtt_us);
	rc = measure_tcp_cold(run);
	bench_set_section(&run->results, "tcp", rc ? "failed" : "ok", rc ? strerror(-rc) : NULL);
	return rc ? -1 : 0;
}

/* The run's facts: date, host, commit, the GPU as seen natively and remotely. */
void bench_record_facts(struct bench_run *run)
{
	char buf[128], stamp[32];
	time_t t = time(NULL);
	strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", gmtime(&t));
	bench_add_fact(&run->results, "date", false, "%s", stamp);
	bench_commit_id(buf, sizeof buf);
	bench_add_fact(&run->results, "git_commit", false, "%s", buf);
	if (gethostname(buf, sizeof buf) == 0)
		bench_add_fact(&run->results, "host", false, "%.*s", (int)sizeof buf, buf);
	char *argv[] = { run->worker, run->image, "info", NULL };
	const struct bench_side *sides[] = { &run->native, &run->remote };
	for (int i = 0; i < 2; i++) {
		struct bench_output out;
		bench_run_workers(sides[i], argv, 1, false, 60, run->tmpdir, &out);
		const char *name = bench_output_get(&out, "gpu_name"), *version = bench_output_get(&out, "driver_version");
		bench_add_fact(&run->results, i ? "remote_gpu_name" : "gpu_name", false, "%s%s%s",
			       name ? name : "unknown", name || !out.reason[0] ? "" : ": ", name ? "" : out.reason);
		if (version)
			bench_add_fact(&run->results, i ? "remote_driver_version" : "driver_version", true, "%s", version);
		bench_output_free(&out);
	}
	bench_add_fact(&run->results, "quick", true, "%s", run->cfg->quick ? "true" : "false");
	bench_add_fact(&run->results, "repeat", true, "%d", run->cfg->repeat);
	bench_add_fact(&run->results, "native_lib", false, "%s", run->cfg->native_lib ? run->cfg->native_lib : "system");
	bench_add_fact(&run->results, "remorad_driver", false, "%s", run->cfg->driver ? run->cfg->driver : "system");
}

#ifdef RM_HAVE_TLS
/* Whether kernel TLS offload (kTLS) carries the records of a connection like the clients':
 * one dialled here to the daemon with the same CA, then closed. The daemon's side of the
 * same host does what its kernel allows, as this one does. */
void bench_record_ktls(struct bench_run *run, const char *addr, const char *ca)
{
	char why[300] = "";
	const char *hostport;
	const struct rm_transport *tp = rm_transport_for(addr, &hostport);
	struct rm_conn *c = NULL;
	int err = -EINVAL;
	if (tp && !rm_tls_client_configure(ca, NULL, NULL, why, sizeof why) && !(err = tp->dial(hostport, 5000, &c))) {
		int k = rm_tls_last_ktls();
		rm_conn_close(c);
		bench_add_fact(&run->results, "tls_ktls_tx", true, "%s", k & 1 ? "true" : "false");
		bench_add_fact(&run->results, "tls_ktls_rx", true, "%s", k & 2 ? "true" : "false");
		return;
	}
	fprintf(stderr, "remora bench: kTLS probe: %s\n", why[0] ? why : rm_transport_why(err));
	bench_add_fact(&run->results, "tls_ktls_tx", true, "null");
	bench_add_fact(&run->results, "tls_ktls_rx", true, "null");
}
#endif
