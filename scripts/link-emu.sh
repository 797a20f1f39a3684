#!/usr/bin/env bash
# The emulated link (docs/performance.md "The emulated link"): runs a command on one side
# of a link with a round-trip time and a rate, with the daemon's side one step away.
#
# usage: link-emu.sh rtt=50us,rate=25gbit [--] CMD [ARG...]
#        link-emu.sh bundle DIR      copy ip, tc and their non-libc libraries into DIR
#
# Three network namespaces per run, named after this process (two runs never collide):
# the client's (10.77.0.1, CMD runs there), the server's (10.77.0.2) and between them the
# wire's, where remora-link's delay line bridges two veth pairs. tbf on each end's veth
# sets the rate; the delay line adds the round trip less what the path takes without it
# (measured first, then subtracted). The link is then measured (remora-link probe) and
# printed, and CMD gets in its environment:
#   REMORA_LINK            the spec as given
#   REMORA_LINK_SERVER_NS  the server's namespace: `remora-link exec $REMORA_LINK_SERVER_NS CMD`
#   REMORA_LINK_SERVER_IP  10.77.0.2, where a daemon there listens
#   REMORA_LINK_TOOL       the remora-link binary
#   REMORA_LINK_RTT_US, REMORA_LINK_GBPS   the link as measured
# Everything is removed on exit, on failure too. Exit status: CMD's; 77 with one line when
# this machine cannot make namespaces or tbf (not root); 2 for a bad spec.
# ip and tc come from REMORA_LINK_IPROUTE or iproute/ beside this script (a folder that
# `bundle` made: the build makes one), else from the PATH; remora-link from beside this
# script or REMORA_LINK_TOOL.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
say() { echo "link-emu: $*" >&2; }

if [[ ${1:-} == bundle ]]; then
	DIR=${2:?link-emu.sh bundle DIR}
	mkdir -p "$DIR/lib"
	for b in ip tc; do
		p=$(PATH=/usr/sbin:/sbin:$PATH command -v "$b") || { say "no $b on this machine"; exit 1; }
		cp -fL "$p" "$DIR/$b"
		# Every library but glibc's own, which the GPU host has (the same glibc the build runs on).
		ldd "$p" | awk '/=> \// { print $3 }' | grep -Ev '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*)\.so' |
			while read -r lib; do cp -fL "$lib" "$DIR/lib/"; done
	done
	exit 0
fi

SPEC=${1:-}
shift || true
[[ ${1:-} == -- ]] && shift
RTT_NS='' RATE_BPS=''
IFS=, read -ra parts <<<"$SPEC"
for p in "${parts[@]}"; do
	case $p in
	rtt=*) RTT_NS=$(awk -v v="${p#rtt=}" 'BEGIN { if (match(v, /^[0-9.]+(ns|us|ms|s)$/)) {
		n = v + 0; u = substr(v, length(v + 0) + 1); m = u == "ns" ? 1 : u == "us" ? 1e3 : u == "ms" ? 1e6 : 1e9
		printf "%.0f", n * m } }') ;;
	rate=*) RATE_BPS=$(awk -v v="${p#rate=}" 'BEGIN { if (match(v, /^[0-9.]+(kbit|mbit|gbit)$/)) {
		n = v + 0; u = substr(v, length(v + 0) + 1); m = u == "kbit" ? 1e3 : u == "mbit" ? 1e6 : 1e9
		printf "%.0f", n * m } }') ;;
	*) RTT_NS='' RATE_BPS=''; break ;;
	esac
done
if [[ -z $RTT_NS || -z $RATE_BPS || $RATE_BPS == 0 || $# == 0 ]]; then
	say "usage: link-emu.sh rtt=TIME,rate=RATE -- CMD (both required: TIME as 50us, 2ms; RATE as 200mbit, 25gbit); got '$SPEC'"
	exit 2
fi
RATE=${SPEC#*rate=}; RATE=${RATE%%,*}

TOOL=${REMORA_LINK_TOOL:-$HERE/remora-link}
[[ -x $TOOL ]] || { say "no remora-link beside this script (build it, or set REMORA_LINK_TOOL)"; exit 1; }
IPROUTE=${REMORA_LINK_IPROUTE:-$HERE/iproute}
if [[ -x $IPROUTE/ip && -x $IPROUTE/tc ]]; then
	ip() { LD_LIBRARY_PATH=$IPROUTE/lib "$IPROUTE/ip" "$@"; }
	tc() { LD_LIBRARY_PATH=$IPROUTE/lib "$IPROUTE/tc" "$@"; }
elif ! PATH=/usr/sbin:/sbin:$PATH command -v ip >/dev/null || ! PATH=/usr/sbin:/sbin:$PATH command -v tc >/dev/null; then
	say "no ip or tc here, nor bundled beside this script (link-emu.sh bundle $HERE/iproute)"
	exit 77
else
	export PATH=/usr/sbin:/sbin:$PATH
fi

ID=$$-$RANDOM
NSC=remora-link-$ID-c NSM=remora-link-$ID-m NSS=remora-link-$ID-s
PIDS=() MADE=()
cleanup() {
	local rc=$?
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	for ns in "${MADE[@]}"; do # whatever CMD left running in them (a daemon it started)
		for p in $(ip netns pids "$ns" 2>/dev/null); do kill "$p" 2>/dev/null || true; done
	done
	wait 2>/dev/null || true
	for ns in "${MADE[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Namespaces of runs whose script is gone (killed by SIGKILL) go first.
for ns in $(ip netns list 2>/dev/null | awk '/^remora-link-[0-9]+-[0-9]+-[cms]( |$)/ { print $1 }'); do
	owner=${ns#remora-link-}
	kill -0 "${owner%%-*}" 2>/dev/null && continue
	for p in $(ip netns pids "$ns" 2>/dev/null); do kill "$p" 2>/dev/null || true; done
	ip netns del "$ns" 2>/dev/null || true
done
for ns in "$NSC" "$NSM" "$NSS"; do
	if ! err=$(ip netns add "$ns" 2>&1); then
		say "cannot make a network namespace here ($err): skipped"
		exit 77
	fi
	MADE+=("$ns")
done
# The wire's latency: bursts of at most two 64 KiB segments, or 50 us at the rate.
BURST=$(awk -v r="$RATE_BPS" 'BEGIN { b = r / 8 * 50e-6; printf "%d", (b > 140000 ? b : 140000) }')
LIMIT=$(awk -v r="$RATE_BPS" 'BEGIN { b = r / 8 * 0.02; printf "%d", (b > 4194304 ? b : 4194304) }')
for pair in "c0 $NSC c1" "s0 $NSS s1"; do
	read -r end ns wire <<<"$pair"
	if ! err=$(ip link add "$end" netns "$ns" type veth peer name "$wire" netns "$NSM" 2>&1); then
		say "cannot make a veth pair here ($err): skipped"
		exit 77
	fi
done
for side in "$NSC c0 10.77.0.1" "$NSS s0 10.77.0.2"; do
	read -r ns dev addr <<<"$side"
	ip -n "$ns" addr add "$addr/24" dev "$dev"
	ip -n "$ns" link set lo up
	ip -n "$ns" link set "$dev" up
	if ! err=$(tc -n "$ns" qdisc add dev "$dev" root tbf rate "$RATE_BPS"bit burst "$BURST" limit "$LIMIT" 2>&1); then
		say "tc tbf is not available here ($err): skipped"
		exit 77
	fi
done
ip -n "$NSM" link set c1 up
ip -n "$NSM" link set s1 up

MODE='sleep'
# Spinning takes two cores a lane for the run: only where there are cores to spare. Above
# 25 Gbit/s two lanes a direction (flows hashed over them: copy links spread over cores),
# or REMORA_LINK_LANES.
((RTT_NS < 1000000 && $(nproc) >= 8)) && MODE=spin
LANES=${REMORA_LINK_LANES:-1}
[[ -z ${REMORA_LINK_LANES:-} ]] && ((RATE_BPS > 25000000000 && $(nproc) >= 16)) && LANES=2
start_relay() {
	"$TOOL" exec "$NSM" "$TOOL" relay c1 s1 "$1" "$MODE" "$LANES" >/dev/null &
	RELAY=$!
	PIDS+=("$RELAY")
}
probe() { "$TOOL" exec "$NSC" "$TOOL" probe 10.77.0.2 7 "$1"; }
field() { sed -n "s/.*\b$1=\([0-9.]*\).*/\1/p" <<<"$2"; }

"$TOOL" exec "$NSS" "$TOOL" probe-server 10.77.0.2 7 >/dev/null &
PROBE_SERVER=$!
PIDS+=("$PROBE_SERVER")
# What the path adds besides the delay (the stacks, the relay, a sleeping relay's wake-up),
# measured with a small delay in the mode the run uses, is taken off the delay: its least
# round trip, since a loaded machine's median would take off too much.
CAL_NS=0
[[ $MODE == sleep ]] && CAL_NS=200000
# A loaded machine can hold up even the least for a moment: the least of three tries, and
# never more than 200 us taken off (a real path's own is tens of microseconds).
start_relay $CAL_NS
BASE_US=
for _ in 1 2 3; do
	BASE=$(probe 0.2) || { say "the link does not carry a probe"; exit 1; }
	BASE_US=$(awk -v m="$(field rtt_min_us "$BASE")" -v c=$CAL_NS -v b="$BASE_US" 'BEGIN {
		v = m - 2 * c / 1e3; if (b != "" && b < v) v = b; printf "%.1f", v }')
	awk -v b="$BASE_US" 'BEGIN { exit !(b < 200) }' && break
done
BASE_US=$(awk -v b="$BASE_US" 'BEGIN { printf "%.1f", (b < 0 ? 0 : b < 200 ? b : 200) }')
kill "$RELAY"; wait "$RELAY" 2>/dev/null || true
DELAY_NS=$(awk -v r="$RTT_NS" -v b="$BASE_US" 'BEGIN { d = (r - b * 1e3) / 2; printf "%d", (d > 0 ? d : 0) }')
start_relay "$DELAY_NS"
SECONDS_PROBE=$(awk -v r="$RATE_BPS" 'BEGIN { print r < 1e9 ? 1 : 0.5 }')
MEASURED=$(probe "$SECONDS_PROBE") || { say "the link does not carry a probe"; exit 1; }
kill "$PROBE_SERVER"; wait "$PROBE_SERVER" 2>/dev/null || true
export REMORA_LINK=$SPEC REMORA_LINK_SERVER_NS=$NSS REMORA_LINK_SERVER_IP=10.77.0.2 REMORA_LINK_TOOL=$TOOL
REMORA_LINK_RTT_US=$(field rtt_us "$MEASURED")
REMORA_LINK_GBPS=$(field gbps "$MEASURED")
export REMORA_LINK_RTT_US REMORA_LINK_GBPS
say "link set rtt=$((RTT_NS / 1000))us rate=$RATE; measured rtt ${REMORA_LINK_RTT_US} us, one TCP stream ${REMORA_LINK_GBPS} Gbit/s (the path's own: ${BASE_US} us; delay line $MODE, $((DELAY_NS / 1000)) us each way, $LANES lane(s))"
set +e
"$TOOL" exec "$NSC" "$@"
exit $?
