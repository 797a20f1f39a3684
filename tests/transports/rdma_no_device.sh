#!/bin/sh
# On a host without an RDMA device (real rdma-core, no tests/fake_rdma), rdma:// is refused
# at once with a line that says so: by the transport, and by remorad at start-up.
# usage: rdma_no_device.sh TRANSPORT_PROBE REMORAD DRIVER
set -u
probe=$1 remorad=$2 driver=$3
unset REMORA_FAKE_RDMA_DIR
if [ -d /sys/class/infiniband ] && [ -n "$(ls /sys/class/infiniband 2>/dev/null)" ]; then
	echo "rdma-no-device: this host has an RDMA device; nothing to check"
	exit 77
fi
fail=0
out=$("$probe" rdma://127.0.0.1:0 2>&1)
rc=$?
echo "transport-probe: rc=$rc: $out"
if [ $rc -ne 1 ] || ! printf '%s' "$out" | grep -q "no RDMA device\|cannot be loaded"; then
	echo "FAIL transport-probe did not refuse rdma:// with a clear line"
	fail=1
fi
out=$(timeout 20 "$remorad" --listen rdma://127.0.0.1:0 --driver "$driver" --set allow_anonymous=yes 2>&1)
rc=$?
echo "remorad: rc=$rc: $(printf '%s' "$out" | tail -n 2)"
if [ $rc -eq 0 ] || [ $rc -eq 124 ] || ! printf '%s' "$out" | grep -q "no RDMA device\|cannot be loaded"; then
	echo "FAIL remorad did not refuse rdma:// with a clear line"
	fail=1
fi
exit $fail
