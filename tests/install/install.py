#!/usr/bin/env python3
"""The installed tree works (issue 18): `meson install` into a staging directory places
remora, remorad, the client library in a private directory (no libcuda.so.1 anywhere
else), the systemd unit naming the installed remorad, the example configuration, bash
completion and the man pages (when scdoc is installed); the installed remorad starts from the installed example configuration, and
the installed `remora run` runs a driver-API program through it (the CPU test driver
stands in for a GPU).

usage: install.py MESON BUILD_ROOT DRIVER PROGRAM IMAGE
"""
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from verdict import check, failures  # noqa: E402
from remorad_fixture import stop_process, wait_for  # noqa: E402

meson, build, driver, program, image = sys.argv[1:6]
env = {k: v for k, v in os.environ.items() if not k.startswith("REMORA_") and k != "LD_LIBRARY_PATH"}

with tempfile.TemporaryDirectory() as stage:
    p = subprocess.run([meson, "install", "-C", build, "--destdir", stage, "--no-rebuild"], capture_output=True,
                       text=True, timeout=300)
    check(p.returncode == 0, f"meson install into a staging directory ({p.stderr.strip()[-500:]})")
    files = {}
    for root, _, names in os.walk(stage):
        for n in names:
            files.setdefault(n, []).append(os.path.join(root, n))
    bins = {n: [f for f in files.get(n, []) if os.path.basename(os.path.dirname(f)) == "bin"]
            for n in ("remora", "remorad")}
    check(all(len(v) == 1 for v in bins.values()), f"remora and remorad installed in a bin directory: {bins}")
    libs = files.get("libcuda.so.1", [])
    check(len(libs) == 1 and os.path.basename(os.path.dirname(libs[0])) == "remora",
          f"one libcuda.so.1, in a private directory named remora: {libs}")
    units = files.get("remorad.service", [])
    unit = open(units[0]).read() if units else ""
    remorad = bins["remorad"][0] if bins["remorad"] else "missing"
    remora = bins["remora"][0] if bins["remora"] else "missing"
    check("ExecStart=" + remorad[len(stage):] + " --config" in unit, "the unit starts the installed remorad")
    confs = files.get("remorad.conf.example", [])
    check(len(confs) == 1, "the example configuration is installed")
    check(len(files.get("remora", [])) == 2, "bash completion is installed (a file named remora besides the program)")
    if shutil.which("scdoc"):
        pages = {p: [f for f in files.get(p, []) if f"/man{p.rsplit('.', 1)[1]}/" in f]
                 for p in ("remora.1", "remorad.8", "remorad.conf.5")}
        check(all(len(v) == 1 for v in pages.values()), f"the man pages are installed in their sections: {pages}")

    if bins["remora"] and bins["remorad"] and confs:
        ready = os.path.join(stage, "addr")
        d = subprocess.Popen([remorad, "--config", confs[0], "--listen", "tcp://127.0.0.1:0", "--driver", driver,
                              "--set", "allow_anonymous=yes",
                              "--ready-file", ready], env=env, stderr=subprocess.PIPE, text=True)
        try:
            up = wait_for(lambda: os.path.exists(ready) and open(ready).read().strip(), timeout=20)
            check(up, "the installed remorad starts from the installed example configuration")
            if up:
                r = subprocess.run([remora, "run", "--server", open(ready).read().strip(), "--", program, image, "all"],
                                   capture_output=True, text=True, env=env, timeout=120)
                check(r.returncode == 0, f"the installed remora run runs a program ({r.stderr.strip()[-500:]})")
        finally:
            stop_process(d)
sys.exit(1 if failures else 0)
