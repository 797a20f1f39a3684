#!/usr/bin/env bash
# Live migration of a PyTorch training job (issue 40; docs/pool.md, "Live migration"), on a
# GPU host: the GPT step of tests/frameworks/models.py runs natively, then through remorad A
# while `remora migrate` moves it A -> B -> A ... MOVES times, one move every INTERVAL
# seconds; prints each move's bytes and pause (or its refusal), the daemons' lines on each
# move's phases, and whether the losses equal the native run's bit for bit.
#
# usage: scripts/migrate-gpt.sh [--build DIR] [--moves N] [--interval S] [--steps N]
#                               [--daemon-set KEY=VALUE]...
#        (default build-gpu, 5 moves, 3 s apart, 300 steps with a 40 ms pause after each;
#        --daemon-set: a remorad setting for both, e.g. migratable_memory=yes)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=build-gpu MOVES=5 INTERVAL=3 STEPS=300 PAUSE_MS=40 ADMIN=ops.migrate-gpt
SETS=()
while (($#)); do
	case $1 in
	--build) BUILD=$2; shift 2 ;;
	--moves) MOVES=$2; shift 2 ;;
	--interval) INTERVAL=$2; shift 2 ;;
	--steps) STEPS=$2; shift 2 ;;
	--daemon-set) SETS+=(--set "$2"); shift 2 ;;
	-h | --help) sed -n '2,11s/^# \{0,1\}//p' "$0"; exit 0 ;;
	*) echo "migrate-gpt.sh: unknown argument $1" >&2; exit 2 ;;
	esac
done
WORK=$(mktemp -d)
PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
	[[ -n ${MIGRATE_GPT_LOGS:-} ]] && cp "$WORK"/*.log "$MIGRATE_GPT_LOGS"/ 2>/dev/null
	rm -rf "$WORK"
}
trap cleanup EXIT

python3 tests/frameworks/models.py gpt "$STEPS" "$PAUSE_MS" >"$WORK/native.out"
for d in a b; do
	"$BUILD/backend/remorad" --listen tcp://127.0.0.1:0 --set allow_anonymous=yes --set "admin_token=$ADMIN" "${SETS[@]}" \
		--ready-file "$WORK/$d.addr" 2>"$WORK/remorad-$d.log" &
	PIDS+=($!)
done
for d in a b; do
	for ((i = 0; i < 100; i++)); do [[ -s $WORK/$d.addr ]] && break; sleep 0.1; done
	[[ -s $WORK/$d.addr ]] || { echo "migrate-gpt.sh: remorad $d did not start" >&2; cat "$WORK/remorad-$d.log" >&2; exit 1; }
done
A=$(cat "$WORK/a.addr") B=$(cat "$WORK/b.addr")
REMORA_LOG=info "$BUILD/cli/remora" run --server "$A" -- python3 tests/frameworks/models.py gpt "$STEPS" "$PAUSE_MS" \
	>"$WORK/remote.out" 2>"$WORK/client.log" &
client=$! # remora run execs the program: its pid is the client's, as remora status shows it
for ((i = 0; i < 1200; i++)); do # moves start once training has: PyTorch's start-up takes seconds
	grep -q "^gpt step" "$WORK/remote.out" 2>/dev/null && break
	kill -0 "$client" 2>/dev/null || break
	sleep 0.1
done
src=$A dst=$B made=0
for ((m = 1; m <= MOVES; m++)); do
	sleep "$INTERVAL"
	kill -0 "$client" 2>/dev/null || { echo "move $m: the job has already ended"; break; }
	out=$(REMORA_TOKEN=$ADMIN "$BUILD/cli/remora" migrate "pid:$client" --to "$dst" --server "$src" 2>&1) && rc=0 || rc=$?
	echo "move $m ($src -> $dst): rc=$rc $out"
	((rc == 0)) && { t=$src; src=$dst; dst=$t; made=$((made + 1)); }
done
wait "$client" && rc=0 || rc=$?
# Each move's phases, from the daemons' logs: the greeting and images loaded ahead (before
# the client's call), the pause's parts at the source, the state made again at the target.
grep -h "greeted in\|threads held\|state made again" "$WORK"/remorad-*.log | sort || true
steps=$(grep -c "^gpt step" "$WORK/remote.out" || true)
if ((rc == 0)) && diff <(grep "^gpt step" "$WORK/native.out") <(grep "^gpt step" "$WORK/remote.out") >/dev/null; then
	echo "losses: the same as native's, bit for bit, over $steps steps; $made of $MOVES moves made"
	((made == MOVES)) || exit 1 # a move refused is not the measurement asked for
else
	echo "losses: NOT the same as native's (client rc=$rc, $steps steps); its log's end:"
	tail -5 "$WORK/client.log"
	exit 1
fi
