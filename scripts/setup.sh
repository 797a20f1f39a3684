#!/bin/sh
# Installs what building and testing Remora needs on Debian 12 / Ubuntu 24.04.
# The CUDA toolkit (nvcc, cuda.h, the stub libcuda) is expected at /usr/local/cuda
# or wherever -Dtoolkit_dir points; it is not in Debian's archive.
set -eu
need=""
# etcd-server: the pool's store, started by the pool tests (tests/pool); etcd-client: its
# etcdctl, with which the secured-pool test enables users and roles.
# libcurl4-openssl-dev, libjson-c-dev: the pool reaches etcd's JSON gateway over HTTP(S)
# with libcurl and reads its answers with json-c (pool/, docs/pool.md).
# libssl-dev: TLS 1.3 and hashed tokens (meson option tls); openssl: the TLS tests make their certificates.
# iproute2: the partition tests put client and daemon in network namespaces (tests/robustness).
# scdoc: the man pages (dist/man). nftables: operator-walkthrough runs docs/operations.md's
# firewall rules in a network namespace of its own (tests/install).
# libibverbs-dev, librdmacm-dev: the rdma transport's headers (meson option rdma); the
# libraries are loaded only when an rdma:// address is used (transport/rdma/).
# libzstd-dev: copies over a slow link are compressed (common/zchunk.h; optional: without it
# nothing is compressed); zstd: the tool makes the zchunk fuzz corpus (tests/fuzz/make_corpus.py).
for p in meson ninja-build pkg-config gcc python3 protobuf-c-compiler libprotobuf-c-dev binutils etcd-server etcd-client libcurl4-openssl-dev libjson-c-dev libssl-dev openssl iproute2 scdoc nftables libibverbs-dev librdmacm-dev libzstd-dev zstd; do
	dpkg -s "$p" >/dev/null 2>&1 || need="$need $p"
done
if [ -n "$need" ]; then
	echo "setup: installing$need"
	if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $need >/dev/null
fi
# prometheus: scrapes remorad's metrics in the metrics-prometheus test, and its promtool
# lints them in metrics-promtool and operator-walkthrough (tests/metrics, tests/install);
# without its recommends (exporters that would start as services).
if ! dpkg -s prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
	echo "setup: installing prometheus"
	if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi
if [ ! -f "${CUDA_HOME:-/usr/local/cuda}/include/cuda.h" ]; then
	echo "setup: the CUDA toolkit is missing (no ${CUDA_HOME:-/usr/local/cuda}/include/cuda.h); install it, or set CUDA_HOME" >&2
	exit 1
fi
