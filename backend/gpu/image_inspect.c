/* Reading an image far enough to tell whether it holds writable device state.
 * Layouts: a cubin is a 64-bit little-endian ELF whose section names say what
 * they hold (.nv.global*, .nv.constantN with N > 0 for user constants, .nv.managed*);
 * PTX declares state at module scope with .global or .const; a fatbin
 * (magic 0xBA55ED50) is a 16-byte header then entries, each with its own header:
 * +0 kind (1 PTX, 2 ELF), +4 header size, +8 payload size, +16 compressed size
 * (0: plain), +40 flags (0x2000 LZ4, 0x8000 zstd), +56 uncompressed size. */
#include "image_cache.h"

#include <ctype.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define FATBIN_MAGIC 0xBA55ED50u
#define FATBIN_WRAPPER_MAGIC 0x466243b1u
#define FATBIN_LZ4 0x2000u
#define FATBIN_ZSTD 0x8000u
#define MAX_UNCOMPRESSED (256u << 20)

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t rd32(const uint8_t *p) { return rd16(p) | (uint32_t)rd16(p + 2) << 16; }
static uint64_t rd64(const uint8_t *p) { return rd32(p) | (uint64_t)rd32(p + 4) << 32; }

static int section_is_state(const char *name)
{
	if (!strncmp(name, ".nv.global", 10) || !strncmp(name, ".nv.managed", 11))
		return 1;
	/* .nv.constant0.<kernel> holds a kernel's parameters; other banks may be written by the host. */
	return !strncmp(name, ".nv.constant", 12) && strncmp(name, ".nv.constant0", 13);
}

static int elf_shareable(const uint8_t *e, size_t n)
{
	if (n < 64 || memcmp(e, "\177ELF", 4) || e[4] != 2 || e[5] != 1)
		return 0;
	uint64_t shoff = rd64(e + 0x28);
	uint16_t shentsize = rd16(e + 0x3A), shnum = rd16(e + 0x3C), shstrndx = rd16(e + 0x3E);
	if (shentsize < 64 || shstrndx >= shnum || shoff > n || (uint64_t)shnum * shentsize > n - shoff)
		return 0;
	const uint8_t *strhdr = e + shoff + (uint64_t)shstrndx * shentsize;
	uint64_t stroff = rd64(strhdr + 0x18), strsize = rd64(strhdr + 0x20);
	if (stroff > n || strsize > n - stroff)
		return 0;
	for (unsigned i = 0; i < shnum; i++) {
		uint32_t name = rd32(e + shoff + (uint64_t)i * shentsize);
		if (name >= strsize || !memchr(e + stroff + name, 0, strsize - name))
			return 0;
		if (section_is_state((const char *)e + stroff + name))
			return 0;
	}
	return 1;
}

/* PTX: any module-scope .global or .const declaration (directives such as .visible,
 * .extern or .weak may come first) is state. Instructions (ld.global ...) are not. */
static int ptx_shareable(const uint8_t *p, size_t n)
{
	int depth = 0, line_start = 1;
	for (size_t i = 0; i < n && p[i]; i++) {
		uint8_t c = p[i];
		if (c == '{')
			depth++;
		else if (c == '}')
			depth--;
		if (c == '\n') {
			line_start = 1;
			continue;
		}
		if (!line_start || isspace(c))
			continue;
		line_start = 0;
		if (depth)
			continue;
		size_t j = i;
		for (;;) {
			static const char *const prefixes[] = {".visible", ".extern", ".weak"};
			int skipped = 0;
			for (size_t k = 0; k < 3; k++) {
				size_t l = strlen(prefixes[k]);
				if (j + l < n && !memcmp(p + j, prefixes[k], l) && isspace(p[j + l])) {
					j += l;
					while (j < n && (p[j] == ' ' || p[j] == '\t'))
						j++;
					skipped = 1;
				}
			}
			if (!skipped)
				break;
		}
		if ((j + 7 < n && !memcmp(p + j, ".global", 7) && isspace(p[j + 7])) ||
		    (j + 6 < n && !memcmp(p + j, ".const", 6) && isspace(p[j + 6])))
			return 0;
	}
	return 1;
}

/* Decompressors, if their libraries can be loaded; no build-time dependency. */
static size_t (*zstd_decompress)(void *dst, size_t cap, const void *src, size_t len);
static unsigned (*zstd_is_error)(size_t code);
static int (*lz4_decompress)(const char *src, char *dst, int len, int cap);

static void load_decompressors(void)
{
	void *z = dlopen("libzstd.so.1", RTLD_NOW | RTLD_LOCAL);
	if (z) {
		zstd_decompress = (size_t (*)(void *, size_t, const void *, size_t))dlsym(z, "ZSTD_decompress");
		zstd_is_error = (unsigned (*)(size_t))dlsym(z, "ZSTD_isError");
		if (!zstd_is_error)
			zstd_decompress = NULL;
	}
	void *l = dlopen("liblz4.so.1", RTLD_NOW | RTLD_LOCAL);
	if (l)
		lz4_decompress = (int (*)(const char *, char *, int, int))dlsym(l, "LZ4_decompress_safe");
}

static int entry_shareable(uint16_t kind, const uint8_t *payload, size_t len, uint64_t flags, uint64_t plain_len)
{
	uint8_t *buf = NULL;
	if (flags & (FATBIN_LZ4 | FATBIN_ZSTD)) {
		static pthread_once_t once = PTHREAD_ONCE_INIT;
		pthread_once(&once, load_decompressors);
		if (!plain_len || plain_len > MAX_UNCOMPRESSED || !(buf = malloc(plain_len + 1)))
			return 0;
		size_t got = 0;
		if ((flags & FATBIN_ZSTD) && zstd_decompress) {
			size_t r = zstd_decompress(buf, plain_len, payload, len);
			got = zstd_is_error(r) ? 0 : r;
		} else if ((flags & FATBIN_LZ4) && lz4_decompress && len < (1u << 31)) {
			int r = lz4_decompress((const char *)payload, (char *)buf, (int)len, (int)plain_len);
			got = r > 0 ? (size_t)r : 0;
		}
		if (!got) {
			free(buf);
			return 0;
		}
		buf[got] = 0;
		payload = buf;
		len = got;
	}
	int ok = kind == 2 ? elf_shareable(payload, len) : kind == 1 ? ptx_shareable(payload, len) : 0;
	free(buf);
	return ok;
}

/* A fatbin's entries, walked: each entry header e (64 bytes readable), its header size
 * and payload size checked against the fatbin's end. A tail shorter than an entry header
 * is padding. Returns the entries seen, or -1 when the fatbin's header or an entry
 * reaches past its n bytes, or visit(e, arg) says no (returns 0). */
static int fatbin_walk(const uint8_t *f, size_t n, int (*visit)(const uint8_t *e, void *arg), void *arg)
{
	if (n < 16)
		return -1;
	uint16_t hsz = rd16(f + 6);
	uint64_t size = rd64(f + 8);
	if (hsz < 16 || hsz > n || size > n - hsz)
		return -1;
	int entries = 0;
	for (const uint8_t *e = f + hsz, *end = f + hsz + size; (size_t)(end - e) >= 64; entries++) {
		uint32_t ehsz = rd32(e + 4);
		uint64_t padded = rd64(e + 8), compressed = rd32(e + 16);
		if (ehsz < 16 || ehsz > (size_t)(end - e) || padded > (size_t)(end - e) - ehsz || compressed > padded ||
		    (visit && !visit(e, arg)))
			return -1;
		e += ehsz + padded;
	}
	return entries;
}

static int entry_visit_shareable(const uint8_t *e, void *arg)
{
	(void)arg;
	uint32_t ehsz = rd32(e + 4), compressed = rd32(e + 16);
	uint64_t padded = rd64(e + 8), flags = rd64(e + 40), plain = rd64(e + 56);
	return ehsz >= 64 && entry_shareable(rd16(e), e + ehsz, compressed ? compressed : padded,
					     compressed ? flags : 0, plain);
}

static int fatbin_shareable(const uint8_t *f, size_t n)
{
	return fatbin_walk(f, n, entry_visit_shareable, NULL) > 0;
}

int rm_image_shareable(const uint8_t *image, size_t n)
{
	if (n >= 4 && rd32(image) == FATBIN_MAGIC)
		return fatbin_shareable(image, n);
	if (n >= 4 && !memcmp(image, "\177ELF", 4))
		return elf_shareable(image, n);
	return ptx_shareable(image, n); /* text; the driver rejects what is not PTX */
}

/* Whether [off, off + count * size) lies within n bytes, without overflow. */
static int table_within(uint64_t off, uint64_t count, uint64_t size, size_t n)
{
	return off <= n && (size == 0 || count <= (n - off) / size);
}

static int elf_contained(const uint8_t *e, size_t n)
{
	if (n < 64 || e[4] != 2 /* ELFCLASS64 */)
		return 0;
	uint64_t phoff = rd64(e + 0x20), shoff = rd64(e + 0x28);
	uint16_t phentsize = rd16(e + 0x36), phnum = rd16(e + 0x38), shentsize = rd16(e + 0x3A),
		 shnum = rd16(e + 0x3C);
	if ((phnum && phentsize < 56) || (shnum && shentsize < 64) || !table_within(phoff, phnum, phentsize, n) ||
	    !table_within(shoff, shnum, shentsize, n))
		return 0;
	for (uint16_t i = 0; i < shnum; i++) {
		const uint8_t *sh = e + shoff + (uint64_t)i * shentsize;
		if (rd32(sh + 4) != 8 /* SHT_NOBITS */ && !table_within(rd64(sh + 0x18), 1, rd64(sh + 0x20), n))
			return 0;
	}
	for (uint16_t i = 0; i < phnum; i++) {
		const uint8_t *ph = e + phoff + (uint64_t)i * phentsize;
		if (!table_within(rd64(ph + 0x08), 1, rd64(ph + 0x20), n))
			return 0;
	}
	return 1;
}

/* The driver takes a fatbin's entries on trust: each must lie within it. */
static int fatbin_contained(const uint8_t *f, size_t n)
{
	return fatbin_walk(f, n, NULL, NULL) >= 0;
}

int rm_image_contained(const uint8_t *image, size_t n)
{
	uint32_t magic = n >= 4 ? rd32(image) : 0;
	if (magic == FATBIN_WRAPPER_MAGIC)
		return 0; /* it points into the client's memory: the client sends what it points at */
	if (magic == FATBIN_MAGIC)
		return fatbin_contained(image, n);
	if (n >= 4 && !memcmp(image, "\177ELF", 4))
		return elf_contained(image, n);
	return 1; /* text, which the daemon ends with a NUL */
}
