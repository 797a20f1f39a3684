#!/bin/sh
# Sets up a fresh machine, builds Remora and runs every CI-safe test (no GPU needed).
# Ends with one line "N passed, N failed, N skipped"; exits non-zero when a test failed.
# Arguments go to meson test (e.g. --suite unit).
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
python3 scripts/test_summary.py build/meson-logs
exit "$status"
