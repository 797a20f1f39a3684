#!/usr/bin/env python3
"""Remora behind the emulated link (scripts/link-emu.sh runs this in the client's network
namespace, with the link described in REMORA_LINK*): remorad on the test driver in the
server's namespace, and one on loopback here for comparison. Checks, with margins wide
enough for a loaded 2-core machine (bounds only on the safe side):
  a. a program's output is the same over the link as over loopback;
  b. a synchronous call waits at least about the round trip (the median of 20 is ≥ 0.7 of it);
  c. copies of every size from 64 KiB to 64 MiB, odd sizes too, come back bit for bit,
     a large copy's throughput is at most 1.3 times the rate, and 4 MiB copies (the best
     of three) reach at least half of it (the bound n/(n+RTT*rate) is 0.99 here);
  d. REMORA_STATS counted at least the bytes copied each way and the synchronous calls.

usage: link_check.py REMORAD DRIVER CLIENT_LIB_DIR PROGRAM IMAGE
"""
import ctypes
import os
import random
import re
import struct
import subprocess
import sys
import tempfile
import time

remorad, driver, client_dir, program, image = sys.argv[1:6]
spec = os.environ["REMORA_LINK"]
rtt_s = float(re.search(r"rtt=([0-9.]+)", spec).group(1)) * {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1}[
    re.search(r"rtt=[0-9.]+(ns|us|ms|s)", spec).group(1)]
m = re.search(r"rate=([0-9.]+)(kbit|mbit|gbit)", spec)
rate_bps = float(m.group(1)) * {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9}[m.group(2)]
failures = []


def check(ok, what):
    print(("ok    " if ok else "FAIL  ") + what, flush=True)
    if not ok:
        failures.append(what)


def start_daemon(tmp, name, listen, prefix=()):
    ready = os.path.join(tmp, name + ".addr")
    log = open(os.path.join(tmp, name + ".log"), "w")
    p = subprocess.Popen(list(prefix) + [remorad, "--listen", listen, "--set", "allow_anonymous=yes",
                                         "--driver", driver, "--ready-file", ready], stdout=log, stderr=log)
    for _ in range(200):
        if os.path.exists(ready) and open(ready).read().strip():
            return p, open(ready).read().strip()
        if p.poll() is not None:
            break
        time.sleep(0.05)
    sys.exit(f"remorad {name} did not start: {open(log.name).read()[-500:]}")


def client_env(server, **extra):
    env = dict(os.environ, REMORA_SERVER=server, LD_LIBRARY_PATH=client_dir, **extra)
    env.pop("REMORA_STATS", None)
    env.update(extra)
    return env


def run_program(server):
    r = subprocess.run([program, image], env=client_env(server), capture_output=True, text=True, timeout=120)
    return r.returncode, r.stdout


def copies_child(server, stats_path):
    """This script again as a client of server (ctypes, libcuda.so.1 from client_dir)."""
    env = client_env(server, REMORA_STATS=stats_path, LINK_CHECK_CHILD="1")
    r = subprocess.run([sys.executable] + sys.argv, env=env, capture_output=True, text=True, timeout=600)
    sys.stdout.write(r.stdout)
    if r.returncode:
        check(False, f"the copying client failed: {r.stderr[-800:]}")
    return dict(kv.split("=", 1) for kv in r.stdout.split() if "=" in kv)


def child():
    """In the client: synchronous calls timed, copies checked and timed."""
    cu = ctypes.CDLL("libcuda.so.1")
    def ok(r, what):
        if r:
            sys.exit(f"{what} returned {r}")
    ok(cu.cuInit(0), "cuInit")
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    ok(cu.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
    ok(cu.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev), "cuCtxCreate")
    times = []
    for _ in range(20):
        t = time.perf_counter()
        ok(cu.cuCtxSynchronize(), "cuCtxSynchronize")
        times.append(time.perf_counter() - t)
    times.sort()
    print(f"sync_s={times[10]:.6f} sync_calls=20")
    top = 64 << 20
    d = ctypes.c_uint64()
    ok(cu.cuMemAlloc_v2(ctypes.byref(d), top + 4096), "cuMemAlloc")
    rnd = random.Random(36)
    sent = received = 0
    sizes = [64 << 10, (64 << 10) + 13, 256 << 10, 1 << 20, (1 << 20) + 4097, 4 << 20, 16 << 20,
             (16 << 20) + 4097, 64 << 20]
    for n in sizes:
        src = rnd.randbytes(n)
        back = ctypes.create_string_buffer(n)
        t = time.perf_counter()
        ok(cu.cuMemcpyHtoD_v2(d, src, ctypes.c_size_t(n)), "cuMemcpyHtoD")
        h2d = time.perf_counter() - t
        t = time.perf_counter()
        ok(cu.cuMemcpyDtoH_v2(back, d, ctypes.c_size_t(n)), "cuMemcpyDtoH")
        d2h = time.perf_counter() - t
        sent, received = sent + n, received + n
        print(f"copy.{n}.same={int(back.raw == src)} copy.{n}.h2d_s={h2d:.6f} copy.{n}.d2h_s={d2h:.6f}")
    n = 4 << 20
    src = rnd.randbytes(n)
    back = ctypes.create_string_buffer(n)
    best = {"h2d": 0.0, "d2h": 0.0}
    for _ in range(3):
        t = time.perf_counter()
        ok(cu.cuMemcpyHtoD_v2(d, src, ctypes.c_size_t(n)), "cuMemcpyHtoD")
        best["h2d"] = max(best["h2d"], n * 8 / (time.perf_counter() - t))
        t = time.perf_counter()
        ok(cu.cuMemcpyDtoH_v2(back, d, ctypes.c_size_t(n)), "cuMemcpyDtoH")
        best["d2h"] = max(best["d2h"], n * 8 / (time.perf_counter() - t))
        sent, received = sent + n, received + n
    print(f"best4m.h2d_bps={best['h2d']:.0f} best4m.d2h_bps={best['d2h']:.0f} best4m.same={int(back.raw == src)}")
    print(f"copied_each_way={sent}")
    sys.stdout.flush()


def stats_of(path):
    raw = open(path, "rb").read()
    magic, pid, calls, rts, sent, received, sends = struct.unpack("<8s6Q", raw[:56])
    return {"magic": magic, "calls": calls, "round_trips": rts, "sent": sent, "received": received, "sends": sends}


def main():
    print(f"link {spec}: measured rtt {os.environ.get('REMORA_LINK_RTT_US')} us, "
          f"{os.environ.get('REMORA_LINK_GBPS')} Gbit/s", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        local, local_addr = start_daemon(tmp, "loopback", "tcp://127.0.0.1:0")
        tool, ns, ip = os.environ["REMORA_LINK_TOOL"], os.environ["REMORA_LINK_SERVER_NS"], os.environ["REMORA_LINK_SERVER_IP"]
        far, far_addr = start_daemon(tmp, "far", f"tcp://{ip}:0", prefix=(tool, "exec", ns))
        try:
            check(far_addr.startswith(ip), f"the far remorad listens on the link ({far_addr})")
            a, b = run_program(local_addr), run_program(far_addr)
            check(a[0] == 0 and b[0] == 0 and a[1] == b[1] and a[1],
                  f"{os.path.basename(program)}: the same output over the link as over loopback (rc {a[0]}, {b[0]})")
            stats_path = os.path.join(tmp, "stats")
            kv = copies_child(far_addr, stats_path)
            if "sync_s" in kv:
                sync = float(kv["sync_s"])
                check(sync >= 0.7 * rtt_s, f"a synchronous call takes {sync * 1e3:.3f} ms, at least 0.7 of the "
                      f"round trip {rtt_s * 1e3:.3f} ms")
            for k, v in sorted(kv.items()):
                if k.endswith(".same"):
                    check(v == "1", f"a copy of {k.split('.')[1]} bytes comes back bit for bit")
            for n in (16 << 20, 64 << 20):
                for way in ("h2d", "d2h"):
                    t = float(kv.get(f"copy.{n}.{way}_s", "0"))
                    bps = n * 8 / t if t > 0 else float("inf")
                    check(bps <= 1.3 * rate_bps, f"{way} {n >> 20} MiB: {bps / 1e6:.1f} Mbit/s, at most 1.3 times "
                          f"the rate {rate_bps / 1e6:.0f} Mbit/s")
            for way in ("h2d", "d2h"):
                bps = float(kv.get(f"best4m.{way}_bps", "0"))
                check(bps >= 0.5 * rate_bps, f"{way} 4 MiB, best of 3: {bps / 1e6:.1f} Mbit/s, at least half the rate")
            check(kv.get("best4m.same") == "1", "the 4 MiB copies come back bit for bit")
            st = stats_of(stats_path)
            each = int(kv.get("copied_each_way", "0"))
            check(st["magic"] == b"RMSTATS2" and st["sends"] >= st["round_trips"] and st["sent"] >= each and st["received"] >= each and
                  st["round_trips"] >= 20 and st["calls"] >= st["round_trips"],
                  f"REMORA_STATS counted the copies and round trips ({st})")
        finally:
            for p in (local, far):
                p.terminate()
                p.wait()
    if failures:
        sys.exit(f"{len(failures)} check(s) failed")
    print("PASS")


if __name__ == "__main__":
    child() if os.environ.get("LINK_CHECK_CHILD") else main()
