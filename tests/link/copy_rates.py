#!/usr/bin/env python3
"""Copy rates over the emulated link (docs/performance.md "Copies over a real link"): run by
bench/link-emu.sh, starts remorad in the server's namespace and times back-to-back
synchronous copies of 64 KiB to 64 MiB each way (Gbit/s), with the plan from the measured link, striping
from 1 MiB and one link (COPY_RATES_VARIANTS="label:VAR=V,VAR=V;..." names others). A measuring
tool, not a test (no bounds). COPY_RATES_PROFILE=copies:SIZE: both sides profile each copy of at
least SIZE (REMORA_PROFILE, common/copy_profile.h), and each variant's profile lines follow
its rates, the client's then remorad's, to say where a copy's time goes.

usage: link-emu.sh SPEC -- python3 copy_rates.py REMORAD DRIVER|system CLIENT_LIB_DIR
"""
import ctypes, os, subprocess, sys, time, tempfile, json
remorad, driver, client_dir = sys.argv[1:4]
driver_args = [] if driver == "system" else ["--driver", driver]
if os.environ.get("CHILD"):
    cu = ctypes.CDLL("libcuda.so.1")
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    cu.cuInit(0); cu.cuDeviceGet(ctypes.byref(dev), 0); cu.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev)
    d = ctypes.c_uint64(); cu.cuMemAlloc_v2(ctypes.byref(d), 64 << 20)
    pageable = ctypes.create_string_buffer(64 << 20)
    pinned = ctypes.c_void_p()
    if cu.cuMemAllocHost_v2(ctypes.byref(pinned), ctypes.c_size_t(64 << 20)):
        sys.exit("cuMemAllocHost failed")
    noise = os.urandom(64 << 20)  # incompressible: the link's rate, not compression's, is measured
    ctypes.memmove(pageable, noise, len(noise))
    ctypes.memmove(pinned, noise, len(noise))
    cu.cuMemcpyHtoD_v2(d, pageable, ctypes.c_size_t(64 << 20))
    res = {}
    for host, buf in (("", pageable), ("pinned.", pinned)):
        for n in [64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]:
            reps = max(2, min(20, (32 << 20) // n))
            for way in ("h2d", "d2h"):
                f = cu.cuMemcpyHtoD_v2 if way == "h2d" else cu.cuMemcpyDtoH_v2
                a, b = (d, buf) if way == "h2d" else (buf, d)
                f(a, b, ctypes.c_size_t(n))
                t = time.perf_counter()
                for _ in range(reps):
                    f(a, b, ctypes.c_size_t(n))
                res[f"{host}{way}.{n >> 10}K"] = round(n * reps * 8 / (time.perf_counter() - t) / 1e9, 3)
    print(json.dumps(res)); sys.exit(0)
tmp = tempfile.mkdtemp()
ready = tmp + "/addr"
profile = os.environ.get("COPY_RATES_PROFILE")
profile_env = {"REMORA_PROFILE": profile} if profile else {}
daemon_log = open(tmp + "/remorad.log", "w+")  # each variant's profile lines read from daemon_seen on
daemon_seen = 0
p = subprocess.Popen([os.environ["REMORA_LINK_TOOL"], "exec", os.environ["REMORA_LINK_SERVER_NS"], remorad, "--listen",
                      "tcp://" + os.environ["REMORA_LINK_SERVER_IP"] + ":0", "--set", "allow_anonymous=yes", "--ready-file", ready] + driver_args,
                     stderr=daemon_log, env=dict(os.environ, **profile_env))
while not (os.path.exists(ready) and open(ready).read().strip()): time.sleep(0.05)
addr = open(ready).read().strip()
variants = [("default", {}), ("stripe_min=1M", {"REMORA_STRIPE_MIN": "1M"}), ("links=1", {"REMORA_COPY_LINKS": "1"})]
if os.environ.get("COPY_RATES_VARIANTS"):
    variants = [(v.split(":", 1)[0], dict(kv.split("=", 1) for kv in v.split(":", 1)[1].split(",") if kv))
                for v in os.environ["COPY_RATES_VARIANTS"].split(";")]

def profile_lines(text):
    return [line for line in text.splitlines() if line.startswith("remora-profile side=")]


for label, extra in variants:
    env = dict(os.environ, CHILD="1", REMORA_SERVER=addr, **profile_env, **extra)
    env["LD_LIBRARY_PATH"] = ":".join(p for p in (client_dir, os.environ.get("LD_LIBRARY_PATH")) if p)
    r = subprocess.run([sys.executable, __file__] + sys.argv[1:], env=env, capture_output=True, text=True)
    print(os.environ["REMORA_LINK"], label, r.stdout.strip() or r.stderr[-300:], flush=True)
    if profile:
        time.sleep(0.2)  # remorad's line comes as the copy ends, on its side
        daemon_log.seek(daemon_seen)
        daemon_text = daemon_log.read()
        daemon_seen += len(daemon_text)
        print("\n".join(profile_lines(r.stderr) + profile_lines(daemon_text)), flush=True)
p.terminate(); p.wait()
