#!/usr/bin/env python3
"""Prints the one line CI reads after `meson test`: "N passed, N failed, N skipped",
counted from the newest test log (testlog*.json) in LOGDIR.

usage: test_summary.py LOGDIR
Passed: OK and EXPECTEDFAIL; skipped: SKIP; failed: every other result (FAIL, ERROR,
TIMEOUT, INTERRUPT, UNEXPECTEDPASS). No log at all counts nothing.
"""
import glob
import json
import os
import sys


def main():
    logs = glob.glob(os.path.join(sys.argv[1], "testlog*.json"))
    passed = failed = skipped = 0
    if logs:
        with open(max(logs, key=os.path.getmtime)) as f:
            for line in f:
                if not line.strip():
                    continue
                result = json.loads(line).get("result")
                if result in ("OK", "EXPECTEDFAIL"):
                    passed += 1
                elif result == "SKIP":
                    skipped += 1
                else:
                    failed += 1
    print(f"{passed} passed, {failed} failed, {skipped} skipped")


if __name__ == "__main__":
    main()
