#!/bin/sh
# The main job: on a GPU host, start remorad and run a CUDA program through it.
# usage: scripts/run.sh [PROGRAM [ARGS...]]   (default: the vector-add test program)
set -eu
cd "$(dirname "$0")/.."
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
	echo "remora: this machine has no usable NVIDIA GPU (nvidia-smi finds none)." >&2
	echo "Run this on a GPU host with the NVIDIA driver; elsewhere point programs at one:" >&2
	echo "  remorad on the GPU host, then here: build/cli/remora run --server GPUHOST:7700 -- PROGRAM" >&2
	exit 1
fi
scripts/setup.sh
[ -f build/build.ninja ] || meson setup build -Dtoolkit_dir="${CUDA_HOME:-/usr/local/cuda}"
ninja -C build
log=$(mktemp)
build/backend/remorad --listen tcp://127.0.0.1:0 --set allow_anonymous=yes --ready-file "$log.addr" 2>"$log" &
pid=$!
trap 'kill $pid 2>/dev/null; rm -f "$log" "$log.addr"' EXIT
while [ ! -s "$log.addr" ]; do
	kill -0 $pid 2>/dev/null || { cat "$log" >&2; exit 1; }
	sleep 0.1
done
if [ $# -eq 0 ]; then
	set -- build/tests/rtprograms/rt_vecadd
fi
echo "remora: running $* on $(nvidia-smi -L | head -1) through remorad at $(cat "$log.addr")" >&2
build/cli/remora run --server "$(cat "$log.addr")" -- "$@"
