#!/usr/bin/env python3
"""Stream waits by a word the GPU writes (backend/gpu/stream_wait.h), on the CPU test driver,
where they are off by default (2 CPUs): with gpu_wait_spin_us set, programs that check
their results after every kind of wait still pass (threads of their own channels among
them, which turn words off), and the session logs show that words ended some waits; a
300 us kernel's wait ends by its word (within a few tries on a loaded machine); a wait
longer than the spin is ended by the driver's; a kernel's fault is reported; after the
broken context is reset the next client's waits use words again.

usage: stream_words.py REMORAD DRIVER REMORA PROBE PROBE_IMAGE PROGRAM_IMAGE DRV_PROGRAM...
"""
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from remorad_fixture import Daemon, wait_for  # noqa: E402
from verdict import check, failures  # noqa: E402

remorad, driver, remora, probe, probe_image, image = sys.argv[1:7]
programs = {os.path.basename(p): p for p in sys.argv[7:]}
ARGS = {"drv_thread_order": ["20"], "drv_thread_waits": ["50"], "drv_memcpy": ["64"], "drv_sleep": ["20000000"]}
WAITS = re.compile(r"session (\d+) \(.*\) closed: .*stream waits: (\d+) idle, (\d+) by word, (\d+) by the driver")


def run(d, argv, timeout=120):
    p = subprocess.run([remora, "run", "--server", d.server, "--", *argv], capture_output=True, text=True,
                       timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def waits_of_last(d, before):
    """(idle, word, driver) of the session that closed after the before-th closing line."""
    def closed():
        found = WAITS.findall(d.text())
        return found[before:] or None
    found = wait_for(closed, timeout=10)
    return tuple(int(x) for x in found[-1][1:]) if found else None


def closed_count(d):
    return len(WAITS.findall(d.text()))


def sleeps_ending_by_word(d, tries=8):
    """Runs a 300 us kernel until its one wait ends by its word, at most tries times: on a
    loaded machine the test driver's kernel thread can be kept off a core past the spin, so
    any one run may end in the driver's wait. Returns (ok, waits of the last run, stderr)."""
    waits, err = None, ""
    for _ in range(tries):
        before = closed_count(d)
        rc, out, err = run(d, [programs["drv_sleep"], image, "300000"])
        waits = waits_of_last(d, before)
        if rc != 0 or waits is None or sum(waits) != 1:
            return False, waits, err
        if waits[1] == 1:
            return True, waits, err
    return False, waits, err


def main():
    tmp = tempfile.mkdtemp(prefix="stream-words-")
    # spinning whatever the loaded machine's CPU pressure (transport/spin.h)
    d = Daemon(remorad, driver, tmp, "words", "gpu_wait_spin_us = 1000\n", env={"REMORA_SPIN_PRESSURE": "0"})
    try:
        # Any one wait may find its work done (a query answers) or outlast the spin on a
        # loaded machine; of the hundreds these programs make, some end by word.
        by_word = 0
        for name in ("drv_streams", "drv_thread_order", "drv_thread_waits", "drv_memcpy", "drv_hostfn", "drv_pinned", "drv_managed"):
            before = closed_count(d)
            rc, out, err = run(d, [programs[name], image, *ARGS.get(name, [])])
            check(rc == 0, f"{name} passes with waits by word ({err.strip()[-300:]})")
            waits = waits_of_last(d, before)
            check(waits is not None, f"{name}: its session logged how its waits ended {waits}")
            by_word += waits[1] if waits else 0
        check(by_word > 0, f"words ended some of their waits ({by_word})")
        # A 300 us kernel is still running when its synchronize is read, however slow the
        # machine, and ends within the 1 ms spin unless its thread is kept off the cores.
        ok, waits, err = sleeps_ending_by_word(d)
        check(ok, f"a wait for a 300 us kernel ends by its word {waits} ({err.strip()[-200:]})")

        # The spin (1 ms) runs out inside a 20 ms kernel: the driver's wait ends it.
        before = closed_count(d)
        rc, out, err = run(d, [programs["drv_sleep"], image, *ARGS["drv_sleep"]])
        waits = waits_of_last(d, before)
        check(rc == 0 and waits is not None and waits[2] > 0,
              f"a wait longer than the spin is ended by the driver's {waits} ({err.strip()[-200:]})")

        # A fault: the word is never written, and the driver's wait reports the error.
        before = closed_count(d)
        rc, out, err = run(d, [probe, "fault", probe_image])
        check(out.strip() == "CUDA_ERROR_ILLEGAL_ADDRESS",
              f"a faulting kernel's fault is reported to its synchronize ({out.strip()} {err.strip()[-200:]})")
        check(waits_of_last(d, before) is not None, "the faulting client's session has ended")
        ok, waits, err = sleeps_ending_by_word(d)
        check(waits is not None and len(d.workers()) == 1 and "a fresh worker serves" in d.text(),
              f"the next client works in a fresh worker's context ({err.strip()[-200:]})")
        check(ok, f"with words made in the new worker's context {waits}")
        check(d.proc.poll() is None, "remorad is still running")
    finally:
        d.stop()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
