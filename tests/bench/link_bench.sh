#!/usr/bin/env bash
# Runs psync_bench across an emulated full-duplex network link instead of
# loopback: the servers (and the echo servers) in one network namespace,
# the clients in another: two hosts of an emulated cluster
# (tests/cluster/cluster.sh), each link sending at most --rate each way
# (a token bucket, `tc tbf`, on both ends), as two machines' NICs would. On
# loopback the transport is bound by the 2 cores' copies; across a link
# slower than those copies it is bound by the link, and a push-pull that
# streams weights back while gradients still arrive should take about one
# one-way transfer, where a store-and-forward echo takes two.
#
#   tests/bench/link_bench.sh [--rate=4gbit] [psync_bench flags...]
#
# Needs root (network namespaces and tc) and iproute2; removes its
# emulated hosts (and with them the link) on exit.
set -euo pipefail
cd "$(dirname "$0")/../.."

rate=4gbit
args=()
for a in "$@"; do
  case "$a" in
    --rate=*) rate="${a#--rate=}" ;;
    *) args+=("$a") ;;
  esac
done
bench=bazel-bin/tests/bench/psync_bench
# Quick when up to date; a stale binary would measure old code.
targets=(//tests/bench:psync_bench //server:psync_server)
bazel build "${targets[@]}" >/dev/null 2>&1 || bazel build "${targets[@]}"

# Two emulated hosts (tests/cluster/cluster.sh, which checks the rate and
# needs root): the clients on the first, the servers on the second. The
# name is unique to this run, so that runs side by side do not collide.
cluster=tests/cluster/cluster.sh name="plink$$"
trap '"$cluster" down --name="$name"' EXIT
hosts=$("$cluster" up --name="$name" --hosts=2 --rate="$rate")
read -r w w_address <<<"$(sed -n 1p <<<"$hosts")"
read -r s s_address <<<"$(sed -n 2p <<<"$hosts")"
echo "link_bench.sh: clients on $w ($w_address), servers on $s ($s_address)," \
  "$rate each way (tc tbf on each end of each host's link)"
# --shared_memory=false: the namespaces share one host's memory, which
# processes on two hosts would not.
ip netns exec "$w" timeout 900 "$bench" --server_host="$s_address" --server_netns="$s" \
  --shared_memory=false \
  "${args[@]}"
