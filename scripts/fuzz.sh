#!/bin/sh
# Runs the libFuzzer targets of tests/fuzz (docs/testing.md, "Fuzzing") for SECONDS each
# (default 60), each over a copy of its seed corpus, and reports every crash file.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]        targets: every tests/fuzz/fuzz_TARGET.c (default all)
#
# Builds in a clang build directory of its own, set up on first use with -Dfuzzing=enabled.
# Environment: BUILD_DIR (default build-fuzz), CC (default clang, else clang-14),
# TOOLKIT_DIR (default /usr/local/cuda), JOBS (ninja -j, default 2), FUZZ_ARGS (more
# libFuzzer flags; e.g. '-fork=1 -ignore_crashes=1' to go on past a crash).
# Each run's corpus, log and crash files stay under BUILD_DIR/fuzz-runs/DATE/TARGET.
# Exits 1 when a target crashed, timed out or leaked.
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-60}
[ $# -gt 0 ] && shift
targets=${*:-$(cd "$root/tests/fuzz" && ls fuzz_*.c | sed 's/^fuzz_//; s/\.c$//')}
build=${BUILD_DIR:-$root/build-fuzz}
case $build in /*) ;; *) build=$root/$build ;; esac

if [ ! -f "$build/build.ninja" ]; then
	cc=${CC:-$(command -v clang || command -v clang-14 || echo clang)}
	CC=$cc meson setup "$build" "$root" -Dfuzzing=enabled -Dtoolkit_dir="${TOOLKIT_DIR:-/usr/local/cuda}"
fi
ninja -C "$build" -j "${JOBS:-2}" $(for t in $targets; do printf 'tests/fuzz/fuzz-%s ' "$t"; done) \
	tests/testdriver/libremora-testdriver.so

runs=$build/fuzz-runs/$(date +%Y%m%d-%H%M%S)
failed=0
for t in $targets; do
	dir=$runs/$t
	mkdir -p "$dir/corpus" "$dir/crashes"
	cp "$root/tests/fuzz/corpus/$t/"* "$dir/corpus/"
	echo "fuzz-$t: $seconds s, log in $dir/log"
	# -timeout: a request the daemon never answers is a defect too.
	(cd "$dir" && "$build/tests/fuzz/fuzz-$t" -max_total_time="$seconds" -timeout=25 -print_final_stats=1 \
		-artifact_prefix="$dir/crashes/" ${FUZZ_ARGS:-} corpus >log 2>&1) || true
	found=$(ls "$dir/crashes")
	if [ -n "$found" ]; then
		failed=1
		for f in $found; do
			echo "  $dir/crashes/$f"
		done
		grep -m 3 -E 'ERROR: |runtime error|SUMMARY: |fuzz-[a-z]+: ' "$dir/log" | sed 's/^/    /' || true
	fi
	grep -E '^#[0-9]+' "$dir/log" | tail -n 1 | sed 's/^/  /' || true
done
exit $failed
