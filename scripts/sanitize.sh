#!/bin/sh
# Builds Remora with AddressSanitizer and UndefinedBehaviorSanitizer (build-asan/) and runs
# test suites under the meson test setup `sanitize` (tests/meson.build; docs/testing.md,
# "Sanitizers"): the sanitizer runtimes preloaded into every test process (programs built
# by nvcc are not instrumented but load the instrumented client library), any report
# ending its process, and ASan's reports, from any process, failing the test
# sanitizer-reports that runs alone after the others.
#   scripts/sanitize.sh [SUITE ...]
# Default suites: what CI runs (scripts/test.sh): remote (the programs through Remora,
# robustness, faults, liveness, metrics), sharing, tls, shm, rdma (on tests/fake_rdma) and the
# fuzz corpora.
# Environment: SANITIZE_BUILD (default build-asan), JOBS (ninja -j; default ninja's).
# Exit status: meson test's; its log is SANITIZE_BUILD/meson-logs/testlog-sanitize.json.
set -eu
cd "$(dirname "$0")/.."
scripts/setup.sh
cuda=${CUDA_HOME:-/usr/local/cuda}
build=${SANITIZE_BUILD:-build-asan}
if [ ! -f "$build/build.ninja" ]; then
	meson setup "$build" -Dtoolkit_dir="$cuda" -Db_sanitize=address,undefined -Db_lundef=false
fi
ninja -C "$build" ${JOBS:+-j "$JOBS"}
suites=${*:-remote sharing tls shm rdma fuzz}
set -- --suite sanitize
for s in $suites; do set -- "$@" --suite "$s"; done
rm -f "$build"/meson-logs/testlog-sanitize*.json
exec meson test -C "$build" --setup sanitize --print-errorlogs "$@"
