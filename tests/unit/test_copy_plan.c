/* The copy plan (common/copy_plan.h) against modelled links: a copy of n bytes over L
 * links takes R + n / min(L·S1, B) + (L > 1 ? W : 0), one stream's rate S1, the link's B,
 * W the cost of waking the links' threads. Checks what it chooses once it has seen a few. */
#include <stdio.h>

#include "copy_plan.h"
#include "expect.h"
#include "wire.h"

#define KIB (1ull << 10)
#define MIB (1ull << 20)

struct model {
	double rtt_s, stream_bps, link_bps, wake_s;
};

static uint64_t copy_ns(const struct model *m, uint64_t n, uint32_t links)
{
	double rate = links * m->stream_bps < m->link_bps ? links * m->stream_bps : m->link_bps;
	return (uint64_t)((m->rtt_s + (double)n / rate + (links > 1 ? m->wake_s : 0)) * 1e9);
}

/* Warms st on m (round trips, then copies of n in both directions), then returns how many
 * of the next 32 copies of n to the device were striped; every plan is checked. */
static int striped_of_32(struct rm_copy_plan_state *st, const struct model *m, uint64_t n, uint32_t max_links)
{
	for (int i = 0; i < 64; i++)
		rm_copy_plan_rtt(st, copy_ns(m, 0, 1) + (uint64_t)(i % 7) * 1000);
	int striped = 0;
	for (int i = 0; i < 96; i++) {
		struct rm_copy_plan p = rm_copy_plan_choose(st, 0, n, max_links);
		EXPECT(p.links >= 1 && p.links <= max_links);
		EXPECT(rm_stripe_chunk_ok(n, p.links, p.chunk));
		EXPECT(p.links == 1 || p.chunk == 0 || p.chunk * p.links >= n);
		if (i >= 64)
			striped += p.links > 1;
		rm_copy_plan_done(st, 0, n, p, copy_ns(m, n, p.links));
	}
	return striped;
}

/* The next plan for n that is not the 1-in-16 probe (of two in a row, one is not). */
static struct rm_copy_plan next_plan(struct rm_copy_plan_state *st, uint64_t n, uint32_t max_links)
{
	struct rm_copy_plan a = rm_copy_plan_choose(st, 0, n, max_links);
	struct rm_copy_plan b = rm_copy_plan_choose(st, 0, n, max_links);
	return a.links > b.links ? a : b;
}

int main(void)
{
	int failures = 0;
	struct rm_copy_plan_state st;

	/* Nothing measured: the fixed rule, one copy in 16 left whole to measure one stream. */
	rm_copy_plan_init(&st, 16 * MIB);
	EXPECT(rm_copy_plan_choose(&st, 0, 8 * MIB, 4).links == 1);
	int fixed = 0;
	for (int i = 0; i < 16; i++)
		fixed += rm_copy_plan_choose(&st, 1, 32 * MIB, 4).links == 4;
	EXPECT(fixed == 15);
	EXPECT(rm_copy_plan_choose(&st, 0, 64 * MIB, 1).links == 1);

	/* Loopback: 20 us, one stream 5 GB/s, 20 GB/s in all. 4 MiB copies stripe over the
	 * 4 links (shares of 1 MiB, a round trip's worth being 100 KB), 1 in 16 not;
	 * 256 KiB ones stay whole (a share would be under RM_COPY_PLAN_MIN_SHARE). */
	struct model loop = {20e-6, 5e9, 20e9, 10e-6};
	rm_copy_plan_init(&st, 16 * MIB);
	EXPECT(striped_of_32(&st, &loop, 4 * MIB, 4) == 30);
	struct rm_copy_plan p = next_plan(&st, 4 * MIB, 4);
	EXPECT(p.links == 4 && p.chunk == 1 * MIB);
	p = next_plan(&st, 2 * MIB + 1, 4);
	EXPECT(p.links <= 2 || p.chunk % RM_STRIPE_CHUNK_ALIGN == 0);
	rm_copy_plan_init(&st, 16 * MIB);
	EXPECT(striped_of_32(&st, &loop, 256 * KIB, 4) == 0);
	rm_copy_plan_init(&st, 16 * MIB);
	EXPECT(striped_of_32(&st, &loop, 512 * KIB, 4) == 30);

	/* TLS on loopback: one stream 1.5 GB/s: 1 MiB copies stripe (each share 256 KiB). */
	struct model tls = {25e-6, 1.5e9, 12e9, 10e-6};
	rm_copy_plan_init(&st, 16 * MIB);
	EXPECT(striped_of_32(&st, &tls, 1 * MIB, 8) == 30);
	p = next_plan(&st, 1 * MIB, 8);
	EXPECT(p.links == 4 && p.chunk == 256 * KIB);

	/* A link one stream fills (2 ms, 250 MB/s): striping gains nothing, so after the first
	 * few copies only the probe, 1 in 16, stripes. */
	struct model wan = {2e-3, 250e6, 250e6, 10e-6};
	rm_copy_plan_init(&st, 16 * MIB);
	EXPECT(striped_of_32(&st, &wan, 64 * MIB, 4) == 2);
	/* Its shares would be R·S = 500 KB: 1 MiB copies could take 2 links at most. */
	p = rm_copy_plan_choose(&st, 0, 1 * MIB, 4);
	EXPECT(p.links <= 2);

	/* 25 GbE at 50 us that one stream fills at 3 GB/s: 16 MiB copies go whole. */
	struct model dc = {50e-6, 3e9, 3.1e9, 10e-6};
	rm_copy_plan_init(&st, 16 * MIB);
	EXPECT(striped_of_32(&st, &dc, 16 * MIB, 4) == 2);
	/* The emulated 25 GbE link: one stream 2.7 GB/s of the link's 3.1: 1 MiB copies stripe
	 * (R·S = 135 KB, so 4 shares of 256 KiB). */
	struct model emu = {50e-6, 2.7e9, 3.1e9, 10e-6};
	rm_copy_plan_init(&st, 16 * MIB);
	EXPECT(striped_of_32(&st, &emu, 1 * MIB, 4) == 30);
	p = next_plan(&st, 1 * MIB, 4);
	EXPECT(p.links == 4 && p.chunk == 256 * KIB);

	/* Sizes decided apart: where waking the links costs 1 ms (one stream 1.5 GB/s, 12 GB/s in
	 * all), 1 MiB copies go whole (1.2 ms striped, 0.72 whole) and 64 MiB ones stripe (6.6 ms
	 * against 45), the two sizes in turns; one rate for both striped the 1 MiB copies too. */
	struct model wake = {25e-6, 1.5e9, 12e9, 1e-3};
	rm_copy_plan_init(&st, 16 * MIB);
	for (int i = 0; i < 64; i++)
		rm_copy_plan_rtt(&st, copy_ns(&wake, 0, 1));
	int small_striped = 0, large_striped = 0;
	for (int i = 0; i < 96; i++) {
		struct rm_copy_plan a = rm_copy_plan_choose(&st, 0, 1 * MIB, 8);
		rm_copy_plan_done(&st, 0, 1 * MIB, a, copy_ns(&wake, 1 * MIB, a.links));
		struct rm_copy_plan b = rm_copy_plan_choose(&st, 0, 64 * MIB, 8);
		rm_copy_plan_done(&st, 0, 64 * MIB, b, copy_ns(&wake, 64 * MIB, b.links));
		if (i >= 64) {
			small_striped += a.links > 1;
			large_striped += b.links > 1;
		}
	}
	EXPECT(small_striped == 2 && large_striped == 30);
	EXPECT(rm_copy_plan_class(1 * MIB - 1) == 0 && rm_copy_plan_class(1 * MIB) == 1);
	EXPECT(rm_copy_plan_class(64 * MIB) == RM_COPY_PLAN_CLASSES - 1 && rm_copy_plan_class(1ull << 40) == RM_COPY_PLAN_CLASSES - 1);

	/* Copies that need not wait (pageable, to the device) wait while their class warms
	 * (RM_COPY_PLAN_WARM copies of their way, the first not a sample), then one in
	 * RM_COPY_PLAN_SAMPLE_EVERY; small ones never. */
	rm_copy_plan_init(&st, 16 * MIB);
	struct rm_copy_plan whole = {1, 0}, four = {4, 256 * KIB};
	EXPECT(rm_copy_plan_sample(&st, 0, 1 * MIB, whole) == 1); /* no round trip yet */
	rm_copy_plan_rtt(&st, 50000);
	for (int i = 0; i < RM_COPY_PLAN_WARM; i++) {
		EXPECT(rm_copy_plan_sample(&st, 0, 1 * MIB, whole) == 1);
		rm_copy_plan_done(&st, 0, 1 * MIB, whole, i ? 450000 : 5000000); /* the first: staging set up */
	}
	EXPECT(st.stream_bps[0][1] > 2.5e9 && st.stream_bps[1][1] == 0); /* 1 MiB in 400 us, the first not counted */
	EXPECT(rm_copy_plan_rate(&st, 0, 64 * MIB) == st.stream_bps[0][1]); /* the nearest class measured */
	EXPECT(rm_copy_plan_sample(&st, 0, 1 * MIB, four) == 1);  /* striped: not measured yet */
	EXPECT(rm_copy_plan_sample(&st, 1, 1 * MIB, whole) == 1); /* the other direction either */
	EXPECT(rm_copy_plan_sample(&st, 0, 64 * KIB, whole) == 0);
	int waits = 0;
	for (int i = 0; i < 4 * RM_COPY_PLAN_SAMPLE_EVERY; i++)
		waits += rm_copy_plan_sample(&st, 0, 1 * MIB, whole);
	EXPECT(waits == 4);

	/* A waited copy behind unwaited ones took their time too: no sample; the next copy that
	 * need not wait waits instead, behind nothing, and is one. */
	double before = st.stream_bps[0][1];
	rm_copy_plan_done(&st, 0, 1 * MIB, whole, 8 * 450000); /* seven queued before it */
	EXPECT(st.stream_bps[0][1] == before);
	EXPECT(rm_copy_plan_sample(&st, 0, 1 * MIB, whole) == 1);
	rm_copy_plan_done(&st, 0, 1 * MIB, whole, 350000);
	EXPECT(st.stream_bps[0][1] > before);
	EXPECT(rm_copy_plan_sample(&st, 0, 1 * MIB, whole) == 0); /* and then one in eight again */
	rm_copy_plan_unwaited(&st); /* a compressed copy went unwaited: the next waited is none */
	rm_copy_plan_done(&st, 1, 1 * MIB, whole, 9000000);
	EXPECT(st.copies[1][1][0] == 0 && st.resample); /* not even counted as its way's first */
	EXPECT(rm_copy_plan_sample(&st, 0, 1 * MIB, whole) == 1);
	rm_copy_plan_done(&st, 0, 1 * MIB, whole, 350000);
	/* A waited copy that is no sample (ns 0: cold links) still ends the unwaited mark: the
	 * next waited copy is one. */
	before = st.stream_bps[0][1];
	EXPECT(rm_copy_plan_sample(&st, 0, 1 * MIB, whole) == 0);
	rm_copy_plan_done(&st, 0, 1 * MIB, four, 0);
	EXPECT(!st.pipe_busy && st.copies[0][1][1] == 0);
	rm_copy_plan_done(&st, 0, 1 * MIB, whole, 300000);
	EXPECT(st.stream_bps[0][1] > before);

	/* A class warms with whole and striped copies in turns, the first of each way not a
	 * sample: one slow first striped copy does not turn striping off (the TLS model). */
	rm_copy_plan_init(&st, 16 * MIB);
	for (int i = 0; i < 64; i++)
		rm_copy_plan_rtt(&st, copy_ns(&tls, 0, 1));
	int ways[2] = {0, 0};
	for (int i = 0; i < 2 * RM_COPY_PLAN_WARM; i++) {
		struct rm_copy_plan q = rm_copy_plan_choose(&st, 0, 64 * MIB, 8);
		ways[q.links > 1]++;
		EXPECT((q.links > 1) == (i % 2 == 1));
		rm_copy_plan_done(&st, 0, 64 * MIB, q, copy_ns(&tls, 64 * MIB, q.links) * (i == 1 ? 20 : 1));
	}
	EXPECT(ways[0] == RM_COPY_PLAN_WARM && ways[1] == RM_COPY_PLAN_WARM);
	EXPECT(next_plan(&st, 64 * MIB, 8).links == 8);

	/* The round trip follows the link: a window of slower calls raises it. */
	rm_copy_plan_init(&st, 0);
	for (int i = 0; i < RM_COPY_PLAN_RTT_WINDOW; i++)
		rm_copy_plan_rtt(&st, 20000);
	EXPECT(st.rtt_ns == 20000);
	for (int i = 0; i < RM_COPY_PLAN_RTT_WINDOW; i++)
		rm_copy_plan_rtt(&st, 50000 + (uint64_t)i);
	EXPECT(st.rtt_ns == 50000);
	rm_copy_plan_rtt(&st, 30000);
	EXPECT(st.rtt_ns == 30000);

	if (!failures)
		printf("copy_plan: ok\n");
	return failures ? 1 : 0;
}
