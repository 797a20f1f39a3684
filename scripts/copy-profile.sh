#!/usr/bin/env bash
# Where a large copy's time goes, on both sides, without perf (docs/hotpath.md).
#
# usage: scripts/copy-profile.sh BUILD [--driver LIB] [--max BYTES]
#
# BUILD is a configured and built build directory. Measures loopback TCP with
# `remora bench --only tcp` (the yardstick, and the cold and multi-stream
# figures beside it), then starts remorad as `remora bench` does and runs
# bench_worker's copies (4 KiB .. BYTES, default 1 GiB) natively and through
# it, with REMORA_PROFILE=copies:MIN exported to the daemon and the client.
# For each copy of MIN (256 MiB, or BYTES when smaller) and more it prints the
# rate against loopback TCP and a summary of the profile lines of both sides.
# On a GPU host the real driver is used; --driver LIB serves remorad from
# another driver (the CPU test driver: BUILD/tests/testdriver/libremora-testdriver.so),
# its directory then also the native side's libcuda.so.1.
# The raw profile lines are kept when KEEP=DIR is set (copied there).
set -euo pipefail

usage="usage: copy-profile.sh BUILD [--driver LIB] [--max BYTES]"
BUILD=${1:?$usage}
shift
DRIVER=
MAX=$((1 << 30))
while [[ $# -gt 0 ]]; do
	case $1 in
	--driver) DRIVER=${2:?--driver needs a library}; shift 2 ;;
	--max) MAX=${2:?--max needs a byte count}; shift 2 ;;
	*) echo "$usage" >&2; exit 2 ;;
	esac
done

die() { echo "copy-profile: $*" >&2; exit 2; }
for f in cli/remora backend/remorad bench/bench_worker bench/bench_kernels.fatbin frontend/libcuda.so.1; do
	[[ -e $BUILD/$f ]] || die "$BUILD/$f missing: build first (ninja -C $BUILD)"
done
[[ $MAX =~ ^[0-9]+$ && $MAX -ge 4096 ]] || die "--max wants a byte count of at least 4096"
BUILD=$(cd "$BUILD" && pwd)
if [[ -n $DRIVER ]]; then
	DRIVER=$(cd "$(dirname "$DRIVER")" && pwd)/$(basename "$DRIVER")
	[[ -e $(dirname "$DRIVER")/libcuda.so.1 ]] || die "$(dirname "$DRIVER") has no libcuda.so.1 for the native side"
fi
MIN=$((256 << 20))
((MIN <= MAX)) || MIN=$MAX

dir=$(mktemp -d /tmp/copy-profile.XXXXXX)
pid=
cleanup() {
	if [[ -n $pid ]]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
	if [[ -n ${KEEP:-} ]]; then mkdir -p "$KEEP" && cp "$dir"/* "$KEEP"/; fi
	rm -rf "$dir"
}
trap cleanup EXIT

echo "host: $(nproc) CPUs, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), kernel $(uname -r)"
echo "tcp_rmem: $(cat /proc/sys/net/ipv4/tcp_rmem), tcp_wmem: $(cat /proc/sys/net/ipv4/tcp_wmem)"

# Loopback TCP, exactly as remora bench measures it.
bench_opts=()
[[ -n $DRIVER ]] && bench_opts=(--driver "$DRIVER" --native-lib "$(dirname "$DRIVER")")
timeout 300 "$BUILD/cli/remora" bench --only tcp --json "${bench_opts[@]}" >"$dir/tcp.json" 2>"$dir/tcp.log" ||
	{ cat "$dir/tcp.log" >&2; die "remora bench --only tcp failed"; }
fact() { sed -n "s/^ *\"$1\": *\\([0-9.]*\\),\\{0,1\\}$/\\1/p" "$dir/tcp.json" | head -1; }
tcp=$(fact loopback_tcp_gbps)
cold=$(fact loopback_tcp_cold_gbps)
echo "loopback TCP: $tcp GB/s (the yardstick: 4 MiB writes from one reused buffer), round trip $(fact loopback_tcp_rtt_us) us"
echo "loopback TCP, $(fact loopback_tcp_cold_mib) MiB not cache resident: 1 stream $cold GB/s," \
	"2 streams $(fact loopback_tcp_cold_2_streams_gbps), 4 streams $(fact loopback_tcp_cold_4_streams_gbps)"

# remorad as remora bench starts it (bench/workers.c), profiling copies.
export REMORA_PROFILE=copies:$MIN
"$BUILD/backend/remorad" --listen tcp://127.0.0.1:0 --set allow_anonymous=yes --ready-file "$dir/remorad.addr" \
	${DRIVER:+--driver "$DRIVER"} >"$dir/remorad.log" 2>&1 &
pid=$!
for _ in $(seq 600); do [[ -s $dir/remorad.addr ]] && break; sleep 0.05; done
[[ -s $dir/remorad.addr ]] || { cat "$dir/remorad.log" >&2; die "remorad did not start"; }
server=$(head -1 "$dir/remorad.addr")

# bench_worker's own limit in remora bench is 600 s; a hung copy ends the run rather than the session.
worker=(timeout 600 "$BUILD/bench/bench_worker" "$BUILD/bench/bench_kernels.fatbin" memcpy "$MAX")
if [[ -n $DRIVER ]]; then
	LD_LIBRARY_PATH=$(dirname "$DRIVER")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "${worker[@]}" \
		>"$dir/native.out" 2>"$dir/native.err" || { cat "$dir/native.err" >&2; die "native copies failed"; }
else
	"${worker[@]}" >"$dir/native.out" 2>"$dir/native.err" || { cat "$dir/native.err" >&2; die "native copies failed"; }
fi
LD_LIBRARY_PATH=$BUILD/frontend${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} REMORA_SERVER=$server "${worker[@]}" \
	>"$dir/remote.out" 2>"$dir/client.log" || { tail -5 "$dir/client.log" >&2; die "remote copies failed"; }
kill "$pid" 2>/dev/null || true
wait "$pid" 2>/dev/null || true
pid=
grep '^remora-profile ' "$dir/client.log" >"$dir/client.prof" || true
grep '^remora-profile ' "$dir/remorad.log" >"$dir/daemon.prof" || true

echo
echo "Per copy, the mean of the timed copies (the first of each kind, a warm-up, left out);"
echo "% are shares of that side's wall time; CPU is the copying thread's."
for ((bytes = 4096; bytes <= MAX; bytes *= 4)); do
	((bytes >= MIN)) || continue
	for dir_name in h2d d2h; do
		op=cuMemcpyHtoD_v2; [[ $dir_name == d2h ]] && op=cuMemcpyDtoH_v2
		key=memcpy.$dir_name.pageable.$bytes.gbps
		nat=$(sed -n "s/^$key=//p" "$dir/native.out")
		rem=$(sed -n "s/^$key=//p" "$dir/remote.out")
		awk -v op="$op" -v bytes="$bytes" -v dirn="$dir_name" -v nat="${nat:-nan}" -v rem="${rem:-nan}" \
			-v tcp="$tcp" -v cold="$cold" '
		function field(line, name,   i, n, kv, parts) {
			n = split(line, parts, " ")
			for (i = 1; i <= n; i++) {
				split(parts[i], kv, "=")
				if (kv[1] == name) return kv[2]
			}
			return ""
		}
		function size(b) { return b >= 2^30 ? b / 2^30 " GiB" : b / 2^20 " MiB" }
		function pct(a, b) { return b > 0 ? sprintf("%.0f%%", 100 * a / b) : "-" }
		function ratio(a, b) { return b > 0 ? sprintf("%.2f", a / b) : "-" }
		# The client tags each line pageable or pinned; the daemon serves one client in
		# order, so its k-th line of this op and size belongs to the client line k.
		{ file = FILENAME == ARGV[1] ? 1 : 2 }
		$0 ~ (" op=" op " ") && field($0, "bytes") == bytes {
			n[file]++
			line[file, n[file]] = $0
		}
		END {
			printf "%s pageable %s: remote %s GB/s, native %s; %s of loopback TCP (target 0.85), %s of cold loopback\n",
				toupper(dirn), size(bytes), rem, nat, ratio(rem, tcp), ratio(rem, cold)
			names[1] = "client"; names[2] = "daemon"
			split("wall_us user_us sys_us send_calls send_us recv_calls recv_us wait_calls wait_us dma_calls dma_us prefault_us minflt vcsw ivcsw", keys, " ")
			for (f = 1; f <= 2; f++) {
				copies = 0
				warm = 0
				for (j in keys) sum[keys[j]] = 0
				for (k = 1; k <= n[1] && k <= n[f]; k++) {
					if (field(line[1, k], "host") != "pageable") continue
					if (!warm) { warm = 1; continue }
					copies++
					for (j in keys) sum[keys[j]] += field(line[f, k], keys[j])
				}
				if (!copies) { printf "  %s: no profile lines (REMORA_PROFILE not seen?)\n", names[f]; continue }
				for (j in keys) sum[keys[j]] /= copies
				w = sum["wall_us"]
				# The bulk goes out of the client and into the daemon for H2D, the other way for D2H.
				bulk = (f == 1) == (dirn == "h2d") ? "send" : "recv"
				other = bulk == "send" ? "recv" : "send"
				printf "  %s: %d copies, %.1f ms each; in socket calls %s: %s %s in %d calls (%.0f KiB each), %s %s in %d",
					names[f], copies, w / 1000, pct(sum["send_us"] + sum["recv_us"], w),
					bulk, pct(sum[bulk "_us"], w), sum[bulk "_calls"],
					sum[bulk "_calls"] ? bytes / sum[bulk "_calls"] / 1024 : 0,
					other, pct(sum[other "_us"], w), sum[other "_calls"]
				if (f == 2)
					printf "; waiting for staging/DMA %s (%d waits); in cuMemcpy*Async %s (%d calls)",
						pct(sum["wait_us"], w), sum["wait_calls"], pct(sum["dma_us"], w), sum["dma_calls"]
				else if (dirn == "d2h")
					printf "; waiting for the pre-fault helper %s, which used %s of a CPU",
						pct(sum["wait_us"], w), pct(sum["prefault_us"], w)
				printf "; CPU user %s sys %s; %d page faults; %d voluntary and %d forced context switches\n",
					pct(sum["user_us"], w), pct(sum["sys_us"], w), sum["minflt"], sum["vcsw"], sum["ivcsw"]
				cpu[f] = pct(sum["user_us"] + sum["sys_us"], w)
			}
			if (cpu[1] != "" && cpu[2] != "")
				printf "  busy: client thread %s, daemon thread %s of the wall time (one near 100%% bounds the copy; both well below: it waits on something else, the DMA or CPUs busy with other threads)\n",
					cpu[1], cpu[2]
		}' "$dir/client.prof" "$dir/daemon.prof"
	done
done
