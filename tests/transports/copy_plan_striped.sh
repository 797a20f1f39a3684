#!/bin/sh
# Copies striped from the measured link (common/copy_plan.h): runs tests/with-remorad.sh
# RUNNER ARGS... with the client's log at DEBUG and passes when the program did and the
# client said its copies to the device came to be striped (loopback: one stream cannot
# fill it, so mid-size copies are).
# usage: copy_plan_striped.sh WITH_REMORAD ARGS...
set -u
log=$(mktemp)
REMORA_LOG=DEBUG sh "$@" 2>"$log"
status=$?
if [ $status -eq 0 ] && ! grep -q "and up to the device are striped" "$log"; then
	echo "copy_plan_striped: no copy was striped from the measured link" >&2
	status=1
fi
[ $status -eq 0 ] || cat "$log" >&2
rm -f "$log"
exit $status
