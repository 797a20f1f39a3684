#!/usr/bin/env python3
"""Copy rates with and without compression over the emulated link (docs/performance.md
"Compression"): run by scripts/link-emu.sh, starts remorad in the server's namespace and
times back-to-back synchronous copies of 1 to 16 MiB each way, of compressible data (runs
of 256 equal bytes) and random data, with REMORA_COMPRESS=auto and off (Gbit/s of the
copy's own bytes). A measuring tool, not a test (no bounds).

usage: link-emu.sh SPEC -- python3 compress_rates.py REMORAD DRIVER CLIENT_LIB_DIR
"""
import ctypes, json, os, random, subprocess, sys, tempfile, time
remorad, driver, client_dir = sys.argv[1:4]
if os.environ.get("CHILD"):
    cu = ctypes.CDLL("libcuda.so.1")
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    cu.cuInit(0); cu.cuDeviceGet(ctypes.byref(dev), 0); cu.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev)
    d = ctypes.c_uint64(); cu.cuMemAlloc_v2(ctypes.byref(d), 16 << 20)
    rng = random.Random(36)
    data = {"compressible": bytes(i // 256 % 251 for i in range(16 << 20)), "random": rng.randbytes(16 << 20)}
    buf = ctypes.create_string_buffer(16 << 20)
    for _ in range(4):  # one stream's rate measured each way, uncompressed
        cu.cuMemcpyHtoD_v2(d, data["random"], ctypes.c_size_t(1 << 20))
        cu.cuMemcpyDtoH_v2(buf, d, ctypes.c_size_t(1 << 20))
    res = {}
    for kind, src in data.items():
        for n in [1 << 20, 4 << 20, 16 << 20]:
            reps = max(2, (32 << 20) // n)
            for way in ("h2d", "d2h"):
                if way == "h2d":
                    f, a, b = cu.cuMemcpyHtoD_v2, d, src
                else:
                    cu.cuMemcpyHtoD_v2(d, src, ctypes.c_size_t(n))
                    f, a, b = cu.cuMemcpyDtoH_v2, buf, d
                f(a, b, ctypes.c_size_t(n))
                t = time.perf_counter()
                for _ in range(reps):
                    f(a, b, ctypes.c_size_t(n))
                res[f"{kind}.{way}.{n >> 20}M"] = round(n * reps * 8 / (time.perf_counter() - t) / 1e9, 3)
    print(json.dumps(res)); sys.exit(0)
tmp = tempfile.mkdtemp()
ready = tmp + "/addr"
p = subprocess.Popen([os.environ["REMORA_LINK_TOOL"], "exec", os.environ["REMORA_LINK_SERVER_NS"], remorad, "--listen",
                      "tcp://" + os.environ["REMORA_LINK_SERVER_IP"] + ":0", "--set", "allow_anonymous=yes",
                      "--ready-file", ready, "--driver", driver], stderr=subprocess.DEVNULL)
while not (os.path.exists(ready) and open(ready).read().strip()): time.sleep(0.05)
addr = open(ready).read().strip()
for mode in ("off", "auto"):
    env = dict(os.environ, CHILD="1", REMORA_SERVER=addr, LD_LIBRARY_PATH=client_dir, REMORA_COMPRESS=mode)
    r = subprocess.run([sys.executable, __file__] + sys.argv[1:], env=env, capture_output=True, text=True)
    print(os.environ["REMORA_LINK"], "REMORA_COMPRESS=" + mode, r.stdout.strip() or r.stderr[-300:], flush=True)
p.terminate(); p.wait()
