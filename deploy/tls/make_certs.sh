#!/usr/bin/env bash
# Makes a job's TLS material with the right names (docs/security.md):
#
#   bash deploy/tls/make_certs.sh DIR SERVERS [NUM_SERVERS]
#
# SERVERS is the job's --servers value: host:port entries separated by
# commas ([v6]:port for IPv6; a bare host will do), or a pattern with
# {rank}, expanded for ranks 0..NUM_SERVERS-1 as psync does (here each
# entry with {rank} is, so "localhost,s-{rank}.s" names localhost too).
# Writes into DIR (made if missing, files readable by their owner only):
#   ca.crt, ca.key       an EC P-256 CA (reused if DIR already has both)
#   server.crt, .key     for every server: a subjectAltName for each host in
#                        SERVERS (IP for an address, DNS for a name), as
#                        workers and servers dial them; server and client
#                        use (servers are clients of server 0)
#   worker.crt, .key     for workers and psync_ctl: client use only
#   token                32 random bytes in hex (kept if DIR has one): the
#                        job's, every process holds it
#   server_token         another 32 (kept if DIR has one): the servers' own
#                        (--server_token_file), which Join requires
# Certificates are valid DAYS days (environment, default 365). Keep ca.key
# private: it signs more certificates. Needs openssl.
set -euo pipefail
usage="usage: make_certs.sh DIR SERVERS [NUM_SERVERS]"
dir=${1:?$usage}
servers=${2:?$usage}
num_servers=${3:-}
days=${DAYS:-365}
die() { echo "make_certs: $*" >&2; exit 2; }
[[ "$days" =~ ^[1-9][0-9]*$ ]] || die "DAYS is '$days', expected a positive number of days"

# The hosts, in order, once each.
entries=()
IFS=, read -ra given <<<"$servers"
for entry in "${given[@]}"; do
  if [[ "$entry" != *"{rank}"* ]]; then entries+=("$entry"); continue; fi
  [[ "$num_servers" =~ ^[1-9][0-9]*$ ]] ||
    die "SERVERS entry '$entry' is a {rank} pattern: NUM_SERVERS is '$num_servers', expected a positive count"
  for ((r = 0; r < num_servers; r++)); do entries+=("${entry//\{rank\}/$r}"); done
done
sans=()
declare -A seen
for entry in "${entries[@]}"; do
  if [[ "$entry" =~ ^\[([0-9A-Fa-f:.]+)\](:[0-9]+)?$ ]]; then
    host=${BASH_REMATCH[1]}  # IPv6 in brackets
  elif [[ "$entry" == *:*:* ]]; then
    host=$entry  # a bare IPv6 address
  else
    host=${entry%%:*}
  fi
  if [[ "$host" =~ ^[0-9]{1,3}(\.[0-9]{1,3}){3}$ || "$host" == *:* ]]; then
    san="IP:$host"
  elif [[ "$host" =~ ^[A-Za-z0-9*_]([A-Za-z0-9._-]*[A-Za-z0-9])?$ ]]; then
    san="DNS:$host"
  else
    die "SERVERS entry '$entry' has host '$host', expected a host name, an IPv4 address or [IPv6]"
  fi
  [[ -n "${seen[$san]:-}" ]] || sans+=("$san")
  seen[$san]=1
done
(( ${#sans[@]} > 0 )) || die "SERVERS is empty, expected the job's --servers value"

umask 077
mkdir -p "$dir"
# openssl, quiet unless it fails.
quiet() {
  local out
  if ! out=$("$@" 2>&1); then echo "make_certs: $* failed: $out" >&2; exit 1; fi
}
ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
if [[ ! -s "$dir/ca.crt" || ! -s "$dir/ca.key" ]]; then
  quiet openssl req -x509 "${ec[@]}" -keyout "$dir/ca.key" -out "$dir/ca.crt" -days "$days" \
    -subj "/CN=psync CA"
fi
# ROLE CN EXTENSIONS: ROLE.key and ROLE.crt, signed by the CA.
issue() {
  printf '%s\n' "basicConstraints=critical,CA:FALSE" "$3" >"$dir/$1.ext"
  quiet openssl req "${ec[@]}" -keyout "$dir/$1.key" -out "$dir/$1.csr" -subj "/CN=$2"
  quiet openssl x509 -req -in "$dir/$1.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" \
    -CAcreateserial -out "$dir/$1.crt" -days "$days" -extfile "$dir/$1.ext"
  rm -f "$dir/$1.csr" "$dir/$1.ext"
}
names=$(IFS=,; echo "${sans[*]}")
issue server "psync server" "extendedKeyUsage=serverAuth,clientAuth
subjectAltName=$names"
issue worker "psync worker" "extendedKeyUsage=clientAuth"
[[ -s "$dir/token" ]] || quiet openssl rand -hex -out "$dir/token" 32
[[ -s "$dir/server_token" ]] || quiet openssl rand -hex -out "$dir/server_token" 32
echo "make_certs: $dir: ca.crt, server.crt/.key naming $names, worker.crt/.key, token," \
  "server_token" >&2
