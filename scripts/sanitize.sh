#!/bin/sh
# Builds Remora with AddressSanitizer and UndefinedBehaviorSanitizer (build-asan/) and runs
# test suites under them (default: the remote, sharing and pool suites: the daemon, the
# client library and the CLI on the test driver). Programs built by nvcc are not
# instrumented, so the sanitizer runtimes are preloaded into every process. Any report
# ends its process (a daemon's too, so its test fails) and is written to a file: a run
# passes when every test passes and no report was written.
#   scripts/sanitize.sh [SUITE ...]
set -eu
cd "$(dirname "$0")/.."
scripts/setup.sh
cuda=${CUDA_HOME:-/usr/local/cuda}
if [ ! -f build-asan/build.ninja ]; then
	meson setup build-asan -Dtoolkit_dir="$cuda" -Db_sanitize=address,undefined -Db_lundef=false
fi
ninja -C build-asan
reports=$(mktemp -d)
suites=${*:-remote sharing pool}
set --
for s in $suites; do set -- "$@" --suite "$s"; done
rc=0
LD_PRELOAD="$(cc -print-file-name=libasan.so) $(cc -print-file-name=libubsan.so)" \
ASAN_OPTIONS="detect_leaks=0:log_path=$reports/asan" \
UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
	meson test -C build-asan --print-errorlogs "$@" || rc=$?
# UBSan beside ASan writes to stderr whatever log_path says: look for it in the tests' output too.
if grep -q "runtime error:" build-asan/meson-logs/testlog.txt; then
	grep -A5 "runtime error:" build-asan/meson-logs/testlog.txt | head -n 40 >&2
	rc=1
fi
if [ -n "$(ls "$reports")" ]; then
	echo "sanitize: reports in $reports:" >&2
	head -n 40 "$reports"/* >&2
	rc=1
else
	echo "sanitize: no sanitizer report"
fi
exit $rc
