#!/bin/sh
# The main job: on a GPU host, start remorad and run a CUDA program through it.
# usage: scripts/run.sh [PROGRAM [ARGS...]]   (default: the vector-add test program)
#        scripts/run.sh --cpu-stand-in [PROGRAM [ARGS...]]
# --cpu-stand-in, on a machine without a GPU, serves remorad from the CPU test driver
# (tests/testdriver: it runs the test programs' own kernels on the CPU) to try the
# plumbing: client library, protocol, daemon. It is a stand-in, never a GPU.
set -eu
cd "$(dirname "$0")/.."
stand_in=
if [ "${1:-}" = --cpu-stand-in ]; then
	stand_in=1
	shift
fi
if [ -z "$stand_in" ] && { ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; }; then
	echo "remora: this machine has no usable NVIDIA GPU (nvidia-smi finds none)." >&2
	echo "Run this on a GPU host with the NVIDIA driver; elsewhere point programs at one:" >&2
	echo "  remorad on the GPU host, then here: build/cli/remora run --server GPUHOST:7700 -- PROGRAM" >&2
	echo "To try the plumbing here, with a CPU test driver standing in for the GPU (not a GPU):" >&2
	echo "  scripts/run.sh --cpu-stand-in" >&2
	exit 1
fi
scripts/setup.sh
[ -f build/build.ninja ] || meson setup build -Dtoolkit_dir="${CUDA_HOME:-/usr/local/cuda}"
ninja -C build
driver=libcuda.so.1
where=$(command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | head -1 || true)
if [ -n "$stand_in" ]; then
	driver=build/tests/testdriver/libremora-testdriver.so
	where="the CPU test driver (a stand-in for trying the plumbing, NOT a GPU)"
fi
log=$(mktemp)
build/backend/remorad --listen tcp://127.0.0.1:0 --set allow_anonymous=yes --driver "$driver" --ready-file "$log.addr" 2>"$log" &
pid=$!
trap 'kill $pid 2>/dev/null; rm -f "$log" "$log.addr"' EXIT
while [ ! -s "$log.addr" ]; do
	kill -0 $pid 2>/dev/null || { cat "$log" >&2; exit 1; }
	sleep 0.1
done
if [ $# -eq 0 ]; then
	set -- build/tests/rtprograms/rt_vecadd
fi
echo "remora: running $* on $where through remorad at $(cat "$log.addr")" >&2
build/cli/remora run --server "$(cat "$log.addr")" -- "$@"
