/* The built-in kernel catalogue: CPU versions of tests/programs/kernels.cu,
 * found by the kernels' (extern "C") names.
 *
 * A body runs the whole grid at once.  The element-wise kernels are
 * grid-stride loops on the GPU, so any launch covers all n elements; the
 * reduction is computed as its mathematical result.  Every body first checks
 * that the memory it would touch lies inside allocations, and reports
 * CUDA_ERROR_ILLEGAL_ADDRESS otherwise, as a faulting GPU kernel would.
 *
 * Parameters are packed as a GPU kernel's are: each at the next offset
 * aligned to its own size.
 */
#include "testdriver.h"

#include <math.h>
#include <string.h>
#include <time.h>

struct arg_reader { const unsigned char *args; size_t offset; };

static void next_arg(struct arg_reader *r, void *out, size_t size)
{
	r->offset = (r->offset + size - 1) / size * size;
	memcpy(out, r->args + r->offset, size);
	r->offset += size;
}

static bool span_ok(const void *p, long long count, size_t element)
{
	return count <= 0 || td_device_range_ok(p, (size_t)count * element);
}

static CUresult run_vec_add(const struct td_launch_shape *shape, const unsigned char *args)
{
	(void)shape;
	struct arg_reader r = { args, 0 };
	const float *a, *b;
	float *c;
	int n;
	next_arg(&r, &a, sizeof a), next_arg(&r, &b, sizeof b), next_arg(&r, &c, sizeof c), next_arg(&r, &n, sizeof n);
	if (!span_ok(a, n, 4) || !span_ok(b, n, 4) || !span_ok(c, n, 4))
		return CUDA_ERROR_ILLEGAL_ADDRESS;
	for (int i = 0; i < n; i++)
		c[i] = a[i] + b[i];
	return CUDA_SUCCESS;
}

static CUresult run_scale_array(const struct td_launch_shape *shape, const unsigned char *args)
{
	(void)shape;
	struct arg_reader r = { args, 0 };
	float *x, s;
	int n;
	next_arg(&r, &x, sizeof x), next_arg(&r, &s, sizeof s), next_arg(&r, &n, sizeof n);
	if (!span_ok(x, n, 4))
		return CUDA_ERROR_ILLEGAL_ADDRESS;
	for (int i = 0; i < n; i++)
		x[i] *= s;
	return CUDA_SUCCESS;
}

static CUresult run_fill_u32(const struct td_launch_shape *shape, const unsigned char *args)
{
	(void)shape;
	struct arg_reader r = { args, 0 };
	unsigned *x, v;
	int n;
	next_arg(&r, &x, sizeof x), next_arg(&r, &v, sizeof v), next_arg(&r, &n, sizeof n);
	if (!span_ok(x, n, 4))
		return CUDA_ERROR_ILLEGAL_ADDRESS;
	for (int i = 0; i < n; i++)
		x[i] = v;
	return CUDA_SUCCESS;
}

static CUresult run_reduce_sum(const struct td_launch_shape *shape, const unsigned char *args)
{
	(void)shape;
	struct arg_reader r = { args, 0 };
	const int *in;
	unsigned long long *out, sum = 0;
	int n;
	next_arg(&r, &in, sizeof in), next_arg(&r, &out, sizeof out), next_arg(&r, &n, sizeof n);
	if (!span_ok(in, n, 4) || !span_ok(out, 1, sizeof *out))
		return CUDA_ERROR_ILLEGAL_ADDRESS;
	for (int i = 0; i < n; i++)
		sum += (unsigned long long)(long long)in[i];
	*out += sum;
	return CUDA_SUCCESS;
}

/* Same fmaf chain per element as the tiled GPU kernel: ascending k from 0. */
static CUresult run_matmul_tiled(const struct td_launch_shape *shape, const unsigned char *args)
{
	(void)shape;
	struct arg_reader r = { args, 0 };
	const float *A, *B;
	float *C;
	int n;
	next_arg(&r, &A, sizeof A), next_arg(&r, &B, sizeof B), next_arg(&r, &C, sizeof C), next_arg(&r, &n, sizeof n);
	long long elements = (long long)n * n;
	if (n > 0 && (!span_ok(A, elements, 4) || !span_ok(B, elements, 4) || !span_ok(C, elements, 4)))
		return CUDA_ERROR_ILLEGAL_ADDRESS;
	for (int row = 0; row < n; row++) {
		for (int col = 0; col < n; col++) {
			float acc = 0.0f;
			for (int k = 0; k < n; k++)
				acc = fmaf(A[(size_t)row * n + k], B[(size_t)k * n + col], acc);
			C[(size_t)row * n + col] = acc;
		}
	}
	return CUDA_SUCCESS;
}

static CUresult run_spin_fma(const struct td_launch_shape *shape, const unsigned char *args)
{
	(void)shape;
	struct arg_reader r = { args, 0 };
	float *out;
	long long iters;
	next_arg(&r, &out, sizeof out), next_arg(&r, &iters, sizeof iters);
	if (!span_ok(out, 1, sizeof *out))
		return CUDA_ERROR_ILLEGAL_ADDRESS;
	float x = 1.0f;
	for (long long i = 0; i < iters; i++) {
		x = fmaf(x, 0.999999f, 1e-7f);
		x = fmaf(x, 0.999999f, 1e-7f);
		x = fmaf(x, 0.999999f, 1e-7f);
		x = fmaf(x, 0.999999f, 1e-7f);
	}
	out[0] = x;
	return CUDA_SUCCESS;
}

/* Spins until *flag is set, for up to WAIT_FLAG_LIMIT_S (a GPU would spin on, and the
 * test hang): then CUDA_ERROR_LAUNCH_TIMEOUT. */
#define WAIT_FLAG_LIMIT_S 20
static CUresult run_wait_flag(const struct td_launch_shape *shape, const unsigned char *args)
{
	(void)shape;
	struct arg_reader r = { args, 0 };
	const unsigned *flag;
	unsigned *out;
	next_arg(&r, &flag, sizeof flag), next_arg(&r, &out, sizeof out);
	bool host = !td_device_range_ok(flag, sizeof *flag); /* natively: a pinned host pointer */
	if (!span_ok(out, 1, sizeof *out) || (host && !flag))
		return CUDA_ERROR_ILLEGAL_ADDRESS;
	struct timespec start, now, pause = { 0, 1000000 };
	clock_gettime(CLOCK_MONOTONIC, &start);
	unsigned v;
	while (!(v = __atomic_load_n(flag, __ATOMIC_ACQUIRE))) {
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec - start.tv_sec > WAIT_FLAG_LIMIT_S)
			return CUDA_ERROR_LAUNCH_TIMEOUT;
		nanosleep(&pause, NULL);
	}
	*out = v;
	return CUDA_SUCCESS;
}

static CUresult run_sleep_ns(const struct td_launch_shape *shape, const unsigned char *args)
{
	(void)shape;
	struct arg_reader r = { args, 0 };
	unsigned long long ns;
	next_arg(&r, &ns, sizeof ns);
	struct timespec left = { (time_t)(ns / 1000000000u), (long)(ns % 1000000000u) };
	while (nanosleep(&left, &left) != 0)
		;
	return CUDA_SUCCESS;
}

static CUresult run_empty_kernel(const struct td_launch_shape *shape, const unsigned char *args)
{
	(void)shape, (void)args;
	return CUDA_SUCCESS;
}

static CUresult run_fault_kernel(const struct td_launch_shape *shape, const unsigned char *args)
{
	(void)shape;
	struct arg_reader r = { args, 0 };
	int *p;
	next_arg(&r, &p, sizeof p);
	if (!span_ok(p, 1, sizeof *p))
		return CUDA_ERROR_ILLEGAL_ADDRESS;
	*p = 1;
	return CUDA_SUCCESS;
}

/* A device-side assert: assert(v != 0) in every thread. */
static CUresult run_assert_kernel(const struct td_launch_shape *shape, const unsigned char *args)
{
	(void)shape;
	struct arg_reader r = { args, 0 };
	int v;
	next_arg(&r, &v, sizeof v);
	return v ? CUDA_SUCCESS : CUDA_ERROR_ASSERT;
}

/* tests/programs/coop_kernels.cu: a grid-wide sum in two phases that grid.sync() separates,
 * each block writing its partial sum, then every block reading all of them into out[block].
 * Run as the phases in turn; without a cooperative launch grid.sync() is not allowed. */
static CUresult run_grid_sum_coop(const struct td_launch_shape *shape, const unsigned char *args)
{
	struct arg_reader r = { args, 0 };
	const int *in;
	unsigned long long *partial, *out;
	int n;
	next_arg(&r, &in, sizeof in), next_arg(&r, &partial, sizeof partial), next_arg(&r, &out, sizeof out);
	next_arg(&r, &n, sizeof n);
	if (!shape->cooperative)
		return CUDA_ERROR_LAUNCH_FAILED;
	unsigned long long blocks = (unsigned long long)shape->grid[0] * shape->grid[1] * shape->grid[2];
	unsigned long long threads = (unsigned long long)shape->block[0] * shape->block[1] * shape->block[2];
	if (shape->grid[1] * shape->grid[2] != 1 || !span_ok(in, n, 4) || !span_ok(partial, (long long)blocks, 8) ||
	    !span_ok(out, (long long)blocks, 8))
		return shape->grid[1] * shape->grid[2] != 1 ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_ILLEGAL_ADDRESS;
	for (unsigned long long b = 0; b < blocks; b++)
		partial[b] = 0;
	for (long long i = 0; i < n; i++) /* element i is grid thread i mod the grid's threads' */
		partial[(unsigned long long)i % (blocks * threads) / threads] += (unsigned long long)(long long)in[i];
	unsigned long long total = 0;
	for (unsigned long long b = 0; b < blocks; b++)
		total += partial[b];
	for (unsigned long long b = 0; b < blocks; b++)
		out[b] = total;
	return CUDA_SUCCESS;
}

/* coop_kernels.cu: each block of a one-dimensional grid writes its rank in its cluster, the
 * cluster's size and its next neighbour's mark (read from the neighbour's shared memory). */
static CUresult run_cluster_ranks(const struct td_launch_shape *shape, const unsigned char *args)
{
	struct arg_reader r = { args, 0 };
	unsigned *out;
	next_arg(&r, &out, sizeof out);
	unsigned size = shape->cluster[0] ? shape->cluster[0] : 1;
	if (shape->grid[1] * shape->grid[2] != 1 || (shape->cluster[0] && shape->cluster[1] * shape->cluster[2] != 1))
		return CUDA_ERROR_NOT_SUPPORTED; /* the model's limit: clusters along x */
	if (!span_ok(out, shape->grid[0], 4))
		return CUDA_ERROR_ILLEGAL_ADDRESS;
	for (unsigned b = 0; b < shape->grid[0]; b++) {
		unsigned rank = b % size, neighbour = b - rank + (rank + 1) % size;
		out[b] = rank | size << 8 | (neighbour * 3 + 1) << 16;
	}
	return CUDA_SUCCESS;
}

/* Texels read through a texture object at each element's centre (textures.c). */
static CUresult run_tex_fetch_2d(const struct td_launch_shape *shape, const unsigned char *args)
{
	(void)shape;
	struct arg_reader r = { args, 0 };
	float *out, dx, dy;
	unsigned long long tex;
	int w, h;
	next_arg(&r, &out, sizeof out), next_arg(&r, &tex, sizeof tex), next_arg(&r, &w, sizeof w);
	next_arg(&r, &h, sizeof h), next_arg(&r, &dx, sizeof dx), next_arg(&r, &dy, sizeof dy);
	if (w > 0 && h > 0 && !span_ok(out, (long long)w * h, 4))
		return CUDA_ERROR_ILLEGAL_ADDRESS;
	for (int i = 0; w > 0 && i < w * h; i++) {
		CUresult rc = td_texture_fetch2d(tex, (float)(i % w) + dx + 0.5f, (float)(i / w) + dy + 0.5f, &out[i]);
		if (rc != CUDA_SUCCESS)
			return rc;
	}
	return CUDA_SUCCESS;
}

/* surf2Dwrite of 32-bit elements: outside the surface's array faults (the GPU's trap mode). */
static CUresult run_surf_write_2d(const struct td_launch_shape *shape, const unsigned char *args)
{
	(void)shape;
	struct arg_reader r = { args, 0 };
	unsigned long long surf;
	int w, h;
	unsigned v;
	next_arg(&r, &surf, sizeof surf), next_arg(&r, &w, sizeof w), next_arg(&r, &h, sizeof h);
	next_arg(&r, &v, sizeof v);
	for (int i = 0; w > 0 && i < w * h; i++) {
		unsigned value = v + 1000u * (unsigned)(i % w) + (unsigned)(i / w);
		void *at = td_surface_element(surf, (long long)(i % w) * 4, i / w, 4);
		if (!at)
			return CUDA_ERROR_ILLEGAL_ADDRESS;
		memcpy(at, &value, 4);
	}
	return CUDA_SUCCESS;
}

/* tests/programs/drv_texrefs.c's PTX: out[i] = tex1Dfetch(legacyTex, i) (texrefs.c). */
static CUresult run_legacy_tex_read(const struct td_launch_shape *shape, const unsigned char *args)
{
	(void)shape;
	struct arg_reader r = { args, 0 };
	float *out;
	int n;
	next_arg(&r, &out, sizeof out), next_arg(&r, &n, sizeof n);
	if (!span_ok(out, n, 4))
		return CUDA_ERROR_ILLEGAL_ADDRESS;
	for (int i = 0; i < n; i++) {
		CUresult rc = td_legacy_tex_fetch(i, &out[i]);
		if (rc != CUDA_SUCCESS)
			return rc;
	}
	return CUDA_SUCCESS;
}

/* cond_kernels.cu: a conditional graph node's handle set by a kernel (graph.c). */
static CUresult run_cond_set(const struct td_launch_shape *shape, const unsigned char *args)
{
	(void)shape;
	struct arg_reader r = { args, 0 };
	const unsigned *v;
	unsigned long long handle;
	next_arg(&r, &v, sizeof v), next_arg(&r, &handle, sizeof handle);
	if (!span_ok(v, 1, 4) || !td_graph_set_conditional(handle, *v))
		return CUDA_ERROR_ILLEGAL_ADDRESS;
	return CUDA_SUCCESS;
}

static CUresult run_cond_count_down(const struct td_launch_shape *shape, const unsigned char *args)
{
	(void)shape;
	struct arg_reader r = { args, 0 };
	unsigned *counter;
	unsigned long long handle;
	next_arg(&r, &counter, sizeof counter), next_arg(&r, &handle, sizeof handle);
	if (!span_ok(counter, 1, 4))
		return CUDA_ERROR_ILLEGAL_ADDRESS;
	if (--*counter == 0 && !td_graph_set_conditional(handle, 0))
		return CUDA_ERROR_ILLEGAL_ADDRESS;
	return CUDA_SUCCESS;
}

static CUresult run_cond_add_u32(const struct td_launch_shape *shape, const unsigned char *args)
{
	(void)shape;
	struct arg_reader r = { args, 0 };
	unsigned *x, v;
	next_arg(&r, &x, sizeof x), next_arg(&r, &v, sizeof v);
	if (!span_ok(x, 1, 4))
		return CUDA_ERROR_ILLEGAL_ADDRESS;
	*x += v;
	return CUDA_SUCCESS;
}

/* bumpMagic: the module's kernelsMagic + 1, into it and into out[0]. */
static CUresult run_bump_magic(const struct td_launch_shape *shape, const unsigned char *args)
{
	struct arg_reader r = { args, 0 };
	unsigned *out;
	next_arg(&r, &out, sizeof out);
	if (!shape->magic || !span_ok(out, 1, 4))
		return CUDA_ERROR_ILLEGAL_ADDRESS;
	*out = ++*(unsigned *)shape->magic;
	return CUDA_SUCCESS;
}

#define P 8 /* a pointer parameter */
static const struct td_kernel catalogue[] = {
	{ "vecAdd", 4, { P, P, P, 4 }, 0, 16, run_vec_add },
	{ "scaleArray", 3, { P, 4, 4 }, 0, 10, run_scale_array },
	{ "fillU32", 3, { P, 4, 4 }, 0, 10, run_fill_u32 },
	{ "reduceSum", 3, { P, P, 4 }, 8192, 18, run_reduce_sum },
	{ "matmulTiled", 4, { P, P, P, 4 }, 2048, 32, run_matmul_tiled },
	{ "spinFma", 2, { P, 8 }, 0, 12, run_spin_fma },
	{ "sleepNs", 1, { 8 }, 0, 10, run_sleep_ns },
	{ "waitFlag", 2, { P, P }, 0, 8, run_wait_flag },
	{ "emptyKernel", 0, { 0 }, 0, 4, run_empty_kernel },
	{ "faultKernel", 1, { P }, 0, 8, run_fault_kernel },
	{ "assertKernel", 1, { 4 }, 0, 8, run_assert_kernel },
	{ "gridSumCoop", 4, { P, P, P, 4 }, 8, 16, run_grid_sum_coop },
	{ "clusterRanks", 1, { P }, 4, 8, run_cluster_ranks },
	{ "texFetch2D", 6, { P, 8, 4, 4, 4, 4 }, 0, 16, run_tex_fetch_2d },
	{ "surfWrite2D", 4, { 8, 4, 4, 4 }, 0, 16, run_surf_write_2d },
	{ "legacyTexRead", 2, { P, 4 }, 0, 8, run_legacy_tex_read },
	{ "condSet", 2, { P, 8 }, 0, 8, run_cond_set },
	{ "condCountDown", 2, { P, 8 }, 0, 8, run_cond_count_down },
	{ "condAddU32", 2, { P, 4 }, 0, 8, run_cond_add_u32 },
	{ "bumpMagic", 1, { P }, 0, 8, run_bump_magic },
};
#undef P

static const unsigned kernels_magic = 0x52454d4fu;
static const struct td_global globals[] = {
	{ "kernelsMagic", sizeof kernels_magic, &kernels_magic, false },
	/* Module state larger than its image (a NOBITS section), as a quota must count it. */
	{ "stateBlock", 3u << 20, NULL, true },
};

const struct td_kernel *td_kernel_at(size_t index)
{
	return index < sizeof catalogue / sizeof catalogue[0] ? &catalogue[index] : NULL;
}

const struct td_kernel *td_find_kernel(const char *name)
{
	for (const struct td_kernel *k = catalogue; k < catalogue + sizeof catalogue / sizeof catalogue[0]; k++)
		if (strcmp(k->name, name) == 0)
			return k;
	return NULL;
}

const struct td_global *td_global_at(size_t index)
{
	return index < sizeof globals / sizeof globals[0] ? &globals[index] : NULL;
}

size_t td_param_offset(const struct td_kernel *k, unsigned index)
{
	size_t offset = 0;
	for (unsigned i = 0; i <= index && i < k->param_count; i++) {
		size_t size = k->param_size[i];
		offset = (offset + size - 1) / size * size;
		if (i < index)
			offset += size;
	}
	return offset;
}

size_t td_args_size(const struct td_kernel *k)
{
	if (k->param_count == 0)
		return 0;
	unsigned last = k->param_count - 1;
	return td_param_offset(k, last) + k->param_size[last];
}
