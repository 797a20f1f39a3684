/* Copies' stripes and chunks from the measured link (copy_plan.h). */
#include "copy_plan.h"

#include "wire.h"

#define WEIGHT (1.0 / 8)   /* a copy's share of its rate's running mean */
#define STRIPE_GAIN 1.1    /* striping stays on while it beats one stream by this */
/* A link's share of a striped copy: at least this many R·S. 4 (before) gave a 1 MiB copy
 * over 25 GbE at 50 us one link, whose bound is n / (n + R·S) = 0.88 of one stream; striped,
 * the streams together may carry more than one does (one carried 21.65 of the emulated
 * link's 25 Gbit/s), and B against S still turns striping off where it does not pay. */
#define SHARE_RTTS 1

void rm_copy_plan_init(struct rm_copy_plan_state *st, uint64_t fixed_min)
{
	*st = (struct rm_copy_plan_state){.fixed_min = fixed_min};
	for (int d = 0; d < 2; d++)
		for (int k = 0; k < RM_COPY_PLAN_CLASSES; k++)
			st->striping[d][k] = -1;
}

int rm_copy_plan_class(uint64_t n)
{
	int k = 0;
	for (uint64_t top = (uint64_t)RM_COPY_PLAN_MIN_SHARE * 4; n >= top && k < RM_COPY_PLAN_CLASSES - 1; top *= 4)
		k++;
	return k;
}

/* rates[k] if measured, else the nearest measured class's (the smaller on a tie); 0: none. */
static double nearest(const double *rates, int k)
{
	for (int dist = 0; dist < RM_COPY_PLAN_CLASSES; dist++) {
		if (k - dist >= 0 && rates[k - dist] > 0)
			return rates[k - dist];
		if (k + dist < RM_COPY_PLAN_CLASSES && rates[k + dist] > 0)
			return rates[k + dist];
	}
	return 0;
}

double rm_copy_plan_rate(const struct rm_copy_plan_state *st, int to_host, uint64_t n)
{
	int d = !!to_host, k = rm_copy_plan_class(n);
	double s = nearest(st->stream_bps[d], k), b = st->striped_bps[d][k];
	return st->striping[d][k] == 1 && b > s ? b : s;
}

void rm_copy_plan_rtt(struct rm_copy_plan_state *st, uint64_t ns)
{
	if (!ns)
		return;
	if (!st->rtt_ns || ns < st->rtt_ns)
		st->rtt_ns = ns;
	if (!st->win_min_ns || ns < st->win_min_ns)
		st->win_min_ns = ns;
	if (++st->win_n == RM_COPY_PLAN_RTT_WINDOW) { /* the last window's least, up or down */
		st->rtt_ns = st->win_min_ns;
		st->win_min_ns = 0;
		st->win_n = 0;
	}
}

/* Links of one copy: as many as give each at least share bytes, within max_links. */
static uint32_t links_for(uint64_t n, uint64_t share, uint32_t max_links)
{
	uint64_t l = n / share;
	return l < max_links ? (uint32_t)l : max_links;
}

struct rm_copy_plan rm_copy_plan_choose(struct rm_copy_plan_state *st, int to_host, uint64_t n, uint32_t max_links)
{
	struct rm_copy_plan p = {1, 0};
	int d = !!to_host, k = rm_copy_plan_class(n);
	double s_any = nearest(st->stream_bps[d], k), s = st->stream_bps[d][k], b = st->striped_bps[d][k];
	if (max_links < 2)
		return p;
	if (!st->rtt_ns) { /* no round trip measured yet: the fixed rule, but for a probe */
		if (st->fixed_min && n >= st->fixed_min && ++st->eligible[d][k] % RM_COPY_PLAN_PROBE_EVERY)
			p.links = max_links;
		return p;
	}
	double bdp = (double)st->rtt_ns * 1e-9 * s_any; /* 0 before any S: shares of the least */
	uint64_t share = bdp * SHARE_RTTS > RM_COPY_PLAN_MIN_SHARE ? (uint64_t)(bdp * SHARE_RTTS) : RM_COPY_PLAN_MIN_SHARE;
	uint32_t l = links_for(n, share, max_links);
	if (l < 2)
		return p;
	const uint8_t *done = st->copies[d][k];
	int stripe;
	if (done[0] < RM_COPY_PLAN_WARM || done[1] < RM_COPY_PLAN_WARM) {
		stripe = done[1] < done[0]; /* warming: whole and striped in turns */
		goto planned;
	}
	/* On at a gain of 10%, off below none: no flapping on a gain near the bar. */
	stripe = b >= s * (st->striping[d][k] == 1 ? 1.0 : STRIPE_GAIN);
	if (stripe != st->striping[d][k]) {
		st->striping[d][k] = stripe;
		st->changed[d] = k + 1;
	}
	if (++st->eligible[d][k] % RM_COPY_PLAN_PROBE_EVERY == 0)
		stripe = !stripe; /* measure the other way too */
planned:
	if (!stripe)
		return p;
	uint64_t c = (n + l - 1) / l;
	c = (c + RM_STRIPE_CHUNK_ALIGN - 1) / RM_STRIPE_CHUNK_ALIGN * RM_STRIPE_CHUNK_ALIGN;
	p.links = l;
	p.chunk = c;
	return p;
}

int rm_copy_plan_sample(struct rm_copy_plan_state *st, int to_host, uint64_t n, struct rm_copy_plan plan)
{
	int d = !!to_host, k = rm_copy_plan_class(n), striped = plan.links > 1, wait;
	if (n < RM_COPY_PLAN_MIN_SHARE)
		wait = 0;
	else if (st->copies[d][k][striped] < RM_COPY_PLAN_WARM || !st->rtt_ns || st->resample)
		wait = 1;
	else
		wait = ++st->unwaited[d][striped] % RM_COPY_PLAN_SAMPLE_EVERY == 0;
	if (wait)
		st->resample = 0;
	else
		st->pipe_busy = 1;
	return wait;
}

/* A running mean, not a maximum: striped and whole copies are sampled 15 to 1, and the
 * maximum of more samples of a noisy rate is larger (on a loaded 2-CPU machine TLS kept
 * striping 1 MiB copies that one stream moved faster). The i-th sample weighs 1/i until
 * that is WEIGHT, so that the first does not decide alone. */
static void rate_sample(double *rate, double sample, unsigned i)
{
	double w = 1.0 / i > WEIGHT ? 1.0 / i : WEIGHT;
	*rate += (sample - *rate) * w;
}

void rm_copy_plan_unwaited(struct rm_copy_plan_state *st)
{
	st->pipe_busy = 1;
}

void rm_copy_plan_done(struct rm_copy_plan_state *st, int to_host, uint64_t n, struct rm_copy_plan plan, uint64_t ns)
{
	int d = !!to_host, k = rm_copy_plan_class(n), striped = plan.links > 1;
	if (st->pipe_busy) { /* its time was theirs too (on the H100 a 1 MiB copy to the device
			      * waiting behind seven flapped striping on and off) */
		st->pipe_busy = 0;
		st->resample = 1;
		return;
	}
	if (n < RM_COPY_PLAN_MIN_SHARE || ns <= st->rtt_ns) /* ns 0 among them */
		return;
	uint8_t *done = &st->copies[d][k][striped];
	if (*done < UINT8_MAX)
		(*done)++;
	if (*done == 1)
		return; /* the first of its way in its class: staging set up, not a sample */
	double rate = (double)n / ((double)(ns - st->rtt_ns) * 1e-9);
	rate_sample(striped ? &st->striped_bps[d][k] : &st->stream_bps[d][k], rate, *done - 1u);
}
