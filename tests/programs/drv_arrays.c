/* drv_arrays IMAGE: arrays, layered and mipmapped arrays, and copies to and from them, each
 * checked bit for bit: the 1-D copies (cuMemcpyHtoA, AtoH, DtoA, AtoD, AtoA), 2-D copies
 * between host, device and array sides with odd pitches and offsets, 3-D copies of volumes
 * and layers, a mipmapped array's levels and their descriptors. IMAGE is not used. */
#include "drv_common.h"

static void fill(unsigned char *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (unsigned char)((i * 29 + seed * 101) ^ (i >> 7));
}

static void same(const void *got, const void *want, size_t n, const char *what)
{
	int ok = !memcmp(got, want, n);
	EXPECT(ok, "%s differs", what);
	printf("%s: %s %016llx\n", what, ok ? "ok" : "FAIL", (unsigned long long)drv_fnv1a(got, n));
}

static void test_1d(void)
{
	CUarray a, b;
	CUDA_ARRAY_DESCRIPTOR d = {.Width = 1000, .Height = 0, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1};
	CHECK(cuArrayCreate(&a, &d));
	CHECK(cuArrayCreate(&b, &d));
	CUDA_ARRAY_DESCRIPTOR got;
	CHECK(cuArrayGetDescriptor(&got, a));
	printf("1d descriptor: %zu x %zu format %d channels %u\n", got.Width, got.Height, (int)got.Format, got.NumChannels);
	unsigned char in[4000], out[4000], want[4000];
	fill(in, sizeof(in), 1);
	memset(out, 0, sizeof(out));
	CHECK(cuMemcpyHtoA(a, 0, in, sizeof(in)));
	CHECK(cuMemcpyHtoA(a, 40, in + 7, 3000));
	memcpy(want, in, sizeof(in));
	memcpy(want + 40, in + 7, 3000);
	CHECK(cuMemcpyAtoA(b, 0, a, 0, sizeof(in)));
	CHECK(cuMemcpyAtoA(b, 100, a, 8, 800));
	memmove(want + 100, want + 8, 800); /* b's model: a's, then the shifted piece */
	CHECK(cuMemcpyAtoH(out, b, 0, sizeof(out)));
	same(out, want, sizeof(out), "1d htoa atoa atoh");
	CUdeviceptr dev;
	CHECK(cuMemAlloc(&dev, 4000));
	CHECK(cuMemcpyAtoD(dev, b, 12, 3000));
	CHECK(cuMemcpyDtoA(a, 1000, dev, 3000));
	CHECK(cuMemcpyAtoH(out, a, 0, sizeof(out)));
	unsigned char wa[4000];
	memcpy(wa, in, sizeof(in));
	memcpy(wa + 40, in + 7, 3000);
	memcpy(wa + 1000, want + 12, 3000);
	same(out, wa, sizeof(out), "1d atod dtoa");
	CUstream s;
	CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CHECK(cuMemcpyHtoAAsync(a, 4, in + 100, 64, s));
	CHECK(cuMemcpyAtoHAsync(out, a, 0, 256, s));
	CHECK(cuStreamSynchronize(s));
	memcpy(wa + 4, in + 100, 64);
	same(out, wa, 256, "1d async");
	CHECK(cuStreamDestroy(s));
	CHECK(cuMemFree(dev));
	CHECK(cuArrayDestroy(a));
	CHECK(cuArrayDestroy(b));
}

static void test_2d(void)
{
	const size_t W = 67, H = 45, E = 4, hp = 300, hh = 50;
	CUarray a;
	CUDA_ARRAY_DESCRIPTOR d = {.Width = W, .Height = H, .Format = CU_AD_FORMAT_UNSIGNED_INT8, .NumChannels = 4};
	CHECK(cuArrayCreate(&a, &d));
	unsigned char *host = malloc(hp * hh), *out = malloc(hp * hh), *model = calloc(W * E, H);
	fill(host, hp * hh, 2);
	CUDA_MEMCPY2D c;
	memset(&c, 0, sizeof(c));
	c.srcMemoryType = CU_MEMORYTYPE_HOST, c.srcHost = host, c.srcPitch = hp;
	c.dstMemoryType = CU_MEMORYTYPE_ARRAY, c.dstArray = a;
	c.WidthInBytes = W * E, c.Height = H;
	CHECK(cuMemcpy2D(&c));
	for (size_t y = 0; y < H; y++)
		memcpy(model + y * W * E, host + y * hp, W * E);
	/* A piece at (3 texels, 5 rows) from (11, 2) of the host. */
	c.srcXInBytes = 11, c.srcY = 2, c.dstXInBytes = 3 * E, c.dstY = 5, c.WidthInBytes = 40 * E, c.Height = 31;
	CHECK(cuMemcpy2D(&c));
	for (size_t y = 0; y < 31; y++)
		memcpy(model + (5 + y) * W * E + 3 * E, host + (2 + y) * hp + 11, 40 * E);
	CUDA_ARRAY_MEMORY_REQUIREMENTS req;
	CUdevice device;
	CHECK(cuCtxGetDevice(&device));
	/* Only an array with deferred mapping has memory requirements. */
	EXPECT_RESULT(cuArrayGetMemoryRequirements(&req, a, device), CUDA_ERROR_INVALID_VALUE);
	size_t linear_max;
	CHECK(cuDeviceGetTexture1DLinearMaxWidth(&linear_max, CU_AD_FORMAT_FLOAT, 4, device));
	printf("1-D linear textures of %zu elements\n", linear_max);
	/* Array to pitched device memory and back to the host. */
	CUdeviceptr dev;
	size_t pitch;
	CHECK(cuMemAllocPitch(&dev, &pitch, W * E, H, 4));
	memset(&c, 0, sizeof(c));
	c.srcMemoryType = CU_MEMORYTYPE_ARRAY, c.srcArray = a;
	c.dstMemoryType = CU_MEMORYTYPE_DEVICE, c.dstDevice = dev, c.dstPitch = pitch;
	c.WidthInBytes = W * E, c.Height = H;
	CHECK(cuMemcpy2D(&c));
	memset(out, 0, hp * hh);
	memset(&c, 0, sizeof(c));
	c.srcMemoryType = CU_MEMORYTYPE_DEVICE, c.srcDevice = dev, c.srcPitch = pitch;
	c.dstMemoryType = CU_MEMORYTYPE_HOST, c.dstHost = out, c.dstPitch = W * E;
	c.WidthInBytes = W * E, c.Height = H;
	CHECK(cuMemcpy2D(&c));
	same(out, model, W * E * H, "2d host array device");
	/* A piece of the array straight to an odd host layout, Async. */
	CUstream s;
	CHECK(cuStreamCreate(&s, 0));
	unsigned char *want = malloc(hp * hh);
	fill(out, hp * hh, 3);
	memcpy(want, out, hp * hh);
	memset(&c, 0, sizeof(c));
	c.srcMemoryType = CU_MEMORYTYPE_ARRAY, c.srcArray = a, c.srcXInBytes = 8 * E, c.srcY = 9;
	c.dstMemoryType = CU_MEMORYTYPE_HOST, c.dstHost = out, c.dstXInBytes = 5, c.dstY = 1, c.dstPitch = hp - 1;
	c.WidthInBytes = 50 * E, c.Height = 33;
	CHECK(cuMemcpy2DAsync(&c, s));
	CHECK(cuStreamSynchronize(s));
	for (size_t y = 0; y < 33; y++)
		memcpy(want + (1 + y) * (hp - 1) + 5, model + (9 + y) * W * E + 8 * E, 50 * E);
	same(out, want, hp * hh, "2d array to host");
	CHECK(cuStreamDestroy(s));
	CHECK(cuMemFree(dev));
	CHECK(cuArrayDestroy(a));
	free(host), free(out), free(model), free(want);
}

static CUDA_MEMCPY3D c3d(void)
{
	CUDA_MEMCPY3D c;
	memset(&c, 0, sizeof(c));
	return c;
}

/* A volume of float2 and a layered array: 3-D copies in and out, array to array. */
static void test_3d(void)
{
	const size_t W = 13, H = 11, D = 7, E = 8;
	CUarray v, w, layered;
	CUDA_ARRAY3D_DESCRIPTOR d = {.Width = W, .Height = H, .Depth = D, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 2};
	CHECK(cuArray3DCreate(&v, &d));
	CHECK(cuArray3DCreate(&w, &d));
	CUDA_ARRAY3D_DESCRIPTOR got;
	CHECK(cuArray3DGetDescriptor(&got, v));
	printf("3d descriptor: %zu x %zu x %zu format %d channels %u flags %u\n", got.Width, got.Height, got.Depth,
	       (int)got.Format, got.NumChannels, got.Flags);
	size_t n = W * E * H * D;
	unsigned char *host = malloc(n), *out = malloc(n), *model = calloc(1, n);
	fill(host, n, 4);
	CUDA_MEMCPY3D c = c3d();
	c.srcMemoryType = CU_MEMORYTYPE_HOST, c.srcHost = host, c.srcPitch = W * E, c.srcHeight = H;
	c.dstMemoryType = CU_MEMORYTYPE_ARRAY, c.dstArray = v;
	c.WidthInBytes = W * E, c.Height = H, c.Depth = D;
	CHECK(cuMemcpy3D(&c));
	c.srcHost = model, c.dstArray = w; /* zeros first: a new array's contents are undefined */
	CHECK(cuMemcpy3D(&c));
	/* w gets a sub-box of v, shifted. */
	CHECK(cuMemcpy3D(&(CUDA_MEMCPY3D){.srcMemoryType = CU_MEMORYTYPE_ARRAY, .srcArray = v, .srcXInBytes = 2 * E,
					  .srcY = 1, .srcZ = 3, .dstMemoryType = CU_MEMORYTYPE_ARRAY, .dstArray = w,
					  .dstXInBytes = 0, .dstY = 4, .dstZ = 1, .WidthInBytes = 9 * E, .Height = 6,
					  .Depth = 4}));
	for (size_t z = 0; z < 4; z++)
		for (size_t y = 0; y < 6; y++)
			memcpy(model + ((1 + z) * H + 4 + y) * W * E, host + ((3 + z) * H + 1 + y) * W * E + 2 * E, 9 * E);
	c = c3d();
	c.srcMemoryType = CU_MEMORYTYPE_ARRAY, c.srcArray = w;
	c.dstMemoryType = CU_MEMORYTYPE_HOST, c.dstHost = out, c.dstPitch = W * E, c.dstHeight = H;
	c.WidthInBytes = W * E, c.Height = H, c.Depth = D;
	CHECK(cuMemcpy3D(&c));
	same(out, model, n, "3d host array array host");

	/* A layered 2-D array of 5 layers: layer 3 from the host, all back. */
	CUDA_ARRAY3D_DESCRIPTOR ld = {.Width = 20, .Height = 9, .Depth = 5, .Format = CU_AD_FORMAT_SIGNED_INT16,
				      .NumChannels = 1, .Flags = CUDA_ARRAY3D_LAYERED};
	CHECK(cuArray3DCreate(&layered, &ld));
	CHECK(cuArray3DGetDescriptor(&got, layered));
	printf("layered descriptor: %zu x %zu x %zu flags %u\n", got.Width, got.Height, got.Depth, got.Flags);
	size_t ln = 20 * 2 * 9 * 5;
	unsigned char *lm = calloc(1, ln), *lo = malloc(ln);
	c = c3d();
	c.srcMemoryType = CU_MEMORYTYPE_HOST, c.srcHost = lm, c.srcPitch = 40, c.srcHeight = 9;
	c.dstMemoryType = CU_MEMORYTYPE_ARRAY, c.dstArray = layered;
	c.WidthInBytes = 40, c.Height = 9, c.Depth = 5;
	CHECK(cuMemcpy3D(&c)); /* zeros first: a new array's contents are undefined */
	c.srcHost = host, c.dstZ = 3, c.Depth = 1;
	CHECK(cuMemcpy3D(&c));
	memcpy(lm + 3 * 40 * 9, host, 40 * 9);
	c = c3d();
	c.srcMemoryType = CU_MEMORYTYPE_ARRAY, c.srcArray = layered;
	c.dstMemoryType = CU_MEMORYTYPE_HOST, c.dstHost = lo, c.dstPitch = 40, c.dstHeight = 9;
	c.WidthInBytes = 40, c.Height = 9, c.Depth = 5;
	CHECK(cuMemcpy3D(&c));
	same(lo, lm, ln, "layered");
	CHECK(cuArrayDestroy(v));
	CHECK(cuArrayDestroy(w));
	CHECK(cuArrayDestroy(layered));
	free(host), free(out), free(model), free(lm), free(lo);
}

static void test_mipmapped(void)
{
	CUmipmappedArray m;
	CUDA_ARRAY3D_DESCRIPTOR d = {.Width = 64, .Height = 32, .Format = CU_AD_FORMAT_UNSIGNED_INT8, .NumChannels = 1};
	CHECK(cuMipmappedArrayCreate(&m, &d, 4));
	for (unsigned l = 0; l < 4; l++) {
		CUarray level;
		CUDA_ARRAY3D_DESCRIPTOR got;
		CHECK(cuMipmappedArrayGetLevel(&level, m, l));
		CHECK(cuArray3DGetDescriptor(&got, level));
		printf("level %u: %zu x %zu x %zu\n", l, got.Width, got.Height, got.Depth);
		size_t n = got.Width * got.Height;
		unsigned char in[2048], out[2048];
		fill(in, n, 10 + l);
		CUDA_MEMCPY3D c = c3d();
		c.srcMemoryType = CU_MEMORYTYPE_HOST, c.srcHost = in, c.srcPitch = got.Width, c.srcHeight = got.Height;
		c.dstMemoryType = CU_MEMORYTYPE_ARRAY, c.dstArray = level;
		c.WidthInBytes = got.Width, c.Height = got.Height, c.Depth = 1;
		CHECK(cuMemcpy3D(&c));
		c = c3d();
		c.srcMemoryType = CU_MEMORYTYPE_ARRAY, c.srcArray = level;
		c.dstMemoryType = CU_MEMORYTYPE_HOST, c.dstHost = out, c.dstPitch = got.Width, c.dstHeight = got.Height;
		c.WidthInBytes = got.Width, c.Height = got.Height, c.Depth = 1;
		CHECK(cuMemcpy3D(&c));
		char what[32];
		snprintf(what, sizeof(what), "mipmap level %u", l);
		same(out, in, n, what);
	}
	CHECK(cuMipmappedArrayDestroy(m));
}

int main(int argc, char **argv)
{
	(void)argc, (void)argv;
	drv_open_device0();
	test_1d();
	test_2d();
	test_3d();
	test_mipmapped();
	int status = drv_exit_status();
	printf("%s\n", status ? "FAIL" : "PASS");
	return status;
}
