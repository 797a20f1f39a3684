#!/bin/sh
# Sets up a fresh machine, builds Remora and runs every CI-safe test (no GPU needed).
set -eu
cd "$(dirname "$0")/.."
scripts/setup.sh
cuda=${CUDA_HOME:-/usr/local/cuda}
if [ ! -f build/build.ninja ]; then
	meson setup build -Dtoolkit_dir="$cuda"
fi
ninja -C build
meson test -C build --print-errorlogs "$@"
