// rt_texture: what NVIDIA's texture samples do through cudart (simpleTexture,
// simplePitchLinearTexture, simpleSurfaceWrite): an array and pitched memory read through
// texture objects, a surface written by a kernel, cudaMemset2D, cudaMalloc3D and
// cudaMemcpy3D; every result checked bit for bit.
#define RT_WANT_texFetch2D
#define RT_WANT_surfWrite2D
#include "catalogue.cuh"
#include "rtcommon.h"

#define W 45
#define H 29

static int failures;

static void check(const void *got, const void *want, size_t n, const char *what)
{
    int ok = !memcmp(got, want, n);
    printf("%s: %s %016llx\n", what, ok ? "ok" : "FAIL", (unsigned long long)rt_fnv1a(got, n));
    if (!ok) {
        fprintf(stderr, "%s differs\n", what);
        failures++;
    }
}

static float texel(int x, int y)
{
    return (float)(x * 64 - y) + 0.5f;
}

// Reads texture tex at an offset of (dx, dy), clamped, and compares with the model.
static void fetch(cudaTextureObject_t tex, int dx, int dy, const char *what)
{
    float *out, got[W * H], want[W * H];
    CK(cudaMalloc(&out, sizeof(got)));
    texFetch2D<<<3, 128>>>(out, tex, W, H, (float)dx, (float)dy);
    CK_KERNEL();
    CK(cudaMemcpy(got, out, sizeof(got), cudaMemcpyDeviceToHost));
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            int u = x + dx < 0 ? 0 : x + dx >= W ? W - 1 : x + dx;
            int v = y + dy < 0 ? 0 : y + dy >= H ? H - 1 : y + dy;
            want[y * W + x] = texel(u, v);
        }
    check(got, want, sizeof(got), what);
    CK(cudaFree(out));
}

static cudaTextureObject_t texture_of(const cudaResourceDesc *res)
{
    cudaTextureDesc td;
    memset(&td, 0, sizeof(td));
    td.addressMode[0] = td.addressMode[1] = cudaAddressModeClamp;
    td.filterMode = cudaFilterModePoint;
    td.readMode = cudaReadModeElementType;
    td.normalizedCoords = 0;
    cudaTextureObject_t tex;
    CK(cudaCreateTextureObject(&tex, res, &td, NULL));
    return tex;
}

int main(void)
{
    static float host[W * H];
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            host[y * W + x] = texel(x, y);

    // simpleTexture: a CUDA array behind a texture object.
    cudaChannelFormatDesc fd = cudaCreateChannelDesc<float>();
    cudaArray_t array;
    CK(cudaMallocArray(&array, &fd, W, H));
    CK(cudaMemcpy2DToArray(array, 0, 0, host, W * sizeof(float), W * sizeof(float), H, cudaMemcpyHostToDevice));
    cudaResourceDesc res;
    memset(&res, 0, sizeof(res));
    res.resType = cudaResourceTypeArray;
    res.res.array.array = array;
    cudaTextureObject_t tex = texture_of(&res);
    fetch(tex, 0, 0, "array texture");
    fetch(tex, 4, -3, "array texture clamp");
    CK(cudaDestroyTextureObject(tex));

    // simplePitchLinearTexture: pitched memory behind a texture object.
    float *pitched;
    size_t pitch;
    CK(cudaMallocPitch((void **)&pitched, &pitch, W * sizeof(float), H));
    CK(cudaMemcpy2D(pitched, pitch, host, W * sizeof(float), W * sizeof(float), H, cudaMemcpyHostToDevice));
    memset(&res, 0, sizeof(res));
    res.resType = cudaResourceTypePitch2D;
    res.res.pitch2D.devPtr = pitched;
    res.res.pitch2D.desc = fd;
    res.res.pitch2D.width = W;
    res.res.pitch2D.height = H;
    res.res.pitch2D.pitchInBytes = pitch;
    tex = texture_of(&res);
    fetch(tex, -2, 5, "pitch texture");
    CK(cudaDestroyTextureObject(tex));

    // cudaMemset2D on a part of the pitched memory, read back whole.
    CK(cudaMemset2D((char *)pitched + 12, pitch, 0x3c, 57, 11));
    float back[W * H];
    unsigned char want[W * H * sizeof(float)];
    memcpy(want, host, sizeof(want));
    for (int y = 0; y < 11; y++)
        memset(want + y * W * sizeof(float) + 12, 0x3c, 57);
    CK(cudaMemcpy2D(back, W * sizeof(float), pitched, pitch, W * sizeof(float), H, cudaMemcpyDeviceToHost));
    check(back, want, sizeof(back), "memset2d");
    CK(cudaFree(pitched));

    // simpleSurfaceWrite: a kernel writes a surface; the array is read back.
    cudaChannelFormatDesc ud = cudaCreateChannelDesc<unsigned>();
    cudaArray_t surf_array;
    CK(cudaMallocArray(&surf_array, &ud, W, H, cudaArraySurfaceLoadStore));
    memset(&res, 0, sizeof(res));
    res.resType = cudaResourceTypeArray;
    res.res.array.array = surf_array;
    cudaSurfaceObject_t surf;
    CK(cudaCreateSurfaceObject(&surf, &res));
    surfWrite2D<<<3, 128>>>(surf, W, H, 11u);
    CK_KERNEL();
    unsigned got[W * H], wanted[W * H];
    CK(cudaMemcpy2DFromArray(got, W * 4, surf_array, 0, 0, W * 4, H, cudaMemcpyDeviceToHost));
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            wanted[y * W + x] = 11u + 1000u * (unsigned)x + (unsigned)y;
    check(got, wanted, sizeof(got), "surface write");
    CK(cudaDestroySurfaceObject(surf));
    CK(cudaFreeArray(surf_array));
    CK(cudaFreeArray(array));

    // cudaMalloc3D and cudaMemcpy3D: a volume up and back.
    cudaExtent ext = make_cudaExtent(W * sizeof(float), H, 5);
    cudaPitchedPtr vol;
    CK(cudaMalloc3D(&vol, ext));
    static float vin[W * H * 5], vout[W * H * 5];
    for (int i = 0; i < W * H * 5; i++)
        vin[i] = (float)i * 0.75f;
    cudaMemcpy3DParms p;
    memset(&p, 0, sizeof(p));
    p.srcPtr = make_cudaPitchedPtr(vin, W * sizeof(float), W, H);
    p.dstPtr = vol;
    p.extent = ext;
    p.kind = cudaMemcpyHostToDevice;
    CK(cudaMemcpy3D(&p));
    memset(&p, 0, sizeof(p));
    p.srcPtr = vol;
    p.dstPtr = make_cudaPitchedPtr(vout, W * sizeof(float), W, H);
    p.extent = ext;
    p.kind = cudaMemcpyDeviceToHost;
    CK(cudaMemcpy3D(&p));
    check(vout, vin, sizeof(vin), "memcpy3d");
    CK(cudaFree(vol.ptr));

    printf("%s\n", failures ? "FAIL" : "PASS");
    return failures ? 1 : 0;
}
