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
 * connect's private data). On RDMA every message is one send: an 8-byte header (payload
 * length, receive buffers returned, credit-only messages seen) and the payload. */
#ifndef REMORA_RDMA_WIRE_H
#define REMORA_RDMA_WIRE_H

#include <stddef.h>
#include <stdint.h>

enum rm_rdma_chunk_type { RM_RDMA_DATA = 1, RM_RDMA_UPGRADE = 2, RM_RDMA_SWITCH = 3 };

#define RM_RDMA_CHUNK_HEADER_LEN 8
#define RM_RDMA_NONCE_LEN 16
#define RM_RDMA_OFFER_LEN 28  /* port (2, network order), 2 zero bytes, nonce, geometry */
#define RM_RDMA_ANSWER_LEN 24 /* nonce, geometry */
#define RM_RDMA_MSG_HEADER_LEN 8

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
	uint8_t nonce[RM_RDMA_NONCE_LEN];
	struct rm_rdma_geometry geometry;
};

struct rm_rdma_answer {
	uint8_t nonce[RM_RDMA_NONCE_LEN];
	struct rm_rdma_geometry geometry;
};

struct rm_rdma_msg {
	uint32_t len;     /* payload bytes; 0: a credit-only message */
	uint16_t credits; /* the receiver's data buffers the sender has posted again since */
	uint8_t ctrl_seen; /* credit-only messages the sender has received, modulo 256 */
};

void rm_rdma_chunk_encode(uint8_t out[RM_RDMA_CHUNK_HEADER_LEN], int type, uint32_t len);
/* 0, or -EPROTO: unknown type, nonzero padding, or a length the type cannot have. */
int rm_rdma_chunk_decode(const uint8_t in[RM_RDMA_CHUNK_HEADER_LEN], struct rm_rdma_chunk *out);

void rm_rdma_offer_encode(uint8_t out[RM_RDMA_OFFER_LEN], const struct rm_rdma_offer *o);
/* 0, or -EPROTO: a wrong length, port 0, padding, or a geometry out of bounds. */
int rm_rdma_offer_decode(const uint8_t *in, size_t len, struct rm_rdma_offer *out);

void rm_rdma_answer_encode(uint8_t out[RM_RDMA_ANSWER_LEN], const struct rm_rdma_answer *a);
/* 0, or -EPROTO: shorter than an answer (a connect's private data may be padded past it),
 * or a geometry out of bounds. */
int rm_rdma_answer_decode(const uint8_t *in, size_t len, struct rm_rdma_answer *out);

void rm_rdma_msg_encode(uint8_t out[RM_RDMA_MSG_HEADER_LEN], const struct rm_rdma_msg *m);
/* A received message of byte_len bytes (what the completion says) into a buffer of
 * buffer_size: 0, or -EPROTO when it is shorter than its header, longer than the buffer,
 * or its header's length disagrees with byte_len. */
int rm_rdma_msg_decode(const uint8_t *in, uint32_t byte_len, uint32_t buffer_size, struct rm_rdma_msg *out);

#endif
