#!/usr/bin/env bash
# Runs psync_bench across an emulated full-duplex network link instead of
# loopback: the servers (and the echo servers) in one network namespace,
# the clients in another, joined by a veth pair whose two ends each send at
# most --rate (a token bucket, `tc tbf`), as two machines' NICs would. On
# loopback the transport is bound by the 2 cores' copies; across a link
# slower than those copies it is bound by the link, and a push-pull that
# streams weights back while gradients still arrive should take about one
# one-way transfer, where a store-and-forward echo takes two.
#
#   tests/bench/link_bench.sh [--rate=4gbit] [psync_bench flags...]
#
# Needs root (network namespaces and tc) and iproute2; removes its
# namespaces (and with them the link) on exit.
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
if [[ $(id -u) != 0 ]]; then
  echo "link_bench.sh: needs root for network namespaces and tc (running as uid $(id -u))" >&2
  exit 2
fi
for tool in ip tc; do
  command -v "$tool" >/dev/null || { echo "link_bench.sh: needs iproute2's $tool" >&2; exit 2; }
done
if ! [[ $rate =~ ^[0-9]+(\.[0-9]+)?[kmg]?bit$ ]]; then
  echo "link_bench.sh: --rate is '$rate', expected a tc rate such as 4gbit or 800mbit" >&2
  exit 2
fi
bench=bazel-bin/tests/bench/psync_bench
# Quick when up to date; a stale binary would measure old code.
targets=(//tests/bench:psync_bench //server:psync_server)
bazel build "${targets[@]}" >/dev/null 2>&1 || bazel build "${targets[@]}"

# Names unique to this run, so that runs side by side do not collide.
w="psync-link-$$-w" s="psync-link-$$-s" wdev="pl$$w" sdev="pl$$s"
cleanup() { ip netns del "$w" 2>/dev/null || true; ip netns del "$s" 2>/dev/null || true; }
trap cleanup EXIT
ip netns add "$w"
ip netns add "$s"
ip link add "$wdev" netns "$w" type veth peer name "$sdev" netns "$s"
ip -n "$w" addr add 10.201.0.1/24 dev "$wdev"
ip -n "$s" addr add 10.201.0.2/24 dev "$sdev"
for ns in "$w" "$s"; do ip -n "$ns" link set lo up; done
ip -n "$w" link set "$wdev" up
ip -n "$s" link set "$sdev" up
# Each direction on its own: a token bucket on each end's egress.
tc -n "$w" qdisc add dev "$wdev" root tbf rate "$rate" burst 256kb latency 5ms
tc -n "$s" qdisc add dev "$sdev" root tbf rate "$rate" burst 256kb latency 5ms
echo "link_bench.sh: clients in $w (10.201.0.1), servers in $s (10.201.0.2)," \
  "$rate each way (tc tbf on a veth pair)"
# --shared_memory=false: the namespaces share one host's memory, which
# processes on two hosts would not.
ip netns exec "$w" timeout 900 "$bench" --server_host=10.201.0.2 --server_netns="$s" \
  --shared_memory=false \
  "${args[@]}"
