#!/bin/sh
# concurrently.sh N PROGRAM [ARGS...]: runs N copies of PROGRAM at once (under `remora run`,
# N clients of one daemon sharing its contexts) and checks that each passes and prints what
# the first prints: what one client sets in its contexts, no other sees.
set -u
n=$1
shift
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
i=0 pids=
while [ "$i" -lt "$n" ]; do
	"$@" >"$dir/out$i" 2>"$dir/err$i" &
	pids="$pids $!"
	i=$((i + 1))
done
status=0 i=0
for p in $pids; do
	if ! wait "$p"; then
		echo "copy $i failed:" >&2
		cat "$dir/err$i" >&2
		status=1
	fi
	i=$((i + 1))
done
i=1
while [ "$i" -lt "$n" ]; do
	if ! cmp -s "$dir/out0" "$dir/out$i"; then
		echo "copy $i printed otherwise than copy 0:" >&2
		diff "$dir/out0" "$dir/out$i" >&2
		status=1
	fi
	i=$((i + 1))
done
cat "$dir/out0"
exit $status
