#!/bin/sh
# SLURM TaskProlog for Remora (docs/integration.md): every task of a job that asks for
# remote GPUs (--comment=remora, or REMORA_JOB=1 in its environment) finds Remora's client
# library first and the GPU pool in its environment. SLURM reads the "export NAME=VALUE"
# lines this prints and sets them in the task's environment.
#   slurm.conf: TaskProlog=/etc/slurm/remora-task-prolog.sh
# Settings: /etc/remora/slurm.env (REMORA_POOL=..., REMORA_CLIENT_LIB=..., optional
# REMORA_TOKEN_FILE=... whose first line is the job's tenant token).
set -eu
conf=${REMORA_SLURM_ENV:-/etc/remora/slurm.env}
[ -r "$conf" ] || exit 0
. "$conf"
case "${SLURM_JOB_COMMENT:-}${REMORA_JOB:-}" in
*remora* | 1) ;;
*) exit 0 ;;
esac
lib=${REMORA_CLIENT_LIB:-}
if [ -z "$lib" ]; then
	for d in /usr/lib/x86_64-linux-gnu/remora /usr/local/lib/x86_64-linux-gnu/remora /usr/lib64/remora /usr/local/lib/remora; do
		[ -e "$d/libcuda.so.1" ] && lib=$d && break
	done
fi
if [ -z "$lib" ] || [ ! -e "$lib/libcuda.so.1" ]; then
	echo "print remora: no client library found (set REMORA_CLIENT_LIB in $conf)"
	exit 0
fi
echo "export LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# The client's NCCL first, as remora run does: PyTorch may load its own by an absolute path.
[ -e "$lib/libnccl.so.2" ] && echo "export LD_PRELOAD=$lib/libnccl.so.2${LD_PRELOAD:+:$LD_PRELOAD}"
[ -n "${REMORA_POOL:-}" ] && echo "export REMORA_POOL=$REMORA_POOL"
[ -n "${REMORA_SERVER:-}" ] && echo "export REMORA_SERVER=$REMORA_SERVER"
if [ -n "${REMORA_TOKEN_FILE:-}" ] && [ -r "$REMORA_TOKEN_FILE" ]; then
	echo "export REMORA_TOKEN=$(head -n1 "$REMORA_TOKEN_FILE")"
fi
exit 0
