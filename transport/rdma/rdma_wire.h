/* The rdma transport's own bytes (docs/protocol.md, "RDMA"), as pure encoders and checking
 * decoders: every one of them reads bytes a peer chose (tests/fuzz/fuzz_rdma_wire.c).
 *
 * A connection starts on TCP, where each side's bytes travel in chunks (an 8-byte header:
 * type, three zero bytes, length little-endian; then the length's bytes):
 *   DATA     the caller's bytes;
 *   UPGRADE  remorad's worker to the client, its last chunk: connect over RDMA to this port
 *            with this nonce (an offer, RM_RDMA_OFFER_LEN bytes);
 *   SWITCH   the client to the worker, its last chunk, once the RDMA connection stands.
 * The client's RDMA connect carries the nonce and its receive geometry (an answer, in the
 * connect's private data). Offer and answer each name the features their side has; a
 * connection uses those both have. On RDMA every message is one send: an 8-byte header
 * (payload length, receive buffers returned, credit-only messages seen, kind) and the
 * payload. A message's kind: bytes (length 0: credit-only); a read offer (with the feature
 * READS: the receiver reads the offered bytes from the sender's memory by RDMA read); a
 * read done (the receiver has read all of the offer, which is the sender's again). */
#ifndef REMORA_RDMA_WIRE_H
#define REMORA_RDMA_WIRE_H

#include <stddef.h>
#include <stdint.h>

enum rm_rdma_chunk_type { RM_RDMA_DATA = 1, RM_RDMA_UPGRADE = 2, RM_RDMA_SWITCH = 3 };

#define RM_RDMA_CHUNK_HEADER_LEN 8
#define RM_RDMA_NONCE_LEN 16
#define RM_RDMA_OFFER_LEN 28  /* port (2, network order), features, a zero byte, nonce, geometry */
#define RM_RDMA_ANSWER_LEN 28 /* nonce, geometry, features (4) */
#define RM_RDMA_MSG_HEADER_LEN 8
#define RM_RDMA_READ_OFFER_LEN 16 /* address (8), rkey (4), length (4) */

/* Features a side names in its offer or answer; bits it does not know it ignores. */
#define RM_RDMA_FEATURE_READS 1u /* it sends read offers, and reads those it is sent */

enum rm_rdma_msg_kind { RM_RDMA_MSG_BYTES = 0, RM_RDMA_MSG_READ_OFFER = 1, RM_RDMA_MSG_READ_DONE = 2 };

/* Bounds of a side's receive geometry that the other side accepts. */
#define RM_RDMA_MIN_BUFFERS 2
#define RM_RDMA_MAX_BUFFERS 1024
#define RM_RDMA_MIN_BUFFER_SIZE 4096
#define RM_RDMA_MAX_BUFFER_SIZE (4u << 20)

struct rm_rdma_chunk {
	int type;
	uint32_t len;
};

/* How a side receives: this many data messages at once, each at most size bytes with its
 * header (one more buffer is kept for the peer's one credit-only message in flight). */
struct rm_rdma_geometry {
	uint32_t buffers, size;
};

struct rm_rdma_offer {
	uint16_t port; /* host order */
	uint8_t features;
	uint8_t nonce[RM_RDMA_NONCE_LEN];
	struct rm_rdma_geometry geometry;
};

struct rm_rdma_answer {
	uint8_t nonce[RM_RDMA_NONCE_LEN];
	struct rm_rdma_geometry geometry;
	uint32_t features;
};

struct rm_rdma_msg {
	uint32_t len;     /* payload bytes; 0: a credit-only message */
	uint16_t credits; /* the receiver's data buffers the sender has posted again since */
	uint8_t ctrl_seen; /* credit-only messages the sender has received, modulo 256 */
	uint8_t kind;      /* enum rm_rdma_msg_kind */
};

/* Bytes the receiver of a read offer reads from the sender's memory. */
struct rm_rdma_read_offer {
	uint64_t addr;
	uint32_t rkey, len;
};

void rm_rdma_chunk_encode(uint8_t out[RM_RDMA_CHUNK_HEADER_LEN], int type, uint32_t len);
/* 0, or -EPROTO: unknown type, nonzero padding, or a length the type cannot have. */
int rm_rdma_chunk_decode(const uint8_t in[RM_RDMA_CHUNK_HEADER_LEN], struct rm_rdma_chunk *out);

void rm_rdma_offer_encode(uint8_t out[RM_RDMA_OFFER_LEN], const struct rm_rdma_offer *o);
/* 0, or -EPROTO: a wrong length, port 0, a nonzero byte 3, or a geometry out of bounds. */
int rm_rdma_offer_decode(const uint8_t *in, size_t len, struct rm_rdma_offer *out);

void rm_rdma_answer_encode(uint8_t out[RM_RDMA_ANSWER_LEN], const struct rm_rdma_answer *a);
/* 0, or -EPROTO: shorter than an answer (a connect's private data is padded past it with
 * zeros, so an answer without features has none), or a geometry out of bounds. */
int rm_rdma_answer_decode(const uint8_t *in, size_t len, struct rm_rdma_answer *out);

void rm_rdma_msg_encode(uint8_t out[RM_RDMA_MSG_HEADER_LEN], const struct rm_rdma_msg *m);
/* A received message of byte_len bytes (what the completion says) into a buffer of
 * buffer_size: 0, or -EPROTO when it is shorter than its header, longer than the buffer,
 * its header's length disagrees with byte_len, its kind is unknown, or its length is not
 * its kind's (a read offer's RM_RDMA_READ_OFFER_LEN, a read done's 0). */
int rm_rdma_msg_decode(const uint8_t *in, uint32_t byte_len, uint32_t buffer_size, struct rm_rdma_msg *out);

void rm_rdma_read_offer_encode(uint8_t out[RM_RDMA_READ_OFFER_LEN], const struct rm_rdma_read_offer *o);
/* A read offer's payload: 0, or -EPROTO for a length of 0 or a range past the end of the
 * address space. */
int rm_rdma_read_offer_decode(const uint8_t in[RM_RDMA_READ_OFFER_LEN], struct rm_rdma_read_offer *out);

#endif
