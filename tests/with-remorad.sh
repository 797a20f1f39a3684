#!/bin/sh
# Runs one program through Remora against a private remorad on a free loopback port.
# usage: with-remorad.sh REMORAD DRIVER REMORA PROGRAM [ARGS...]
set -eu
remorad=$1 driver=$2 remora=$3
shift 3
dir=$(mktemp -d)
pid=
cleanup() {
	[ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	rm -rf "$dir"
}
trap 'cleanup; exit 1' INT TERM
"$remorad" --listen tcp://127.0.0.1:0 --driver "$driver" --ready-file "$dir/addr" 2>"$dir/remorad.log" &
pid=$!
i=0
while [ ! -s "$dir/addr" ]; do
	i=$((i + 1))
	if [ $i -gt 100 ] || ! kill -0 "$pid" 2>/dev/null; then
		echo "with-remorad: remorad did not start" >&2
		cat "$dir/remorad.log" >&2
		cleanup
		exit 1
	fi
	sleep 0.05
done
status=0
"$remora" run --server "$(cat "$dir/addr")" -- "$@" || status=$?
if [ $status -ne 0 ]; then
	echo "--- remorad log" >&2
	cat "$dir/remorad.log" >&2
fi
cleanup || true
exit $status
