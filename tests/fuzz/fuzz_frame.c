/* Fuzz target `frame`: a frame header (common/wire.c) and the message after it, as
 * every message of remora.proto and the generated api.proto would unpack it.
 * Input: a 48-byte header, then the message bytes (shorter: all message, no header).
 * Checks that a header that decodes encodes back to the same bytes, that the stripe
 * geometry of its bulk adds up, and that every message that unpacks packs to the size
 * it claims. (Not that it unpacks again: protobuf-c keeps unknown fields, nested ones
 * too, and writes some back in a form it refuses, such as a field numbered 0.) */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <protobuf-c/protobuf-c.h>

#include "wire.h"

extern const ProtobufCMessageDescriptor *const fuzz_descriptors[];
extern const unsigned fuzz_ndescriptors;

static void check_header(const uint8_t *data)
{
	struct rm_frame f;
	if (rm_frame_decode(data, &f))
		return;
	uint8_t again[RM_FRAME_LEN];
	rm_frame_encode(&f, again);
	if (memcmp(again, data, RM_FRAME_LEN) || f.msg_len > RM_MAX_MSG_LEN || f.bulk_len > RM_MAX_BULK_LEN)
		abort();
	/* A copy of bulk_len bytes striped over 1..RM_MAX_COPY_LINKS links: the shares add up. */
	uint32_t links = 1 + (uint32_t)(f.seq % RM_MAX_COPY_LINKS);
	uint64_t sum = 0, chunk = f.ctx; /* a chunk the peer names, where the daemon takes it */
	if (!rm_stripe_chunk_ok(f.bulk_len, links, chunk))
		chunk = 0;
	for (uint32_t j = 0; j < links; j++)
		sum += rm_stripe_share(f.bulk_len, links, chunk, j);
	if (sum != f.bulk_len)
		abort();
}

static void check_message(const ProtobufCMessageDescriptor *desc, const uint8_t *msg, size_t len)
{
	ProtobufCMessage *m = protobuf_c_message_unpack(desc, NULL, len, msg);
	if (!m)
		return;
	size_t packed = protobuf_c_message_get_packed_size(m);
	uint8_t *buf = malloc(packed ? packed : 1);
	if (!buf)
		abort();
	if (protobuf_c_message_pack(m, buf) != packed)
		abort();
	protobuf_c_message_free_unpacked(m, NULL);
	free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *msg = data;
	size_t len = size;
	if (size >= RM_FRAME_LEN) {
		check_header(data);
		msg += RM_FRAME_LEN;
		len -= RM_FRAME_LEN;
	}
	for (unsigned i = 0; i < fuzz_ndescriptors; i++)
		check_message(fuzz_descriptors[i], msg, len);
	return 0;
}
