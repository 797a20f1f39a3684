#!/bin/sh
# Sets up a fresh machine, builds Remora and runs every CI-safe test (no GPU needed), then
# the sanitizer run: a second build (build-asan/, AddressSanitizer and UndefinedBehavior-
# Sanitizer) running the integration suites under the `sanitize` test setup
# (scripts/sanitize.sh; docs/testing.md, "Sanitizers").
# Ends with one line "N passed, N failed, N skipped" counting both runs; exits non-zero
# when a test of either failed.
# Arguments go to the first meson test (e.g. --suite unit), and then no sanitizer run is
# made; REMORA_CI_SANITIZE=no leaves it out too.
set -eu
cd "$(dirname "$0")/.."
scripts/setup.sh
cuda=${CUDA_HOME:-/usr/local/cuda}
if [ ! -f build/build.ninja ]; then
	meson setup build -Dtoolkit_dir="$cuda"
fi
ninja -C build
# meson test's own summary spans lines: CI reads this one.
rm -f build/meson-logs/testlog*.json
status=0
meson test -C build --print-errorlogs "$@" || status=$?
logs=build/meson-logs
if [ $# -eq 0 ] && [ "${REMORA_CI_SANITIZE:-yes}" != no ]; then
	start=$(date +%s)
	scripts/sanitize.sh || status=1
	echo "sanitize: $(($(date +%s) - start)) s (build and tests)"
	logs="$logs build-asan/meson-logs"
fi
python3 scripts/test_summary.py $logs
exit "$status"
