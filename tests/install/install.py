#!/usr/bin/env python3
"""The installed tree works (issue 18): `meson install` into a staging directory places
remora, remorad, the client library in a private directory (no libcuda.so.1 anywhere
else), the systemd unit naming the installed remorad, the example configuration, bash
completion and the man pages (when scdoc is installed); the installed remorad starts from the installed example configuration, and
the installed `remora run` runs a driver-API program through it (the CPU test driver
stands in for a GPU). Issue 38: the unit, the example's header and the man pages name one
configuration file; the docs they point at are installed; a sysusers.d file makes the
unit's user; the example as it is starts with one warning that every client is refused.

usage: install.py MESON BUILD_ROOT DRIVER PROGRAM IMAGE
"""
import os
import re
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

    # One configuration path: the unit's, in the example's header and the man pages; the
    # docs the man pages and the example point at are installed; the unit's user has a
    # sysusers.d file.
    config = re.search(r"^ExecStart=\S+ --config (\S+)$", unit, re.M)
    config = config.group(1) if config else "missing"
    check(config.endswith("/remora/remorad.conf"), f"the unit reads SYSCONFDIR/remora/remorad.conf: {config}")
    example = open(confs[0]).read() if confs else ""
    check(f"#   {config}\n" in example and os.path.dirname(confs[0] if confs else "")[len(stage):] ==
          os.path.dirname(config), f"the example, installed beside it, names the unit's file {config}")
    sysusers = [f for f in files.get("remora.conf", []) if "/sysusers.d/" in f]
    m = re.search(r"^User=(\S+)$", unit, re.M)
    check(len(sysusers) == 1 and m and f"u {m.group(1)} " in open(sysusers[0]).read(),
          f"a sysusers.d file makes the unit's user: {sysusers}")
    docs = {n: [f for f in files.get(n, []) if "/doc/remora/" in f] for n in ("configuration.md", "operations.md")}
    check(all(len(v) == 1 for v in docs.values()), f"the docs are installed: {docs}")
    named = set(re.findall(r"(/\S+/doc/remora)/", unit + example))
    if shutil.which("scdoc"):
        for page in ("remorad.8", "remorad.conf.5", "remora.1"):
            src = [f for f in files.get(page, []) if "/man" in f]
            text = open(src[0]).read().replace("\\&", "") if src else ""  # roff's zero-width marks
            named |= set(re.findall(r"(/[^\s\\]+/doc/remora)/", text))
            if page != "remora.1":
                check(config in text, f"{page} names the unit's file {config}")
            check("docs/configuration.md" not in text, f"{page} points at no uninstalled file")
    check(named and all(os.path.isfile(stage + d + "/configuration.md") for d in named),
          f"the unit, the example and the man pages point at the installed docs: {named}")

    if bins["remora"] and bins["remorad"] and confs:
        # The example as it is refuses every client, and says so once at start.
        ready = os.path.join(stage, "addr-example")
        log = os.path.join(stage, "example.log")
        with open(log, "w") as f:
            d = subprocess.Popen([remorad, "--config", confs[0], "--listen", "tcp://127.0.0.1:0", "--driver", driver,
                                  "--ready-file", ready], env=env, stderr=f)
        try:
            check(wait_for(lambda: os.path.exists(ready) and open(ready).read().strip(), timeout=20),
                  "the installed remorad starts from the example as it is")
        finally:
            stop_process(d)
        said = [line for line in open(log) if "every client will be refused" in line]
        check(len(said) == 1 and "[tenant NAME]" in said[0] and "allow_anonymous = yes" in said[0],
              f"... and warns once that it refuses every client, and how to serve: {said}")

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
