/* Fuzz target `rdma_wire` (transport/rdma/rdma_wire.c), over what an rdma:// peer sends
 * of the transport's own: chunk headers on TCP, the worker's offer, the client's answer
 * (a connect's private data), the header of every message over RDMA and a read offer's
 * payload. The first byte picks the decoder; whatever decodes must encode back to the same
 * bytes, a message's payload must fit the buffer it came in and be as long as its kind's,
 * and a read offer's range must not pass the end of the address space. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rdma_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	uint8_t pick = data[0], again[64];
	const uint8_t *in = data + 1;
	size_t len = size - 1;
	switch (pick % 4) {
	case 0: {
		struct rm_rdma_chunk ch;
		if (len < RM_RDMA_CHUNK_HEADER_LEN || rm_rdma_chunk_decode(in, &ch))
			break;
		rm_rdma_chunk_encode(again, ch.type, ch.len);
		if (memcmp(again, in, RM_RDMA_CHUNK_HEADER_LEN))
			abort();
		break;
	}
	case 1: {
		struct rm_rdma_offer o;
		if (rm_rdma_offer_decode(in, len, &o))
			break;
		if (!o.port || o.geometry.buffers > RM_RDMA_MAX_BUFFERS || o.geometry.size > RM_RDMA_MAX_BUFFER_SIZE)
			abort();
		rm_rdma_offer_encode(again, &o);
		if (memcmp(again, in, RM_RDMA_OFFER_LEN))
			abort();
		break;
	}
	case 2: {
		struct rm_rdma_answer a;
		if (rm_rdma_answer_decode(in, len, &a))
			break;
		if (a.geometry.buffers < RM_RDMA_MIN_BUFFERS || a.geometry.size < RM_RDMA_MIN_BUFFER_SIZE)
			abort();
		rm_rdma_answer_encode(again, &a);
		if (memcmp(again, in, RM_RDMA_ANSWER_LEN))
			abort();
		break;
	}
	default: { /* two bytes of buffer size in KiB, then the message as received */
		if (len < 2)
			break;
		uint32_t buffer = (uint32_t)(in[0] | in[1] << 8) << 10;
		struct rm_rdma_msg m;
		if (rm_rdma_msg_decode(in + 2, (uint32_t)(len - 2), buffer, &m))
			break;
		if (m.len + (uint64_t)RM_RDMA_MSG_HEADER_LEN > buffer || m.len != len - 2 - RM_RDMA_MSG_HEADER_LEN)
			abort();
		rm_rdma_msg_encode(again, &m);
		if (memcmp(again, in + 2, RM_RDMA_MSG_HEADER_LEN))
			abort();
		if (m.kind == RM_RDMA_MSG_READ_DONE && m.len)
			abort();
		if (m.kind == RM_RDMA_MSG_READ_OFFER) {
			if (m.len != RM_RDMA_READ_OFFER_LEN)
				abort();
			struct rm_rdma_read_offer o;
			const uint8_t *payload = in + 2 + RM_RDMA_MSG_HEADER_LEN;
			if (rm_rdma_read_offer_decode(payload, &o))
				break;
			if (!o.len || o.addr + o.len < o.addr)
				abort();
			rm_rdma_read_offer_encode(again, &o);
			if (memcmp(again, payload, RM_RDMA_READ_OFFER_LEN))
				abort();
		} else if (m.kind != RM_RDMA_MSG_BYTES && m.kind != RM_RDMA_MSG_READ_DONE) {
			abort();
		}
		break;
	}
	}
	return 0;
}
