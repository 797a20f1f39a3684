#!/usr/bin/env python3
"""The NVML shim (libnvidia-ml.so.1 beside the client library): a program that dlopens NVML
by name, run through `remora run` on the test driver, sees the GPUs the client sees
(count, name and UUID as `remora status` gives them), memory as its quota allows
(client_memory_limit), itself as the GPU's one process once it holds memory, and
NVML_ERROR_NOT_SUPPORTED for what the shim does not answer (a generated stub) and for
what only the host's NVML knows (absent here).

usage: nvml_shim.py REMORA REMORAD DRIVER NVML_QUERY
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from verdict import check, failures  # noqa: E402
from remorad_fixture import Daemon  # noqa: E402

remora, remorad, driver, query = sys.argv[1:5]
ENV = {k: v for k, v in os.environ.items() if not k.startswith("REMORA_")}
MiB = 1 << 20
NOT_SUPPORTED, INVALID_ARGUMENT, NOT_FOUND, INSUFFICIENT_SIZE, UNINITIALIZED, TIMEOUT = 3, 2, 6, 7, 1, 10


def run_query(d, *args):
    p = subprocess.run([remora, "run", "--server", d.server, "--", query, *args], capture_output=True, text=True,
                       timeout=60, env=ENV)
    check(p.returncode == 0, f"nvml_query exits 0 ({p.returncode}): {p.stderr.strip()[-500:]}")
    out = {}
    for line in p.stdout.splitlines():
        k, _, v = line.partition("=")
        out.setdefault(k, v)
        if k.endswith(".process"):
            out[k] = v
    return out


def status(d):
    p = subprocess.run([remora, "status", "--server", d.server, "--json"], capture_output=True, text=True,
                       timeout=30, env=ENV)
    return json.loads(p.stdout)


with tempfile.TemporaryDirectory() as tmp:
    d = Daemon(remorad, driver, tmp, "quota", "client_memory_limit = 64M\n")
    try:
        st = status(d)
        out = run_query(d, "16")
        gpus = st["gpus"]
        check(out.get("count") == str(len(gpus)), f"count {out.get('count')} is the daemon's {len(gpus)}")
        check(out.get("gpu0.name") == gpus[0]["name"], f"name {out.get('gpu0.name')!r}")
        check(out.get("gpu0.uuid") == gpus[0]["uuid"], f"uuid {out.get('gpu0.uuid')!r}")
        check(out.get("gpu0.lookups") == "agree", "handles by index, UUID and PCI bus id agree")
        check(out.get("gpu0.bus_id", "").count(":") == 2, f"PCI bus id {out.get('gpu0.bus_id')!r}")
        check(int(out.get("cuda_driver", 0)) >= 12000, f"CUDA driver version {out.get('cuda_driver')}")
        check(out.get("before.total") == str(64 * MiB), f"memory.total is the client's quota ({out.get('before.total')})")
        check(out.get("before.v2_total") == str(64 * MiB), "memory info v2 agrees")
        check(int(out.get("before.free", -1)) <= 64 * MiB, "memory.free within the quota")
        check(out.get("before.processes") == "0", f"no process before a context ({out.get('before.processes')})")
        check(out.get("after.total") == str(64 * MiB), "memory.total stays the quota")
        used = int(out.get("after.used", 0))
        check(16 * MiB <= used <= 64 * MiB, f"memory.used counts the 16 MiB held ({used})")
        check(int(out.get("after.free", -1)) == 64 * MiB - used, "free + used = total")
        check(out.get("after.processes") == "1", f"the client is the one process ({out.get('after.processes')})")
        pid, _, held = out.get("after.process", ":").partition(":")
        check(pid == out.get("pid") and int(held or 0) >= 16 * MiB, f"process {out.get('after.process')}")
        # Not answered: a generated stub, and what only a host NVML tells.
        check(int(out.get("private.size", 0)) > 648, f"nvidia-smi's private table is there ({out.get('private.size')})")
        check(out.get("private.by_index") == "agrees", "its slot 81 finds the device by index")
        check(out.get("private.processes_rc") == "0" and out.get("private.processes") == "1" and
              out.get("private.process", "").startswith(out.get("pid", "?") + ":nvml_query"),
              f"its slot 213 lists this client ({out.get('private.process')})")
        check(out.get("private.other_table_rc") == str(NOT_SUPPORTED), "another private table: NOT_SUPPORTED")
        check(out.get("event_set_rc") == "0" and out.get("event_free_rc") == "0", "an event set is made and freed")
        check(out.get("event_types_rc") == "0" and out.get("event_types") == "0", "no event type is supported")
        check(out.get("register_none_rc") == "0" and out.get("register_xid_rc") == str(NOT_SUPPORTED),
              f"registering no type succeeds, Xid events NOT_SUPPORTED ({out.get('register_xid_rc')})")
        check(out.get("event_wait_rc") == str(TIMEOUT), f"a wait times out ({out.get('event_wait_rc')})")
        check(out.get("mig_mode_rc") == "0" and out.get("mig_mode") == "0/0", f"MIG disabled ({out.get('mig_mode')})")
        check(out.get("mig_devices_rc") == "0" and out.get("mig_devices") == "0", "no MIG devices")
        check(out.get("gpu0.fan_rc") == str(NOT_SUPPORTED), f"fan speed: NOT_SUPPORTED ({out.get('gpu0.fan_rc')})")
        check(out.get("gpu0.temperature_v0_rc") == "25", f"TemperatureV of an unknown struct version: ARGUMENT_VERSION_MISMATCH ({out.get('gpu0.temperature_v0_rc')})")
        for k in ("gpu0.utilization_rc", "gpu0.temperature_rc", "gpu0.temperature_v_rc", "driver_version_rc"):
            check(out.get(k) == str(NOT_SUPPORTED), f"{k}: NOT_SUPPORTED without a host NVML ({out.get(k)})")
        check(out.get("gpu0.short_name_rc") == str(INSUFFICIENT_SIZE), "a short name buffer: INSUFFICIENT_SIZE")
        check(out.get("bad_index_rc") == str(INVALID_ARGUMENT), "an index past the count: INVALID_ARGUMENT")
        check(out.get("unknown_uuid_rc") == str(NOT_FOUND), "an unknown UUID: NOT_FOUND")
        check(out.get("error_string_3") == "Not Supported", "nvmlErrorString")
        check(out.get("shutdown_again_rc") == str(UNINITIALIZED), "a second nvmlShutdown: UNINITIALIZED")
    finally:
        d.stop()
    # Without a quota, memory.total is the device's.
    d = Daemon(remorad, driver, tmp, "plain", "")
    try:
        total = status(d)["gpus"][0]["total"]
        out = run_query(d, "1")
        check(out.get("before.total") == str(total), f"no quota: memory.total is the GPU's ({out.get('before.total')})")
    finally:
        d.stop()
sys.exit(1 if failures else 0)
