/* drv_copy2d IMAGE: pitched allocation, 2-D and 3-D copies and 2-D memsets on linear memory,
 * each checked bit for bit against a CPU model of the device memory: host to device, device
 * to host and device to device, with odd widths, pitches and offsets, blocking and Async,
 * pinned and pageable host sides, copies larger than one 16 MiB piece (whole rows, and rows
 * longer than a piece), and memsets of 1, 2 and 4 bytes. Through Remora (REMORA_SERVER set)
 * it also checks that a copy or memset whose last row leaves the allocation is refused, where
 * a GPU need not notice. cuMemcpy3DPeer(Async) within the current context and batches of 1-D
 * and 3-D copies (cuMemcpyBatchAsync, cuMemcpy3DBatchAsync), checked the same way. IMAGE is
 * not used. */
#include "drv_common.h"

#define MIB (1u << 20)

/* The first batch form, with its failIdx (cuda.h names the second). */
#undef cuMemcpy3DBatchAsync
CUresult CUDAAPI cuMemcpy3DBatchAsync(size_t numOps, CUDA_MEMCPY3D_BATCH_OP *opList, size_t *failIdx,
				      unsigned long long flags, CUstream hStream);

/* A device buffer and its model: what its bytes must be. */
struct buf {
	CUdeviceptr d;
	unsigned char *model;
	size_t size;
};

static void buf_alloc(struct buf *b, size_t size)
{
	CHECK(cuMemAlloc(&b->d, size));
	b->model = malloc(size);
	b->size = size;
	for (size_t i = 0; i < size; i++)
		b->model[i] = (unsigned char)(i * 7 + 3);
	CHECK(cuMemcpyHtoD(b->d, b->model, size));
}

static void fill(unsigned char *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (unsigned char)((i * 131 + seed * 17) ^ (i >> 9));
}

/* The device buffer equals its model. */
static void buf_check(const struct buf *b, const char *what)
{
	unsigned char *got = malloc(b->size);
	CHECK(cuMemcpyDtoH(got, b->d, b->size));
	size_t bad = 0;
	for (size_t i = 0; i < b->size; i++)
		bad += got[i] != b->model[i];
	EXPECT(bad == 0, "%s: %zu byte(s) differ", what, bad);
	printf("%s: %s %016llx\n", what, bad ? "FAIL" : "ok", (unsigned long long)drv_fnv1a(got, b->size));
	free(got);
}

/* The model of a 3-D copy of w x h x d bytes between two byte arrays. */
static void model_3d(unsigned char *dst, size_t dx, size_t dy, size_t dz, size_t dpitch, size_t dheight,
		     const unsigned char *src, size_t sx, size_t sy, size_t sz, size_t spitch, size_t sheight, size_t w,
		     size_t h, size_t d)
{
	for (size_t z = 0; z < d; z++)
		for (size_t y = 0; y < h; y++)
			memmove(dst + (dz + z) * dpitch * dheight + (dy + y) * dpitch + dx,
				src + (sz + z) * spitch * sheight + (sy + y) * spitch + sx, w);
}

static CUDA_MEMCPY2D c2d(CUmemorytype st, const void *sh, CUdeviceptr sdev, size_t sx, size_t sy, size_t sp,
			 CUmemorytype dt, void *dh, CUdeviceptr ddev, size_t dx, size_t dy, size_t dp, size_t w, size_t h)
{
	CUDA_MEMCPY2D c;
	memset(&c, 0, sizeof(c));
	c.srcMemoryType = st, c.srcHost = sh, c.srcDevice = sdev, c.srcXInBytes = sx, c.srcY = sy, c.srcPitch = sp;
	c.dstMemoryType = dt, c.dstHost = dh, c.dstDevice = ddev, c.dstXInBytes = dx, c.dstY = dy, c.dstPitch = dp;
	c.WidthInBytes = w, c.Height = h;
	return c;
}

static void test_2d(CUstream stream, int pinned)
{
	const size_t W = 333, H = 37;
	struct buf dev;
	size_t pitch;
	CUdeviceptr p;
	CHECK(cuMemAllocPitch(&p, &pitch, W, H, 4));
	EXPECT(pitch >= W, "pitch %zu below the width", pitch);
	printf("cuMemAllocPitch(333, 37, 4): pitch %zu\n", pitch);
	dev.d = p, dev.size = pitch * H, dev.model = malloc(dev.size);
	memset(dev.model, 0x5a, dev.size);
	CHECK(cuMemsetD8(dev.d, 0x5a, dev.size));

	const size_t hp = 351, hh = 41;
	unsigned char *host;
	if (pinned)
		CHECK(cuMemAllocHost((void **)&host, hp * hh));
	else
		host = malloc(hp * hh);
	fill(host, hp * hh, pinned + 1);
	/* Host to device: 301 bytes of 30 rows from (3, 2) at pitch 351 to (5, 1) at the pitch. */
	CUDA_MEMCPY2D c = c2d(CU_MEMORYTYPE_HOST, host, 0, 3, 2, hp, CU_MEMORYTYPE_DEVICE, NULL, dev.d, 5, 1, pitch, 301, 30);
	if (stream) {
		CHECK(cuMemcpy2DAsync(&c, stream));
		CHECK(cuStreamSynchronize(stream));
	} else {
		CHECK(cuMemcpy2D(&c));
	}
	model_3d(dev.model, 5, 1, 0, pitch, 0, host, 3, 2, 0, hp, 0, 301, 30, 1);
	buf_check(&dev, pinned ? "2d htod pinned" : stream ? "2d htod async" : "2d htod");

	/* Device to device, within the allocation and to a second of pitch LP, which is no
	 * cuMemAllocPitch pitch (cuMemcpy2D may refuse an odd device pitch: odd pitches are the
	 * host's here, and cuMemcpy2DUnaligned's). */
	const size_t LP = 260;
	struct buf lin;
	buf_alloc(&lin, LP * 40 + 11);
	c = c2d(CU_MEMORYTYPE_DEVICE, NULL, dev.d, 7, 3, pitch, CU_MEMORYTYPE_DEVICE, NULL, lin.d, 11, 2, LP, 199, 33);
	if (stream)
		CHECK(cuMemcpy2DAsync(&c, stream));
	else
		CHECK(cuMemcpy2D(&c));
	model_3d(lin.model, 11, 2, 0, LP, 0, dev.model, 7, 3, 0, pitch, 0, 199, 33, 1);
	c = c2d(CU_MEMORYTYPE_UNIFIED, NULL, lin.d, 1, 0, LP, CU_MEMORYTYPE_DEVICE, NULL, lin.d, 0, 38, LP, 100, 2);
	CHECK(cuMemcpy2DUnaligned(&c));
	model_3d(lin.model, 0, 38, 0, LP, 0, lin.model, 1, 0, 0, LP, 0, 100, 2, 1);
	if (stream)
		CHECK(cuStreamSynchronize(stream));
	buf_check(&lin, "2d dtod");

	/* Device to host at an odd pitch: the gaps between rows stay as they were. */
	unsigned char *out = malloc(hp * hh), *want = malloc(hp * hh);
	fill(out, hp * hh, 9);
	memcpy(want, out, hp * hh);
	c = c2d(CU_MEMORYTYPE_DEVICE, NULL, lin.d, 13, 1, LP, CU_MEMORYTYPE_HOST, out, 0, 2, 4, hp, 211, 35);
	if (stream) {
		CHECK(cuMemcpy2DAsync(&c, stream));
		CHECK(cuStreamSynchronize(stream));
	} else {
		CHECK(cuMemcpy2D(&c));
	}
	model_3d(want, 2, 4, 0, hp, 0, lin.model, 13, 1, 0, LP, 0, 211, 35, 1);
	EXPECT(!memcmp(out, want, hp * hh), "2d dtoh differs");
	printf("2d dtoh: %s %016llx\n", memcmp(out, want, hp * hh) ? "FAIL" : "ok",
	       (unsigned long long)drv_fnv1a(out, hp * hh));

	/* Memsets of 1, 2 and 4 bytes with odd widths and offsets. */
	CHECK(cuMemsetD2D8(dev.d + 3, pitch, 0xc3, 123, 9));
	for (size_t y = 0; y < 9; y++)
		memset(dev.model + 3 + y * pitch, 0xc3, 123);
	if (stream)
		CHECK(cuMemsetD2D16Async(dev.d + 10 * pitch + 6, pitch, 0xbeef, 77, 5, stream));
	else
		CHECK(cuMemsetD2D16(dev.d + 10 * pitch + 6, pitch, 0xbeef, 77, 5));
	for (size_t y = 0; y < 5; y++)
		for (size_t i = 0; i < 77; i++)
			memcpy(dev.model + 10 * pitch + 6 + y * pitch + i * 2, &(uint16_t){0xbeef}, 2);
	if (stream)
		CHECK(cuMemsetD2D32Async(dev.d + 20 * pitch + 8, pitch, 0x01234567u, pitch / 4 - 2, 17, stream));
	else
		CHECK(cuMemsetD2D32(dev.d + 20 * pitch + 8, pitch, 0x01234567u, pitch / 4 - 2, 17));
	for (size_t y = 0; y < 17; y++)
		for (size_t i = 0; i < pitch / 4 - 2; i++)
			memcpy(dev.model + 20 * pitch + 8 + y * pitch + i * 4, &(uint32_t){0x01234567u}, 4);
	if (stream)
		CHECK(cuMemsetD2D8Async(dev.d + 36 * pitch, pitch, 0x11, 1, 1, stream));
	else
		CHECK(cuMemsetD2D8(dev.d + 36 * pitch, pitch, 0x11, 1, 1));
	dev.model[36 * pitch] = 0x11;
	if (stream)
		CHECK(cuStreamSynchronize(stream));
	buf_check(&dev, stream ? "2d memsets async" : "2d memsets");

	CHECK(cuMemFree(dev.d));
	CHECK(cuMemFree(lin.d));
	if (pinned)
		CHECK(cuMemFreeHost(host));
	else
		free(host);
	free(out), free(want), free(dev.model), free(lin.model);
}

static CUDA_MEMCPY3D c3d(void)
{
	CUDA_MEMCPY3D c;
	memset(&c, 0, sizeof(c));
	return c;
}

static void test_3d(CUstream stream)
{
	/* A volume of 6 slices of 19 rows at pitch 203, on the device, from and to host layouts
	 * of their own. */
	const size_t dp = 203, dh = 19, dd = 6, hp = 97, hh = 23, hd = 7;
	struct buf vol;
	buf_alloc(&vol, dp * dh * dd);
	unsigned char *host = malloc(hp * hh * hd), *out = malloc(hp * hh * hd), *want = malloc(hp * hh * hd);
	fill(host, hp * hh * hd, 5);
	CUDA_MEMCPY3D c = c3d();
	c.srcMemoryType = CU_MEMORYTYPE_HOST, c.srcHost = host, c.srcXInBytes = 4, c.srcY = 3, c.srcZ = 1;
	c.srcPitch = hp, c.srcHeight = hh;
	c.dstMemoryType = CU_MEMORYTYPE_DEVICE, c.dstDevice = vol.d, c.dstXInBytes = 9, c.dstY = 2, c.dstZ = 1;
	c.dstPitch = dp, c.dstHeight = dh;
	c.WidthInBytes = 91, c.Height = 15, c.Depth = 5;
	if (stream)
		CHECK(cuMemcpy3DAsync(&c, stream));
	else
		CHECK(cuMemcpy3D(&c));
	model_3d(vol.model, 9, 2, 1, dp, dh, host, 4, 3, 1, hp, hh, 91, 15, 5);
	if (stream)
		CHECK(cuStreamSynchronize(stream));
	buf_check(&vol, stream ? "3d htod async" : "3d htod");

	/* Device to device inside the volume (slices 0..1 from 3..4, shifted). */
	c = c3d();
	c.srcMemoryType = CU_MEMORYTYPE_DEVICE, c.srcDevice = vol.d, c.srcXInBytes = 1, c.srcY = 1, c.srcZ = 3;
	c.srcPitch = dp, c.srcHeight = dh;
	c.dstMemoryType = CU_MEMORYTYPE_DEVICE, c.dstDevice = vol.d, c.dstXInBytes = 100, c.dstY = 0, c.dstZ = 0;
	c.dstPitch = dp, c.dstHeight = dh;
	c.WidthInBytes = 101, c.Height = 17, c.Depth = 2;
	if (stream)
		CHECK(cuMemcpy3DAsync(&c, stream));
	else
		CHECK(cuMemcpy3D(&c));
	model_3d(vol.model, 100, 0, 0, dp, dh, vol.model, 1, 1, 3, dp, dh, 101, 17, 2);
	if (stream)
		CHECK(cuStreamSynchronize(stream));
	buf_check(&vol, "3d dtod");

	/* Device to host, into a layout with gaps that must stay. */
	fill(out, hp * hh * hd, 11);
	memcpy(want, out, hp * hh * hd);
	c = c3d();
	c.srcMemoryType = CU_MEMORYTYPE_DEVICE, c.srcDevice = vol.d, c.srcXInBytes = 2, c.srcY = 1, c.srcZ = 0;
	c.srcPitch = dp, c.srcHeight = dh;
	c.dstMemoryType = CU_MEMORYTYPE_HOST, c.dstHost = out, c.dstXInBytes = 3, c.dstY = 5, c.dstZ = 2;
	c.dstPitch = hp, c.dstHeight = hh;
	c.WidthInBytes = 93, c.Height = 18, c.Depth = 5;
	if (stream) {
		CHECK(cuMemcpy3DAsync(&c, stream));
		CHECK(cuStreamSynchronize(stream));
	} else {
		CHECK(cuMemcpy3D(&c));
	}
	model_3d(want, 3, 5, 2, hp, hh, vol.model, 2, 1, 0, dp, dh, 93, 18, 5);
	EXPECT(!memcmp(out, want, hp * hh * hd), "3d dtoh differs");
	printf("3d dtoh: %s %016llx\n", memcmp(out, want, hp * hh * hd) ? "FAIL" : "ok",
	       (unsigned long long)drv_fnv1a(out, hp * hh * hd));
	CHECK(cuMemFree(vol.d));
	free(host), free(out), free(want), free(vol.model);
}

/* cuMemcpy3DPeer(Async) between the current context and itself (the one GPU a test host
 * may have): host to device, device to device and device to host. */
static void test_3d_peer(CUstream stream)
{
	const size_t dp = 131, dh = 11, dd = 4, hp = 67, hh = 13, hd = 5;
	CUcontext ctx;
	CHECK(cuCtxGetCurrent(&ctx));
	struct buf vol;
	buf_alloc(&vol, dp * dh * dd);
	unsigned char *host = malloc(hp * hh * hd), *out = malloc(hp * hh * hd), *want = malloc(hp * hh * hd);
	fill(host, hp * hh * hd, 23);
	CUDA_MEMCPY3D_PEER c;
	memset(&c, 0, sizeof(c));
	c.srcMemoryType = CU_MEMORYTYPE_HOST, c.srcHost = host, c.srcXInBytes = 3, c.srcY = 2, c.srcZ = 1;
	c.srcPitch = hp, c.srcHeight = hh, c.srcContext = ctx;
	c.dstMemoryType = CU_MEMORYTYPE_DEVICE, c.dstDevice = vol.d, c.dstXInBytes = 5, c.dstY = 1, c.dstZ = 0;
	c.dstPitch = dp, c.dstHeight = dh, c.dstContext = ctx;
	c.WidthInBytes = 61, c.Height = 9, c.Depth = 4;
	CHECK(cuMemcpy3DPeer(&c));
	model_3d(vol.model, 5, 1, 0, dp, dh, host, 3, 2, 1, hp, hh, 61, 9, 4);
	buf_check(&vol, "3d peer htod");

	memset(&c, 0, sizeof(c));
	c.srcMemoryType = CU_MEMORYTYPE_DEVICE, c.srcDevice = vol.d, c.srcXInBytes = 0, c.srcY = 2, c.srcZ = 2;
	c.srcPitch = dp, c.srcHeight = dh, c.srcContext = ctx;
	c.dstMemoryType = CU_MEMORYTYPE_DEVICE, c.dstDevice = vol.d, c.dstXInBytes = 70, c.dstY = 0, c.dstZ = 0;
	c.dstPitch = dp, c.dstHeight = dh, c.dstContext = ctx;
	c.WidthInBytes = 60, c.Height = 8, c.Depth = 2;
	CHECK(cuMemcpy3DPeerAsync(&c, stream));
	CHECK(cuStreamSynchronize(stream));
	model_3d(vol.model, 70, 0, 0, dp, dh, vol.model, 0, 2, 2, dp, dh, 60, 8, 2);
	buf_check(&vol, "3d peer dtod async");

	fill(out, hp * hh * hd, 29);
	memcpy(want, out, hp * hh * hd);
	memset(&c, 0, sizeof(c));
	c.srcMemoryType = CU_MEMORYTYPE_DEVICE, c.srcDevice = vol.d, c.srcXInBytes = 7, c.srcY = 1, c.srcZ = 1;
	c.srcPitch = dp, c.srcHeight = dh, c.srcContext = ctx;
	c.dstMemoryType = CU_MEMORYTYPE_HOST, c.dstHost = out, c.dstXInBytes = 2, c.dstY = 3, c.dstZ = 1;
	c.dstPitch = hp, c.dstHeight = hh, c.dstContext = ctx;
	c.WidthInBytes = 59, c.Height = 10, c.Depth = 3;
	CHECK(cuMemcpy3DPeerAsync(&c, stream));
	CHECK(cuStreamSynchronize(stream));
	model_3d(want, 2, 3, 1, hp, hh, vol.model, 7, 1, 1, dp, dh, 59, 10, 3);
	int same = !memcmp(out, want, hp * hh * hd);
	EXPECT(same, "3d peer dtoh differs");
	printf("3d peer dtoh async: %s %016llx\n", same ? "ok" : "FAIL",
	       (unsigned long long)drv_fnv1a(out, hp * hh * hd));
	if (getenv("REMORA_SERVER")) { /* a context not the client's, and a row past the allocation */
		c.srcContext = (CUcontext)(uintptr_t)0x1000;
		EXPECT_RESULT(cuMemcpy3DPeer(&c), CUDA_ERROR_INVALID_CONTEXT);
		c.srcContext = ctx, c.Height = dh + 1;
		EXPECT_RESULT(cuMemcpy3DPeer(&c), CUDA_ERROR_INVALID_VALUE);
	}
	CHECK(cuMemFree(vol.d));
	free(host), free(out), free(want), free(vol.model);
}

static CUmemcpy3DOperand ptr_operand(const void *host, CUdeviceptr dev, size_t row, size_t layer)
{
	CUmemcpy3DOperand o;
	memset(&o, 0, sizeof(o));
	o.type = CU_MEMCPY_OPERAND_TYPE_POINTER;
	o.op.ptr.ptr = host ? (CUdeviceptr)(uintptr_t)host : dev;
	o.op.ptr.rowLength = row, o.op.ptr.layerHeight = layer;
	return o;
}

/* Batches: three independent 1-D copies (host to device, device to device, device to host);
 * 3-D copies between pitched host and device memory, device memory and an array of floats,
 * and back to the host, each copy's width in elements of its array where it has one. */
static void test_batches(CUstream stream)
{
	const size_t n = 3000;
	struct buf a, b, c;
	buf_alloc(&a, n), buf_alloc(&b, n), buf_alloc(&c, n);
	unsigned char *src = malloc(n), *dst = calloc(1, n);
	fill(src, n, 41);
	CUdeviceptr dsts[3] = {a.d + 10, c.d, (CUdeviceptr)(uintptr_t)dst};
	CUdeviceptr srcs[3] = {(CUdeviceptr)(uintptr_t)src, b.d + 5, b.d};
	size_t sizes[3] = {n - 10, n - 5, n}, idxs[2] = {0, 1};
	CUmemcpyAttributes attrs[2];
	memset(attrs, 0, sizeof(attrs));
	attrs[0].srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
	attrs[1].srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_ANY;
	CHECK(cuMemcpyBatchAsync(dsts, srcs, sizes, 3, attrs, idxs, 2, stream));
	CHECK(cuStreamSynchronize(stream));
	memcpy(a.model + 10, src, n - 10);
	memcpy(c.model, b.model + 5, n - 5);
	buf_check(&a, "batch htod");
	buf_check(&c, "batch dtod");
	int same = !memcmp(dst, b.model, n);
	EXPECT(same, "batch dtoh differs");
	printf("batch dtoh: %s %016llx\n", same ? "ok" : "FAIL", (unsigned long long)drv_fnv1a(dst, n));
	if (getenv("REMORA_SERVER")) { /* no attributes for the first copy; a range past an allocation */
		idxs[0] = 1;
		CUresult rc = cuMemcpyBatchAsync(dsts, srcs, sizes, 3, attrs, idxs, 2, stream);
		EXPECT(rc == CUDA_ERROR_INVALID_VALUE, "a batch without attributes for its first copy: %s",
		       drv_error_name(rc));
		idxs[0] = 0, sizes[1] = n;
		rc = cuMemcpyBatchAsync(dsts, srcs, sizes, 3, attrs, idxs, 2, stream);
		EXPECT(rc == CUDA_ERROR_INVALID_VALUE, "a batch copy past an allocation: %s", drv_error_name(rc));
		CHECK(cuStreamSynchronize(stream));
	}

	const size_t W = 12, H = 7, D = 3, row = 16, layer = 9, bytes = row * 4 * layer * D;
	struct buf v, w;
	buf_alloc(&v, bytes), buf_alloc(&w, bytes);
	unsigned char *hsrc = malloc(bytes), *hout = malloc(bytes), *want = malloc(bytes);
	fill(hsrc, bytes, 43), fill(hout, bytes, 47);
	memcpy(want, hout, bytes);
	CUarray arr;
	CUDA_ARRAY3D_DESCRIPTOR ad = {.Width = W + 2, .Height = H + 1, .Depth = D, .Format = CU_AD_FORMAT_FLOAT,
				      .NumChannels = 1};
	CHECK(cuArray3DCreate(&arr, &ad));
	CUDA_MEMCPY3D_BATCH_OP ops[2];
	memset(ops, 0, sizeof(ops));
	ops[0].src = ptr_operand(hsrc, 0, row * 4, layer); /* pointer to pointer: elements are bytes */
	ops[0].dst = ptr_operand(NULL, w.d, row * 4, layer);
	ops[0].extent = (CUextent3D){W * 4, H, D};
	ops[0].srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
	ops[1].src = ptr_operand(NULL, v.d, row, layer); /* to the array: elements are its floats */
	ops[1].dst.type = CU_MEMCPY_OPERAND_TYPE_ARRAY;
	ops[1].dst.op.array.array = arr;
	ops[1].dst.op.array.offset = (CUoffset3D){1, 1, 0};
	ops[1].extent = (CUextent3D){W, H, D};
	ops[1].srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
	size_t fail = 0;
	CHECK(cuMemcpy3DBatchAsync(2, ops, &fail, 0, stream));
	CHECK(cuStreamSynchronize(stream));
	model_3d(w.model, 0, 0, 0, row * 4, layer, hsrc, 0, 0, 0, row * 4, layer, W * 4, H, D);
	buf_check(&w, "3d batch htod");
	ops[0].src = ops[1].dst; /* and back from the array to the host */
	ops[0].dst = ptr_operand(hout, 0, row, layer);
	ops[0].extent = (CUextent3D){W, H, D};
	CHECK(cuMemcpy3DBatchAsync_v2(1, ops, 0, stream));
	CHECK(cuStreamSynchronize(stream));
	model_3d(want, 0, 0, 0, row * 4, layer, v.model, 0, 0, 0, row * 4, layer, W * 4, H, D);
	same = !memcmp(hout, want, bytes);
	EXPECT(same, "3d batch through an array differs");
	printf("3d batch array round trip: %s %016llx\n", same ? "ok" : "FAIL",
	       (unsigned long long)drv_fnv1a(hout, bytes));
	if (getenv("REMORA_SERVER")) { /* a depth past the device buffer: the second op fails */
		ops[1] = ops[0];
		ops[1].src = ptr_operand(NULL, w.d, row * 4, layer);
		ops[1].extent = (CUextent3D){W * 4, H, D + 1};
		ops[1].dst = ptr_operand(hout, 0, row * 4, layer);
		EXPECT_RESULT(cuMemcpy3DBatchAsync(2, ops, &fail, 0, stream), CUDA_ERROR_INVALID_VALUE);
		EXPECT(fail == 1, "failIdx %zu", fail);
	}
	CHECK(cuArrayDestroy(arr));
	const CUdeviceptr all[] = {a.d, b.d, c.d, v.d, w.d};
	for (int i = 0; i < 5; i++)
		CHECK(cuMemFree(all[i]));
	free(a.model), free(b.model), free(c.model), free(v.model), free(w.model);
	free(src), free(dst), free(hsrc), free(hout), free(want);
}

/* Copies past one 16 MiB piece: many rows, and rows longer than a piece. */
static void test_large(void)
{
	const size_t W = 5001, H = 4001, hp = 5003;
	size_t pitch;
	struct buf dev;
	CHECK(cuMemAllocPitch(&dev.d, &pitch, W, H, 8));
	dev.size = pitch * H, dev.model = malloc(dev.size);
	memset(dev.model, 0, dev.size);
	CHECK(cuMemsetD8(dev.d, 0, dev.size));
	unsigned char *host = malloc(hp * H), *out = malloc(hp * H);
	fill(host, hp * H, 3);
	CUDA_MEMCPY2D c = c2d(CU_MEMORYTYPE_HOST, host, 0, 2, 0, hp, CU_MEMORYTYPE_DEVICE, NULL, dev.d, 0, 0, pitch, W, H);
	CHECK(cuMemcpy2D(&c));
	model_3d(dev.model, 0, 0, 0, pitch, 0, host, 2, 0, 0, hp, 0, W, H, 1);
	buf_check(&dev, "2d htod large");
	memset(out, 0x77, hp * H);
	c = c2d(CU_MEMORYTYPE_DEVICE, NULL, dev.d, 0, 0, pitch, CU_MEMORYTYPE_HOST, out, 0, 1, 0, hp, W, H);
	CHECK(cuMemcpy2D(&c));
	size_t bad = 0;
	for (size_t y = 0; y < H; y++)
		for (size_t x = 0; x < hp; x++)
			bad += out[y * hp + x] != (x >= 1 && x < 1 + W ? dev.model[y * pitch + x - 1] : 0x77);
	EXPECT(bad == 0, "2d dtoh large: %zu byte(s) differ", bad);
	printf("2d dtoh large: %s\n", bad ? "FAIL" : "ok");
	CHECK(cuMemFree(dev.d));
	free(host), free(out), free(dev.model);

	/* Two rows of 17 MiB and 5 bytes each, from a host pitch 3 bytes longer. */
	const size_t RW = 17 * MIB + 5, RP = RW + 3;
	struct buf two;
	buf_alloc(&two, 2 * RW + 64);
	host = malloc(2 * RP), out = malloc(2 * RP);
	fill(host, 2 * RP, 8);
	c = c2d(CU_MEMORYTYPE_HOST, host, 0, 1, 0, RP, CU_MEMORYTYPE_DEVICE, NULL, two.d, 7, 0, RW + 20, RW - 1, 2);
	CHECK(cuMemcpy2DUnaligned(&c));
	model_3d(two.model, 7, 0, 0, RW + 20, 0, host, 1, 0, 0, RP, 0, RW - 1, 2, 1);
	buf_check(&two, "2d htod long rows");
	memset(out, 0x33, 2 * RP);
	c = c2d(CU_MEMORYTYPE_DEVICE, NULL, two.d, 7, 0, RW + 20, CU_MEMORYTYPE_HOST, out, 0, 0, 0, RP, RW - 1, 2);
	CHECK(cuMemcpy2DUnaligned(&c));
	bad = 0;
	for (size_t y = 0; y < 2; y++)
		for (size_t x = 0; x < RP; x++)
			bad += out[y * RP + x] != (x < RW - 1 ? two.model[7 + y * (RW + 20) + x] : 0x33);
	EXPECT(bad == 0, "2d dtoh long rows: %zu byte(s) differ", bad);
	printf("2d dtoh long rows: %s\n", bad ? "FAIL" : "ok");
	CHECK(cuMemFree(two.d));
	free(host), free(out), free(two.model);
}

/* Remora checks every row of a device side as the client's memory. */
static void test_bounds(void)
{
	CUdeviceptr d;
	unsigned char host[4096] = {0};
	CHECK(cuMemAlloc(&d, 1000));
	CUDA_MEMCPY2D c = c2d(CU_MEMORYTYPE_HOST, host, 0, 0, 0, 100, CU_MEMORYTYPE_DEVICE, NULL, d, 0, 0, 100, 100, 11);
	EXPECT_RESULT(cuMemcpy2D(&c), CUDA_ERROR_INVALID_VALUE);
	c = c2d(CU_MEMORYTYPE_DEVICE, NULL, d, 1, 0, 100, CU_MEMORYTYPE_HOST, host, 0, 0, 0, 100, 100, 10);
	EXPECT_RESULT(cuMemcpy2D(&c), CUDA_ERROR_INVALID_VALUE);
	c = c2d(CU_MEMORYTYPE_DEVICE, NULL, d, 0, 0, 100, CU_MEMORYTYPE_DEVICE, NULL, d, 0, 0, (size_t)1 << 62, 10, 4);
	EXPECT_RESULT(cuMemcpy2D(&c), CUDA_ERROR_INVALID_VALUE);
	EXPECT_RESULT(cuMemsetD2D32(d, 100, 0, 26, 10), CUDA_ERROR_INVALID_VALUE);
	CHECK(cuMemsetD2D32(d, 100, 0, 25, 10));
	CHECK(cuMemFree(d));
	fprintf(stderr, "bounds: ok\n"); /* checked through Remora only */
}

int main(int argc, char **argv)
{
	(void)argc, (void)argv;
	drv_open_device0();
	CUstream stream;
	CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
	test_2d(NULL, 0);
	test_2d(stream, 0);
	test_2d(stream, 1);
	test_3d(NULL);
	test_3d(stream);
	test_3d_peer(stream);
	test_batches(stream);
	test_large();
	if (getenv("REMORA_SERVER"))
		test_bounds();
	CHECK(cuStreamDestroy(stream));
	int status = drv_exit_status();
	printf("%s\n", status ? "FAIL" : "PASS");
	return status;
}
