#!/usr/bin/env python3
"""Every fuzz target runs in CI: each tests/fuzz/fuzz_NAME.c is in fuzz_targets of
tests/fuzz/meson.build (which gives it the CI test fuzz-NAME over its corpus) and has a
non-empty seed corpus tests/fuzz/corpus/NAME/, and scripts/fuzz.sh runs it by default.

usage: check_targets.py FUZZ_DIR TEST_NAME...   (the test names meson defined)
"""
import os
import re
import sys

here, tests = sys.argv[1], set(sys.argv[2:])
failures = []
targets = sorted(m.group(1) for f in os.listdir(here) if (m := re.fullmatch(r"fuzz_(\w+)\.c", f)))
with open(os.path.join(here, "meson.build")) as f:
    table = f.read()
for t in targets:
    corpus = os.path.join(here, "corpus", t)
    if not re.search(rf"^\s*'{t}': {{'sources': [^\n]*'fuzz_{t}\.c'", table, re.M):
        failures.append(f"fuzz_{t}.c is not in fuzz_targets (tests/fuzz/meson.build)")
    if f"fuzz-{t}" not in tests:
        failures.append(f"no CI test fuzz-{t}")
    if not os.path.isdir(corpus) or not os.listdir(corpus):
        failures.append(f"no seed corpus {corpus}")
for line in failures:
    print("FAIL " + line)
print(f"{len(targets)} fuzz targets: {' '.join(targets)}")
sys.exit(1 if failures else 0)
