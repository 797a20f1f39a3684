#!/usr/bin/env bash
# Where the time of launch + synchronize goes with N busy clients (docs/hotpath.md):
# N `bench_worker latency` clients released together against a private remorad with
# REMORA_PROFILE=calls, then the clients' percentiles and, per part of remorad's calls,
# how the sessions' p50, p99 and p99.9 spread (the call profile's spread= lines).
#
# usage: scripts/latency-profile.sh BUILD [N] [--transport shm|tcp] [--iters K] [--driver LIB]
#
# BUILD is a configured and built build directory; N clients (default 16), each timing K
# pairs (default 5000), over shared memory (default) or loopback TCP. On a GPU host the real
# driver serves remorad; --driver LIB serves it from another (the CPU test driver, where
# the figures say only that the tool works). KEEP=DIR keeps remorad's log. Prints
# name=value lines: clients_p50_us (the median of the clients' medians), clients_p99_us
# (the median client's p99), clients_p99_max_us, then per part
# "part=NAME sessions=S p50_us=... p99_us=... p999_us=... p999_max_us=... mean_us=...",
# each the median over the sessions but p999_max_us, their largest.
set -euo pipefail

usage() { echo "usage: latency-profile.sh BUILD [N] [--transport shm|tcp] [--iters K] [--driver LIB]" >&2; exit 2; }
die() { echo "latency-profile: $*" >&2; exit 2; }

BUILD=${1:-}
[[ -n $BUILD ]] || usage
shift
N=16
if [[ ${1:-} =~ ^[0-9]+$ ]]; then N=$1; shift; fi
TRANSPORT=shm ITERS=5000 DRIVER=
while [[ $# -gt 0 ]]; do
	case $1 in
	--transport) TRANSPORT=${2:?}; shift 2 ;;
	--iters) ITERS=${2:?}; shift 2 ;;
	--driver) DRIVER=${2:?}; shift 2 ;;
	*) usage ;;
	esac
done
[[ $TRANSPORT == shm || $TRANSPORT == tcp ]] || die "--transport is shm or tcp, not $TRANSPORT"
(( N >= 1 && N <= 256 )) || die "N is 1 to 256"
for f in backend/remorad cli/remora bench/bench_worker bench/bench_kernels.fatbin; do
	[[ -e $BUILD/$f ]] || die "$BUILD/$f missing: build first (ninja -C $BUILD; bench_worker needs nvcc)"
done

dir=$(mktemp -d)
pid=
cleanup() {
	[[ -n $pid ]] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	[[ -n ${KEEP:-} ]] && mkdir -p "$KEEP" && cp "$dir/remorad.log" "$KEEP/" 2>/dev/null
	rm -rf "$dir"
}
trap cleanup EXIT

listen=tcp://127.0.0.1:0
[[ $TRANSPORT == shm ]] && listen=unix:$dir/remorad.sock
REMORA_PROFILE=calls "$BUILD/backend/remorad" --listen "$listen" --set allow_anonymous=yes \
	--ready-file "$dir/addr" ${DRIVER:+--driver "$DRIVER"} 2>"$dir/remorad.log" &
pid=$!
for _ in $(seq 200); do [[ -s $dir/addr ]] && break; sleep 0.05; done
[[ -s $dir/addr ]] || { cat "$dir/remorad.log" >&2; die "remorad did not start"; }
server=$(cat "$dir/addr")
[[ $TRANSPORT == shm ]] && server=$listen

# The start gate: each client writes a byte on fd 3 once warm and waits for end-of-file
# on fd 4 (bench_worker's latency section); all go at once.
cat >"$dir/gate.py" <<'EOF'
import os, subprocess, sys
n, cmd = int(sys.argv[1]), sys.argv[2:]
ready_r, ready_w = os.pipe()
go_r, go_w = os.pipe()
def fds():
    os.dup2(ready_w, 3)
    os.dup2(go_r, 4)
procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, preexec_fn=fds, pass_fds=(3, 4)) for _ in range(n)]
os.close(ready_w)
os.close(go_r)
got = 0
while got < n:
    b = os.read(ready_r, 64)
    if not b:
        break
    got += len(b)
os.close(go_w)
failed = 0
for i, p in enumerate(procs):
    out, _ = p.communicate()
    if p.returncode:
        failed += 1
        continue
    d = dict(l.split("=", 1) for l in out.split() if "=" in l)
    print(d.get("latency_p50_us", "nan"), d.get("latency_p99_us", "nan"))
sys.exit(1 if failed else 0)
EOF
"$BUILD/cli/remora" run --server "$server" -- python3 "$dir/gate.py" "$N" \
	"$BUILD/bench/bench_worker" "$BUILD/bench/bench_kernels.fatbin" latency "$ITERS" >"$dir/clients" ||
	die "a client failed (remorad's log: KEEP=DIR keeps it)"

# Sessions log their profile when they end: wait until all N have, then stop remorad.
for _ in $(seq 200); do
	[[ $(grep -c 'remora-profile side=daemon session=[0-9]* wall_ms=' "$dir/remorad.log" || true) -ge $N ]] && break
	sleep 0.05
done
kill "$pid" && wait "$pid" 2>/dev/null || true
pid=

python3 - "$dir/clients" "$dir/remorad.log" "$N" <<'EOF'
import re, statistics, sys
clients, log, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
p50s, p99s = [], []
for line in open(clients):
    a, b = line.split()
    p50s.append(float(a)); p99s.append(float(b))
if len(p50s) != n:
    sys.exit(f"latency-profile: {len(p50s)} of {n} clients reported")
print(f"clients={n}")
print(f"clients_p50_us={statistics.median(p50s):.2f}")
print(f"clients_p99_us={statistics.median(p99s):.2f}")
print(f"clients_p99_max_us={max(p99s):.2f}")
spreads, means = {}, {}
for line in open(log):
    m = re.search(r"session=\d+ spread=(\S+) p50_us=(\S+) p99_us=(\S+) p999_us=(\S+)", line)
    if m:
        spreads.setdefault(m[1], []).append(tuple(float(x) for x in m.groups()[1:]))
    m = re.search(r"session=\d+ part=(\S+) calls=\d+ mean_us=(\S+)", line)
    if m:
        means.setdefault(m[1], []).append(float(m[2]))
if not spreads:
    sys.exit("latency-profile: remorad logged no spread= lines")
for name, rows in spreads.items():
    col = lambda i: statistics.median(r[i] for r in rows)
    mean = f" mean_us={statistics.median(means[name]):.3f}" if name in means else ""
    print(f"part={name} sessions={len(rows)} p50_us={col(0):.3f} p99_us={col(1):.3f} p999_us={col(2):.3f} "
          f"p999_max_us={max(r[2] for r in rows):.3f}{mean}")
EOF
