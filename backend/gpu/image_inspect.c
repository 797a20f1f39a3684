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

/* ---- naming the state: the device variables a move copies by name (migrate.h) ---- */

struct variables {
	int (*visit)(const char *name, void *arg);
	void *arg;
	int managed;
};

/* A cubin's variables: its symbol tables' objects that lie in state sections. */
static int elf_variables(const uint8_t *e, size_t n, struct variables *x)
{
	if (n < 64 || memcmp(e, "\177ELF", 4) || e[4] != 2 || e[5] != 1)
		return -1;
	uint64_t shoff = rd64(e + 0x28);
	uint16_t shentsize = rd16(e + 0x3A), shnum = rd16(e + 0x3C), shstrndx = rd16(e + 0x3E);
	if (shentsize < 64 || shstrndx >= shnum || shoff > n || (uint64_t)shnum * shentsize > n - shoff)
		return -1;
	const uint8_t *sh = e + shoff, *strhdr = sh + (uint64_t)shstrndx * shentsize;
	uint64_t stroff = rd64(strhdr + 0x18), strsize = rd64(strhdr + 0x20);
	if (stroff > n || strsize > n - stroff)
		return -1;
	for (unsigned i = 0; i < shnum; i++) {
		const uint8_t *s = sh + (uint64_t)i * shentsize;
		if (rd32(s + 4) != 2) /* SHT_SYMTAB */
			continue;
		uint64_t off = rd64(s + 0x18), size = rd64(s + 0x20), ent = rd64(s + 0x38);
		uint32_t link = rd32(s + 0x28);
		if (ent < 24 || off > n || size > n - off || link >= shnum)
			return -1;
		const uint8_t *lh = sh + (uint64_t)link * shentsize;
		uint64_t soff = rd64(lh + 0x18), ssize = rd64(lh + 0x20);
		if (soff > n || ssize > n - soff)
			return -1;
		for (uint64_t k = 0; ent <= size - k; k += ent) {
			const uint8_t *sym = e + off + k;
			uint32_t name = rd32(sym), secname;
			uint16_t shndx = rd16(sym + 6);
			if ((sym[4] & 0xf) != 1 || !shndx || shndx >= shnum) /* STT_OBJECT, in a section */
				continue;
			secname = rd32(sh + (uint64_t)shndx * shentsize);
			if (secname >= strsize || !memchr(e + stroff + secname, 0, strsize - secname) || name >= ssize ||
			    !memchr(e + soff + name, 0, ssize - name))
				return -1;
			const char *sec = (const char *)e + stroff + secname;
			int r = 0;
			if (!strncmp(sec, ".nv.managed", 11))
				x->managed = 1;
			else if (section_is_state(sec))
				r = x->visit((const char *)e + soff + name, x->arg);
			if (r)
				return r;
		}
	}
	return 0;
}

/* PTX: the name each module-scope .global or .const declaration declares, after its
 * directives (.align N, .attribute(...), the type); .attribute(.managed) is managed. */
static int ptx_variables(const uint8_t *p, size_t n, struct variables *x)
{
	int depth = 0, line_start = 1;
	for (size_t i = 0; i < n && p[i]; i++) {
		uint8_t c = p[i];
		depth += c == '{' ? 1 : c == '}' ? -1 : 0;
		if (c == '\n') {
			line_start = 1;
			continue;
		}
		if (!line_start || isspace(c) || (line_start = 0, depth))
			continue;
		size_t j = i;
		while (j < n && p[j] == '.' && !(j + 7 < n && !memcmp(p + j, ".global", 7) && isspace(p[j + 7])) &&
		       !(j + 6 < n && !memcmp(p + j, ".const", 6) && isspace(p[j + 6])) &&
		       ((j + 8 < n && !memcmp(p + j, ".visible", 8)) || (j + 7 < n && !memcmp(p + j, ".extern", 7)) ||
			(j + 5 < n && !memcmp(p + j, ".weak", 5)))) {
			while (j < n && !isspace(p[j]))
				j++;
			while (j < n && (p[j] == ' ' || p[j] == '\t'))
				j++;
		}
		size_t k;
		if (j + 7 < n && !memcmp(p + j, ".global", 7) && isspace(p[j + 7]))
			k = j + 7;
		else if (j + 6 < n && !memcmp(p + j, ".const", 6) && isspace(p[j + 6]))
			k = j + 6;
		else
			continue;
		for (;;) { /* directives, then the name */
			while (k < n && (p[k] == ' ' || p[k] == '\t'))
				k++;
			if (k >= n || p[k] == '\n' || p[k] == ';' || !p[k])
				return -1; /* a declaration whose name is not on its line */
			if (p[k] == '.') {
				size_t t = k;
				while (k < n && p[k] && !isspace(p[k]) && p[k] != '(')
					k++;
				if (k - t == 10 && !memcmp(p + t, ".attribute", 10)) {
					size_t open = k;
					while (k < n && p[k] && p[k] != ')' && p[k] != '\n')
						k++;
					if (memmem(p + open, k - open, ".managed", 8))
						x->managed = 1;
					if (k < n && p[k] == ')')
						k++;
				} else if (k - t == 6 && !memcmp(p + t, ".align", 6)) {
					while (k < n && (p[k] == ' ' || p[k] == '\t'))
						k++;
					while (k < n && isdigit(p[k]))
						k++;
				}
				continue;
			}
			char name[1024];
			size_t len = 0;
			while (k < n && (isalnum(p[k]) || p[k] == '_' || p[k] == '$' || p[k] == '%') && len < sizeof(name) - 1)
				name[len++] = (char)p[k++];
			if (!len || len == sizeof(name) - 1)
				return -1;
			name[len] = 0;
			int r = x->visit(name, x->arg);
			if (r)
				return r;
			break;
		}
	}
	return 0;
}

static int entry_variables(const uint8_t *e, void *arg)
{
	struct variables *x = arg;
	uint32_t ehsz = rd32(e + 4), compressed = rd32(e + 16);
	uint64_t padded = rd64(e + 8), flags = compressed ? rd64(e + 40) : 0, plain = rd64(e + 56);
	const uint8_t *payload = e + ehsz;
	size_t len = compressed ? compressed : padded;
	uint8_t *buf = NULL;
	if (ehsz < 64)
		return 0;
	if (flags & (FATBIN_LZ4 | FATBIN_ZSTD)) { /* as entry_shareable */
		static pthread_once_t once = PTHREAD_ONCE_INIT;
		pthread_once(&once, load_decompressors);
		size_t got = 0;
		if (plain && plain <= MAX_UNCOMPRESSED && (buf = malloc(plain + 1))) {
			if ((flags & FATBIN_ZSTD) && zstd_decompress) {
				size_t r = zstd_decompress(buf, plain, payload, len);
				got = zstd_is_error(r) ? 0 : r;
			} else if ((flags & FATBIN_LZ4) && lz4_decompress && len < (1u << 31)) {
				int r = lz4_decompress((const char *)payload, (char *)buf, (int)len, (int)plain);
				got = r > 0 ? (size_t)r : 0;
			}
		}
		if (!got) {
			free(buf);
			return 0;
		}
		buf[got] = 0;
		payload = buf, len = got;
	}
	int r = rd16(e) == 2 ? elf_variables(payload, len, x) : rd16(e) == 1 ? ptx_variables(payload, len, x) : -1;
	free(buf);
	return r == 0; /* fatbin_walk goes on while this says yes */
}

int rm_image_variables(const uint8_t *image, size_t n, int (*visit)(const char *name, void *arg), void *arg)
{
	struct variables x = {visit, arg, 0};
	int r;
	if (n >= 4 && rd32(image) == FATBIN_MAGIC)
		r = fatbin_walk(image, n, entry_variables, &x) > 0 ? 0 : -1;
	else if (n >= 4 && !memcmp(image, "\177ELF", 4))
		r = elf_variables(image, n, &x);
	else
		r = ptx_variables(image, n, &x);
	return r ? r : x.managed;
}

/* The entry the driver runs on a GPU of compute capability sm (major * 10 + minor): the
 * cubin of the highest arch it can run (same major, not above sm), else the PTX of the
 * highest arch not above sm (JIT-compiled); bytes as uncompressed. */
struct code_pick {
	unsigned sm;
	uint32_t cubin_arch, ptx_arch;
	uint64_t cubin, ptx, largest;
};

static int entry_code(const uint8_t *e, void *arg)
{
	struct code_pick *c = arg;
	uint32_t compressed = rd32(e + 16), arch = rd32(e + 28);
	uint64_t bytes = compressed && rd32(e + 4) >= 64 ? rd64(e + 56) : rd64(e + 8);
	uint16_t kind = rd16(e);
	if (bytes > c->largest)
		c->largest = bytes;
	if (kind == 2 && arch <= c->sm && arch / 10 == c->sm / 10 && (!c->cubin || arch > c->cubin_arch))
		c->cubin = bytes, c->cubin_arch = arch;
	if (kind == 1 && arch <= c->sm && (!c->ptx || arch > c->ptx_arch))
		c->ptx = bytes, c->ptx_arch = arch;
	return 1;
}

uint64_t rm_image_code_bytes(const uint8_t *image, size_t n, unsigned sm)
{
	if (n < 4 || rd32(image) != FATBIN_MAGIC)
		return n;
	struct code_pick c = {.sm = sm};
	if (fatbin_walk(image, n, entry_code, &c) <= 0)
		return n;
	return c.cubin ? c.cubin : c.ptx ? c.ptx : c.largest ? c.largest : n;
}
