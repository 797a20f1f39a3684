#!/usr/bin/env python3
"""A client's fault never takes a GPU out of service (issue 32; docs/sharing.md, "Faults").
One kind of fault a run, with tenants alpha (the faulting one) and beta:

  address     faultKernel on a bad pointer: CUDA_ERROR_ILLEGAL_ADDRESS
  assert      assertKernel: a device-side assert, CUDA_ERROR_ASSERT
  unreported  faultKernel, and the faulting program exits before any call reports it:
              the worker finds the fault itself
  departing   as unreported, but the fault comes 300 ms after the program has gone, and
              the newcomer starts at once: it must not join the worker the departed
              program's work is about to break (remorad waits for that work first)
  timeout     no fault: alpha's kernel runs past alpha's kernel_time_limit (2 s): the worker
              is ended, which ends the kernel; its client and the bystander each get a
              line saying why and a failed call, the newcomer a fresh worker
  partial     no fault: the capabilities a remote client has only in part (concurrent
              managed access, pageable memory access, host-native atomics, host pointers
              of registered memory) are reported absent, so programs take their other path;
              a program that writes managed memory from the host while a kernel writes the
              same bytes gets an error from its synchronize

Each run: a bystander of alpha computes and waits; a client of beta computes throughout;
alpha's client faults. Then:
  - the faulting client gets the fault's error, and again at its next call (sticky);
  - a newcomer of alpha, started right after, is served by a fresh worker (timed);
  - the bystander's next calls fail with the same error, never a hang or a success, and
    its stderr has one line naming the cause (the program, its pid, the error);
  - beta's results are bit-identical to a run with no fault;
  - the faulted worker exits once its last client has left; remorad serves on.

Runs on the CPU test driver in CI (usage: fault_suite.py KIND REMORAD DRIVER REMORA PROBE
IMAGE) and on a GPU with DRIVER "real" (scripts/gpu-suite.sh); every bound on time is wide
for a loaded machine, and the newcomer's time is printed for the GPU suite's record.
"""
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from verdict import check, failures  # noqa: E402
from remorad_fixture import Daemon, alive, wait_for  # noqa: E402

kind, remorad, driver, remora, probe, image = sys.argv[1:7]
ERRORS = {"address": "CUDA_ERROR_ILLEGAL_ADDRESS", "assert": "CUDA_ERROR_ASSERT",
          "unreported": "CUDA_ERROR_ILLEGAL_ADDRESS", "departing": "CUDA_ERROR_ILLEGAL_ADDRESS",
          "timeout": "CUDA_ERROR_DEVICE_UNAVAILABLE"}
CONFIG = "[tenant alpha]\ntoken = alpha-secret\n[tenant beta]\ntoken = beta-secret\n"
# FAULT_SUITE_ISOLATION=mps runs the tenants as NVIDIA MPS clients (on a GPU host), to
# measure what MPS contains: there a fatal fault reaches every client of the GPU, and the
# checks on beta say so.
# FAULT_SUITE_MPS_CONTROL names a stand-in control program for the test driver (CI).
MPS = os.environ.get("FAULT_SUITE_ISOLATION") == "mps"
if os.environ.get("FAULT_SUITE_ISOLATION"):
    CONFIG = f"tenant_isolation = {os.environ['FAULT_SUITE_ISOLATION']}\n" + CONFIG
if os.environ.get("FAULT_SUITE_MPS_CONTROL"):
    CONFIG = f"mps_control = {os.environ['FAULT_SUITE_MPS_CONTROL']}\n" + CONFIG
# Under MPS a faulted worker ends at once (its server takes no new client before), and its
# clients get a line naming MPS and, from then on, CUDA_ERROR_DEVICE_UNAVAILABLE.
MPS_LINE = "broke every client of this GPU's MPS server"
ROUNDS = "40"


def client(d, token, *args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("REMORA_")}
    env["REMORA_TOKEN"] = token
    return subprocess.Popen([remora, "run", "--server", d.server, "--", probe, *args], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def finish(p, timeout=120):
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        err += "\n(killed: it hung)"
    return p.returncode, out.split(), err


def partial(d):
    rc, out, err = finish(client(d, "alpha-secret", "capabilities", image))
    values = dict(zip(out[0::2], out[1::2]))
    check(rc == 0 and len(values) == 7, f"the capabilities are answered ({out} {err.strip()[-300:]})")
    check(all(v == "0" for v in values.values()), f"each is reported absent ({values})")
    # A program that does it anyway gets an error, not a wrong answer.
    rc, out, err = finish(client(d, "alpha-secret", "concurrent", image))
    check(out == ["CUDA_ERROR_NOT_SUPPORTED"] and "both wrote" in err,
          f"host and GPU writing the same managed bytes at once: an error ({out} {err.strip()[-300:]})")


def main():
    want = ERRORS.get(kind)
    with tempfile.TemporaryDirectory() as tmp:
        real = driver == "real"
        config = CONFIG.replace("[tenant beta]", "kernel_time_limit = 2\n[tenant beta]") if kind == "timeout" else CONFIG
        d = Daemon(remorad, None if real else driver, tmp, "faults-" + kind, config)
        try:
            if kind == "partial":
                return partial(d) or (1 if failures else 0)
            rc, alone, err = finish(client(d, "beta-secret", "compute", image, ROUNDS))
            check(rc == 0 and len(alone) == 1, f"beta computes alone ({err.strip()[-300:]})")
            started = time.monotonic()
            rc, _, err = finish(client(d, "alpha-secret", "compute", image, "2"))
            print(f"newcomer_before_fault_s {time.monotonic() - started:.3f}")
            check(rc == 0, f"alpha's client computes before the fault ({err.strip()[-300:]})")
            bystander = client(d, "alpha-secret", "bystander", image)
            check(wait_for(lambda: bystander.stdout.readline().strip() == "ready", timeout=60) is True,
                  "alpha's bystander computed and waits")
            old = d.workers().get("alpha")
            beta = client(d, "beta-secret", "compute", image, ROUNDS)

            started = time.monotonic()
            rc, out, err = finish(client(d, "alpha-secret", "fault", image, "long" if kind == "timeout" else kind))
            if kind == "timeout":
                took = time.monotonic() - started
                check(out[:1] == [want] and took < 15, f"the long kernel's synchronize fails after {took:.1f} s, "
                      f"not its 20 s ({out} {err.strip()[-300:]})")
                check("ran longer than its tenant's kernel_time_limit" in err, f"its client is told why ({err.strip()[-300:]})")
            elif kind == "departing":
                check(rc == 0 and out == ["launched"], f"alpha's client launched a late fault and left ({out} {err})")
            elif kind == "unreported":
                check(rc == 0 and out == ["launched"], f"alpha's client launched a fault and left ({out} {err})")
                check(wait_for(lambda: "broke this worker's GPU contexts" in d.text(), timeout=30),
                      "the worker found the fault no call reported")
            else:
                check(out == [want, want], f"the faulting client gets {want}, sticky ({out} {err.strip()[-300:]})")
            started = time.monotonic()
            rc, newcomer, err = finish(client(d, "alpha-secret", "compute", image, "2"))
            took = time.monotonic() - started
            print(f"newcomer_after_fault_s {took:.3f}")
            check(rc == 0 and len(newcomer) == 1, f"a newcomer of alpha right after is served ({err.strip()[-300:]})")
            check(took < 20, f"promptly ({took:.1f} s)")
            fresh = d.workers().get("alpha")
            check(fresh != old, f"by a fresh worker ({fresh}; the faulted one {old})")

            if MPS:
                check(wait_for(lambda: old is not None and not alive(old), timeout=10),
                      "under MPS the faulted worker ends with its bystander still connected")
            bystander.stdin.write("go\n")
            bystander.stdin.flush()
            rc, out, err = finish(bystander)
            if MPS:
                gone = "CUDA_ERROR_DEVICE_UNAVAILABLE"
                calls = out[1:] if out[:1] == ["ready"] else out
                check(calls == [gone, gone], f"the bystander's next calls fail with {gone}: its worker has ended ({out})")
                check(err.count(MPS_LINE) == 1, f"one line on its stderr names MPS ({err.strip()[-400:]})")
            else:
                check(out == ["ready", want, want] or out == [want, want],
                      f"the bystander's next calls fail with {want}, sticky ({out})")
                lines = [ln for ln in err.splitlines() if "broken by error" in ln or "kernel_time_limit" in ln]
                check(len(lines) == 1 and want in lines[0] and re.search(r"program \S+ \(pid \d+", lines[0])
                      if kind not in ("unreported", "departing", "timeout") else len(lines) == 1 and (
                          want in lines[0] or kind == "timeout"),
                      f"one line on its stderr names the cause ({err.strip()[-400:]})")

            rc, out, err = finish(beta)
            if MPS:  # on a GPU the fault reaches beta through MPS; the test driver has no MPS
                check(rc == 0 and out == alone or MPS_LINE in err,
                      f"beta's results are bit-identical to a run alone, or it is told MPS's fault reached it "
                      f"({out} {alone} {err.strip()[-300:]})")
                print(f"beta_under_mps {'unharmed' if rc == 0 and out == alone else 'reached by the fault'}")
            else:
                check(rc == 0 and out == alone, f"beta's results are bit-identical to a run alone ({out} {alone})")
            check(wait_for(lambda: old is not None and not alive(old), timeout=30),
                  "the faulted worker exits once its clients have left")
            check(d.proc.poll() is None, "remorad is still running")
        finally:
            d.stop()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
