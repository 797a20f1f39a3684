/* How a copy crosses the link (docs/performance.md "Copies over a real link"): over one
 * connection, or striped over several in chunks of what size, chosen from the link as
 * measured rather than from a fixed size.
 *
 *   R  the round trip: the least a call without bulk took, over a window of such calls
 *      (the hello's first), so that it follows a link that changes;
 *   S  one stream's rate, per direction and size class: n / (t - R) of copies over one
 *      connection, a running mean (the i-th sample weighing 1/i, from the 8th 1/8);
 *   B  the whole rate of striped copies, likewise.
 *
 * A size class is a power of 4 from RM_COPY_PLAN_MIN_SHARE (256 KiB to 1 MiB, 1 to 4 MiB, ...,
 * 64 MiB and up): whether striping pays depends on the size, so each class is measured and
 * decided apart. With one rate for all sizes, a run of copies of one size set the choice for
 * the next size, and probes (1 in 16) took dozens of copies to undo it.
 *
 * A copy of n bytes is striped over L = as many links as give each at least
 * max(R·S, RM_COPY_PLAN_MIN_SHARE) bytes (a stream whose share is a round trip's worth keeps
 * its part of the link busy while the others carry theirs), at most the links attached, while
 * striping pays: a class's first copies go whole and striped in turns until each way has
 * RM_COPY_PLAN_WARM copies, the first of each way not a sample (it may pay for staging the
 * daemon sets up for a larger chunk: on the H100 one such 64 MiB copy over TLS, as the whole
 * striped rate, kept 64 MiB copies on one stream at 0.19 of TCP), and then striping is on
 * once B beats S by 10% and until it falls below S. One eligible copy in 16 goes the
 * other way, so that S and B stay measured (a link that one stream fills falls back to one
 * stream; one that it cannot fill, loopback or TLS, stripes). The chunk is the copy split
 * evenly over L, rounded up to RM_STRIPE_CHUNK_ALIGN (each link's share is one chunk,
 * pipelined by the daemon's staging). Before R is known, copies go as the fixed rule says
 * (fixed_min, the size from which copies stripe, chunk 0), one in 16 of them unstriped. R·S
 * for a class not yet measured takes the nearest measured class's S (none: shares of
 * RM_COPY_PLAN_MIN_SHARE).
 *
 * Pure arithmetic: callers serialise calls on one state (frontend/copy_links.c). */
#ifndef REMORA_COPY_PLAN_H
#define REMORA_COPY_PLAN_H

#include <stdint.h>

#define RM_COPY_PLAN_MIN_SHARE (256u << 10) /* the least a link carries of a striped copy */
#define RM_COPY_PLAN_RTT_WINDOW 64          /* calls a round trip's minimum is taken over */
#define RM_COPY_PLAN_PROBE_EVERY 16         /* one eligible copy in this many goes the other way */
#define RM_COPY_PLAN_SAMPLE_EVERY 8         /* one copy in this many that need not wait, waits */
#define RM_COPY_PLAN_CLASSES 5              /* size classes: 256 KiB, 1, 4, 16 and 64 MiB and up */
#define RM_COPY_PLAN_WARM 3                 /* copies each way a class makes before it chooses */

/* Per direction ([1]: to the host) and size class (rm_copy_plan_class). */
struct rm_copy_plan_state {
	uint64_t rtt_ns;     /* R (0: unknown) */
	uint64_t win_min_ns; /* the window's least so far (0: none) */
	uint32_t win_n;
	double stream_bps[2][RM_COPY_PLAN_CLASSES];  /* S (0: unknown) */
	double striped_bps[2][RM_COPY_PLAN_CLASSES]; /* B (0: unknown) */
	uint32_t eligible[2][RM_COPY_PLAN_CLASSES];  /* copies that could stripe, for the probe */
	int striping[2][RM_COPY_PLAN_CLASSES];       /* the choice but for probes: 1 stripe, 0 not, -1 none yet */
	uint8_t copies[2][RM_COPY_PLAN_CLASSES][2];  /* copies done, [0] whole and [1] striped (at most 255) */
	int changed[2];                              /* class + 1 whose striping changed (the caller logs and clears) */
	uint32_t unwaited[2][2];                     /* copies that need not wait, per direction and striped */
	uint64_t fixed_min;                          /* before R and S: stripe from this size (0: never) */
	int pipe_busy;                               /* a copy went unwaited since the last waited copy */
	int resample;                                /* the next copy that need not wait waits, a sample */
};

struct rm_copy_plan {
	uint32_t links; /* connections, the main one counted (1: not striped) */
	uint64_t chunk; /* the stripe chunk for the request (0: rm_stripe_chunk's rule) */
};

void rm_copy_plan_init(struct rm_copy_plan_state *st, uint64_t fixed_min);
/* The size class of a copy of n bytes: 0 below 1 MiB, up to RM_COPY_PLAN_CLASSES - 1. */
int rm_copy_plan_class(uint64_t n);
/* The rate a copy of n bytes moves at as planned (striped where the class stripes and that
 * is faster), or the nearest measured class's; 0 while none is measured. */
double rm_copy_plan_rate(const struct rm_copy_plan_state *st, int to_host, uint64_t n);
/* A call without bulk took ns from its send to its reply. */
void rm_copy_plan_rtt(struct rm_copy_plan_state *st, uint64_t ns);
/* The plan for a copy of n bytes (to_host 1: device to host) with max_links connections
 * at hand (1: none but the main one). */
struct rm_copy_plan rm_copy_plan_choose(struct rm_copy_plan_state *st, int to_host, uint64_t n, uint32_t max_links);
/* For a copy of n bytes going as plan says that need not wait for its reply (a blocking
 * copy from pageable memory, frontend/memory.c): 1 when it should wait all the same so that
 * the link stays measured: while its kind's rate (one stream or striped, that direction)
 * is not known, and then one such copy in RM_COPY_PLAN_SAMPLE_EVERY; 0 for copies too small
 * to measure (below RM_COPY_PLAN_MIN_SHARE). A waited copy behind unwaited ones waits for
 * theirs too, so it is no sample: the next copy that need not wait waits instead, behind
 * nothing (rm_copy_plan_done). */
int rm_copy_plan_sample(struct rm_copy_plan_state *st, int to_host, uint64_t n, struct rm_copy_plan plan);
/* A copy went unwaited without asking rm_copy_plan_sample (one compressed). */
void rm_copy_plan_unwaited(struct rm_copy_plan_state *st);
/* A copy of n bytes went as plan said and took ns, its reply waited for: a sample of its
 * way's rate unless copies went unwaited since the last waited one. ns 0: waited for, but
 * no sample (its links were cold); it still ends the copies unwaited before it. */
void rm_copy_plan_done(struct rm_copy_plan_state *st, int to_host, uint64_t n, struct rm_copy_plan plan, uint64_t ns);

#endif
