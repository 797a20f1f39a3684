#!/bin/sh
# The client's flush delay (frontend/connection.h): a steady run of async launches, each
# after 10 µs of host work, goes out in batches that grow to REMORA_FLUSH_DELAY_MAX_US.
# Runs drv_async_run through Remora (RUNNER ARGS... PROGRAM IMAGE CALLS) with the delay
# kept at 50 µs, then as built, and passes when both ran right and the second needed at
# most half the first's writes (about an eighth on an idle machine; a thread preempted
# past a batch's delay has its batch sent by the flusher, which restarts the growth).
# usage: flush_delay.sh WITH_REMORAD ARGS...
set -u
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
sends() { sed -n 's/.*remora-stats .* sends=\([0-9]*\).*/\1/p' "$1" | tail -n 1; }
REMORA_STATS=1 REMORA_FLUSH_DELAY_MAX_US=50 sh "$@" >"$dir/short.out" 2>"$dir/short.err" || {
	cat "$dir/short.err" >&2
	exit 1
}
REMORA_STATS=1 sh "$@" >"$dir/grown.out" 2>"$dir/grown.err" || {
	cat "$dir/grown.err" >&2
	exit 1
}
short=$(sends "$dir/short.err") grown=$(sends "$dir/grown.err")
echo "writes: 50 µs batches $short, grown batches $grown"
if [ -z "$short" ] || [ -z "$grown" ] || [ "$((grown * 2))" -gt "$short" ]; then
	echo "flush_delay: grown batches took more than half the writes of 50 µs ones" >&2
	cat "$dir/short.err" "$dir/grown.err" >&2
	exit 1
fi
