/* A main() for machines without libFuzzer: runs the target linked with it over every
 * file it is given (a directory stands for its files), then over deterministic
 * mutations of each. It judges nothing itself: a crash, a sanitizer's report or the
 * target's own abort() is the failure; anything else exits 0.
 *
 *   fuzz-TARGET-standalone [--mutations N] [--seconds S] CORPUS_DIR|FILE...
 *
 * N mutations of each file (default 300), each one to three stacked edits drawn from a
 * fixed seed: a bit flip, a truncation, an insertion, an erasure, or a length field set
 * to an edge value. Mutations stop early once S seconds (default 15) have passed, so
 * that a slow machine runs fewer rather than time out. On a crash the input is saved as
 * ./fuzz-TARGET.crash for `fuzz-TARGET-standalone --mutations 0 fuzz-TARGET.crash`. */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));
void __sanitizer_set_death_callback(void (*callback)(void)) __attribute__((weak));

#define FRAME_MAGIC "1RMR" /* RM_WIRE_MAGIC as it lies in little-endian bytes */
#define FRAME_LEN 48
#define MAX_INSERT 16

/* What a length or count field is set to: the edges of every width a parser may use. */
static const uint64_t edge_values[] = {0, 1, 0x7fffffff, 0x80000000, 0xffffffff, 1ull << 63, UINT64_MAX};

struct input {
	uint8_t *data;
	size_t size;
};

/* The input being run and where it came from, for the crash report. */
static struct {
	const struct input *in;
	const char *file;
	long mutation; /* -1: the file itself */
	char save_as[256];
} current;

static void report_crash(void)
{
	static const char head[] = "\nstandalone: crashed on ";
	char line[512];
	int n = snprintf(line, sizeof(line), "%s%s (%s%ld); input saved as %s\n", head, current.file,
			 current.mutation < 0 ? "unmutated, " : "mutation ", current.mutation < 0 ? 0 : current.mutation,
			 current.save_as);
	if (write(2, line, n > 0 ? (size_t)n : 0) < 0)
		return;
	int fd = open(current.save_as, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd >= 0 && current.in) {
		if (write(fd, current.in->data, current.in->size) < 0)
			n = 0;
		close(fd);
	}
}

static void on_abort(int sig)
{
	report_crash();
	signal(sig, SIG_DFL);
	raise(sig);
}

static uint64_t next_random(uint64_t *state) /* splitmix64 */
{
	uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

static size_t below(uint64_t *state, size_t n)
{
	return n ? (size_t)(next_random(state) % n) : 0;
}

/* Offsets of the length fields of the frames an input starts with (msg_len, bulk_len). */
static size_t frame_length_fields(const struct input *in, size_t *offsets, size_t max)
{
	size_t n = 0, at = 0;
	while (n + 2 <= max && in->size - at >= FRAME_LEN && !memcmp(in->data + at, FRAME_MAGIC, 4)) {
		uint64_t msg = 0, bulk = 0;
		for (int i = 3; i >= 0; i--)
			msg = msg << 8 | in->data[at + 16 + i];
		for (int i = 7; i >= 0; i--)
			bulk = bulk << 8 | in->data[at + 24 + i];
		offsets[n++] = at + 16;
		offsets[n++] = at + 24;
		if (msg + bulk > in->size - at - FRAME_LEN)
			break;
		at += FRAME_LEN + msg + bulk;
	}
	return n;
}

static void set_length_field(struct input *in, uint64_t *rs)
{
	size_t offsets[64], n = frame_length_fields(in, offsets, 64);
	uint64_t value = edge_values[below(rs, sizeof(edge_values) / sizeof(edge_values[0]))];
	if (n && below(rs, 2)) { /* a frame's own: msg_len is 4 bytes, bulk_len 8 */
		size_t i = below(rs, n), width = i % 2 ? 8 : 4;
		for (size_t k = 0; k < width; k++)
			in->data[offsets[i] + k] = (uint8_t)(value >> (8 * k));
		return;
	}
	size_t width = below(rs, 2) ? 8 : 4;
	if (in->size < width)
		return;
	size_t at = below(rs, (in->size - width) / width + 1) * width;
	for (size_t k = 0; k < width; k++)
		in->data[at + k] = (uint8_t)(value >> (8 * k));
}

/* Replaces the protobuf varint at a random offset with an edge value's encoding. */
static void set_varint(struct input *in, uint64_t *rs)
{
	if (!in->size)
		return;
	size_t at = below(rs, in->size), end = at;
	while (end < in->size && end - at < 10 && (in->data[end] & 0x80))
		end++;
	if (end < in->size)
		end++;
	uint8_t enc[10];
	size_t len = 0;
	uint64_t value = edge_values[below(rs, sizeof(edge_values) / sizeof(edge_values[0]))];
	do {
		enc[len++] = (uint8_t)((value & 0x7f) | (value > 0x7f ? 0x80 : 0));
		value >>= 7;
	} while (value);
	memmove(in->data + at + len, in->data + end, in->size - end); /* room: MAX_INSERT spare */
	memcpy(in->data + at, enc, len);
	in->size = in->size - (end - at) + len;
}

static void mutate_once(struct input *in, uint64_t *rs)
{
	switch (below(rs, 6)) {
	case 0:
		if (in->size)
			in->data[below(rs, in->size)] ^= (uint8_t)(1u << below(rs, 8));
		break;
	case 1:
		in->size = below(rs, in->size);
		break;
	case 2: {
		size_t at = below(rs, in->size + 1), k = 1 + below(rs, MAX_INSERT);
		memmove(in->data + at + k, in->data + at, in->size - at);
		for (size_t i = 0; i < k; i++)
			in->data[at + i] = (uint8_t)next_random(rs);
		in->size += k;
		break;
	}
	case 3: {
		size_t at = below(rs, in->size), k = 1 + below(rs, in->size - at);
		if (in->size) {
			memmove(in->data + at, in->data + at + k, in->size - at - k);
			in->size -= k;
		}
		break;
	}
	case 4: set_length_field(in, rs); break;
	default: set_varint(in, rs); break;
	}
}

static void run(const struct input *in, const char *file, long mutation)
{
	current.in = in;
	current.file = file;
	current.mutation = mutation;
	LLVMFuzzerTestOneInput(in->data, in->size);
}

static int read_file(const char *path, struct input *out)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return -1;
	size_t cap = 4096, n = 0;
	uint8_t *buf = malloc(cap);
	for (size_t got; buf && (got = fread(buf + n, 1, cap - n, f)) > 0;) {
		n += got;
		if (n == cap) {
			uint8_t *p = realloc(buf, cap *= 2);
			if (!p)
				free(buf);
			buf = p;
		}
	}
	int bad = ferror(f) || !buf;
	fclose(f);
	if (bad) {
		free(buf);
		return -1;
	}
	out->data = buf;
	out->size = n;
	return 0;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Adds path, or the regular files of directory path in name order, to *files. */
static int collect(const char *path, char ***files, size_t *n)
{
	struct stat st;
	if (stat(path, &st)) {
		perror(path);
		return -1;
	}
	size_t first = *n;
	DIR *d = S_ISDIR(st.st_mode) ? opendir(path) : NULL;
	for (struct dirent *e; d && (e = readdir(d));) {
		char full[4096];
		snprintf(full, sizeof(full), "%s/%s", path, e->d_name);
		if (e->d_name[0] == '.' || stat(full, &st) || !S_ISREG(st.st_mode))
			continue;
		*files = realloc(*files, (*n + 1) * sizeof(**files));
		(*files)[(*n)++] = strdup(full);
	}
	if (d)
		closedir(d);
	else {
		*files = realloc(*files, (*n + 1) * sizeof(**files));
		(*files)[(*n)++] = strdup(path);
	}
	qsort(*files + first, *n - first, sizeof(**files), by_name);
	return 0;
}

static double seconds_since(const struct timespec *t0)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) / 1e9;
}

int main(int argc, char **argv)
{
	long mutations = 300;
	double budget_s = 15;
	char **files = NULL;
	size_t nfiles = 0;
	const char *self = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
	const char *suffix = strstr(self, "-standalone");
	int target_len = suffix ? (int)(suffix - self) : (int)strlen(self);
	snprintf(current.save_as, sizeof(current.save_as), "%.*s.crash", target_len, self);
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--mutations") && i + 1 < argc)
			mutations = atol(argv[++i]);
		else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
			budget_s = atof(argv[++i]);
		else if (collect(argv[i], &files, &nfiles))
			return 2;
	}
	if (!nfiles) {
		fprintf(stderr, "usage: %s [--mutations N] [--seconds S] CORPUS_DIR|FILE...\n", argv[0]);
		return 2;
	}
	if (__sanitizer_set_death_callback)
		__sanitizer_set_death_callback(report_crash);
	signal(SIGABRT, on_abort);
	if (LLVMFuzzerInitialize)
		LLVMFuzzerInitialize(&argc, &argv);

	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	struct input *seeds = calloc(nfiles, sizeof(*seeds));
	for (size_t f = 0; f < nfiles; f++) {
		if (read_file(files[f], &seeds[f])) {
			perror(files[f]);
			return 2;
		}
		run(&seeds[f], files[f], -1);
	}
	/* Round-robin over the files, so that a time cut still reaches every one. */
	long ran = 0;
	int cut = 0;
	for (long m = 0; m < mutations && !cut; m++)
		for (size_t f = 0; f < nfiles && !cut; f++) {
			uint64_t rs = 0x5eed0000u ^ ((uint64_t)f << 32) ^ (uint64_t)m;
			struct input in = {malloc(seeds[f].size + 4 * MAX_INSERT), seeds[f].size};
			if (!in.data)
				return 2;
			memcpy(in.data, seeds[f].data, seeds[f].size);
			for (size_t k = 1 + below(&rs, 3); k > 0; k--)
				mutate_once(&in, &rs);
			run(&in, files[f], m);
			free(in.data);
			ran++;
			cut = seconds_since(&t0) > budget_s;
		}
	printf("%s: %zu files and %ld mutations run in %.1f s%s\n", self, nfiles, ran, seconds_since(&t0),
	       cut ? " (stopped at the time budget)" : "");
	current.in = NULL; /* a leak found at exit is reported without them */
	current.file = "(every input run; found at exit)";
	for (size_t f = 0; f < nfiles; f++) {
		free(seeds[f].data);
		free(files[f]);
	}
	free(seeds);
	free(files);
	return 0;
}
