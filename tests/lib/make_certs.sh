#!/bin/sh
# Test certificates, made at test time (nothing secret is kept in the repository):
#   make_certs.sh [--etcd] DIR [CLIENT_CN...]
# writes into DIR: ca.pem/ca.key (a test CA), server.pem/server.key (signed by it, for
# 127.0.0.1, ::1 and localhost, valid for 400 days), other-ca.pem (a CA that signed nothing
# here: "the wrong CA"), and for each CLIENT_CN client-CN.pem/client-CN.key signed by ca.
# Certificates for server.key that a client must refuse or a daemon warn of, all signed by
# ca: server-expired.pem (expired in 2020), server-soon.pem (expires in 5 days),
# server-elsewhere.pem (for the name elsewhere.test only).
# --etcd: as etcd's JSON gateway wants them (docs/pool.md): the server's certificate also
# for client authentication (the gateway dials etcd with it), and the clients' without a
# common name (the gateway refuses one): subject O=CLIENT_CN.
set -eu
etcd=
subject=CN
if [ "$1" = --etcd ]; then
	etcd=1
	subject=O
	shift
fi
dir=$1
shift
mkdir -p "$dir"
cd "$dir"
q() { "$@" >/dev/null 2>&1 || { echo "make_certs: $* failed" >&2; "$@"; exit 1; }; }
key() { q openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1"; }
key ca.key
q openssl req -x509 -new -key ca.key -subj "/CN=Remora test CA" -days 2 -out ca.pem
key other-ca.key
q openssl req -x509 -new -key other-ca.key -subj "/CN=Another test CA" -days 2 -out other-ca.pem
key server.key
q openssl req -new -key server.key -subj "/CN=localhost" -out server.csr
printf 'subjectAltName=IP:127.0.0.1,IP:::1,DNS:localhost\nextendedKeyUsage=serverAuth%s\n' "${etcd:+,clientAuth}" > server.ext
q openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 400 -extfile server.ext -out server.pem
q openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 5 -extfile server.ext \
	-out server-soon.pem
printf 'subjectAltName=DNS:elsewhere.test\nextendedKeyUsage=serverAuth\n' > elsewhere.ext
q openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 400 -extfile elsewhere.ext \
	-out server-elsewhere.pem
# A past validity needs openssl ca (x509 -days takes no negative count).
: > index.txt
printf '[ca]\ndefault_ca = c\n[c]\ndatabase = index.txt\nnew_certs_dir = .\nserial = ca.srl\ndefault_md = sha256\npolicy = p\n[p]\ncommonName = supplied\n' > ca.cnf
q openssl ca -batch -config ca.cnf -cert ca.pem -keyfile ca.key -in server.csr -startdate 20200101000000Z \
	-enddate 20200102000000Z -extfile server.ext -notext -out server-expired.pem
printf 'extendedKeyUsage=clientAuth\n' > client.ext
for cn in "$@"; do
	key "client-$cn.key"
	q openssl req -new -key "client-$cn.key" -subj "/$subject=$cn" -out "client-$cn.csr"
	q openssl x509 -req -in "client-$cn.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -extfile client.ext \
		-out "client-$cn.pem"
done
