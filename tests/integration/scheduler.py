#!/usr/bin/env python3
"""The scheduler integration files (issue 18, docs/integration.md): SLURM's TaskProlog
(dist/slurm/task-prolog.sh) prints, for a job that asks for remote GPUs, the exports that
put Remora's client library first and name the pool; a task started with them runs an
unmodified CUDA program through remorad (the CPU test driver stands in for a GPU), and a
job that did not ask gets nothing. The Kubernetes manifests (dist/kubernetes) parse and
name what docs/integration.md says they do.

usage: scheduler.py SOURCE_ROOT CLIENT_LIB_DIR REMORAD DRIVER PROGRAM IMAGE
"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from verdict import check, failures  # noqa: E402
from remorad_fixture import Daemon, wait_for  # noqa: E402

root, libdir, remorad, driver, program, image = sys.argv[1:7]
prolog = os.path.join(root, "dist", "slurm", "task-prolog.sh")
base = {k: v for k, v in os.environ.items() if not k.startswith(("REMORA_", "SLURM_")) and k != "LD_LIBRARY_PATH"}

with tempfile.TemporaryDirectory() as tmp:
    d = Daemon(remorad, driver, tmp, "slurm", "")
    try:
        conf = os.path.join(tmp, "slurm.env")
        with open(conf, "w") as f:
            f.write(f"REMORA_SERVER={d.server}\nREMORA_CLIENT_LIB={libdir}\n")
        env = dict(base, REMORA_SLURM_ENV=conf, SLURM_JOB_COMMENT="remora")
        p = subprocess.run(["sh", prolog], capture_output=True, text=True, env=env, timeout=30)
        exports = dict(line[len("export "):].split("=", 1) for line in p.stdout.splitlines()
                       if line.startswith("export "))
        check(p.returncode == 0 and exports.get("LD_LIBRARY_PATH", "").startswith(libdir) and
              exports.get("REMORA_SERVER") == d.server, f"the prolog exports the library and the server: {exports}")
        task = dict(base, **exports)
        r = subprocess.run([program, image, "all"], capture_output=True, text=True, env=task, timeout=120)
        check(r.returncode == 0, f"a task with those exports runs a CUDA "
              f"program through remorad, unmodified ({r.stderr.strip()[-300:]})")
        p = subprocess.run(["sh", prolog], capture_output=True, text=True,
                           env=dict(base, REMORA_SLURM_ENV=conf), timeout=30)
        check(p.returncode == 0 and not p.stdout.strip(), "a job that did not ask for remote GPUs gets nothing")
        check(wait_for(lambda: "closed: released" in d.text(), timeout=30),
              "the task's session was served and released by remorad")
    finally:
        d.stop()

try:
    import yaml
except ImportError:
    yaml = None
if yaml:
    kinds = []
    for name in ("remorad-daemonset.yaml", "client-pod.yaml"):
        with open(os.path.join(root, "dist", "kubernetes", name)) as f:
            kinds += [(doc["kind"], doc["metadata"]["name"]) for doc in yaml.safe_load_all(f) if doc]
    check(kinds == [("ConfigMap", "remorad-config"), ("DaemonSet", "remorad"), ("Pod", "cuda-through-remora")],
          f"the Kubernetes manifests parse: {kinds}")
else:
    print("scheduler: python3-yaml is not installed; the manifests were not parsed")
sys.exit(1 if failures else 0)
