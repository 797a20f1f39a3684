#!/usr/bin/env bash
# The MPS experiment with a real framework (issue 13): N processes of torchvision ResNet-50
# fp16 inference at batch 1, started together, natively without MPS, natively under NVIDIA
# MPS, and through one remorad; prints each configuration's aggregate images per second.
#
# usage: scripts/bench-resnet-sharing.sh [--build DIR] [--iters N] [--port N | --unix] [--only LIST]
#                                        [--daemon-set KEY=VALUE]... [--tenant-each] [N ...]
#        (default: build-gpu, 300 inferences per process, every configuration of
#        native,mps,remora, N = 1 2 4 8; --daemon-set passes remorad a setting; remorad's log
#        is left in $RESNET_SHARING_LOG when that is set; --tenant-each: each process through
#        remorad is a tenant of its own, as with tenant_isolation = mps, say; --client-cpus
#        and --daemon-cpus, taskset lists: every configuration's processes on the first, remorad
#        and its workers on the second, as clients on other machines leave the GPU host's cores
#        to the workers; --daemon-batch: remorad and its workers under SCHED_BATCH (chrt), whose
#        wake-ups do not preempt; --unix: clients connect over a unix socket, with shared memory;
#        RESNET_SHARING_CPU=1 in the environment: where the CPU went, on stderr: the host's CPU
#        an image and remorad's tree's part of it, the host's and the GPU's busy shares, the
#        clients' CPU share, their time runnable but waiting for a CPU, and their context
#        switches an image)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=build-gpu ITERS=300 PORT=47321 COUNTS=() ONLY=native,mps,remora DAEMON_SETS=() TENANT_EACH=0
CLIENT_PIN=() DAEMON_PIN=() UNIX=0
while (($#)); do
	case $1 in
	--build) BUILD=$2; shift 2 ;;
	--iters) ITERS=$2; shift 2 ;;
	--port) PORT=$2; shift 2 ;;
	--unix) UNIX=1; shift ;;
	--only) ONLY=$2; shift 2 ;;
	--daemon-set) DAEMON_SETS+=(--set "$2"); shift 2 ;;
	--tenant-each) TENANT_EACH=1; shift ;;
	--client-cpus) CLIENT_PIN=(taskset -c "$2"); shift 2 ;;
	--daemon-cpus) DAEMON_PIN=(taskset -c "$2" "${DAEMON_PIN[@]}"); shift 2 ;;
	--daemon-batch) DAEMON_PIN+=(chrt --batch 0); shift ;;
	-h | --help) sed -n '2,19s/^# \{0,1\}//p' "$0"; exit 0 ;;
	*) COUNTS+=("$1"); shift ;;
	esac
done
((${#COUNTS[@]})) || COUNTS=(1 2 4 8)
WORK=$(mktemp -d)
DAEMON_PID=
cleanup() {
	[[ -n $DAEMON_PID ]] && kill "$DAEMON_PID" 2>/dev/null && wait "$DAEMON_PID" 2>/dev/null
	[[ -n ${RESNET_SHARING_LOG:-} ]] && cp "$WORK/remorad.log" "$RESNET_SHARING_LOG"
	echo quit | CUDA_MPS_PIPE_DIRECTORY=$WORK/mps nvidia-cuda-mps-control >/dev/null 2>&1 || true
	rm -rf "$WORK"
}
trap cleanup EXIT

# run_group LABEL N PREFIX...: N workers at once (a barrier file starts them together);
# prints the sum of their images per second.
run_group() {
	local label=$1 n=$2 i pids=()
	shift 2
	rm -f "$WORK"/go* "$WORK"/out.*
	for ((i = 0; i < n; i++)); do
		local cmd=("$@")
		((TENANT_EACH)) && [[ $label == remora ]] && cmd=("${cmd[@]:0:2}" --token "tok$i" "${cmd[@]:2}")
		MPS_BARRIER=$WORK/go timeout 600 "${CLIENT_PIN[@]}" "${cmd[@]}" python3 tests/frameworks/models.py mps_worker 1 "$ITERS" \
			>"$WORK/out.$i" 2>"$WORK/err.$label.$n.$i" &
		pids+=($!)
	done
	# torch start-up and warm-up of every worker: each says ready (or has died)
	local waited=0 alive
	while (($(ls "$WORK"/go.ready.* 2>/dev/null | wc -l) < n && waited < 1200)); do
		alive=0
		for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=$((alive + 1)); done
		((alive)) || break
		sleep 0.1
		waited=$((waited + 1))
	done
	local busy0 tree0 t0 gpu_pid=
	if [[ -n ${RESNET_SHARING_CPU:-} ]]; then
		busy0=$(host_busy_ticks) tree0=$(daemon_tree_ticks) t0=$(date +%s%N)
		nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits -lms 500 >"$WORK/gpu_util" 2>/dev/null &
		gpu_pid=$!
	fi
	touch "$WORK/go"
	local failed=0
	for p in "${pids[@]}"; do wait "$p" || failed=1; done
	if [[ -n $gpu_pid ]]; then
		kill "$gpu_pid" 2>/dev/null
		wait "$gpu_pid" 2>/dev/null || true
		local busy1 tree1 hz
		busy1=$(host_busy_ticks) tree1=$(daemon_tree_ticks) hz=$(getconf CLK_TCK)
		awk -v l="$label N=$n" -v b="$((busy1 - busy0))" -v t="$((tree1 - tree0))" -v hz="$hz" -v iters="$ITERS" -v n="$n" \
			-v wall="$(($(date +%s%N) - t0))" -v cpus="$(nproc)" \
			'{ u += $1; k++ } END { printf "%s: host CPU %.2f ms an image (remorad and its workers %.2f), host %.0f%% busy, GPU %.0f%%\n", l, b / hz * 1000 / (iters * n), t / hz * 1000 / (iters * n), 100 * b / hz / (wall / 1e9) / cpus, k ? u / k : -1 }' \
			"$WORK/gpu_util" >&2
	fi
	if ((failed)); then
		echo "$label N=$n: a worker failed:" >&2
		tail -n 5 "$WORK"/err.$label.$n.* >&2
		echo "-"
		return
	fi
	# with RESNET_SHARING_CPU set: the processes' mean CPU share, and remorad's tree's CPU seconds so far
	# (above: the host's CPU an image over the timed loop, and the GPU's utilization)
	[[ -n ${RESNET_SHARING_CPU:-} ]] && {
		awk -v l="$label N=$n" '/^cpu_share/ { s += $2; k++ } /^run_queue_share/ { q += $2 } /^switches_per_image/ { v += $2; i += $3 }
			END { if (k) printf "%s: client mean CPU share %.2f, runnable and waiting %.2f, switches an image %.1f slept, %.1f preempted\n", l, s / k, q / k, v / k, i / k }' "$WORK"/out.* >&2
		[[ -n $DAEMON_PID ]] && ps -o pid=,time=,class=,comm= --ppid "$DAEMON_PID" >&2
	}
	awk '/^images_per_s/ { s += $2 } END { printf "%.0f", s }' "$WORK"/out.*
}

# host_busy_ticks: the host's CPU time in ticks, every core, idle and iowait left out (/proc/stat).
host_busy_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9; exit }' /proc/stat; }
# daemon_tree_ticks: the CPU time in ticks of remorad and its children (the workers; MPS's
# server, which remorad's MPS control daemon starts, is counted on the host's line only).
daemon_tree_ticks() {
	[[ -n $DAEMON_PID ]] || { echo 0; return; }
	local p sum=0
	for p in $DAEMON_PID $(pgrep -P "$DAEMON_PID"); do
		sum=$((sum + $(awk '{ sub(/^.*\) /, ""); print $12 + $13 }' /proc/$p/stat 2>/dev/null || echo 0)))
	done
	echo $sum
}

ADDR=127.0.0.1:$PORT
((UNIX)) && ADDR=unix:$WORK/remorad.sock
CONF=()
if ((TENANT_EACH)); then
	for ((i = 0; i < 62; i++)); do printf '[tenant t%d]\ntoken = tok%d\n' $i $i; done >"$WORK/tenants.conf"
	CONF=(--config "$WORK/tenants.conf")
fi
"${DAEMON_PIN[@]}" "$BUILD/backend/remorad" "${CONF[@]}" --listen "$ADDR" --set allow_anonymous=yes "${DAEMON_SETS[@]}" >"$WORK/remorad.log" 2>&1 &
DAEMON_PID=$!
sleep 1
printf '%-10s %10s %10s %10s\n' processes native mps remora
for n in "${COUNTS[@]}"; do
	native=- mps=- remora=-
	[[ ,$ONLY, == *,native,* ]] && native=$(run_group native "$n" env)
	if [[ ,$ONLY, == *,mps,* ]]; then
		mkdir -p "$WORK/mps"
		CUDA_MPS_PIPE_DIRECTORY=$WORK/mps CUDA_MPS_LOG_DIRECTORY=$WORK/mps nvidia-cuda-mps-control -d
		mps=$(run_group mps "$n" env CUDA_MPS_PIPE_DIRECTORY="$WORK/mps")
		echo quit | CUDA_MPS_PIPE_DIRECTORY=$WORK/mps nvidia-cuda-mps-control
		sleep 1
	fi
	[[ ,$ONLY, == *,remora,* ]] && remora=$(run_group remora "$n" "$BUILD/cli/remora" run --server "$ADDR" --)
	printf '%-10s %10s %10s %10s\n' "$n" "$native" "$mps" "$remora"
done
