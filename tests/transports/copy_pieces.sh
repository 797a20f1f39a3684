#!/bin/sh
# Copies in pieces and parts over shared memory (backend/copy/stripe.h): runs
# tests/with-remorad.sh RUNNER ARGS... (drv_copy_sizes) with nothing striped and remorad's
# copy profile on, and passes when the program did (its data compared byte for byte) and
# remorad handed each 4 MiB copy to the driver in 4 parts (to the device) and 4 pieces (from
# it), the DMA overlapping the transport, not in one piece after the last byte.
# usage: copy_pieces.sh WITH_REMORAD ARGS...
set -u
log=$(mktemp)
REMORA_STRIPE_MIN=1G REMORA_PROFILE=copies:4M WITH_REMORAD_KEEPLOG=1 sh "$@" 2>"$log"
status=$?
for op in cuMemcpyHtoD_v2 cuMemcpyDtoH_v2; do
	if [ $status -eq 0 ] && ! grep "side=daemon op=$op " "$log" | grep " bytes=4194304 " | grep -q " dma_calls=4 "; then
		echo "copy_pieces: remorad's $op of 4 MiB was not handed to the driver in 4 parts" >&2
		status=1
	fi
done
[ $status -eq 0 ] || cat "$log" >&2
rm -f "$log"
exit $status
