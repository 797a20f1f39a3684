#include "wire.h"

#include <errno.h>
#include <string.h>

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p)
{
	uint32_t v = 0;
	for (int i = 0; i < 4; i++)
		v |= (uint32_t)p[i] << (8 * i);
	return v;
}

static uint64_t get64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

void rm_frame_encode(const struct rm_frame *f, uint8_t out[RM_FRAME_LEN])
{
	put32(out + 0, f->magic);
	put32(out + 4, f->op);
	put64(out + 8, f->seq);
	put32(out + 16, f->msg_len);
	put32(out + 20, f->flags);
	put64(out + 24, f->bulk_len);
	put64(out + 32, f->ctx);
	put32(out + 40, (uint32_t)f->result);
	put32(out + 44, (uint32_t)f->async_result);
}

int rm_frame_decode(const uint8_t in[RM_FRAME_LEN], struct rm_frame *f)
{
	f->magic = get32(in + 0);
	f->op = get32(in + 4);
	f->seq = get64(in + 8);
	f->msg_len = get32(in + 16);
	f->flags = get32(in + 20);
	f->bulk_len = get64(in + 24);
	f->ctx = get64(in + 32);
	f->result = (int32_t)get32(in + 40);
	f->async_result = (int32_t)get32(in + 44);
	if (f->magic != RM_WIRE_MAGIC || f->msg_len > RM_MAX_MSG_LEN || f->bulk_len > RM_MAX_BULK_LEN)
		return -EPROTO;
	return 0;
}
