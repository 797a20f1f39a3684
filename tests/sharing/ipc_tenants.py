#!/usr/bin/env python3
"""CUDA IPC handles across the boundaries a remorad keeps (docs/architecture.md, "CUDA IPC"),
on the CPU test driver, with tests/programs/drv_ipc's export and import modes:

  - between two clients of one tenant a handle opens, and the memory stays for the importer
    when the exporter frees it (the driver frees it when the importer closes it); once
    freed by its exporter it opens no more; the same with migratable_memory, whose memory
    is a mapping of the worker's window
  - a handle of another tenant (a worker of its own, or tenant_isolation = shared), of
    another remorad, or garbage or forged bytes: CUDA_ERROR_INVALID_HANDLE, and the daemon's
    log says why

usage: ipc_tenants.py REMORAD DRIVER REMORA DRV_IPC IMAGE
"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from verdict import check, conclude  # noqa: E402
import remorad_fixture  # noqa: E402
from remorad_fixture import wait_for  # noqa: E402

remorad, driver, remora, drv_ipc, image = sys.argv[1:6]
started = []

TENANTS = "[tenant alpha]\ntoken = alpha-secret\n[tenant beta]\ntoken = beta-secret\n"


def run(d, token, *args):
    """drv_ipc IMAGE ARGS... through d, as a client of token's tenant; stdin and stdout piped."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("REMORA_")}
    env["REMORA_TOKEN"] = token
    p = subprocess.Popen([remora, "run", "--server", d.server, "--", drv_ipc, image, *args], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    started.append(p)
    return p


def line(p):
    return p.stdout.readline().strip()


def exporter(d, token):
    """Starts an exporter: (process, its memory handle); its event handle in p.event."""
    p = run(d, token, "export")
    mem, p.event = line(p).split()[-1], line(p).split()[-1]
    return p, mem


def importer(d, token, handle, event=None):
    """Starts an importer: (process, its "open" result, its first checksum or None); with an
    event handle, that it opened the event and recorded it."""
    p = run(d, token, "import", handle, *([event] if event else []))
    opened = line(p)
    if event and opened == "open CUDA_SUCCESS":
        p.event_opened = line(p)
    return p, opened, (line(p) if opened == "open CUDA_SUCCESS" else None)


def free_memory(d):
    p = run(d, "alpha-secret", "meminfo")
    out, _ = p.communicate(timeout=30)
    return int(out.split()[-1]) if p.returncode == 0 and out.strip() else None


def import_once(d, token, handle):
    p, opened, _ = importer(d, token, handle)
    p.stdin.close()
    p.wait(timeout=30)
    return opened


def logged(d, text):
    return wait_for(lambda: text in d.text(), timeout=5)


def one_tenant_and_process_isolation(tmp, window=False):
    # window: migratable_memory, whose cuMemAlloc maps memory in the worker's window: shared
    # as it is, it becomes the worker's when its exporter lets go while it is open elsewhere.
    d = remorad_fixture.Daemon(remorad, driver, tmp, "ipc-window" if window else "ipc-process",
                               "tenant_isolation = process\n" + ("migratable_memory = yes\n" if window else "") + TENANTS)
    try:
        before = free_memory(d)
        exp, handle = exporter(d, "alpha-secret")
        check(len(handle) == 128 and len(exp.event) == 128, f"alpha's client exports memory and an event ({handle[:16]}...)")
        imp, opened, first = importer(d, "alpha-secret", handle, exp.event)
        check(opened == "open CUDA_SUCCESS" and first, f"another client of alpha opens the memory ({opened})")
        check(imp.event_opened == "event CUDA_SUCCESS" and line(imp) == "record CUDA_SUCCESS",
              f"and the event, which it records ({imp.event_opened})")
        check(import_once(d, "beta-secret", handle) == "open CUDA_ERROR_INVALID_HANDLE", "a client of beta cannot")
        check(logged(d, "exported in another worker of this remorad (its token names tenant alpha)"),
              "the log says the handle is of another tenant's worker")

        exp.stdin.write("free\n")
        exp.stdin.flush()
        check(line(exp) == "free CUDA_SUCCESS", "the exporter frees the memory while it is open elsewhere")
        check(logged(d, "which another client has open (CUDA IPC): the memory stays until it closes it"),
              "the log says the memory stays for the importer")
        exp.stdin.write("destroy\n")
        exp.stdin.flush()
        check(line(exp) == "destroy CUDA_SUCCESS", "the exporter destroys the event while it is open elsewhere")
        imp.stdin.write("again\n")
        imp.stdin.flush()
        check(line(imp) == first, "the importer still reads the same bytes")
        check(line(imp) == "record CUDA_SUCCESS", "and still records the event")
        check(import_once(d, "alpha-secret", handle) == "open CUDA_ERROR_INVALID_HANDLE",
              "once freed by its exporter, the handle opens no more")
        check(logged(d, "its exporter freed it"), "the log says its exporter freed it")
        imp.stdin.close()
        check(line(imp) == "close CUDA_SUCCESS" and line(imp) == "destroy CUDA_SUCCESS" and imp.wait(timeout=30) == 0,
              "the importer closes the memory and destroys the event")
        exp.stdin.close()
        check(exp.wait(timeout=30) == 0, "the exporter leaves cleanly")
        check(wait_for(lambda: free_memory(d) == before, timeout=10),
              f"then the memory is freed: the device has as much free as before ({free_memory(d)}, {before})")

        # An importer that goes away without closing: the memory goes once the exporter frees it.
        exp, handle = exporter(d, "alpha-secret")
        imp, opened, _ = importer(d, "alpha-secret", handle)
        imp.kill()
        imp.wait()
        exp.stdin.write("free\n")
        exp.stdin.flush()
        check(opened == "open CUDA_SUCCESS" and line(exp) == "free CUDA_SUCCESS",
              "an importer killed while holding memory, its exporter frees it")
        exp.stdin.close()
        exp.wait(timeout=30)
        check(wait_for(lambda: free_memory(d) == before, timeout=10), "and the memory is freed")

        check(import_once(d, "alpha-secret", "00" * 64) == "open CUDA_ERROR_INVALID_HANDLE", "garbage is refused")
        check(logged(d, "not a handle a Remora client exported"), "the log says it is no Remora handle")
        exp2, handle2 = exporter(d, "alpha-secret")
        forged = handle2[:80] + ("00" if handle2[80:82] != "00" else "11") + handle2[82:]  # a byte of the secret
        check(import_once(d, "alpha-secret", forged) == "open CUDA_ERROR_INVALID_HANDLE", "a forged handle is refused")
        check(logged(d, "its secret does not match"), "the log says its secret does not match")
        exp2.stdin.close()
        check(exp2.wait(timeout=30) == 0, "an exporter leaves cleanly")
        if window:
            check(logged(d, "migratable memory: device addresses from"), "the memory shared was the window's")
    finally:
        d.stop()


def shared_isolation(tmp):
    d = remorad_fixture.Daemon(remorad, driver, tmp, "ipc-shared", "tenant_isolation = shared\n" + TENANTS)
    try:
        exp, handle = exporter(d, "alpha-secret")
        check(import_once(d, "beta-secret", handle) == "open CUDA_ERROR_INVALID_HANDLE",
              "shared isolation: a client of beta cannot open alpha's handle in their one worker")
        check(logged(d, "exported by a client of tenant alpha, this client is of tenant beta"),
              "shared isolation: the log says which tenants")
        check(import_once(d, "alpha-secret", handle) == "open CUDA_SUCCESS", "shared isolation: alpha's client can")
        exp.stdin.close()
        exp.wait(timeout=30)
    finally:
        d.stop()


def two_daemons(tmp):
    d1 = remorad_fixture.Daemon(remorad, driver, tmp, "ipc-one", TENANTS)
    d2 = remorad_fixture.Daemon(remorad, driver, tmp, "ipc-two", TENANTS)
    try:
        exp, handle = exporter(d1, "alpha-secret")
        check(import_once(d2, "alpha-secret", handle) == "open CUDA_ERROR_INVALID_HANDLE",
              "a handle of another remorad is refused, though of the same tenant")
        check(logged(d2, "exported through another remorad"), "the log says it is of another remorad")
        exp.stdin.close()
        exp.wait(timeout=30)
    finally:
        d1.stop()
        d2.stop()


def main():
    tmp = tempfile.mkdtemp(prefix="remora-ipc-")
    try:
        one_tenant_and_process_isolation(tmp)
        one_tenant_and_process_isolation(tmp, window=True)
        shared_isolation(tmp)
        two_daemons(tmp)
    finally:
        status = conclude(started, tmp)
    return status


if __name__ == "__main__":
    sys.exit(main())
