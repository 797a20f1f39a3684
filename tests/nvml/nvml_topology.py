#!/usr/bin/env python3
"""The NVML shim's topology answers (issue 39): what NCCL and `nvidia-smi topo` ask of two
GPUs and their links (P2P status by every caps index, common ancestor, nearest GPUs, NVLink
state, version, capability and far end, NUMA node) come from the GPU host's NVML through
the daemon, by the client's device ordinals; CPU and memory affinity are the client's own
(every CPU it may run on), and a CPU of it sees every GPU (nvmlSystemGetTopologyGpuSet). The
host's NVML is tests/nvml/fake_host_nvml.c, of a lopsided topology, so that an answer of the
wrong GPU shows: with REMORA_VISIBLE_DEVICES=1,0 the client's GPU 0 is the host's GPU 1.

usage: nvml_topology.py REMORA REMORAD DRIVER NVML_TOPOLOGY FAKE_HOST_NVML
"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from verdict import check, failures  # noqa: E402
from remorad_fixture import Daemon  # noqa: E402

remora, remorad, driver, query, fake = sys.argv[1:6]
NOT_SUPPORTED, OK, P2P_NOT_SUPPORTED, NODE, INTERNAL = 3, 0, 5, 40, 0  # NVML's values
BUS = {0: "00000000:19:00.0", 1: "00000000:1A:00.0"}  # the test driver's PCI buses


def run(d, visible=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("REMORA_")}
    if visible:
        env["REMORA_VISIBLE_DEVICES"] = visible
    p = subprocess.run([remora, "run", "--server", d.server, "--", query], capture_output=True, text=True,
                       timeout=60, env=env)
    check(p.returncode == 0, f"nvml_topology exits 0 ({p.returncode}): {p.stderr.strip()[-500:]}")
    return dict(line.split("=", 1) for line in p.stdout.splitlines() if "=" in line)


def expect(out, host, what):
    """The answers for client GPU i, which is host GPU host[i]."""
    check(out.get("count") == "2", f"{what}: two GPUs ({out.get('count')})")
    for i in (0, 1):
        h, j = host[i], 1 - i
        for c in range(5):
            want = P2P_NOT_SUPPORTED if c == 4 and h == 1 else OK  # PCI P2P: host 1 -> 0 not supported
            check(out.get(f"p2p.{i}.{j}.{c}") == str(want),
                  f"{what}: P2P {i} -> {j} caps {c} is the host's {h} -> {1 - h} ({out.get(f'p2p.{i}.{j}.{c}')})")
        check(out.get(f"p2p.{i}.{i}.0") == f"rc={NOT_SUPPORTED}",
              f"{what}: P2P of a GPU with itself, as the host's NVML refuses")
        check(out.get(f"ancestor.{i}.{j}") == str(NODE) and out.get(f"ancestor.{i}.{i}") == str(INTERNAL),
              f"{what}: common ancestors ({out.get(f'ancestor.{i}.{j}')}, {out.get(f'ancestor.{i}.{i}')})")
        check(out.get(f"nearest.{i}") == str(j),
              f"{what}: the other GPU is nearest at NODE ({out.get(f'nearest.{i}')})")
        links = 4 if h == 0 else 2
        check(out.get(f"nvlinks.{i}") == str(links), f"{what}: GPU {i} has the host GPU {h}'s {links} links")
        check(out.get(f"nvlink.{i}.0") == f"0,4,0,1,0,{BUS[1 - h]}",
              f"{what}: link 0 of GPU {i}: version 4, P2P, to the other GPU's bus ({out.get(f'nvlink.{i}.0')})")
        check(out.get(f"nvlink-type.{i}.0") == "0,0",
              f"{what}: link 0 of GPU {i} ends at a GPU ({out.get(f'nvlink-type.{i}.0')})")
        check(out.get(f"numa.{i}") == str(h),
              f"{what}: NUMA node of GPU {i} is the host GPU {h}'s ({out.get(f'numa.{i}')})")
        check(out.get(f"affinity.{i}") == "0,0,0,1,1",
              f"{what}: CPU and memory affinity, the client's ({out.get(f'affinity.{i}')})")
    check(out.get("gpuset") == "0,1", f"{what}: a CPU of the client sees both GPUs ({out.get('gpuset')})")


with tempfile.TemporaryDirectory() as tmp:
    d = Daemon(remorad, driver, tmp, "topology", f"host_nvml = {fake}\n", env={"REMORA_TESTDRIVER_DEVICES": "2"})
    try:
        expect(run(d), {0: 0, 1: 1}, "both GPUs")
        expect(run(d, "1,0"), {0: 1, 1: 0}, "REMORA_VISIBLE_DEVICES=1,0")
    finally:
        d.stop()
    d = Daemon(remorad, driver, tmp, "no-nvml", "host_nvml = \n", env={"REMORA_TESTDRIVER_DEVICES": "2"})
    try:
        out = run(d)
        check(out.get("p2p.0.1.0") == f"rc={NOT_SUPPORTED}" and out.get("numa.0") == f"rc={NOT_SUPPORTED}" and
              out.get("nvlink.0.0") == f"rc={NOT_SUPPORTED}",
              f"without a host NVML: NOT_SUPPORTED ({out.get('p2p.0.1.0')}, {out.get('numa.0')})")
    finally:
        d.stop()
sys.exit(1 if failures else 0)
