/* drv_texrefs [IMAGE]: the legacy texture and surface references (deprecated, still in
 * CUDA 13's driver) of a PTX module of its own (IMAGE, the suite's, is not used): a
 * module's texture reference bound to linear memory and read by a kernel (tex1Dfetch),
 * its sampling settings set and read back, bound to pitched memory and to an array; a
 * surface reference bound to an array; a reference made by cuTexRefCreate; the kernel launched
 * as before CUDA 4 (cuParamSet*, cuFuncSetBlockShape, cuLaunchGrid). Through Remora
 * (REMORA_SERVER set) it also checks that memory the client does not own cannot be bound
 * and that a reference goes with its module. */
#include "drv_common.h"

#pragma GCC diagnostic ignored "-Wdeprecated-declarations" /* the references are deprecated: what is tested */

#define N 256

/* The CUDA 3.2 entry point, still exported (cuda.h declares it for the driver's own build only). */
CUresult CUDAAPI cuTexRefSetAddress2D_v2(CUtexref hTexRef, const CUDA_ARRAY_DESCRIPTOR *desc, CUdeviceptr dptr,
					 size_t Pitch);

static const char ptx[] =
	".version 7.0\n"
	".target sm_75\n"
	".address_size 64\n"
	".global .texref legacyTex;\n"
	".global .surfref legacySurf;\n"
	".visible .entry legacyTexRead(.param .u64 out, .param .u32 n)\n"
	"{\n"
	"  .reg .u64 %rd<4>; .reg .u32 %r<4>; .reg .f32 %f<5>; .reg .pred %p;\n"
	"  ld.param.u64 %rd1, [out];\n"
	"  ld.param.u32 %r1, [n];\n"
	"  mov.u32 %r2, %tid.x;\n"
	"  setp.ge.u32 %p, %r2, %r1;\n"
	"  @%p ret;\n"
	"  tex.1d.v4.f32.s32 {%f1,%f2,%f3,%f4}, [legacyTex, {%r2}];\n"
	"  cvta.to.global.u64 %rd2, %rd1;\n"
	"  mul.wide.u32 %rd3, %r2, 4;\n"
	"  add.u64 %rd2, %rd2, %rd3;\n"
	"  st.global.f32 [%rd2], %f1;\n"
	"  ret;\n"
	"}\n"
	".visible .entry legacySurfWrite(.param .u32 v)\n"
	"{\n"
	"  .reg .u32 %r<4>;\n"
	"  ld.param.u32 %r1, [v];\n"
	"  mov.u32 %r2, %tid.x;\n"
	"  mul.lo.u32 %r3, %r2, 4;\n"
	"  sust.b.2d.b32.trap [legacySurf, {%r3, %r2}], {%r1};\n"
	"  ret;\n"
	"}\n";

static void test_settings(CUtexref tr)
{
	CHECK(cuTexRefSetAddressMode(tr, 0, CU_TR_ADDRESS_MODE_CLAMP));
	CHECK(cuTexRefSetAddressMode(tr, 1, CU_TR_ADDRESS_MODE_BORDER));
	CUaddress_mode am0 = -1, am1 = -1;
	CHECK(cuTexRefGetAddressMode(&am0, tr, 0));
	CHECK(cuTexRefGetAddressMode(&am1, tr, 1));
	EXPECT(am0 == CU_TR_ADDRESS_MODE_CLAMP && am1 == CU_TR_ADDRESS_MODE_BORDER, "address modes %d %d", am0, am1);
	CHECK(cuTexRefSetFilterMode(tr, CU_TR_FILTER_MODE_POINT));
	CUfilter_mode fm = -1, mfm = -1;
	CHECK(cuTexRefGetFilterMode(&fm, tr));
	CHECK(cuTexRefSetMipmapFilterMode(tr, CU_TR_FILTER_MODE_LINEAR));
	CHECK(cuTexRefGetMipmapFilterMode(&mfm, tr));
	EXPECT(fm == CU_TR_FILTER_MODE_POINT && mfm == CU_TR_FILTER_MODE_LINEAR, "filter modes %d %d", fm, mfm);
	float bias = 0, lo = 0, hi = 0, border[4] = {1.5f, -2.0f, 0.25f, 8.0f}, got_border[4] = {0};
	CHECK(cuTexRefSetMipmapLevelBias(tr, 0.5f));
	CHECK(cuTexRefGetMipmapLevelBias(&bias, tr));
	CHECK(cuTexRefSetMipmapLevelClamp(tr, 1.0f, 6.0f));
	CHECK(cuTexRefGetMipmapLevelClamp(&lo, &hi, tr));
	EXPECT(bias == 0.5f && lo == 1.0f && hi == 6.0f, "mipmap bias %g clamp %g..%g", bias, lo, hi);
	CHECK(cuTexRefSetBorderColor(tr, border));
	CHECK(cuTexRefGetBorderColor(got_border, tr));
	EXPECT(!memcmp(border, got_border, sizeof(border)), "border colour %g %g %g %g", got_border[0], got_border[1],
	       got_border[2], got_border[3]);
	int aniso = 0;
	CHECK(cuTexRefSetMaxAnisotropy(tr, 8));
	CHECK(cuTexRefGetMaxAnisotropy(&aniso, tr));
	EXPECT(aniso == 8, "max anisotropy %d", aniso);
	unsigned flags = 99;
	CHECK(cuTexRefSetFlags(tr, CU_TRSF_NORMALIZED_COORDINATES));
	CHECK(cuTexRefGetFlags(&flags, tr));
	EXPECT(flags == CU_TRSF_NORMALIZED_COORDINATES, "flags %u", flags);
	CHECK(cuTexRefSetFlags(tr, 0)); /* element reads for the kernel */
	CHECK(cuTexRefGetFlags(&flags, tr));
	EXPECT(flags == 0, "flags %u", flags);
	printf("settings: modes %d %d, filters %d %d, bias %g, clamp %g..%g, border %g %g %g %g, anisotropy %d\n", am0,
	       am1, fm, mfm, bias, lo, hi, got_border[0], got_border[1], got_border[2], got_border[3], aniso);
	CHECK(cuTexRefSetAddressMode(tr, 1, CU_TR_ADDRESS_MODE_CLAMP));
	CHECK(cuTexRefSetMipmapFilterMode(tr, CU_TR_FILTER_MODE_POINT));
}

/* The same kernel launched as before CUDA 4: parameters set one by one, the block shape
 * and shared size kept by the function, then cuLaunchGrid, cuLaunchGridAsync and cuLaunch
 * (one block of N threads each). */
static void legacy_launches(CUfunction f, CUtexref tr, CUdeviceptr out, const float *want)
{
	CUstream s;
	float got[N];
	int n = N, same = 1;
	CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CHECK(cuParamSetv(f, 0, &out, sizeof(out)));
	CHECK(cuParamSeti(f, 8, (unsigned)n));
	CHECK(cuParamSetSize(f, 12));
	CHECK(cuFuncSetBlockShape(f, N, 1, 1));
	CHECK(cuFuncSetSharedSize(f, 0));
	printf("cuParamSetTexRef: %s\n", drv_error_name(cuParamSetTexRef(f, CU_PARAM_TR_DEFAULT, tr)));
	for (int way = 0; way < 3; way++) {
		CHECK(cuMemsetD32(out, 0, N));
		if (way == 0)
			CHECK(cuLaunchGrid(f, 1, 1));
		else if (way == 1)
			CHECK(cuLaunchGridAsync(f, 1, 1, s));
		else
			CHECK(cuLaunch(f));
		CHECK(cuCtxSynchronize());
		CHECK(cuMemcpyDtoH(got, out, sizeof(got)));
		same &= !memcmp(got, want, sizeof(got));
	}
	EXPECT(same, "a legacy launch read other texels");
	printf("legacy launches: %s %016llx\n", same ? "ok" : "FAIL", (unsigned long long)drv_fnv1a(got, sizeof(got)));
	CHECK(cuStreamDestroy(s));
}

/* legacyTex bound to N floats, read back by the kernel element by element. */
static void test_linear(CUmodule mod, CUtexref tr)
{
	float host[N], got[N];
	for (int i = 0; i < N; i++)
		host[i] = (float)i * 0.75f + 1.0f;
	CUdeviceptr d, out, bound = 0;
	CHECK(cuMemAlloc(&d, sizeof(host)));
	CHECK(cuMemAlloc(&out, sizeof(got)));
	CHECK(cuMemcpyHtoD(d, host, sizeof(host)));
	CHECK(cuTexRefSetFormat(tr, CU_AD_FORMAT_FLOAT, 1));
	size_t offset = 1;
	CHECK(cuTexRefSetAddress(&offset, tr, d, sizeof(host)));
	CHECK(cuTexRefGetAddress(&bound, tr));
	CUarray_format fmt = 0;
	int channels = 0;
	CHECK(cuTexRefGetFormat(&fmt, &channels, tr));
	EXPECT(offset == 0 && bound == d, "linear binding: offset %zu, address %s", offset,
	       bound == d ? "same" : "other");
	EXPECT(fmt == CU_AD_FORMAT_FLOAT && channels == 1, "format %d x %d", (int)fmt, channels);
	test_settings(tr);
	CUfunction f;
	CHECK(cuModuleGetFunction(&f, mod, "legacyTexRead"));
	int n = N;
	void *params[] = {&out, &n};
	CHECK(cuLaunchKernel(f, 1, 1, 1, N, 1, 1, 0, NULL, params, NULL));
	CHECK(cuMemcpyDtoH(got, out, sizeof(got)));
	int ok = !memcmp(got, host, sizeof(got));
	EXPECT(ok, "texels read through the reference differ");
	printf("linear: offset %zu, format %d x %d, read %s %016llx\n", offset, (int)fmt, channels, ok ? "ok" : "FAIL",
	       (unsigned long long)drv_fnv1a(got, sizeof(got)));
	legacy_launches(f, tr, out, host);
	if (getenv("REMORA_SERVER")) /* Remora checks the memory a reference names; a GPU need not */
		EXPECT_RESULT(cuTexRefSetAddress(&offset, tr, d + 64, sizeof(host)), CUDA_ERROR_INVALID_VALUE);
	CHECK(cuMemFree(out));
	CHECK(cuMemFree(d));
}

static void test_pitch_and_array(CUtexref tr)
{
	CUdeviceptr p, bound = 0;
	size_t pitch = 0;
	CHECK(cuMemAllocPitch(&p, &pitch, 16 * sizeof(float), 8, 4));
	CUDA_ARRAY_DESCRIPTOR d = {.Width = 16, .Height = 8, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1};
	CHECK(cuTexRefSetAddress2D(tr, &d, p, pitch));
	CHECK(cuTexRefGetAddress(&bound, tr));
	EXPECT(bound == p, "pitched binding reads back another address");
	CHECK(cuTexRefSetAddress2D_v2(tr, &d, p, pitch));
	bound = 0;
	CHECK(cuTexRefGetAddress(&bound, tr));
	EXPECT(bound == p, "pitched binding (the CUDA 3.2 entry point) reads back another address");
	if (getenv("REMORA_SERVER")) { /* rows past the allocation's end */
		CUDA_ARRAY_DESCRIPTOR tall = d;
		tall.Height = 1 << 20;
		EXPECT_RESULT(cuTexRefSetAddress2D(tr, &tall, p, pitch), CUDA_ERROR_INVALID_VALUE);
		EXPECT_RESULT(cuTexRefSetAddress2D_v2(tr, &tall, p, pitch), CUDA_ERROR_INVALID_VALUE);
	}
	CUarray a = NULL, got = NULL;
	CUDA_ARRAY_DESCRIPTOR ad = {.Width = 64, .Height = 0, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1};
	CHECK(cuArrayCreate(&a, &ad));
	CHECK(cuTexRefSetArray(tr, a, CU_TRSA_OVERRIDE_FORMAT));
	CHECK(cuTexRefGetArray(&got, tr));
	CUarray_format fmt = 0;
	int channels = 0;
	CHECK(cuTexRefGetFormat(&fmt, &channels, tr));
	EXPECT(got == a, "the array bound reads back as another");
	EXPECT(fmt == CU_AD_FORMAT_FLOAT && channels == 1, "array format %d x %d", (int)fmt, channels);
	printf("pitched: bound %s; array: bound %s, format %d x %d\n", bound == p ? "yes" : "no",
	       got == a ? "yes" : "no", (int)fmt, channels);
	CUmipmappedArray mm = NULL, got_mm = NULL;
	CUDA_ARRAY3D_DESCRIPTOR md = {.Width = 16, .Height = 16, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1};
	CHECK(cuMipmappedArrayCreate(&mm, &md, 3));
	CHECK(cuTexRefSetMipmappedArray(tr, mm, CU_TRSA_OVERRIDE_FORMAT));
	CHECK(cuTexRefGetMipmappedArray(&got_mm, tr));
	EXPECT(got_mm == mm, "the mipmapped array bound reads back as another");
	printf("mipmapped array: bound %s\n", got_mm == mm ? "yes" : "no");
	CHECK(cuArrayDestroy(a));
	CHECK(cuMipmappedArrayDestroy(mm));
	CHECK(cuMemFree(p));
}

static void test_surface(CUsurfref sr)
{
	CUarray a = NULL, got = NULL;
	CUDA_ARRAY3D_DESCRIPTOR d = {.Width = 16, .Height = 16, .Depth = 0, .Format = CU_AD_FORMAT_UNSIGNED_INT32,
				     .NumChannels = 1, .Flags = CUDA_ARRAY3D_SURFACE_LDST};
	CHECK(cuArray3DCreate(&a, &d));
	CHECK(cuSurfRefSetArray(sr, a, 0));
	CHECK(cuSurfRefGetArray(&got, sr));
	EXPECT(got == a, "the surface's array reads back as another");
	printf("surface: bound %s\n", got == a ? "yes" : "no");
	CHECK(cuArrayDestroy(a));
}

/* A reference of no module: the driver's answer, whatever it is, and its settings if made. */
static void test_created(void)
{
	CUtexref t = NULL;
	CUresult rc = cuTexRefCreate(&t);
	printf("cuTexRefCreate: %s\n", drv_error_name(rc));
	if (rc != CUDA_SUCCESS)
		return;
	CUfilter_mode fm = -1;
	CHECK(cuTexRefSetFilterMode(t, CU_TR_FILTER_MODE_LINEAR));
	CHECK(cuTexRefGetFilterMode(&fm, t));
	EXPECT(fm == CU_TR_FILTER_MODE_LINEAR, "filter mode %d", fm);
	CHECK(cuTexRefDestroy(t));
	if (getenv("REMORA_SERVER")) /* destroyed: no longer the client's */
		EXPECT_RESULT(cuTexRefSetFilterMode(t, CU_TR_FILTER_MODE_POINT), CUDA_ERROR_INVALID_HANDLE);
}

int main(void)
{
	drv_open_device0();
	CUmodule mod;
	CHECK(cuModuleLoadData(&mod, ptx));
	CUtexref tr = NULL, missing = NULL;
	CUsurfref sr = NULL;
	CHECK(cuModuleGetTexRef(&tr, mod, "legacyTex"));
	EXPECT_RESULT(cuModuleGetTexRef(&missing, mod, "noSuchTexture"), CUDA_ERROR_NOT_FOUND);
	CHECK(cuModuleGetSurfRef(&sr, mod, "legacySurf"));
	test_linear(mod, tr);
	test_pitch_and_array(tr);
	test_surface(sr);
	test_created();
	CHECK(cuModuleUnload(mod));
	if (getenv("REMORA_SERVER")) /* the module's references went with it */
		EXPECT_RESULT(cuTexRefSetFlags(tr, 0), CUDA_ERROR_INVALID_HANDLE);
	int status = drv_exit_status();
	printf("%s\n", status ? "FAIL" : "PASS");
	return status;
}
