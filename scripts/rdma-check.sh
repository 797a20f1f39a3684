#!/bin/sh
# The rdma transport on a host with an RDMA device (docs/status.md, "RDMA"): the conformance
# probe with bulk read from the sender's memory at the default threshold, at 1 KiB and never
# (its round trip and bulk throughput, each), then driver-API programs through the client
# library and a private remorad (on the test driver: the transport is what is checked) over rdma://ADDR with four copy links,
# on the real rdma-core. CI runs the same on tests/fake_rdma.
# usage: scripts/rdma-check.sh ADDR [BUILD_DIR]   (ADDR: an address an RDMA device serves)
set -eu
addr=${1:?usage: scripts/rdma-check.sh ADDR [BUILD_DIR]}
root=$(cd "$(dirname "$0")/.." && pwd)
build=${2:-$root/build}
if [ -z "$(ls /sys/class/infiniband 2>/dev/null)" ]; then
	echo "rdma-check: this host has no RDMA device (/sys/class/infiniband is empty)" >&2
	exit 1
fi
unset REMORA_FAKE_RDMA_DIR
case $addr in *:*) url="rdma://[$addr]:0" ;; *) url="rdma://$addr:0" ;; esac
# Bulk by RDMA read from 256 KiB (the default), from 1 KiB, and never: what each costs here.
for reads in 256 1 0; do
	echo "== transport-probe --check --adopt $url, REMORA_RDMA_READ_MIN_KB=$reads"
	REMORA_RDMA_READ_MIN_KB=$reads "$build/transport/transport-probe" --check --adopt --rtt 20000 --mib 1024 "$url"
done
for prog in "drv_memcpy 64" "drv_vecadd all" "drv_pinned"; do
	set -- $prog
	name=$1
	shift
	echo "== $name over rdma://$addr"
	WITH_REMORAD_RDMA=1 WITH_REMORAD_RDMA_HOST=$addr "$root/tests/with-remorad.sh" "$build/backend/remorad" \
		"$build/tests/testdriver/libremora-testdriver.so" "$build/cli/remora" \
		"$build/tests/programs/$name" "$build/tests/programs/kernels.fatbin" "$@"
done
echo "rdma-check: passed"
