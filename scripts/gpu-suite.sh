#!/usr/bin/env bash
# The GPU suite: run each test program natively and through Remora on a GPU
# host, and compare their stdout (lines starting with "time_" dropped).
#
# usage: scripts/gpu-suite.sh [--only NAME]... [--no-build] [--no-frameworks] [--no-faults]
#                             [--port N] [--timeout SECONDS] [--list]
#
# Builds into build-gpu, starts build-gpu/backend/remorad on 127.0.0.1:PORT
# (real driver), runs every program twice, prints a table and writes the
# table, every program's stdout/stderr and the daemon's log under $OUT
# (default gpu-suite-out/). Exits 1 if any program fails or differs.
set -euo pipefail

# name | program under build-gpu/ and its arguments (no spaces inside one).
# Edit here: the driver-API programs and their images come from
# tests/programs/meson.build, the runtime programs from tests/rtprograms/.
PROGRAMS=(
	"drv_query|tests/programs/drv_query"
	"drv_vecadd_ptx|tests/programs/drv_vecadd tests/programs/kernels.ptx all"
	"drv_vecadd_cubin|tests/programs/drv_vecadd tests/programs/kernels.cubin all"
	"drv_vecadd_fatbin|tests/programs/drv_vecadd tests/programs/kernels.fatbin all"
	"drv_reduce|tests/programs/drv_reduce tests/programs/kernels.fatbin"
	"drv_streams|tests/programs/drv_streams tests/programs/kernels.fatbin"
	"drv_memcpy|tests/programs/drv_memcpy tests/programs/kernels.fatbin 1024"
	"drv_spin|tests/programs/drv_spin tests/programs/kernels.fatbin 100000000"
	"drv_sleep|tests/programs/drv_sleep tests/programs/kernels.fatbin 20000000"
	"drv_memkinds|tests/programs/drv_memkinds tests/programs/kernels.fatbin"
	"rt_vecadd|tests/rtprograms/rt_vecadd"
	"rt_matmul|tests/rtprograms/rt_matmul"
	"rt_reduce|tests/rtprograms/rt_reduce"
	"rt_streams|tests/rtprograms/rt_streams"
	"rt_twofiles|tests/rtprograms/rt_twofiles"
	"rt_oldarch|tests/rtprograms/rt_oldarch"
	"rt_shared|tests/rtprograms/rt_shared"
	"rt_cublas|tests/rtprograms/rt_cublas"
	"rt_spin|tests/rtprograms/rt_spin 100000000"
	"rt_legacy|tests/rtprograms/rt_legacy"
	"rt_empty|tests/rtprograms/rt_empty 20000"
	"drv_tables|tests/programs/drv_tables tests/programs/kernels.fatbin"
	"drv_attrcache|tests/programs/drv_attrcache tests/programs/kernels.fatbin"
	"rt_memkinds|tests/rtprograms/rt_memkinds"
	"rt_texture|tests/rtprograms/rt_texture"
	"drv_graphs|tests/programs/drv_graphs tests/programs/kernels.fatbin 1000"
	"drv_graph_nodes|tests/programs/drv_graph_nodes tests/programs/kernels.fatbin 1000"
	"drv_graph_host|tests/programs/drv_graph_host tests/programs/kernels.fatbin 100"
	"drv_graph_edges|tests/programs/drv_graph_edges tests/programs/kernels.fatbin"
	"drv_graph_mem|tests/programs/drv_graph_mem tests/programs/kernels.fatbin 100"
	"drv_graph_cond|tests/programs/drv_graph_cond tests/programs/cond_kernels.cubin"
	"drv_graph_cond_ptx|tests/programs/drv_graph_cond tests/programs/cond_kernels.ptx"
	"drv_graph_getters|tests/programs/drv_graph_getters tests/programs/kernels.fatbin"
	"drv_graph_uobj|tests/programs/drv_graph_uobj"
	"drv_hostfn|tests/programs/drv_hostfn tests/programs/kernels.fatbin"
	"drv_threads|tests/programs/drv_threads tests/programs/kernels.fatbin 200000000"
	"drv_thread_order|tests/programs/drv_thread_order tests/programs/kernels.fatbin 20"
	"drv_thread_waits|tests/programs/drv_thread_waits tests/programs/kernels.fatbin 50"
	"drv_managed|tests/programs/drv_managed tests/programs/kernels.fatbin"
	"drv_hostptr|tests/programs/drv_hostptr tests/programs/kernels.fatbin"
	"drv_coop|tests/programs/drv_coop tests/programs/coop_kernels.cubin"
	"drv_coop_ptx|tests/programs/drv_coop tests/programs/coop_kernels.ptx"
	"rt_coop|tests/rtprograms/rt_coop"
	"rt_graph_cond|tests/rtprograms/rt_graph_cond"
	"drv_contexts|tests/programs/drv_contexts tests/programs/kernels.ptx"
	"drv_nvrtc|tests/programs/drv_nvrtc"
	"drv_copy2d|tests/programs/drv_copy2d tests/programs/kernels.fatbin"
	"drv_arrays|tests/programs/drv_arrays tests/programs/kernels.fatbin"
	"drv_textures|tests/programs/drv_textures tests/programs/kernels.fatbin"
	"drv_smallcalls|tests/programs/drv_smallcalls tests/programs/kernels.ptx"
	"drv_ipc|tests/programs/drv_ipc tests/programs/kernels.fatbin"
	"drv_texrefs|tests/programs/drv_texrefs"
	"drv_ctxevents|tests/programs/drv_ctxevents tests/programs/kernels.fatbin"
	"drv_nowait|tests/programs/drv_nowait tests/programs/kernels.fatbin 6000"
	"drv_ipc_multi|tests/programs/drv_ipc_multi tests/programs/kernels.fatbin" # simpleIPC's sequence, a process per GPU
	"drv_pool_ipc|tests/programs/drv_pool_ipc tests/programs/kernels.fatbin" # streamOrderedAllocationIPC's, shared pools
	"drv_copy_sizes|tests/programs/drv_copy_sizes tests/programs/kernels.fatbin 12"
	"drv_copy_deferred|tests/programs/drv_copy_deferred tests/programs/kernels.fatbin"
	"drv_async_run|tests/programs/drv_async_run tests/programs/kernels.fatbin 20000 5"
	"drv_migrate|tests/programs/drv_migrate tests/programs/kernels.fatbin 20"
	"rt_migrate|tests/rtprograms/rt_migrate 20"
)
# Programs of two GPUs of the host (issue 39), run where nvidia-smi lists two or more; on a
# host of one GPU they are skipped, with a line saying so in the table.
MULTIGPU_PROGRAMS=(
	"rt_multigpu|tests/rtprograms/rt_multigpu"
	"drv_peer|tests/programs/drv_peer tests/programs/kernels.fatbin"
)
# Framework programs (issue 13), run from the repository root with the Python on the
# PATH (PyTorch and torchvision for CUDA 13); --no-frameworks leaves them out.
FRAMEWORKS=(
	"fw_fft|python3 tests/frameworks/models.py fft"
	"fw_conv|python3 tests/frameworks/models.py conv"
	"fw_resnet50_b1|python3 tests/frameworks/models.py resnet50 1"
	"fw_resnet50_b32|python3 tests/frameworks/models.py resnet50 32"
	"fw_resnet18_amp|python3 tests/frameworks/models.py resnet18_amp"
	"fw_gpt|python3 tests/frameworks/models.py gpt"
	"fw_compiled|python3 tests/frameworks/models.py compiled"
	"fw_threads|python3 tests/frameworks/models.py threads"
	"fw_cudagraph|python3 tests/frameworks/models.py cudagraph 50"
	"fw_linalg_magma|python3 tests/frameworks/models.py linalg magma"
	"fw_linalg_cusolver|python3 tests/frameworks/models.py linalg cusolver"
	"fw_rnn|python3 tests/frameworks/models.py rnn"
)

BUILD=${REMORA_SUITE_BUILD:-build-gpu}
PORT=${REMORA_SUITE_PORT:-47311}
TIMEOUT_S=300
DO_BUILD=1
FAULTS=1
ONLY=()

die() { echo "gpu-suite: $*" >&2; exit 2; }

while (($#)); do
	case $1 in
	--only) (($# >= 2)) || die "--only needs a name"; ONLY+=("$2"); shift 2 ;;
	--port) (($# >= 2)) || die "--port needs a number"; PORT=$2; shift 2 ;;
	--timeout) (($# >= 2)) || die "--timeout needs seconds"; TIMEOUT_S=$2; shift 2 ;;
	--no-build) DO_BUILD=0; shift ;;
	--no-frameworks) FRAMEWORKS=(); shift ;;
	--no-faults) FAULTS=0; shift ;;
	--list) for p in "${PROGRAMS[@]}" "${MULTIGPU_PROGRAMS[@]}" "${FRAMEWORKS[@]}"; do echo "${p%%|*}"; done; exit 0 ;;
	-h | --help) sed -n '2,11s/^# \{0,1\}//p' "$0"; exit 0 ;;
	*) die "unknown argument '$1' (try --help)" ;;
	esac
done

cd "$(dirname "$0")/.."
OUTDIR=${OUT:-gpu-suite-out}
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)

NGPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
MULTIGPU_SKIPPED=
if ((NGPUS < 2)); then
	for p in "${MULTIGPU_PROGRAMS[@]}"; do MULTIGPU_SKIPPED+=" ${p%%|*}"; done
	MULTIGPU_PROGRAMS=()
fi
# NCCL (issue 39): the GPU host's NCCL serves clients' NCCL calls (nccl_library) and the
# native runs load the same one: REMORA_SUITE_NCCL, else PyTorch's (nvidia/nccl/lib), else
# the toolkit's. Native runs find it as libnccl.so.2 through a folder holding it alone.
NCCL_LIB=${REMORA_SUITE_NCCL:-$(python3 -c 'import nvidia.nccl as n, os; print(os.path.join(list(n.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null || true)}
[[ -n $NCCL_LIB && -e $NCCL_LIB ]] || NCCL_LIB=/usr/local/cuda/lib64/libnccl.so.2
mkdir -p "$OUTDIR/nccl-lib"
ln -sf "$NCCL_LIB" "$OUTDIR/nccl-lib/libnccl.so.2"
export LD_LIBRARY_PATH=$OUTDIR/nccl-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
((${#FRAMEWORKS[@]})) && FRAMEWORKS+=("fw_dist_single|python3 tests/frameworks/distributed.py single"
	"fw_mp_share|python3 tests/frameworks/distributed.py share")
# The 2-GPU section: NCCL between two GPUs, natively and through one remorad.
if ((NGPUS >= 2)); then
	PROGRAMS+=("drv_nccl|tests/programs/drv_nccl all" "drv_nccl_nopeer|tests/programs/drv_nccl nopeer-nonblocking")
	((${#FRAMEWORKS[@]})) && FRAMEWORKS+=("fw_dist_ops|python3 tests/frameworks/distributed.py ops"
		"fw_ddp|python3 -m torch.distributed.run --nproc_per_node=2 --master_port=29533 tests/frameworks/distributed.py ddp")
else
	echo "gpu-suite: the 2-GPU section (drv_nccl, fw_dist_ops, fw_ddp) is skipped: this host has ${NGPUS:-0} GPU(s)"
fi

selected=()
for p in "${PROGRAMS[@]}" "${MULTIGPU_PROGRAMS[@]}" "${FRAMEWORKS[@]}"; do
	name=${p%%|*}
	if ((${#ONLY[@]} == 0)) || [[ " ${ONLY[*]} " == *" $name "* ]]; then
		selected+=("$p")
	fi
done
((${#selected[@]})) || die "no program named ${ONLY[*]} (see --list)"

if ((DO_BUILD)); then
	[[ -d $BUILD ]] || meson setup "$BUILD" -Dbuildtype=release
	ninja -C "$BUILD"
fi

# ---- the daemon ----
DAEMON_PID=
stop_daemon() {
	if [[ -n $DAEMON_PID ]] && kill -0 "$DAEMON_PID" 2>/dev/null; then
		kill "$DAEMON_PID" 2>/dev/null || true
		for _ in $(seq 50); do kill -0 "$DAEMON_PID" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$DAEMON_PID" 2>/dev/null || true
		wait "$DAEMON_PID" 2>/dev/null || true
	fi
	DAEMON_PID=
}
trap stop_daemon EXIT
trap 'exit 130' INT TERM

# True when something listens on 127.0.0.1:$PORT (read from /proc: no probe
# connection for the daemon to log, and no ss/netstat needed).
port_listening() {
	local hex
	hex=$(printf '0100007F:%04X' "$PORT")
	awk -v a="$hex" '$2 == a && $4 == "0A" { f = 1 } END { exit !f }' /proc/net/tcp
}

start_daemon() {
	local log=$OUTDIR/remorad.log
	echo "=== remorad start $(date -Is)" >>"$log"
	"$BUILD/backend/remorad" --listen "127.0.0.1:$PORT" --set allow_anonymous=yes --set "nccl_library=$NCCL_LIB" \
		>>"$log" 2>&1 &
	DAEMON_PID=$!
	for _ in $(seq 100); do
		port_listening && return 0
		kill -0 "$DAEMON_PID" 2>/dev/null || break
		sleep 0.1
	done
	tail -n 20 "$log" >&2
	die "remorad did not come up on 127.0.0.1:$PORT (log: $log)"
}

port_listening && die "127.0.0.1:$PORT is already in use (use --port)"
[[ -x $BUILD/backend/remorad ]] || die "$BUILD/backend/remorad is missing"
[[ -x $BUILD/cli/remora ]] || die "$BUILD/cli/remora is missing"
: >"$OUTDIR/remorad.log"
start_daemon
{ nvidia-smi -L 2>/dev/null || true; } >"$OUTDIR/gpu.txt"

# ---- running ----
# run_one KIND NAME CMD...: runs CMD under timeout, stdout/stderr to
# $OUTDIR/NAME.KIND.{out,err}; sets RC and WALL.
run_one() {
	local kind=$1 name=$2 t0 t1
	shift 2
	t0=$(date +%s.%N)
	RC=0
	timeout -k 10 "$TIMEOUT_S" "$@" >"$OUTDIR/$name.$kind.out" 2>"$OUTDIR/$name.$kind.err" || RC=$?
	t1=$(date +%s.%N)
	WALL=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
	if ((RC == 124 || RC == 137)); then
		echo "gpu-suite: $name ($kind) timed out after ${TIMEOUT_S}s" >>"$OUTDIR/$name.$kind.err"
	fi
}

# The time_ lines of a file as "key=value,..." with the prefix dropped.
time_figures() {
	local f
	f=$(grep '^time_' "$1" | sed 's/^time_//' | paste -sd, - || true)
	echo "${f:--}"
}

TABLE=$OUTDIR/table.txt
row() { printf '%-18s %6s %6s %-5s %8s %8s  %-32s %s\n' "$@"; }
row program native remote same nat_s rem_s native_time remote_time | tee "$TABLE"
if [[ -n $MULTIGPU_SKIPPED ]]; then
	echo "gpu-suite: 2-GPU programs skipped: this host has ${NGPUS:-0} GPU(s):$MULTIGPU_SKIPPED" | tee -a "$TABLE"
fi

failed=0
for p in "${selected[@]}"; do
	name=${p%%|*}
	read -r -a cmd <<<"${p#*|}"
	exe=$BUILD/${cmd[0]}
	# Not a program of the build tree (python3): the one on the PATH.
	if [[ ! -e $exe ]] && command -v "${cmd[0]}" >/dev/null; then
		exe=$(command -v "${cmd[0]}")
	fi
	args=("${cmd[@]:1}")
	for i in "${!args[@]}"; do
		# An argument naming a file in the build tree is passed as that path.
		if [[ -e $BUILD/${args[i]} ]]; then
			args[i]=$BUILD/${args[i]}
		fi
	done
	if [[ ! -x $exe ]]; then
		row "$name" missing missing no - - - - | tee -a "$TABLE"
		failed=1
		continue
	fi

	run_one native "$name" "$exe" "${args[@]}"
	nrc=$RC nwall=$WALL
	if ! kill -0 "$DAEMON_PID" 2>/dev/null; then
		echo "gpu-suite: remorad died before $name; restarting it" | tee -a "$OUTDIR/remorad.log" "$TABLE" >&2
		failed=1
		wait "$DAEMON_PID" 2>/dev/null || true
		start_daemon
	fi
	run_one remote "$name" "$BUILD/cli/remora" run --server "127.0.0.1:$PORT" -- "$exe" "${args[@]}"
	rrc=$RC rwall=$WALL

	same=yes
	if ! diff <(grep -v '^time_' "$OUTDIR/$name.native.out" || true) \
		<(grep -v '^time_' "$OUTDIR/$name.remote.out" || true) >"$OUTDIR/$name.diff"; then
		same=no
	else
		rm -f "$OUTDIR/$name.diff"
	fi
	if ((nrc != 0 || rrc != 0)) || [[ $same != yes ]]; then
		failed=1
	fi
	row "$name" "$nrc" "$rrc" "$same" "$nwall" "$rwall" \
		"$(time_figures "$OUTDIR/$name.native.out")" \
		"$(time_figures "$OUTDIR/$name.remote.out")" | tee -a "$TABLE"
done

# The fault suite (tests/robustness/fault_suite.py): each kind of fault with a bystander, a
# client of another tenant and a newcomer, each on a remorad of its own on the real driver.
if ((FAULTS)); then
	for kind in address assert unreported departing timeout partial; do
		if python3 tests/robustness/fault_suite.py "$kind" "$BUILD/backend/remorad" real "$BUILD/cli/remora" \
			"$BUILD/tests/robustness/fault_probe" "$BUILD/tests/programs/kernels.cubin" \
			>"$OUTDIR/fault-$kind.out" 2>&1; then
			verdict=pass
		else
			verdict=FAIL failed=1
		fi
		row "fault-$kind" - "$verdict" - - - - "$(grep '^newcomer' "$OUTDIR/fault-$kind.out" | paste -sd, - || echo -)" | tee -a "$TABLE"
	done
fi

# Compressed copies on the real driver (tests/link/compress_check.py, REMORA_COMPRESS=always
# over loopback: bytes compared, compression used for compressible data only), where the
# build found libzstd.
if grep -q RM_HAVE_ZSTD "$BUILD/build.ninja"; then
	if python3 tests/link/compress_check.py "$BUILD/backend/remorad" real "$BUILD/frontend" >"$OUTDIR/compress.out" 2>&1; then
		verdict=pass
	else
		verdict=FAIL failed=1
	fi
	row "compress-always" - "$verdict" - - - - - | tee -a "$TABLE"
fi

if ((failed)); then
	echo "gpu-suite: FAIL (outputs in $OUTDIR)" | tee -a "$TABLE"
	exit 1
fi
echo "gpu-suite: PASS (outputs in $OUTDIR)" | tee -a "$TABLE"
