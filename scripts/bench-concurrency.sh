#!/usr/bin/env bash
# The MPS experiment (docs/status.md): N processes each run one <<<1,1>>> kernel with a
# long dependent FMA chain, all started together, natively (separate contexts) and
# through one remorad (one shared context). Prints each N's mean kernel time over the
# 1-process time.
# usage: scripts/bench-concurrency.sh BUILD_DIR [ITERS] [N...]
set -euo pipefail
build=$1
iters=${2:-100000000}
shift 2 || true
counts=("$@")
[ ${#counts[@]} -gt 0 ] || counts=(1 2 4 8 16)
prog=$build/tests/rtprograms/rt_spin
dir=$(mktemp -d)
"$build/backend/remorad" --listen tcp://127.0.0.1:0 --set allow_anonymous=yes --ready-file "$dir/addr" 2>"$dir/remorad.log" &
pid=$!
trap 'kill $pid 2>/dev/null; rm -rf "$dir"' EXIT
while [ ! -s "$dir/addr" ]; do
	kill -0 $pid 2>/dev/null || { cat "$dir/remorad.log" >&2; exit 1; }
	sleep 0.05
done
server=$(cat "$dir/addr")

# Runs N copies at once; prints their mean time_ms.
run_n() {
	local mode=$1 n=$2 i pids=()
	for ((i = 0; i < n; i++)); do
		if [ "$mode" = native ]; then
			"$prog" "$iters" >"$dir/$mode.$n.$i" 2>&1 &
		else
			"$build/cli/remora" run --server "$server" -- "$prog" "$iters" >"$dir/$mode.$n.$i" 2>&1 &
		fi
		pids+=($!)
	done
	wait "${pids[@]}" 2>/dev/null || true
	cat "$dir/$mode.$n".* | sed -n 's/^time_ms=//p' | awk '{s += $1; n++} END {if (n) printf "%.1f %d\n", s / n, n; else print "nan 0"}'
}

printf "%-4s %12s %8s %12s %8s\n" N native_ms ratio remote_ms ratio
base_native= base_remote=
for n in "${counts[@]}"; do
	read -r nat nn < <(run_n native "$n")
	read -r rem rn < <(run_n remote "$n")
	[ -n "$base_native" ] || base_native=$nat
	[ -n "$base_remote" ] || base_remote=$rem
	awk -v n="$n" -v a="$nat" -v ab="$base_native" -v b="$rem" -v bb="$base_remote" -v an="$nn" -v bn="$rn" \
		'BEGIN {printf "%-4s %12s %8.2f %12s %8.2f   (%s/%s native, %s/%s remote finished)\n", n, a, a / ab, b, b / bb, an, n, bn, n}'
done
