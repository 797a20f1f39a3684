/* Remora wire framing: what travels on every transport (docs/protocol.md). */
#ifndef REMORA_WIRE_H
#define REMORA_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define RM_WIRE_MAGIC 0x524d5231u /* "RMR1" */
#define RM_PROTOCOL_VERSION 1u

/* Bounds checked before anything is allocated. */
#define RM_MAX_MSG_LEN (1u << 20)          /* protobuf part of one frame */
#define RM_MAX_BULK_LEN (1ull << 40)       /* bulk part; each op bounds it further */
#define RM_MAX_IMAGE_LEN (1ull << 30)      /* a module image */
#define RM_MAX_OUT_BUF (1u << 16)          /* an out[LEN] buffer of a generated call */
#define RM_MAX_POINTER_ATTRIBUTES 64       /* attributes of one cuPointerGetAttributes */
#define RM_POINTER_ATTRIBUTE_SLOT 16       /* bytes of one attribute's value on the wire (the largest, P2P tokens) */
#define RM_MANAGED_ALIGN (64u << 10)       /* a managed allocation is a whole number of these
					    * (docs/managed-memory.md): the client maps it page by page */
#define RM_MAX_RANGE_ATTRIBUTE 1024        /* bytes of one cuMemRangeGetAttribute answer */
#define RM_MAX_GRAPH_DEPS 4096             /* node handles in one graph message (dependencies, nodes) */
#define RM_MAX_KERNEL_PARAMS 512           /* parameters of one function's layout (rmFuncGetParamLayout) */

/* Frame flags. */
enum {
	RM_F_REPLY = 1u << 0,      /* daemon to client */
	RM_F_ASYNC = 1u << 1,      /* request that expects no reply */
	RM_F_PER_THREAD = 1u << 2, /* the call came through a _ptds/_ptsz entry point */
};

/* Reserved opcodes outside the generated ones (proto/api.spec starts at 1). */
enum {
	RM_OP_HELLO = 0,
	RM_OP_STATUS = 0x10000, /* first frame of an admin connection: remora.StatusReply (docs/pool.md) */
	RM_OP_ATTACH = 0x10001, /* first frame of a copy link: remora.Attach (docs/protocol.md) */
	RM_OP_HEARTBEAT = 0x10002, /* empty: a client idle on its connection, or a daemon busy
				    * with the client's call, is alive (docs/protocol.md) */
	RM_OP_FENCE = 0x10003,     /* async, remora.Fence: the next call of this channel waits
				    * until another channel has finished a request (docs/protocol.md) */
	RM_OP_GOING_AWAY = 0x10004, /* empty, from the daemon: it is stopping, and the connection
				     * ends after this frame (docs/protocol.md) */
	RM_OP_DEVICE_STATE = 0x10005, /* remora.DeviceState: what NVML tells of a GPU the client
				       * sees (docs/operations.md, the NVML shim) */
	/* Host functions (docs/protocol.md, "Host functions"), all empty: */
	RM_OP_HOST_LISTEN = 0x10006, /* a channel becomes the session's callback channel;
				      * answered by an empty reply frame */
	RM_OP_HOST_CALL = 0x10007,   /* daemon to callback channel, flagged a reply: run host
				      * function seq (the id its cuLaunchHostFunc gave), then answer */
	RM_OP_HOST_DONE = 0x10008,   /* async, on the callback channel: host function seq returned */
	RM_OP_HOST_NODE_CALL = 0x10009, /* as RM_OP_HOST_CALL, for a graph's host node: the client
					 * keeps function seq, as the node runs at every launch */
	/* Shared pinned memory (docs/hotpath.md), over a transport that passes descriptors: */
	RM_OP_HOST_SHARE = 0x1000A,   /* remora.HostShare: the memfd passed just before this frame
				       * is the client's pinned allocation addr; empty reply */
	RM_OP_HOST_UNSHARE = 0x1000B, /* remora.HostShare (addr only): no longer shared; empty reply */
	RM_OP_FAULT_NOTICE = 0x1000C, /* from the daemon, flagged a reply, just before a call's reply:
				       * one line of text (at most RM_NOTICE_MAX bytes) saying why
				       * the call fails: another client's fault broke the shared
				       * context (docs/sharing.md, "Faults") */
};

#define RM_NOTICE_MAX 512

/* Shared pinned memory: regions one session may share at most (each at least a page). */
#define RM_MAX_SHARED_REGIONS 4096

/* Bits of remora.DeviceStateReply's valid: the GPU host's NVML gave that figure. */
enum {
	RM_NVML_HAS_UTILIZATION = 1,
	RM_NVML_HAS_TEMPERATURE = 2,
	RM_NVML_HAS_POWER = 4,
	RM_NVML_HAS_BRAND = 8,
	RM_NVML_HAS_DRIVER_VERSION = 16,
	RM_NVML_HAS_POWER_LIMIT = 32,
};

/* Liveness (docs/protocol.md): a peer silent for its timeout is taken for dead. Each side
 * asks in the hello for a heartbeat at least this often; nobody is asked for more. */
#define RM_DEFAULT_PEER_TIMEOUT_MS 30000
#define RM_MIN_HEARTBEAT_MS 100

/* Striped copies: a copy of n bytes over links links (the session's connection is
 * link 0, its attached copy links 1..links-1) is cut into chunks of
 * rm_stripe_chunk(n, links) bytes (the last one shorter); chunk k travels on link
 * k % links, each link's chunks in order, as raw bytes. */
#define RM_MAX_COPY_LINKS 8
/* Channels (docs/protocol.md): connections of client threads beside the main one, at most. */
#define RM_MAX_CHANNELS 256
#define RM_DEFAULT_MAX_CHANNELS 64
#define RM_STRIPE_MIN_CHUNK (4ull << 20)
#define RM_STRIPE_MAX_CHUNKS_PER_LINK 256 /* larger copies get larger chunks */

static inline uint64_t rm_stripe_chunk(uint64_t n, uint32_t links)
{
	uint64_t per_link = (n + links - 1) / links;
	uint64_t c = (per_link + RM_STRIPE_MAX_CHUNKS_PER_LINK - 1) / RM_STRIPE_MAX_CHUNKS_PER_LINK;
	return c < RM_STRIPE_MIN_CHUNK ? RM_STRIPE_MIN_CHUNK : (c + 4095) & ~4095ull;
}

/* Bytes of an n-byte copy over links links that travel on link j. */
static inline uint64_t rm_stripe_share(uint64_t n, uint32_t links, uint32_t j)
{
	uint64_t c = rm_stripe_chunk(n, links), chunks = (n + c - 1) / c, share = 0;
	for (uint64_t k = j; k < chunks; k += links)
		share += n - k * c < c ? n - k * c : c;
	return share;
}

/* Every frame: this header, then msg_len bytes of protobuf, then bulk_len raw bytes.
 * All fields little-endian. A reply carries the request's seq and opcode. */
struct rm_frame {
	uint32_t magic;
	uint32_t op;
	uint64_t seq;
	uint32_t msg_len;
	uint32_t flags;
	uint64_t bulk_len;
	uint64_t ctx;         /* request: the client's current context (0: none) */
	int32_t result;       /* reply: the call's CUresult */
	int32_t async_result; /* reply: first error of earlier async calls, then cleared */
};

#define RM_FRAME_LEN 48

void rm_frame_encode(const struct rm_frame *f, uint8_t out[RM_FRAME_LEN]);
/* Decodes and checks magic and the protobuf bound; returns 0 or -EPROTO. */
int rm_frame_decode(const uint8_t in[RM_FRAME_LEN], struct rm_frame *f);

#endif
