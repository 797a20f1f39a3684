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
#define RM_MAX_COPY3D_BULK (16u << 20)     /* host bytes of one cuMemcpy2D/3D piece */
#define RM_POINTER_ATTRIBUTE_SLOT 16       /* bytes of one attribute's value on the wire (the largest, P2P tokens) */
#define RM_MANAGED_ALIGN (64u << 10)       /* a managed allocation is a whole number of these
					    * (docs/managed-memory.md): the client maps it page by page */
#define RM_MAX_GRAPH_DEPS 4096             /* node handles in one graph message (dependencies, nodes) */
#define RM_MAX_COND_BODIES 1024           /* body graphs of one conditional (SWITCH) node */
#define RM_MAX_KERNEL_PARAMS 512           /* parameters of one function's layout (rmFuncGetParamLayout) */

/* Frame flags. */
enum {
	RM_F_REPLY = 1u << 0,      /* daemon to client */
	RM_F_ASYNC = 1u << 1,      /* request that expects no reply */
	RM_F_PER_THREAD = 1u << 2, /* the call came through a _ptds/_ptsz entry point */
};

/* Reserved opcodes outside the generated ones (proto/reserved_ops.def says what each is). */
enum {
#define RM_RESERVED_OP(name, value, served_by, direction) name = value,
#include "../proto/reserved_ops.def"
#undef RM_RESERVED_OP
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
	RM_NVML_HAS_NUMA_NODE = 64,   /* DeviceStateReply.numa_node */
};

/* Liveness (docs/protocol.md): a peer silent for its timeout is taken for dead. Each side
 * asks in the hello for a heartbeat at least this often; nobody is asked for more. */
#define RM_DEFAULT_PEER_TIMEOUT_MS 30000
#define RM_MIN_HEARTBEAT_MS 100

/* Striped copies: a copy of n bytes over links links (the session's connection is
 * link 0, its attached copy links 1..links-1) is cut into chunks of c bytes (the last one
 * shorter); chunk k travels on link k % links, each link's chunks in order, as raw bytes.
 * c is the request's chunk where it names one (the client's plan, common/copy_plan.h: a
 * multiple of RM_STRIPE_CHUNK_ALIGN, at most RM_STRIPE_MAX_CHUNKS_PER_LINK chunks a link,
 * rm_stripe_chunk_ok), else (0) rm_stripe_chunk(n, links), the rule of older clients. */
#define RM_MAX_COPY_LINKS 8
/* Channels (docs/protocol.md): connections of client threads beside the main one, at most. */
#define RM_MAX_CHANNELS 256
#define RM_DEFAULT_MAX_CHANNELS 64
#define RM_STRIPE_MIN_CHUNK (4ull << 20)
#define RM_STRIPE_MAX_CHUNKS_PER_LINK 256 /* larger copies get larger chunks */
#define RM_STRIPE_CHUNK_ALIGN (64ull << 10)

static inline uint64_t rm_stripe_chunk(uint64_t n, uint32_t links)
{
	uint64_t per_link = (n + links - 1) / links;
	uint64_t c = (per_link + RM_STRIPE_MAX_CHUNKS_PER_LINK - 1) / RM_STRIPE_MAX_CHUNKS_PER_LINK;
	return c < RM_STRIPE_MIN_CHUNK ? RM_STRIPE_MIN_CHUNK : (c + 4095) & ~4095ull;
}

/* Whether chunk (0: the rule) is one a peer may ask for a copy of n bytes over links. */
static inline int rm_stripe_chunk_ok(uint64_t n, uint32_t links, uint64_t chunk)
{
	if (chunk == 0)
		return 1;
	if (chunk % RM_STRIPE_CHUNK_ALIGN || links == 0 || links > RM_MAX_COPY_LINKS)
		return 0;
	/* No larger than the copy (rounded up): n + chunk then cannot wrap. */
	if (n > UINT64_MAX / 4 || chunk / RM_STRIPE_CHUNK_ALIGN > n / RM_STRIPE_CHUNK_ALIGN + 1)
		return 0;
	uint64_t chunks = n / chunk + (n % chunk != 0);
	return chunks <= (uint64_t)RM_STRIPE_MAX_CHUNKS_PER_LINK * links;
}

/* The chunk of an n-byte copy over links links whose request named chunk. */
static inline uint64_t rm_stripe_chunk_of(uint64_t n, uint32_t links, uint64_t chunk)
{
	return chunk ? chunk : rm_stripe_chunk(n, links);
}

/* Bytes of an n-byte copy over links links, in chunks of chunk (0: the rule), that travel
 * on link j. */
static inline uint64_t rm_stripe_share(uint64_t n, uint32_t links, uint64_t chunk, uint32_t j)
{
	uint64_t c = rm_stripe_chunk_of(n, links, chunk), chunks = (n + c - 1) / c, share = 0;
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
