/* The rdma transport's own bytes (rdma_wire.h). */
#include "rdma_wire.h"

#include <errno.h>
#include <string.h>

static void put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put64(uint8_t *p, uint64_t v)
{
	put32(p, (uint32_t)v);
	put32(p + 4, (uint32_t)(v >> 32));
}

static uint64_t get64(const uint8_t *p)
{
	return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

static int geometry_ok(const struct rm_rdma_geometry *g)
{
	return g->buffers >= RM_RDMA_MIN_BUFFERS && g->buffers <= RM_RDMA_MAX_BUFFERS &&
	       g->size >= RM_RDMA_MIN_BUFFER_SIZE && g->size <= RM_RDMA_MAX_BUFFER_SIZE;
}

void rm_rdma_chunk_encode(uint8_t out[RM_RDMA_CHUNK_HEADER_LEN], int type, uint32_t len)
{
	out[0] = (uint8_t)type;
	out[1] = out[2] = out[3] = 0;
	put32(out + 4, len);
}

int rm_rdma_chunk_decode(const uint8_t in[RM_RDMA_CHUNK_HEADER_LEN], struct rm_rdma_chunk *out)
{
	if (in[1] || in[2] || in[3])
		return -EPROTO;
	out->type = in[0];
	out->len = get32(in + 4);
	switch (out->type) {
	case RM_RDMA_DATA:
		return out->len ? 0 : -EPROTO;
	case RM_RDMA_UPGRADE:
		return out->len == RM_RDMA_OFFER_LEN ? 0 : -EPROTO;
	case RM_RDMA_SWITCH:
		return out->len == 0 ? 0 : -EPROTO;
	default:
		return -EPROTO;
	}
}

void rm_rdma_offer_encode(uint8_t out[RM_RDMA_OFFER_LEN], const struct rm_rdma_offer *o)
{
	out[0] = (uint8_t)(o->port >> 8);
	out[1] = (uint8_t)o->port;
	out[2] = o->features;
	out[3] = 0;
	memcpy(out + 4, o->nonce, RM_RDMA_NONCE_LEN);
	put32(out + 20, o->geometry.buffers);
	put32(out + 24, o->geometry.size);
}

int rm_rdma_offer_decode(const uint8_t *in, size_t len, struct rm_rdma_offer *out)
{
	if (len != RM_RDMA_OFFER_LEN || in[3])
		return -EPROTO;
	out->port = (uint16_t)(in[0] << 8 | in[1]);
	out->features = in[2];
	memcpy(out->nonce, in + 4, RM_RDMA_NONCE_LEN);
	out->geometry.buffers = get32(in + 20);
	out->geometry.size = get32(in + 24);
	return out->port && geometry_ok(&out->geometry) ? 0 : -EPROTO;
}

void rm_rdma_answer_encode(uint8_t out[RM_RDMA_ANSWER_LEN], const struct rm_rdma_answer *a)
{
	memcpy(out, a->nonce, RM_RDMA_NONCE_LEN);
	put32(out + 16, a->geometry.buffers);
	put32(out + 20, a->geometry.size);
	put32(out + 24, a->features);
}

int rm_rdma_answer_decode(const uint8_t *in, size_t len, struct rm_rdma_answer *out)
{
	if (!in || len < RM_RDMA_ANSWER_LEN)
		return -EPROTO;
	memcpy(out->nonce, in, RM_RDMA_NONCE_LEN);
	out->geometry.buffers = get32(in + 16);
	out->geometry.size = get32(in + 20);
	out->features = get32(in + 24);
	return geometry_ok(&out->geometry) ? 0 : -EPROTO;
}

void rm_rdma_msg_encode(uint8_t out[RM_RDMA_MSG_HEADER_LEN], const struct rm_rdma_msg *m)
{
	put32(out, m->len);
	out[4] = (uint8_t)m->credits;
	out[5] = (uint8_t)(m->credits >> 8);
	out[6] = m->ctrl_seen;
	out[7] = m->kind;
}

int rm_rdma_msg_decode(const uint8_t *in, uint32_t byte_len, uint32_t buffer_size, struct rm_rdma_msg *out)
{
	if (byte_len < RM_RDMA_MSG_HEADER_LEN || byte_len > buffer_size)
		return -EPROTO;
	out->len = get32(in);
	out->credits = (uint16_t)(in[4] | in[5] << 8);
	out->ctrl_seen = in[6];
	out->kind = in[7];
	if (out->len != byte_len - RM_RDMA_MSG_HEADER_LEN)
		return -EPROTO;
	switch (out->kind) {
	case RM_RDMA_MSG_BYTES:
		return 0;
	case RM_RDMA_MSG_READ_OFFER:
		return out->len == RM_RDMA_READ_OFFER_LEN ? 0 : -EPROTO;
	case RM_RDMA_MSG_READ_DONE:
		return out->len == 0 ? 0 : -EPROTO;
	default:
		return -EPROTO;
	}
}

void rm_rdma_read_offer_encode(uint8_t out[RM_RDMA_READ_OFFER_LEN], const struct rm_rdma_read_offer *o)
{
	put64(out, o->addr);
	put32(out + 8, o->rkey);
	put32(out + 12, o->len);
}

int rm_rdma_read_offer_decode(const uint8_t in[RM_RDMA_READ_OFFER_LEN], struct rm_rdma_read_offer *out)
{
	out->addr = get64(in);
	out->rkey = get32(in + 8);
	out->len = get32(in + 12);
	return out->len && out->addr <= UINT64_MAX - out->len ? 0 : -EPROTO;
}
