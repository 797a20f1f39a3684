#!/bin/sh
# Copies striped from the measured link (common/copy_plan.h): runs tests/with-remorad.sh
# RUNNER ARGS... with the client's log at DEBUG and passes when the program did (its copies
# bit for bit) and the client said it striped copies both ways: each size class warms with
# striped copies beside whole ones, whichever it then keeps (on a loaded machine striping
# may measure slower and be turned off).
# usage: copy_plan_striped.sh WITH_REMORAD ARGS...
set -u
log=$(mktemp)
REMORA_LOG=DEBUG sh "$@" 2>"$log"
status=$?
for way in to from; do
	if [ $status -eq 0 ] && ! grep -q "and up $way the device: a striped copy over" "$log"; then
		echo "copy_plan_striped: no copy $way the device was striped" >&2
		status=1
	fi
done
[ $status -eq 0 ] || cat "$log" >&2
rm -f "$log"
exit $status
