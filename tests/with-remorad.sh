#!/bin/sh
# Runs one program through Remora against a private remorad on a free loopback port.
# usage: with-remorad.sh REMORAD DRIVER REMORA PROGRAM [ARGS...]
# WITH_REMORAD_TLS=1: over TLS 1.3 (certificates made for the run, tests/lib/make_certs.sh),
# with four copy links, and the log must show them attached.
# WITH_REMORAD_SHM=1: over shared memory (unix:PATH, a socket in the run's directory),
# with four copy links likewise.
# WITH_REMORAD_RDMA=1: over rdma:// on WITH_REMORAD_RDMA_HOST (default 127.0.0.1), with four
# copy links likewise (or REMORA_COPY_LINKS): in CI on tests/fake_rdma, which
# LD_LIBRARY_PATH then names (its emulated fabric in the run's directory);
# scripts/rdma-check.sh on a real device.
# WITH_REMORAD_SET="KEY=VALUE ...": settings given to remorad (--set each; no blanks in one).
# WITH_REMORAD_EXPECT_LOG=REGEX: remorad's log must have a line that matches (grep -E), within 10 s
# of the program's end.
set -eu
remorad=$1 driver=$2 remora=$3
shift 3
dir=$(mktemp -d)
pid=
cleanup() {
	[ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	rm -rf "$dir"
}
trap 'cleanup; exit 1' INT TERM
listen=tcp://127.0.0.1:0 scheme= tls_args=
for kv in ${WITH_REMORAD_SET:-}; do
	tls_args="$tls_args --set $kv"
done
if [ "${WITH_REMORAD_TLS:-}" = 1 ]; then
	"$(dirname "$0")/lib/make_certs.sh" "$dir/certs"
	listen=tls://127.0.0.1:0 scheme=tls://
	tls_args="--tls-cert $dir/certs/server.pem --tls-key $dir/certs/server.key" # mktemp -d: no blanks
	export REMORA_TLS_CA="$dir/certs/ca.pem" REMORA_COPY_LINKS=4
elif [ "${WITH_REMORAD_SHM:-}" = 1 ]; then
	listen=unix:$dir/remorad.sock scheme=unix:
	export REMORA_COPY_LINKS=4
elif [ "${WITH_REMORAD_RDMA:-}" = 1 ]; then
	listen=rdma://${WITH_REMORAD_RDMA_HOST:-127.0.0.1}:0 scheme=rdma://
	export REMORA_COPY_LINKS="${REMORA_COPY_LINKS:-4}" REMORA_FAKE_RDMA_DIR="$dir/fabric"
fi
# shellcheck disable=SC2086
"$remorad" --listen "$listen" $tls_args --set allow_anonymous=yes --driver "$driver" --ready-file "$dir/addr" \
	2>"$dir/remorad.log" &
pid=$!
i=0
while [ ! -s "$dir/addr" ]; do
	i=$((i + 1))
	if [ $i -gt 100 ] || ! kill -0 "$pid" 2>/dev/null; then
		echo "with-remorad: remorad did not start" >&2
		cat "$dir/remorad.log" >&2
		cleanup
		exit 1
	fi
	sleep 0.05
done
status=0
"$remora" run --server "$scheme$(cat "$dir/addr")" -- "$@" || status=$?
if [ $status -eq 0 ] && [ -n "$scheme" ] && ! grep -q "copy link [0-9]* attached" "$dir/remorad.log"; then
	echo "with-remorad: over $scheme, but no copy link attached" >&2
	status=1
fi
if [ $status -eq 0 ] && [ -n "${WITH_REMORAD_EXPECT_LOG:-}" ]; then
	# A session's last lines come once its worker has seen the client go: up to 10 s.
	i=0
	until grep -Eq "$WITH_REMORAD_EXPECT_LOG" "$dir/remorad.log"; do
		i=$((i + 1))
		if [ $i -gt 100 ]; then
			echo "with-remorad: no line of remorad's log matches: $WITH_REMORAD_EXPECT_LOG" >&2
			status=1
			break
		fi
		sleep 0.1
	done
fi
if [ $status -ne 0 ]; then
	echo "--- remorad log" >&2
	cat "$dir/remorad.log" >&2
fi
[ -n "${WITH_REMORAD_KEEPLOG:-}" ] && cat "$dir/remorad.log" >&2
cleanup || true
exit $status
