#!/usr/bin/env python3
"""Answers the client keeps (proto/api.spec's `cached`) cost no round trip: runs drv_attrcache
through Remora with every call to the daemon logged (REMORA_TRACE), and counts them. With
REPEAT = 1000, each cached query must reach the daemon a handful of times at most (once per
distinct request, again after a call that forgets it), not 1000 times; a setting (`sets=`)
repeated with the value it holds is not sent; a stream's capture status is asked only while a
capture is open; a context's limit, its stream priority range and a stream's priority (what
cuDNN's RNNs ask at every call) are asked again only after a limit is set or a stream is made
again; drv_attrcache itself checks that the answers stay true.

usage: query_cache.py WITH_REMORAD REMORAD DRIVER REMORA DRV_ATTRCACHE IMAGE
"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from verdict import check, failures  # noqa: E402

runner, remorad, driver, remora, program, image = sys.argv[1:7]
REPEAT = 1000
env = dict(os.environ, REMORA_LOG="debug", REMORA_TRACE="1")
p = subprocess.run([runner, remorad, driver, remora, program, image, str(REPEAT)], capture_output=True, text=True,
                   env=env, timeout=300)
if not check(p.returncode == 0, f"drv_attrcache exits 0 (status {p.returncode})"):
    print(p.stderr[-4000:])
calls = {}
for m in re.finditer(r"debug: (cu\w+) returned", p.stderr):
    calls[m.group(1)] = calls.get(m.group(1), 0) + 1
print("calls that reached the daemon:", calls)
check(calls.get("cuDeviceGetAttribute", 0) >= 1, "cuDeviceGetAttribute is traced at all (the count can be trusted)")
for name, most in [("cuDeviceGetAttribute", 10), ("cuFuncGetAttribute", 6), ("cuKernelGetAttribute", 8),
                   ("cuDevicePrimaryCtxGetState", 3), ("cuKernelGetFunction", 2), ("cuCtxGetId", 2),
                   ("cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", 2), ("cuStreamIsCapturing", 2),
                   ("cuKernelSetAttribute", 104), ("cuCtxGetLimit", 4), ("cuCtxGetStreamPriorityRange", 2),
                   ("cuStreamGetPriority", 6)]:
    check(calls.get(name, 0) <= most, f"{name} reached the daemon {calls.get(name, 0)} times, at most {most}")
check(calls.get("cuFuncGetAttribute", 0) >= 2, "cuFuncGetAttribute was asked again after cuFuncSetAttribute")
check(calls.get("cuKernelGetAttribute", 0) >= 2, "cuKernelGetAttribute was asked again after cuKernelSetAttribute")
# Set to what it held 1000 times: sent once; then 8192, 4096 and 4096 after cuFuncSetAttribute;
# then another kernel's, to 2048 and 1024 in turns, 100 times, each sent, and each forgetting
# only that kernel's answers (cuKernelGetAttribute stays within its bound above).
check(calls.get("cuKernelSetAttribute", 0) == 104, "cuKernelSetAttribute was sent for each change, and only then")
check(calls.get("cuStreamIsCapturing", 0) >= 1, "cuStreamIsCapturing was asked while a capture was open")
check(calls.get("cuCtxGetLimit", 0) >= 3, "cuCtxGetLimit was asked again after each cuCtxSetLimit")
check(calls.get("cuStreamGetPriority", 0) >= 5, "cuStreamGetPriority was asked again for each stream made again")
sys.exit(1 if failures else 0)
