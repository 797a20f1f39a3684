/* The migration state's records (migrate_wire.h). */
#include "migrate_wire.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void rm_mig_put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

void rm_mig_put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

void rm_mig_header(uint8_t out[RM_MIG_HEADER_LEN], uint32_t type, uint64_t len)
{
	rm_mig_put32(out, type);
	rm_mig_put32(out + 4, 0);
	rm_mig_put64(out + 8, len);
}

#define FAIL(err, ...) do { snprintf(why, n, __VA_ARGS__); return (err); } while (0)

/* A record whose payload is fixed: its length must be exactly want. */
static int fixed(const struct rm_mig_sink *k, void *arg, uint64_t len, uint64_t want, uint8_t *buf)
{
	return len != want ? -EPROTO : k->read(arg, buf, (size_t)want);
}

int rm_mig_decode(const struct rm_mig_sink *k, void *arg, uint64_t total, char *why, size_t n)
{
	uint8_t h[RM_MIG_HEADER_LEN], f[24];
	uint64_t left = total;
	uint32_t records = 0, expected = 0;
	for (;;) {
		if (left < RM_MIG_HEADER_LEN)
			FAIL(-EPROTO, "state truncated at record %u", records);
		int err = k->read(arg, h, sizeof(h));
		if (err)
			FAIL(err, "state unreadable at record %u", records);
		left -= RM_MIG_HEADER_LEN;
		uint32_t type = get32(h);
		uint64_t len = get64(h + 8);
		if (get32(h + 4) || len > left)
			FAIL(-EPROTO, "record %u: length %llu past the state's end (%llu left)", records,
			     (unsigned long long)len, (unsigned long long)left);
		if ((records == 0) != (type == RM_MIG_BEGIN))
			FAIL(-EPROTO, "record %u: the state must begin with one BEGIN record", records);
		if (type == RM_MIG_END) {
			if (len || left)
				FAIL(-EPROTO, "END record with %llu bytes after it", (unsigned long long)(len + left));
			if (records - 1 != expected)
				FAIL(-EPROTO, "%u records where BEGIN said %u", records - 1, expected);
			return 0;
		}
		if (++records > RM_MIG_MAX_RECORDS || (records > 1 && records - 1 > expected))
			FAIL(-EPROTO, "more records than BEGIN said (%u)", expected);
		left -= len;
		switch (type) {
		case RM_MIG_BEGIN:
			if ((err = fixed(k, arg, len, 8, f)))
				FAIL(err, "malformed BEGIN record");
			if (get32(f) != RM_MIG_MAGIC || get32(f + 4) >= RM_MIG_MAX_RECORDS)
				FAIL(-EPROTO, "not a Remora migration state (magic 0x%x, %u records)", get32(f), get32(f + 4));
			expected = get32(f + 4);
			break;
		case RM_MIG_CTX: {
			if ((err = fixed(k, arg, len, 16, f)))
				FAIL(err, "malformed context record");
			int32_t ordinal = (int32_t)get32(f + 8);
			if (ordinal < 0 || ordinal >= RM_MIG_MAX_CTX || get32(f + 12) || !get64(f))
				FAIL(-EPROTO, "context record: device %d", ordinal);
			if ((err = k->ctx(arg, get64(f), ordinal)))
				FAIL(err, "context of device %d not made", ordinal);
			break;
		}
		case RM_MIG_MEMORY: {
			if (len < 24 || (err = k->read(arg, f, 24)))
				FAIL(err ? err : -EPROTO, "malformed memory record");
			uint64_t base = get64(f), size = get64(f + 8);
			if (size != len - 24 || !size || !base || base + size < base || get32(f + 16) >= RM_MIG_MAX_CTX ||
			    get32(f + 20))
				FAIL(-EPROTO, "memory record: 0x%llx + %llu in %llu bytes", (unsigned long long)base,
				     (unsigned long long)size, (unsigned long long)len);
			if ((err = k->memory(arg, base, size, get32(f + 16))))
				FAIL(err, "memory at 0x%llx (%llu bytes) not made at that address", (unsigned long long)base,
				     (unsigned long long)size);
			break;
		}
		case RM_MIG_SPAN: {
			if ((err = fixed(k, arg, len, 24, f)))
				FAIL(err, "malformed span record");
			uint64_t base = get64(f), size = get64(f + 8);
			if (!size || !base || base + size < base || get32(f + 16) >= RM_MIG_MAX_CTX || get32(f + 20))
				FAIL(-EPROTO, "span record: 0x%llx + %llu", (unsigned long long)base, (unsigned long long)size);
			if ((err = k->span(arg, base, size, get32(f + 16))))
				FAIL(err, "addresses 0x%llx to 0x%llx not mapped here", (unsigned long long)base,
				     (unsigned long long)(base + size));
			break;
		}
		case RM_MIG_LIBRARY: {
			if (len <= 16 || len - 16 > RM_MIG_MAX_IMAGE || (err = k->read(arg, f, 16)))
				FAIL(err ? err : -EPROTO, "malformed library record (%llu bytes)", (unsigned long long)len);
			if (!get64(f) || get64(f + 8))
				FAIL(-EPROTO, "library record without a handle");
			size_t size = (size_t)(len - 16);
			uint8_t *image = calloc(1, size + 64);
			if (!image)
				FAIL(-ENOMEM, "no memory for a library image of %zu bytes", size);
			err = k->read(arg, image, size);
			if (!err)
				err = k->library(arg, get64(f), image, size);
			free(image);
			if (err)
				FAIL(err, "library of %zu bytes not loaded", size);
			break;
		}
		case RM_MIG_KERNEL: {
			char name[RM_MIG_MAX_NAME + 1];
			if (len <= 24 || len - 24 > RM_MIG_MAX_NAME || (err = k->read(arg, f, 24)) ||
			    (err = k->read(arg, name, (size_t)(len - 24))))
				FAIL(err ? err : -EPROTO, "malformed kernel record");
			name[len - 24] = 0;
			if (strlen(name) != len - 24 || !get64(f) || !get64(f + 8))
				FAIL(-EPROTO, "kernel record: a name with a NUL, or no handle");
			if ((err = k->kernel(arg, get64(f), get64(f + 8), (int32_t)get32(f + 16), (int32_t)get32(f + 20), name)))
				FAIL(err, "kernel %s not found again", name);
			break;
		}
		case RM_MIG_KERNEL_FUNCTION:
			if ((err = fixed(k, arg, len, 24, f)))
				FAIL(err, "malformed kernel function record");
			if (!get64(f) || !get64(f + 8) || get32(f + 16) >= RM_MIG_MAX_CTX || get32(f + 20))
				FAIL(-EPROTO, "kernel function record: no handle, or context slot %u", get32(f + 16));
			if ((err = k->kernel_function(arg, get64(f), get64(f + 8), get32(f + 16))))
				FAIL(err, "a kernel's function not made again");
			break;
		case RM_MIG_VA_RANGE: {
			if ((err = fixed(k, arg, len, 16, f)))
				FAIL(err, "malformed address range record");
			uint64_t base = get64(f), size = get64(f + 8);
			if (!base || !size || base + size < base)
				FAIL(-EPROTO, "address range record: 0x%llx + %llu", (unsigned long long)base,
				     (unsigned long long)size);
			if ((err = k->va_range(arg, base, size)))
				FAIL(err, "address range 0x%llx + %llu not reserved again", (unsigned long long)base,
				     (unsigned long long)size);
			break;
		}
		case RM_MIG_GLOBAL: {
			char name[RM_MIG_MAX_NAME + 1];
			if (len < 24 || (err = k->read(arg, f, 24)))
				FAIL(err ? err : -EPROTO, "malformed global record");
			uint32_t nlen = get32(f + 8), lib = get32(f + 12);
			uint64_t held = get64(f + 16);
			if (!nlen || nlen > RM_MIG_MAX_NAME || nlen > len - 24 || lib > 1 || !get64(f) ||
			    (held && (len - 24 - nlen == 0 || held + (len - 24 - nlen) < held)) ||
			    (err = k->read(arg, name, nlen)))
				FAIL(err ? err : -EPROTO, "malformed global record (a name of %u bytes)", nlen);
			name[nlen] = 0;
			if (strlen(name) != nlen)
				FAIL(-EPROTO, "global record: a name with a NUL");
			if ((err = k->global(arg, get64(f), (int)lib, name, held, len - 24 - nlen)))
				FAIL(err, "device variable %s not made again", name);
			break;
		}
		case RM_MIG_MODULE: {
			if (len <= 16 || len - 16 > RM_MIG_MAX_IMAGE || (err = k->read(arg, f, 16)))
				FAIL(err ? err : -EPROTO, "malformed module record (%llu bytes)", (unsigned long long)len);
			uint32_t ctx = get32(f + 8);
			if (ctx >= RM_MIG_MAX_CTX || get32(f + 12) || !get64(f))
				FAIL(-EPROTO, "module record: context slot %u", ctx);
			size_t size = (size_t)(len - 16);
			uint8_t *image = calloc(1, size + 64); /* zeros after it: an ELF header's worth */
			if (!image)
				FAIL(-ENOMEM, "no memory for a module image of %zu bytes", size);
			err = k->read(arg, image, size);
			if (!err)
				err = k->module(arg, get64(f), ctx, image, size);
			free(image);
			if (err)
				FAIL(err, "module of %zu bytes not loaded", size);
			break;
		}
		case RM_MIG_FUNCTION: {
			char name[RM_MIG_MAX_NAME + 1];
			if (len <= 24 || len - 24 > RM_MIG_MAX_NAME || (err = k->read(arg, f, 24)) ||
			    (err = k->read(arg, name, (size_t)(len - 24))))
				FAIL(err ? err : -EPROTO, "malformed function record");
			name[len - 24] = 0;
			if (strlen(name) != len - 24 || !get64(f) || !get64(f + 8))
				FAIL(-EPROTO, "function record: a name with a NUL, or no handle");
			if ((err = k->function(arg, get64(f), get64(f + 8), (int32_t)get32(f + 16), (int32_t)get32(f + 20), name)))
				FAIL(err, "function %s not found again", name);
			break;
		}
		case RM_MIG_STREAM:
			if ((err = fixed(k, arg, len, 24, f)))
				FAIL(err, "malformed stream record");
			if (get32(f + 8) >= RM_MIG_MAX_CTX || get32(f + 20) || !get64(f))
				FAIL(-EPROTO, "stream record: context slot %u", get32(f + 8));
			if ((err = k->stream(arg, get64(f), get32(f + 8), get32(f + 12), (int32_t)get32(f + 16))))
				FAIL(err, "stream not made");
			break;
		case RM_MIG_EVENT:
			if ((err = fixed(k, arg, len, 16, f)))
				FAIL(err, "malformed event record");
			if (get32(f + 8) >= RM_MIG_MAX_CTX || !get64(f))
				FAIL(-EPROTO, "event record: context slot %u", get32(f + 8));
			if ((err = k->event(arg, get64(f), get32(f + 8), get32(f + 12))))
				FAIL(err, "event not made");
			break;
		default:
			FAIL(-EPROTO, "record %u of unknown type %u", records, type);
		}
	}
}

void rm_mig_image_head(uint8_t out[RM_MIG_IMAGE_HEAD], uint32_t kind, uint32_t ordinal)
{
	rm_mig_put32(out, kind);
	rm_mig_put32(out + 4, ordinal);
}

int rm_mig_image_head_read(const uint8_t head[RM_MIG_IMAGE_HEAD], uint32_t *kind, uint32_t *ordinal)
{
	*kind = get32(head), *ordinal = get32(head + 4);
	return *kind == RM_MIG_IMAGE_MODULE || *kind == RM_MIG_IMAGE_LIBRARY ? 0 : -EPROTO;
}

void rm_mig_range_put(uint8_t out[RM_MIG_RANGE_LEN], uint64_t base, uint64_t size)
{
	rm_mig_put64(out, base);
	rm_mig_put64(out + 8, size);
}

int rm_mig_range_read(const uint8_t in[RM_MIG_RANGE_LEN], uint64_t *base, uint64_t *size)
{
	*base = get64(in), *size = get64(in + 8);
	return *size && *base + *size > *base ? 0 : -EPROTO;
}
