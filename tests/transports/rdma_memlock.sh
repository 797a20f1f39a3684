#!/bin/sh
# rdma:// under RLIMIT_MEMLOCK, on tests/fake_rdma counting registrations against it as the
# kernel does for a process without CAP_IPC_LOCK (REMORA_FAKE_RDMA_MEMLOCK):
# - a limit below one connection's buffers: the connection is refused with a line that
#   names the limit;
# - a limit that holds the connections' buffers but not every read offer (8 MiB: with two
#   copy links the client's 3 connections and the worker's 3 lock 7.1 MiB each, an offer
#   up to 8 MiB more): a program's copies still arrive exact, offers and reads that cannot
#   register going as messages and through the bounce buffer.
# usage: rdma_memlock.sh TRANSPORT_PROBE WITH_REMORAD REMORAD DRIVER REMORA PROGRAM ARGS...
set -u
probe=$1
shift
export REMORA_FAKE_RDMA_MEMLOCK=1
fail=0
hard=$(ulimit -H -l)
if [ "$hard" != unlimited ] && [ "$hard" -lt 8192 ]; then
	echo "rdma-memlock: the hard RLIMIT_MEMLOCK is $hard KiB, below the 8 MiB this test sets"
	exit 77
fi
out=$(ulimit -S -l 1024 && REMORA_FAKE_RDMA_DIR="${REMORA_FAKE_RDMA_DIR:?}-probe" "$probe" --adopt rdma://127.0.0.1:0 2>&1)
rc=$?
echo "transport-probe under 1 MiB: rc=$rc: $out"
if [ $rc -eq 0 ] || ! printf '%s' "$out" | grep -q "RLIMIT_MEMLOCK"; then
	echo "FAIL a connection past RLIMIT_MEMLOCK was not refused with a line naming it"
	fail=1
fi
runner=$1
shift
if ! (ulimit -S -l 8192 && REMORA_COPY_LINKS=2 WITH_REMORAD_RDMA=1 "$runner" "$@"); then
	echo "FAIL the program did not run through rdma:// under an 8 MiB RLIMIT_MEMLOCK"
	fail=1
fi
exit $fail
