/* The parts of a copy (copy.h) between the copy itself, its shares' staging pipeline
 * (share.c) and the copy links that carry shares beside the session's connection
 * (copy_links.c). Chunk k of a striped copy travels on link k % links (common/wire.h); a
 * copy over one link is one chunk. */
#ifndef REMORA_STRIPE_H
#define REMORA_STRIPE_H

#include <cuda.h>
#include <stdint.h>

#include "copy_profile.h"
#include "dispatch.h"
#include "link.h"

/* One link's part of a striped copy: what the link's share is, and how it went. */
struct rm_stripe_job {
	int to_host;
	uint64_t dev, n;
	uint64_t chunk; /* the stripe chunk the request named (0: the wire's rule) */
	uint32_t links, index;
	CUstream stream;
	CUcontext ctx;
	CUresult result;  /* in: a failure already known (then bytes in are dropped); out: the first failure */
	int link_failed;  /* out: the link broke or fell out of step */
};

/* Where a share's bytes go through: a link and its staging. */
struct rm_share {
	struct rm_link *link;
	struct rm_request *bulk_rq; /* link 0 of a copy to the device: the request whose bulk it reads */
	/* Link 0 of a copy to the host: the reply it sends once its first piece is ready, so
	 * that the reply follows the work the copy waits for (heartbeats cover the wait). */
	struct rm_channel *reply_s;
	struct rm_request *reply_rq;
	uint64_t reply_bulk;
	struct rm_staging *staging;
	struct rm_channel *session; /* link 0's: the session whose thread runs it; else NULL */
	/* Link 0 of a copy in one piece that waits for its stream (a blocking one to the
	 * device, any to the host): no event is recorded for its staging buffer, since the
	 * stream is synchronized next (rm_copy_in, share_out). unrecorded: it was. */
	int sync_after, unrecorded;
	size_t piece; /* the most bytes of a piece (rm_share_piece): set by rm_share_run */
	int parts;    /* pieces to the device go in parts (rm_share_in_parts) */
	const struct rm_copy_profile *prof; /* link 0's, else an inactive one */
	struct rm_time_tally *wait, *dma;   /* where its waits and copy calls are counted */
};

/* Over shared memory (RM_TRANSPORT_MEMORY), where one connection brings a copy's bytes at
 * about one core's memcpy rate, large pieces go in parts so that the DMA overlaps the
 * ring: to the device, a piece of len bytes (rm_share_piece) is handed to the driver a
 * part at a time (rm_share_part), each as soon as it is read. A part is a quarter of the
 * piece (64 KiB multiples), at least RM_SHARE_PART_MIN: what is smaller goes whole, its
 * DMA taking less than the calls and waits of more parts. Other transports hand the
 * driver whole pieces. */
#define RM_SHARE_PART_MIN (1u << 20)
static inline int rm_share_in_parts(const struct rm_link *link)
{
	return (link->conn->tp->flags & RM_TRANSPORT_MEMORY) != 0;
}
/* A quarter of len, rounded up to 64 KiB, at least least (pieces' and parts' rule). */
static inline uint64_t rm_share_quarter(uint64_t len, uint64_t least)
{
	uint64_t q = (len / 4 + 65535) & ~(uint64_t)65535;
	return q > least ? q : least;
}
static inline uint64_t rm_share_part(uint64_t len)
{
	return rm_share_quarter(len, RM_SHARE_PART_MIN);
}
/* Moves a link's share of job j through its staging: reads each piece and copies it to
 * the device, or copies each piece from the device and sends it, the network overlapping
 * the DMA. */
void rm_share_run(struct rm_share *sh, struct rm_stripe_job *j);

/* The most bytes of one piece of a chunk of chunk_len bytes through staging of size bytes:
 * a quarter of the chunk (at least RM_SHARE_PIECE_MIN, a multiple of 64 KiB), within the
 * staging's size. A chunk in one piece is read whole before its DMA starts (or copied whole
 * before its first byte goes), so that DMA and the stream's wait followed the network; in
 * four, only the last quarter's does (a 1 MiB copy: about 40 us less on an H100). */
#define RM_SHARE_PIECE_MIN (256u << 10) /* smaller: an event's record and wait cost more than they save */
size_t rm_share_piece(size_t staging_size, uint64_t chunk_len);

/* Runs jobs[1..links-1] on copy links 1..links-1, on their threads, and jobs[0] on sh0
 * here; returns once all are done. One striped copy at a time, whichever channel it
 * comes on. */
void rm_copy_links_run(struct rm_channel *s, struct rm_share *sh0, struct rm_stripe_job *jobs, uint32_t links);

#endif
