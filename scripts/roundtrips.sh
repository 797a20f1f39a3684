#!/usr/bin/env bash
# Counts, per step of a PyTorch program, the driver calls the client forwards and how many
# of them waited for a reply (a round trip): the profile issue 15 starts from.
#
# usage: scripts/roundtrips.sh [--build DIR] [--server ADDR] PART [STEPS]
#        PART is one of bench/torch_worker.py's (cnn_train, resnet50_b1, gpt_train).
# Without --server, starts DIR/backend/remorad (default build-gpu) on a loopback port.
# Prints one line per forwarded function, most round trips first: per-step calls and
# per-step waits, then the totals per step.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=build-gpu SERVER=
while (($#)); do
	case $1 in
	--build) BUILD=$2; shift 2 ;;
	--server) SERVER=$2; shift 2 ;;
	-h | --help) sed -n '2,9s/^# \{0,1\}//p' "$0"; exit 0 ;;
	*) break ;;
	esac
done
(($#)) || { echo "roundtrips: which part? (try --help)" >&2; exit 2; }
WORK=$(mktemp -d)
DAEMON_PID=
cleanup() {
	[[ -n $DAEMON_PID ]] && kill "$DAEMON_PID" 2>/dev/null && wait "$DAEMON_PID" 2>/dev/null
	rm -rf "$WORK"
}
trap cleanup EXIT
if [[ -z $SERVER ]]; then
	"$BUILD/backend/remorad" --listen unix:"$WORK/sock" --set allow_anonymous=yes >"$WORK/remorad.log" 2>&1 &
	DAEMON_PID=$!
	for _ in $(seq 50); do [[ -S $WORK/sock ]] && break; sleep 0.1; done
	SERVER=unix:$WORK/sock
fi
REMORA_STEP_MARKS=1 REMORA_TRACE=1 REMORA_LOG=debug REMORA_SERVER=$SERVER \
	LD_LIBRARY_PATH="$PWD/$BUILD/frontend${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
	python3 bench/torch_worker.py "$@" >"$WORK/out" 2>"$WORK/err" || {
	echo "roundtrips: the program failed:" >&2
	tail -n 5 "$WORK/err" >&2
	exit 1
}
cat "$WORK/out"
awk '
/remora-steps begin/ { on = 1; steps = $3; next }
/remora-steps end/ { on = 0 }
on && match($0, /cu[A-Za-z0-9_]+ returned/) {
	name = substr($0, RSTART, RLENGTH - 9)
	calls[name]++
	if ($0 ~ /\(waited\)/) waits[name]++
}
END {
	if (!steps) { print "roundtrips: no step markers in the log" > "/dev/stderr"; exit 1 }
	for (n in calls) { tc += calls[n]; tw += waits[n]
		printf "%-44s %9.2f %9.2f\n", n, calls[n] / steps, waits[n] / steps | "sort -k3,3nr -k2,2nr" }
	close("sort -k3,3nr -k2,2nr")
	printf "%-44s %9.2f %9.2f\n", "per step: forwarded, waited", tc / steps, tw / steps
}' "$WORK/err"
