#!/usr/bin/env bash
# NVIDIA's cuda-samples as a conformance corpus (docs/testing.md, "CUDA samples"): builds
# each sample of a checkout, runs it natively and through Remora, and prints a table.
#
# usage: scripts/cuda-samples.sh SAMPLES_DIR [--mode sequence|alone] [--only NAME]...
#                               [--set multigpu] [--jobs N] [--timeout SECONDS] [--build BUILD]
#                               [--no-build] [--phase build|native|remote|both]
#
# SAMPLES_DIR holds the checkout's Common/ and Samples/ (the samples are not part of
# Remora and are never fetched here). Each sample is built with one nvcc line (sm_90, the
# toolkit's libraries); those that do not build (graphics, platform-specific) are listed
# as such. `sequence` (the default) runs every sample through one remorad, one after
# another, as users would; `alone` starts a fresh remorad for each. A sample passes when it
# exits 0; natively failing ones are not run through Remora. --phase native builds and runs
# natively only; --phase remote then uses those native results (both: one after the other);
# --phase build only builds (on a GPU host, beside other work that needs the GPU). Writes table.txt and each
# run's output under $OUT (default cuda-samples-out/). Needs a GPU host and BUILD
# (default build-gpu) built. --set multigpu selects the samples that use several GPUs of
# the host (MULTIGPU_SAMPLES below; most need two), beside any --only.
set -uo pipefail

die() { echo "cuda-samples: $*" >&2; exit 2; }
(($#)) || die "usage: scripts/cuda-samples.sh SAMPLES_DIR [--mode sequence|alone] [--only NAME]..."
SRC=$(cd "$1" && pwd) || die "no such directory: $1"
shift
# The samples that use several GPUs: their own work on each, peer access and copies, or the
# topology between them (issue 39).
MULTIGPU_SAMPLES=(simpleMultiGPU MonteCarloMultiGPU simpleP2P p2pBandwidthLatencyTest simpleCUFFT_MGPU
	simpleCUFFT_2d_MGPU streamOrderedAllocationP2P conjugateGradientMultiDeviceCG topologyQuery cudaOpenMP
	vectorAddMMAP deviceQuery deviceQueryDrv simpleIPC streamOrderedAllocationIPC memMapIPCDrv)
MODE=sequence JOBS=$(nproc) TIMEOUT_S=60 DO_BUILD=1 ONLY=() PHASE=both
BUILD=${REMORA_SUITE_BUILD:-build-gpu}
PORT=${REMORA_SAMPLES_PORT:-47313}
while (($#)); do
	case $1 in
	--mode) MODE=${2:?}; shift 2 ;;
	--only) ONLY+=("${2:?}"); shift 2 ;;
	--set) [[ ${2:-} == multigpu ]] || die "--set takes multigpu"; ONLY+=("${MULTIGPU_SAMPLES[@]}"); shift 2 ;;
	--jobs) JOBS=${2:?}; shift 2 ;;
	--timeout) TIMEOUT_S=${2:?}; shift 2 ;;
	--build) BUILD=${2:?}; shift 2 ;;
	--no-build) DO_BUILD=0; shift ;;
	--phase) PHASE=${2:?}; shift 2 ;;
	-h | --help) sed -n '2,19s/^# \{0,1\}//p' "$0"; exit 0 ;;
	*) die "unknown argument '$1' (try --help)" ;;
	esac
done
[[ $MODE == sequence || $MODE == alone ]] || die "--mode is sequence or alone"
[[ -d $SRC/Samples && -d $SRC/Common ]] || die "$SRC has no Samples/ and Common/"
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BUILD=$(cd "$BUILD" 2>/dev/null && pwd) || die "no build directory $BUILD"
[[ -x $BUILD/backend/remorad && -x $BUILD/cli/remora ]] || die "$BUILD has no remorad and remora"
OUTDIR=${OUT:-cuda-samples-out}
mkdir -p "$OUTDIR/bin" "$OUTDIR/log"
OUTDIR=$(cd "$OUTDIR" && pwd)
CUDA=${CUDA_HOME:-/usr/local/cuda}

# Every folder of Samples/ with CUDA sources is a sample, named by its folder.
mapfile -t DIRS < <(find "$SRC/Samples" -name '*.cu' -printf '%h\n' | sort -u)
selected=()
for d in "${DIRS[@]}"; do
	n=$(basename "$d")
	if ((${#ONLY[@]} == 0)) || [[ " ${ONLY[*]} " == *" $n "* ]]; then selected+=("$d"); fi
done
((${#selected[@]})) || die "no sample named ${ONLY[*]}"

build_one() {
	local d=$1 n
	n=$(basename "$d")
	shopt -s nullglob
	# shellcheck disable=SC2206
	local srcs=("$d"/*.cu "$d"/*.cpp) more=()
	# What a sample's CMake file adds: the multi-process helper, OpenMP, relocatable device
	# code for dynamic parallelism.
	grep -qs 'helper_multiprocess.h' "$d"/*.cpp "$d"/*.cu && srcs+=("$SRC/Common/helper_multiprocess.cpp")
	grep -qs '<omp.h>' "$d"/*.cpp "$d"/*.cu && more+=(-Xcompiler -fopenmp -lgomp)
	[[ $n == cdp* ]] && more+=(-rdc=true -lcudadevrt)
	"$CUDA/bin/nvcc" -O2 -std=c++17 -arch=sm_90 -I "$SRC/Common" -I "$d" "${srcs[@]}" -o "$OUTDIR/bin/$n" \
		-lcuda -lcublas -lcublasLt -lcusparse -lcusolver -lcurand -lcufft -lnvrtc -lnvJitLink "${more[@]}" \
		>"$OUTDIR/log/$n.build" 2>&1 || return
	# What a sample looks for in the folder it runs in goes into a run folder of its own,
	# beside links to the sample's files (the checkout stays as it is). A driver-API sample
	# loads its kernels from NAME_kernel64.fatbin (or .ptx).
	local k
	# An NVRTC sample looks for cooperative_groups.h where it runs, as its CMake build copies it.
	if grep -qs 'nvrtc_helper.h' "$d"/*.cpp "$d"/*.cu; then
		mkdir -p "$OUTDIR/run/$n" && ln -sf "$d"/* "$CUDA/include/cooperative_groups.h" \
			"$CUDA/include/cooperative_groups" "$OUTDIR/run/$n/"
	fi
	local kind
	for kind in fatbin ptx; do
		grep -qs "_kernel64.$kind" "$d"/*.cpp || continue
		mkdir -p "$OUTDIR/run/$n" && ln -sf "$d"/* "$OUTDIR/run/$n/"
		for k in "$d"/*_kernel.cu; do
			"$CUDA/bin/nvcc" -"$kind" -arch=sm_90 -I "$SRC/Common" -I "$d" "$k" \
				-o "$OUTDIR/run/$n/$(basename "$k" .cu)64.$kind" >>"$OUTDIR/log/$n.build" 2>&1 || return
		done
	done
}
export -f build_one
export SRC OUTDIR CUDA
[[ $PHASE == remote ]] && DO_BUILD=0
if ((DO_BUILD)); then
	printf '%s\n' "${selected[@]}" | xargs -P "$JOBS" -I{} bash -c 'build_one "$1"' _ {}
fi
if [[ $PHASE == build ]]; then
	echo "built $(find "$OUTDIR/bin" -maxdepth 1 -type f -executable | wc -l) of ${#selected[@]} samples into $OUTDIR/bin"
	exit 0
fi

DAEMON_PID=
stop_daemon() {
	[[ -n $DAEMON_PID ]] || return 0
	kill "$DAEMON_PID" 2>/dev/null
	for _ in $(seq 50); do kill -0 "$DAEMON_PID" 2>/dev/null || break; sleep 0.1; done
	kill -9 "$DAEMON_PID" 2>/dev/null
	wait "$DAEMON_PID" 2>/dev/null
	DAEMON_PID=
}
trap stop_daemon EXIT
start_daemon() {
	"$BUILD/backend/remorad" --listen "tcp://127.0.0.1:$PORT" --set allow_anonymous=yes \
		>>"$OUTDIR/remorad.log" 2>&1 &
	DAEMON_PID=$!
	for _ in $(seq 100); do
		grep -q "$(printf ':%04X 00000000:0000 0A' "$PORT")" /proc/net/tcp && return 0
		sleep 0.1
	done
	die "remorad did not come up (log: $OUTDIR/remorad.log)"
}

# run_one KIND NAME: runs the sample from its own folder (where its data files are).
run_one() {
	local kind=$1 n=$2 d=$3 t0
	[[ -d $OUTDIR/run/$n ]] && d=$OUTDIR/run/$n
	t0=$(date +%s.%N)
	if [[ $kind == native ]]; then
		(cd "$d" && timeout -k 5 "$TIMEOUT_S" "$OUTDIR/bin/$n" </dev/null) >"$OUTDIR/log/$n.$kind" 2>&1
	else
		(cd "$d" && timeout -k 5 "$TIMEOUT_S" "$BUILD/cli/remora" run --server "127.0.0.1:$PORT" -- \
			"$OUTDIR/bin/$n" </dev/null) >"$OUTDIR/log/$n.$kind" 2>&1
	fi
	RC=$?
	WALL=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
}

TABLE=$OUTDIR/table.txt
row() { printf '%-40s %-8s %-8s %7s %7s\n' "$@"; }
row sample native remote nat_s rem_s | tee "$TABLE"
: >"$OUTDIR/remorad.log"
[[ $MODE == sequence && $PHASE != native ]] && start_daemon
built=0 native_ok=0 remote_ok=0
for d in "${selected[@]}"; do
	n=$(basename "$d")
	if [[ ! -x $OUTDIR/bin/$n ]]; then
		row "$n" no-build - - - >>"$TABLE"
		continue
	fi
	built=$((built + 1))
	if [[ $PHASE == remote ]]; then
		read -r nrc nwall <"$OUTDIR/log/$n.native.rc" || nrc=missing nwall=-
	else
		run_one native "$n" "$d"
		nrc=$RC nwall=$WALL
		echo "$nrc $nwall" >"$OUTDIR/log/$n.native.rc"
	fi
	if [[ $nrc != 0 ]]; then
		row "$n" "rc=$nrc" - "$nwall" - | tee -a "$TABLE"
		continue
	fi
	native_ok=$((native_ok + 1))
	if [[ $PHASE == native ]]; then
		row "$n" pass - "$nwall" - | tee -a "$TABLE"
		continue
	fi
	[[ $MODE == alone ]] && start_daemon
	if ! kill -0 "$DAEMON_PID" 2>/dev/null; then
		echo "cuda-samples: remorad died before $n; restarting it" | tee -a "$TABLE" "$OUTDIR/remorad.log"
		start_daemon
	fi
	echo "=== $n $(date -Is)" >>"$OUTDIR/remorad.log"
	run_one remote "$n" "$d"
	[[ $MODE == alone ]] && stop_daemon
	if ((RC == 0)); then remote_ok=$((remote_ok + 1)); fi
	row "$n" pass "$( ((RC == 0)) && echo pass || echo "rc=$RC")" "$nwall" "$WALL" | tee -a "$TABLE"
done
echo "built $built, pass natively $native_ok, pass through Remora ($MODE) $remote_ok" | tee -a "$TABLE"
[[ $PHASE == native ]] || ((remote_ok == native_ok))
