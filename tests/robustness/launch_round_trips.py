#!/usr/bin/env python3
"""A kernel's parameter layout costs one round trip (rmFuncGetParamLayout) at the first
launch of each function, not one cuFuncGetParamInfo per parameter plus one, and is asked
again once its module is unloaded: runs drv_reload through Remora with every call to the
daemon logged (REMORA_TRACE) and counts, between the program's markers, the calls each
first launch waited for. drv_reload itself checks that every launch packed its arguments
by its own function's layout, though the test driver gives a function of the next module
the handle of the unloaded one's.

usage: launch_round_trips.py WITH_REMORAD REMORAD DRIVER REMORA DRV_RELOAD FILL_IMAGE VECADD_IMAGE
"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from verdict import check, failures  # noqa: E402

runner, remorad, driver, remora, program, fill_image, vecadd_image = sys.argv[1:8]
env = dict(os.environ, REMORA_LOG="debug", REMORA_TRACE="1")
p = subprocess.run([runner, remorad, driver, remora, program, fill_image, vecadd_image], capture_output=True,
                   text=True, env=env, timeout=100)
if not check(p.returncode == 0, f"drv_reload exits 0 (status {p.returncode})"):
    print(p.stderr[-4000:])

firsts, current = [], None  # (kernel, [calls the first launch waited for])
for line in p.stderr.splitlines():
    if m := re.search(r"drv_reload: first launch of (\w+)", line):
        current = (m.group(1), [])
    elif "drv_reload: first launch done" in line and current:
        firsts.append(current)
        current = None
    elif current and (m := re.search(r"debug: (\w+) returned -?\d+ \(waited\)", line)):
        current[1].append(m.group(1))
print("round trips of each first launch:", firsts)
check(len(firsts) == 3, f"three first launches were marked ({len(firsts)})")
for kernel, waited in firsts:
    check(waited == ["rmFuncGetParamLayout"],
          f"the first launch of {kernel} waited for its layout alone, once ({len(waited)} round trips: {waited})")
traced = re.findall(r"debug: (\w+) returned", p.stderr)
check(traced.count("rmFuncGetParamLayout") == 3, "the layout was asked once per module, not again at a second launch "
      f"({traced.count('rmFuncGetParamLayout')} times)")
check("cuFuncGetParamInfo" not in traced, "no launch asked cuFuncGetParamInfo")
check("drv_reload: a function handle came again: yes" in p.stderr,
      "the test driver gave a function of a later module an unloaded one's handle (the test means something)")
sys.exit(1 if failures else 0)
