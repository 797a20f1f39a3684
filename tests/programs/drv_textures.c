/* drv_textures IMAGE: texture and surface objects read and written by kernels, checked bit
 * for bit: a 2-D float array read through textures with the clamp and border address modes
 * (point sampling, unnormalized coordinates, as simpleTexture), pitched memory read through
 * a texture (simplePitchLinearTexture), a surface written by a kernel and read back
 * (simpleSurfaceWrite), and the objects' descriptors. Through Remora (REMORA_SERVER set) it
 * also checks that a texture of memory the client does not own is refused. */
#include "drv_common.h"

#define W 37
#define H 23

static CUfunction tex_fetch, surf_write;

static float texel(int x, int y)
{
	return (float)(x * 100 + y) + 0.25f;
}

/* out[y][x] read at (x + dx, y + dy) from texture tex; compared with the model (border: 0
 * outside, else clamped). */
static void fetch_and_check(CUtexObject tex, int dx, int dy, int border, const char *what)
{
	CUdeviceptr out;
	CHECK(cuMemAlloc(&out, W * H * sizeof(float)));
	int w = W, h = H;
	float fdx = (float)dx, fdy = (float)dy;
	void *params[] = {&out, &tex, &w, &h, &fdx, &fdy};
	CHECK(cuLaunchKernel(tex_fetch, 4, 1, 1, 128, 1, 1, 0, NULL, params, NULL));
	float got[W * H], want[W * H];
	CHECK(cuMemcpyDtoH(got, out, sizeof(got)));
	for (int y = 0; y < H; y++)
		for (int x = 0; x < W; x++) {
			int u = x + dx, v = y + dy;
			int outside = u < 0 || u >= W || v < 0 || v >= H;
			u = u < 0 ? 0 : u >= W ? W - 1 : u;
			v = v < 0 ? 0 : v >= H ? H - 1 : v;
			want[y * W + x] = border && outside ? 0.0f : texel(u, v);
		}
	int ok = !memcmp(got, want, sizeof(got));
	EXPECT(ok, "%s: texels differ", what);
	printf("%s: %s %016llx\n", what, ok ? "ok" : "FAIL", (unsigned long long)drv_fnv1a(got, sizeof(got)));
	CHECK(cuMemFree(out));
}

static CUDA_TEXTURE_DESC point_desc(CUaddress_mode mode)
{
	CUDA_TEXTURE_DESC t;
	memset(&t, 0, sizeof(t));
	t.addressMode[0] = t.addressMode[1] = t.addressMode[2] = mode;
	t.filterMode = CU_TR_FILTER_MODE_POINT;
	return t;
}

static void test_array_texture(const float *host)
{
	CUarray a;
	CUDA_ARRAY_DESCRIPTOR d = {.Width = W, .Height = H, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1};
	CHECK(cuArrayCreate(&a, &d));
	CUDA_MEMCPY2D c;
	memset(&c, 0, sizeof(c));
	c.srcMemoryType = CU_MEMORYTYPE_HOST, c.srcHost = host, c.srcPitch = W * sizeof(float);
	c.dstMemoryType = CU_MEMORYTYPE_ARRAY, c.dstArray = a;
	c.WidthInBytes = W * sizeof(float), c.Height = H;
	CHECK(cuMemcpy2D(&c));
	CUDA_RESOURCE_DESC res;
	memset(&res, 0, sizeof(res));
	res.resType = CU_RESOURCE_TYPE_ARRAY;
	res.res.array.hArray = a;
	CUDA_TEXTURE_DESC clamp = point_desc(CU_TR_ADDRESS_MODE_CLAMP), border = point_desc(CU_TR_ADDRESS_MODE_BORDER);
	CUtexObject tc, tb;
	CHECK(cuTexObjectCreate(&tc, &res, &clamp, NULL));
	CHECK(cuTexObjectCreate(&tb, &res, &border, NULL));
	fetch_and_check(tc, 0, 0, 0, "array texture");
	fetch_and_check(tc, -3, 2, 0, "array texture clamp");
	fetch_and_check(tb, 5, -4, 1, "array texture border");

	CUDA_RESOURCE_DESC got_res;
	CUDA_TEXTURE_DESC got_tex;
	CHECK(cuTexObjectGetResourceDesc(&got_res, tb));
	CHECK(cuTexObjectGetTextureDesc(&got_tex, tb));
	EXPECT(got_res.resType == CU_RESOURCE_TYPE_ARRAY && got_res.res.array.hArray == a, "resource descriptor");
	EXPECT(got_tex.addressMode[0] == CU_TR_ADDRESS_MODE_BORDER && got_tex.filterMode == CU_TR_FILTER_MODE_POINT,
	       "texture descriptor");
	printf("descriptors: type %d mode %d filter %d\n", (int)got_res.resType, (int)got_tex.addressMode[0],
	       (int)got_tex.filterMode);
	CHECK(cuTexObjectDestroy(tc));
	CHECK(cuTexObjectDestroy(tb));
	CHECK(cuArrayDestroy(a));
}

static void test_pitch_texture(const float *host)
{
	CUdeviceptr d;
	size_t pitch;
	CHECK(cuMemAllocPitch(&d, &pitch, W * sizeof(float), H, 4));
	CUDA_MEMCPY2D c;
	memset(&c, 0, sizeof(c));
	c.srcMemoryType = CU_MEMORYTYPE_HOST, c.srcHost = host, c.srcPitch = W * sizeof(float);
	c.dstMemoryType = CU_MEMORYTYPE_DEVICE, c.dstDevice = d, c.dstPitch = pitch;
	c.WidthInBytes = W * sizeof(float), c.Height = H;
	CHECK(cuMemcpy2D(&c));
	CUDA_RESOURCE_DESC res;
	memset(&res, 0, sizeof(res));
	res.resType = CU_RESOURCE_TYPE_PITCH2D;
	res.res.pitch2D.devPtr = d;
	res.res.pitch2D.format = CU_AD_FORMAT_FLOAT;
	res.res.pitch2D.numChannels = 1;
	res.res.pitch2D.width = W;
	res.res.pitch2D.height = H;
	res.res.pitch2D.pitchInBytes = pitch;
	CUDA_TEXTURE_DESC clamp = point_desc(CU_TR_ADDRESS_MODE_CLAMP);
	CUtexObject t;
	CHECK(cuTexObjectCreate(&t, &res, &clamp, NULL));
	fetch_and_check(t, 1, 1, 0, "pitch texture");
	if (getenv("REMORA_SERVER")) { /* Remora checks the memory a texture names; a GPU need not */
		CUtexObject bad;
		res.res.pitch2D.height = H + 2048;
		EXPECT_RESULT(cuTexObjectCreate(&bad, &res, &clamp, NULL), CUDA_ERROR_INVALID_VALUE);
		res.resType = CU_RESOURCE_TYPE_LINEAR;
		res.res.linear.devPtr = d;
		res.res.linear.format = CU_AD_FORMAT_FLOAT;
		res.res.linear.numChannels = 1;
		res.res.linear.sizeInBytes = pitch * H + 256;
		/* Past the client's memory: it ends where that memory does (fetches past it read 0),
		 * unless the client's next allocation follows at once. */
		CUtexObject clamped;
		CHECK(cuTexObjectCreate(&clamped, &res, &clamp, NULL));
		CUDA_RESOURCE_DESC back;
		CHECK(cuTexObjectGetResourceDesc(&back, clamped));
		EXPECT(back.res.linear.sizeInBytes == pitch * H || back.res.linear.sizeInBytes == pitch * H + 256,
		       "a linear texture past the client's memory has %zu bytes, expected %zu", back.res.linear.sizeInBytes,
		       pitch * H);
		CHECK(cuTexObjectDestroy(clamped));
		res.res.linear.devPtr = 64; /* not the client's at all */
		EXPECT_RESULT(cuTexObjectCreate(&bad, &res, &clamp, NULL), CUDA_ERROR_INVALID_VALUE);
		EXPECT_RESULT(cuTexObjectDestroy(t + 1000), CUDA_ERROR_INVALID_HANDLE);
		fprintf(stderr, "bounds: ok\n"); /* checked through Remora only */
	}
	CHECK(cuTexObjectDestroy(t));
	CHECK(cuMemFree(d));
}

static void test_surface(void)
{
	CUarray a;
	CUDA_ARRAY3D_DESCRIPTOR d = {.Width = W, .Height = H, .Format = CU_AD_FORMAT_UNSIGNED_INT32, .NumChannels = 1,
				     .Flags = CUDA_ARRAY3D_SURFACE_LDST};
	CHECK(cuArray3DCreate(&a, &d));
	CUDA_RESOURCE_DESC res;
	memset(&res, 0, sizeof(res));
	res.resType = CU_RESOURCE_TYPE_ARRAY;
	res.res.array.hArray = a;
	CUsurfObject s;
	CHECK(cuSurfObjectCreate(&s, &res));
	int w = W, h = H;
	unsigned v = 7;
	void *params[] = {&s, &w, &h, &v};
	CHECK(cuLaunchKernel(surf_write, 4, 1, 1, 128, 1, 1, 0, NULL, params, NULL));
	unsigned got[W * H];
	CUDA_MEMCPY2D c;
	memset(&c, 0, sizeof(c));
	c.srcMemoryType = CU_MEMORYTYPE_ARRAY, c.srcArray = a;
	c.dstMemoryType = CU_MEMORYTYPE_HOST, c.dstHost = got, c.dstPitch = W * 4;
	c.WidthInBytes = W * 4, c.Height = H;
	CHECK(cuMemcpy2D(&c));
	size_t bad = 0;
	for (int y = 0; y < H; y++)
		for (int x = 0; x < W; x++)
			bad += got[y * W + x] != 7u + 1000u * (unsigned)x + (unsigned)y;
	EXPECT(bad == 0, "surface: %zu element(s) differ", bad);
	printf("surface write: %s %016llx\n", bad ? "FAIL" : "ok", (unsigned long long)drv_fnv1a(got, sizeof(got)));
	CUDA_RESOURCE_DESC got_res;
	CHECK(cuSurfObjectGetResourceDesc(&got_res, s));
	EXPECT(got_res.resType == CU_RESOURCE_TYPE_ARRAY && got_res.res.array.hArray == a, "surface descriptor");
	CHECK(cuSurfObjectDestroy(s));
	CHECK(cuArrayDestroy(a));
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s IMAGE\n", argv[0]);
		return 2;
	}
	drv_open_device0();
	CUmodule module = drv_load_module(argv[1]);
	CHECK(cuModuleGetFunction(&tex_fetch, module, "texFetch2D"));
	CHECK(cuModuleGetFunction(&surf_write, module, "surfWrite2D"));
	static float host[W * H];
	for (int y = 0; y < H; y++)
		for (int x = 0; x < W; x++)
			host[y * W + x] = texel(x, y);
	test_array_texture(host);
	test_pitch_texture(host);
	test_surface();
	CHECK(cuModuleUnload(module));
	int status = drv_exit_status();
	printf("%s\n", status ? "FAIL" : "PASS");
	return status;
}
