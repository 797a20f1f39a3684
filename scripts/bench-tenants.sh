#!/usr/bin/env bash
# Tenants on one GPU (issue 35), on a GPU host. Three experiments, native and Remora in one run:
#
#   concurrency  the MPS experiment with N clients, each in a tenant of its own: one
#                <<<1,1>>> spinFma kernel each, all started together. Natively (contexts
#                time-slice), natively under NVIDIA MPS, and through remorad with
#                tenant_isolation = process and = mps (native nmps rprocess rmps, or those
#                of $CONCURRENCY_MODES). Each N's mean kernel time over one client's alone.
#   share        compute shares: a throughput kernel (BLOCKS one-thread blocks) of a tenant
#                with compute_share = 25, alone, then while a tenant at 75 runs the same
#                kernel without pause; its throughput over that of a tenant at 100 alone.
#   nowait       a short program (drv_vecadd) alone, then beside another client's long
#                kernel of the same tenant and of another (process and mps isolation, with
#                one worker per tenant and with workers_per_tenant = 2; a subset with
#                $NOWAIT_MODES, e.g. "mps+w2").
#
# usage: scripts/bench-tenants.sh [--build DIR] [--iters N] [--only LIST] [N ...]
#        (default: build-gpu, 300000000 iterations, concurrency,share,nowait, N = 1 4 16)
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=build-gpu ITERS=300000000 ONLY=concurrency,share,nowait COUNTS=()
while (($#)); do
	case $1 in
	--build) BUILD=$2; shift 2 ;;
	--iters) ITERS=$2; shift 2 ;;
	--only) ONLY=$2; shift 2 ;;
	-h | --help) sed -n '2,17s/^# \{0,1\}//p' "$0"; exit 0 ;;
	*) COUNTS+=("$1"); shift ;;
	esac
done
((${#COUNTS[@]})) || COUNTS=(1 4 16)
SPIN=$BUILD/tests/rtprograms/rt_spin REMORA=$BUILD/cli/remora REMORAD=$BUILD/backend/remorad
WORK=$(mktemp -d)
DAEMON=
stop_daemon() { [[ -n $DAEMON ]] && kill "$DAEMON" 2>/dev/null && wait "$DAEMON" 2>/dev/null; DAEMON=; }
stop_native_mps() {
	[[ -d $WORK/npipe ]] && echo quit | CUDA_MPS_PIPE_DIRECTORY=$WORK/npipe nvidia-cuda-mps-control >/dev/null 2>&1
	sleep 1
}
# $BENCH_TENANTS_LOG: where remorad's log and the MPS directories' listing are left
trap 'stop_daemon; stop_native_mps; [[ -n ${BENCH_TENANTS_LOG:-} ]] && { cat "$WORK/remorad.log"; grep -v -e '^time_ms' -e '^spinFma' -e '^PASS' "$WORK/clients.out" | sort | uniq -c; ls -lR "$WORK/rmps"; cat "$WORK"/rmps/log/* 2>/dev/null | tail -50; } >"$BENCH_TENANTS_LOG" 2>&1; rm -rf "$WORK"' EXIT
wants() { [[ ,$ONLY, == *,$1,* ]]; }

# remorad with tenants t0..t61 (token tok0..), tenant_isolation = $1, more settings in $2,
# more tenants in $3.
start_daemon() {
	local conf=$WORK/remorad.conf i
	printf 'tenant_isolation = %s\nmps_directory = %s/rmps\n%b' "$1" "$WORK" "${2:-}" >"$conf"
	for ((i = 0; i < 62; i++)); do printf '[tenant t%d]\ntoken = tok%d\n' $i $i >>"$conf"; done
	printf '%b' "${3:-}" >>"$conf"
	rm -f "$WORK/addr"
	"$REMORAD" --config "$conf" --listen tcp://127.0.0.1:0 --ready-file "$WORK/addr" 2>>"$WORK/remorad.log" &
	DAEMON=$!
	while [ ! -s "$WORK/addr" ]; do
		kill -0 $DAEMON 2>/dev/null || { tail -20 "$WORK/remorad.log" >&2; exit 1; }
		sleep 0.05
	done
	SERVER=$(cat "$WORK/addr")
}

# Runs N spin clients at once (mode native, mps or remote; tenant i for client i unless
# $SAME_TENANT); prints their mean time_ms and how many finished.
run_n() {
	local mode=$1 n=$2 i pids=()
	rm -f "$WORK"/out.*
	for ((i = 0; i < n; i++)); do
		case $mode in
		native) "$SPIN" "$ITERS" >"$WORK/out.$i" 2>&1 & ;;
		mps) CUDA_MPS_PIPE_DIRECTORY=$WORK/npipe "$SPIN" "$ITERS" >"$WORK/out.$i" 2>&1 & ;;
		remote) "$REMORA" run --server "$SERVER" --token "tok$((${SAME_TENANT:-0} ? 0 : i))" -- "$SPIN" "$ITERS" >"$WORK/out.$i" 2>&1 & ;;
		esac
		pids+=($!)
	done
	wait "${pids[@]}" 2>/dev/null
	cat "$WORK"/out.* >>"$WORK/clients.out"
	cat "$WORK"/out.* | sed -n 's/^time_ms=//p' | awk '{s += $1; n++} END {if (n) printf "%.1f %d\n", s / n, n; else print "nan 0"}'
}

# "MEAN N" of run_n, as "MEAN (RATIO to BASE) FINISHED"
cell() { awk -v a="$1" -v n="$2" -v b="$3" 'BEGIN {printf "%-22s", sprintf("%.1f (%.2f) %d", a, a / b, n)}'; }

if wants concurrency; then
	echo "== concurrency: N clients, a tenant each; mean kernel ms (ratio to N = ${COUNTS[0]}) finished"
	declare -A R
	MODES=${CONCURRENCY_MODES:-native nmps rprocess rmps} # a subset with $CONCURRENCY_MODES
	for k in $MODES; do
		case $k in
		native) for n in "${COUNTS[@]}"; do R[native,$n]=$(run_n native "$n"); done ;;
		nmps)
			mkdir -p "$WORK/npipe" "$WORK/nlog"
			CUDA_MPS_PIPE_DIRECTORY=$WORK/npipe CUDA_MPS_LOG_DIRECTORY=$WORK/nlog nvidia-cuda-mps-control -d
			for n in "${COUNTS[@]}"; do R[nmps,$n]=$(run_n mps "$n"); done
			stop_native_mps ;;
		rprocess | rmps)
			start_daemon "${k#r}"
			for n in "${COUNTS[@]}"; do R[$k,$n]=$(run_n remote "$n"); done
			stop_daemon ;;
		esac
	done
	printf "%-4s" N; for k in $MODES; do printf " %-22s" "$k"; done; echo
	for n in "${COUNTS[@]}"; do
		row=$(printf "%-4s" "$n")
		for k in $MODES; do
			read -r base _ <<<"${R[$k,${COUNTS[0]}]}"
			read -r mean fin <<<"${R[$k,$n]}"
			row+=" $(cell "$mean" "$fin" "$base")"
		done
		echo "$row"
	done
fi

# One throughput kernel of tenant $1 (token tok$1); prints its time_ms.
throughput() { "$REMORA" run --server "$SERVER" --token "tok$1" -- "$SPIN" "$SHARE_ITERS" "$SHARE_BLOCKS" | sed -n 's/^time_ms=//p'; }
SHARE_ITERS=${SHARE_ITERS:-20000000} SHARE_BLOCKS=${SHARE_BLOCKS:-16896}

if wants share; then
	echo "== share: throughput kernel ($SHARE_BLOCKS one-thread blocks, $SHARE_ITERS iterations), tenant_isolation = mps"
	start_daemon mps '' '[tenant quarter]\ntoken = tokq\ncompute_share = 25\n[tenant rest]\ntoken = tokr\ncompute_share = 75\n'
	full=$(throughput 0)
	alone=$(throughput q)
	( while [ ! -e "$WORK/stop-busy" ]; do throughput r >>"$WORK/busy.ms"; done ) &
	busy=$!
	sleep 3
	contended=$(throughput q)
	rest=$(tail -1 "$WORK/busy.ms" 2>/dev/null)
	touch "$WORK/stop-busy"; wait $busy
	stop_daemon
	awk -v f="$full" -v a="$alone" -v c="$contended" -v r="$rest" 'BEGIN {
		printf "tenant at 100%%, alone:       %8.1f ms (share 1.00)\n", f
		printf "tenant at 25%%, alone:        %8.1f ms (share %.2f)\n", a, f / a
		printf "tenant at 25%%, beside 75%%:   %8.1f ms (share %.2f)\n", c, f / c
		if (r != "") printf "tenant at 75%%, beside 25%%:   %8.1f ms (share %.2f)\n", r, f / r }'
fi

if wants nowait; then
	VECADD=$BUILD/tests/programs/drv_vecadd FATBIN=$BUILD/tests/programs/kernels.fatbin
	echo "== nowait: drv_vecadd alone and beside another client's long kernel (wall ms)"
	short() { local t0=$(date +%s%N); "$REMORA" run --server "$SERVER" --token "tok$1" -- "$VECADD" "$FATBIN" >/dev/null 2>&1; echo $((($(date +%s%N) - t0) / 1000000)); }
	for iso in ${NOWAIT_MODES:-process mps process+w2 mps+w2}; do # +w2: workers_per_tenant = 2
		start_daemon "${iso%+w2}" "$([[ $iso == *+w2 ]] && echo 'workers_per_tenant = 2\n')"
		short 0 >/dev/null
		short 1 >/dev/null # both tenants' workers started
		alone=$(short 0)
		for other in 0 1; do
			"$REMORA" run --server "$SERVER" --token tok0 -- "$SPIN" 2000000000 >/dev/null 2>&1 &
			long=$!
			sleep 1.5
			beside=$(short $other)
			wait $long
			awk -v i=$iso -v o=$other -v a=$alone -v b=$beside 'BEGIN {printf "%-9s long kernel in %-14s alone %6d ms, beside %6d ms (%.2fx)\n", i, o ? "another tenant" : "its tenant", a, b, b / a}'
		done
		stop_daemon
	done
fi
