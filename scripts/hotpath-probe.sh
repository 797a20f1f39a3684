#!/usr/bin/env bash
# The hot path's figures in one run (docs/hotpath.md): loopback TCP as the
# transport sees it, then copies and launches natively and through Remora.
#
# usage: scripts/hotpath-probe.sh BUILD [MiB] [--driver LIB]
#
# BUILD is a configured and built build directory. On a GPU host the real
# driver is used; --driver LIB serves remorad from another driver (the CPU
# test driver: BUILD/tests/testdriver/libremora-testdriver.so; copies only, its
# native side then LIB's directory). Prints name=value lines; "ratio" lines are
# remote/native, "of_tcp" lines remote copy rate over loopback TCP throughput.
set -euo pipefail

BUILD=${1:?usage: hotpath-probe.sh BUILD [MiB] [--driver LIB]}
MIB=${2:-1024}
DRIVER=
if [[ ${3:-} == --driver ]]; then
	DRIVER=${4:?--driver needs a library}
fi
LAUNCHES=20000

die() { echo "hotpath-probe: $*" >&2; exit 2; }
for f in transport/transport-probe backend/remorad cli/remora tests/programs/drv_memcpy tests/rtprograms/rt_empty; do
	[[ -x $BUILD/$f ]] || die "$BUILD/$f missing: build first (ninja -C $BUILD)"
done

dir=$(mktemp -d)
pid=
cleanup() { [[ -n $pid ]] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"; }
trap cleanup EXIT

"$BUILD/backend/remorad" --listen tcp://127.0.0.1:0 --set allow_anonymous=yes --ready-file "$dir/addr" ${DRIVER:+--driver "$DRIVER"} \
	2>"$dir/remorad.log" &
pid=$!
for _ in $(seq 100); do [[ -s $dir/addr ]] && break; sleep 0.05; done
[[ -s $dir/addr ]] || { cat "$dir/remorad.log" >&2; die "remorad did not start"; }
server=$(cat "$dir/addr")

native() {
	if [[ -n $DRIVER ]]; then LD_LIBRARY_PATH=$(dirname "$DRIVER") "$@"; else "$@"; fi
}
remote() { "$BUILD/cli/remora" run --server "$server" -- "$@"; }
value() { sed -n "s/^$1=//p" "$2" | head -1; }

"$BUILD/transport/transport-probe" --rtt 20000 --mib 4096 >"$dir/tcp"
tcp_rtt=$(value rtt_us "$dir/tcp")
tcp_mib=$(value bulk_mib_per_s "$dir/tcp")
echo "tcp_rtt_us=$tcp_rtt"
echo "tcp_mib_per_s=$tcp_mib"

image=$BUILD/tests/programs/kernels.fatbin
[[ -n $DRIVER ]] && image=$BUILD/tests/programs/kernels.ptx
native "$BUILD/tests/programs/drv_memcpy" "$image" "$MIB" >"$dir/copy.native"
remote "$BUILD/tests/programs/drv_memcpy" "$image" "$MIB" >"$dir/copy.remote"
for k in pageable_h2d pageable_d2h pinned_h2d pinned_d2h; do
	n=$(value "time_${k}_mib_per_s" "$dir/copy.native")
	r=$(value "time_${k}_mib_per_s" "$dir/copy.remote")
	echo "${k}_mib_per_s native=$n remote=$r of_tcp=$(awk -v r="$r" -v t="$tcp_mib" 'BEGIN{printf "%.2f", r/t}')"
done

if [[ -n $DRIVER ]]; then # the CPU test driver serves cudart only through remorad
	echo "launches: measured on a GPU host only"
	exit 0
fi
native "$BUILD/tests/rtprograms/rt_empty" $LAUNCHES >"$dir/launch.native"
remote "$BUILD/tests/rtprograms/rt_empty" $LAUNCHES >"$dir/launch.remote"
na=$(value time_async_us "$dir/launch.native"); ra=$(value time_async_us "$dir/launch.remote")
ns=$(value time_sync_us "$dir/launch.native"); rs=$(value time_sync_us "$dir/launch.remote")
echo "async_launch_us native=$na remote=$ra ratio=$(awk -v a="$ra" -v b="$na" 'BEGIN{printf "%.2f", a/b}') (target 1.5)"
echo "launch_sync_us native=$ns remote=$rs extra_in_rtt=$(awk -v a="$rs" -v b="$ns" -v t="$tcp_rtt" 'BEGIN{printf "%.2f", (a-b)/t}') (target 1.5)"
