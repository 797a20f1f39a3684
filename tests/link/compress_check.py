#!/usr/bin/env python3
"""Compressed copies (common/zchunk.h, docs/performance.md "Compression"): copies of
compressible and random data of several sizes to the device and back, bytes compared, and
the client's log saying which went compressed. Run by scripts/link-emu.sh over a slow
link (REMORA_COMPRESS unset: the plan's measured rate decides), or alone over loopback
with REMORA_COMPRESS=always (the decision forced; tests only). forbid: the daemon is set
compress_copies=no, and nothing goes compressed.

usage: [link-emu.sh SPEC --] python3 compress_check.py REMORAD DRIVER|real CLIENT_LIB_DIR [forbid]
(real: remorad's own driver, scripts/gpu-suite.sh)
"""
import ctypes, os, random, subprocess, sys, tempfile, time
remorad, driver, client_dir = sys.argv[1:4]
forbid = sys.argv[4:5] == ["forbid"]
SIZES = [256 << 10, (1 << 20) + 17, 5 << 20]
if os.environ.get("CHILD"):
    cu = ctypes.CDLL("libcuda.so.1")
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    assert cu.cuInit(0) == 0 and cu.cuDeviceGet(ctypes.byref(dev), 0) == 0
    assert cu.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev) == 0
    d = ctypes.c_uint64()
    assert cu.cuMemAlloc_v2(ctypes.byref(d), 8 << 20) == 0
    rng = random.Random(36)
    warm = rng.randbytes(1 << 20)
    for _ in range(4):  # one stream's rate measured each way, uncompressed
        assert cu.cuMemcpyHtoD_v2(d, warm, ctypes.c_size_t(len(warm))) == 0
        back = ctypes.create_string_buffer(len(warm))
        assert cu.cuMemcpyDtoH_v2(back, d, ctypes.c_size_t(len(warm))) == 0
    # A direction whose try went raw skips trying for copies of a few times its bytes
    # (frontend/compress.c): copies of compressible data until one went compressed.
    ease = bytes(i // 256 % 251 for i in range(1 << 20))
    for _ in range(6):
        assert cu.cuMemcpyHtoD_v2(d, ease, ctypes.c_size_t(len(ease))) == 0
        back = ctypes.create_string_buffer(len(ease))
        assert cu.cuMemcpyDtoH_v2(back, d, ctypes.c_size_t(len(ease))) == 0
    bad = 0
    for kind in ("pattern", "random"):
        for n in SIZES:
            data = bytes(i // 256 % 251 for i in range(n)) if kind == "pattern" else rng.randbytes(n)
            print(f"COPY {kind} {n}", file=sys.stderr, flush=True)
            r1 = cu.cuMemcpyHtoD_v2(d, data, ctypes.c_size_t(n))
            back = ctypes.create_string_buffer(n)
            r2 = cu.cuMemcpyDtoH_v2(back, d, ctypes.c_size_t(n))
            ok = r1 == 0 and r2 == 0 and back.raw == data
            bad += not ok
            print(f"{kind} {n}: {'PASS' if ok else 'FAIL'} ({r1}, {r2})", flush=True)
    sys.exit(1 if bad else 0)

tmp = tempfile.mkdtemp()
ready = tmp + "/addr"
emulated = "REMORA_LINK_TOOL" in os.environ
if emulated:
    cmd = [os.environ["REMORA_LINK_TOOL"], "exec", os.environ["REMORA_LINK_SERVER_NS"], remorad, "--listen",
           "tcp://" + os.environ["REMORA_LINK_SERVER_IP"] + ":0"]
else:
    cmd = [remorad, "--listen", "tcp://127.0.0.1:0"]
if forbid:
    cmd += ["--set", "compress_copies=no"]
p = subprocess.Popen(cmd + ["--set", "allow_anonymous=yes", "--ready-file", ready] +
                     ([] if driver == "real" else ["--driver", driver]),
                     stderr=subprocess.DEVNULL)
deadline = time.time() + 30
while not (os.path.exists(ready) and open(ready).read().strip()):
    if time.time() > deadline or p.poll() is not None:
        print("FAIL remorad did not start"); sys.exit(1)
    time.sleep(0.05)
env = dict(os.environ, CHILD="1", REMORA_SERVER=open(ready).read().strip(), LD_LIBRARY_PATH=os.pathsep.join(filter(None, [client_dir, os.environ.get("LD_LIBRARY_PATH")])),
           REMORA_LOG="debug")
if not emulated:
    env["REMORA_COMPRESS"] = "always"
r = subprocess.run([sys.executable, __file__] + sys.argv[1:], env=env, capture_output=True, text=True, timeout=240)
p.terminate(); p.wait()
print(r.stdout, end="")
# Which copies went compressed, from the client's log: the lines after each COPY mark.
seen, cur = {}, None
for line in r.stderr.splitlines():
    if line.startswith("COPY "):
        cur = tuple(line.split()[1:3]); seen[cur] = set()
    elif cur and "goes compressed" in line and "to the device" in line:
        seen[cur].add("h2d")
    elif cur and "came compressed" in line:
        seen[cur].add("d2h")
failures = 0 if r.returncode == 0 else 1
for kind in ("pattern", "random"):
    for n in SIZES:
        got = seen.get((kind, str(n)), set())
        want = {"h2d", "d2h"} if kind == "pattern" and not forbid else set()
        ok = got == want
        failures += not ok
        print(f"{kind} {n}: compressed {sorted(got) or 'none'}: {'PASS' if ok else 'FAIL, expected ' + str(sorted(want))}")
if failures:
    print(r.stderr[-3000:])
sys.exit(1 if failures else 0)
