#!/bin/sh
# Runs a program natively (LD_LIBRARY_PATH=NATIVE_LIBS) and through Remora (with-remorad.sh
# and its arguments), and fails unless both succeed and print the same stdout (lines
# starting "time_" dropped).
# usage: same_output.sh NATIVE_LIBS WITH_REMORAD REMORAD DRIVER REMORA PROGRAM [ARGS...]
set -eu
native_libs=$1 runner=$2 remorad=$3 driver=$4 remora=$5
shift 5
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
LD_LIBRARY_PATH=$native_libs "$@" >"$dir/native" || { echo "same_output: native run failed" >&2; exit 1; }
"$runner" "$remorad" "$driver" "$remora" "$@" >"$dir/remote" || { echo "same_output: remote run failed" >&2; exit 1; }
grep -v '^time_' "$dir/native" >"$dir/native.kept" || true
grep -v '^time_' "$dir/remote" >"$dir/remote.kept" || true
if ! diff "$dir/native.kept" "$dir/remote.kept"; then
	echo "same_output: native and remote outputs differ" >&2
	exit 1
fi
echo "same_output: $(wc -l <"$dir/native.kept") lines, the same natively and through Remora"
