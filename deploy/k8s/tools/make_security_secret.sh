#!/usr/bin/env bash
# Makes what the secure overlay needs (deploy/k8s/components/tls): a CA, one
# certificate it signed for the job's servers and clients (EC P-256, valid
# 365 days, naming psync-server-0.psync-server ... psync-server-<N-1>.psync-server
# as the pods dial the servers: gRPC matches no wildcard over a single-label
# domain such as *.psync-server, and logs an error for each one it meets),
# and a random token; prints them as the Secret psync-security.
#
#   bash deploy/k8s/tools/make_security_secret.sh [NAMESPACE] [DIR] [N] | kubectl apply -f -
#
# N (default 64) is the most servers the certificate names.
#
# DIR (default: a temporary folder, removed) keeps the files, the CA's key
# included, for issuing more certificates; keep it private. Needs openssl
# and kubectl (used offline: --dry-run=client).
set -euo pipefail
namespace=${1:-psync}
keep=${2:-}
max_servers=${3:-64}
dir=${keep:-$(mktemp -d)}
[[ -n "$keep" ]] || trap 'rm -rf "$dir"' EXIT
mkdir -p "$dir"
umask 077
# openssl, quiet unless it fails (stdout is the Secret).
quiet() {
  local out
  if ! out=$("$@" 2>&1); then echo "make_security_secret: $* failed: $out" >&2; exit 1; fi
}
ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
quiet openssl req -x509 "${ec[@]}" -keyout "$dir/ca.key" -out "$dir/ca.crt" -days 365 \
  -subj "/CN=psync CA"
quiet openssl req "${ec[@]}" -keyout "$dir/tls.key" -out "$dir/tls.csr" -subj "/CN=psync"
names="DNS:localhost,IP:127.0.0.1"
for ((i = 0; i < max_servers; i++)); do names+=",DNS:psync-server-$i.psync-server"; done
echo "subjectAltName=$names" >"$dir/san.ext"
quiet openssl x509 -req -in "$dir/tls.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" \
  -CAcreateserial -out "$dir/tls.crt" -days 365 -extfile "$dir/san.ext"
quiet openssl rand -hex -out "$dir/token" 32
kubectl create secret generic psync-security --namespace="$namespace" --dry-run=client -o yaml \
  --from-file=tls.crt="$dir/tls.crt" --from-file=tls.key="$dir/tls.key" \
  --from-file=ca.crt="$dir/ca.crt" --from-file=token="$dir/token"
