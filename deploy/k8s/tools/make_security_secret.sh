#!/usr/bin/env bash
# Makes what the secure overlay needs (deploy/k8s/components/tls) with
# deploy/tls/make_certs.sh and prints it as two Secrets, one per role, each
# holding only that role's credentials:
#
#   psync-server-security  tls.crt, tls.key: the servers' certificate (EC
#                          P-256, valid 365 days, naming
#                          psync-server-0.psync-server ...
#                          psync-server-<N-1>.psync-server as the pods dial
#                          the servers, and localhost and 127.0.0.1 for
#                          psync_ctl in a pod: gRPC matches no wildcard over
#                          a single-label domain such as *.psync-server);
#                          ca.crt; token (the job's, which servers check on
#                          workers' calls); server_token (the servers' own,
#                          which Join requires)
#   psync-worker-security  tls.crt, tls.key: the workers' client-only
#                          certificate; ca.crt; token
#
# A worker's pod thus holds neither the servers' key nor their token, and
# cannot join as a server (docs/security.md#roles).
#
#   bash deploy/k8s/tools/make_security_secret.sh [NAMESPACE] [DIR] [N] | kubectl apply -f -
#
# N (default 64) is the most servers the certificate names; a server whose
# name it lacks refuses to start, naming it.
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
bash "$(dirname "$0")/../../tls/make_certs.sh" "$dir" \
  "localhost,127.0.0.1,psync-server-{rank}.psync-server" "$max_servers"
kubectl create secret generic psync-server-security --namespace="$namespace" \
  --dry-run=client -o yaml \
  --from-file=tls.crt="$dir/server.crt" --from-file=tls.key="$dir/server.key" \
  --from-file=ca.crt="$dir/ca.crt" --from-file=token="$dir/token" \
  --from-file=server_token="$dir/server_token"
echo "---"
kubectl create secret generic psync-worker-security --namespace="$namespace" \
  --dry-run=client -o yaml \
  --from-file=tls.crt="$dir/worker.crt" --from-file=tls.key="$dir/worker.key" \
  --from-file=ca.crt="$dir/ca.crt" --from-file=token="$dir/token"
