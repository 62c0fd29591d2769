#!/usr/bin/env bash
# //tests/cluster:shared_memory_hosts_test: shared memory never crosses a
# host, though the emulated hosts share one kernel (docs/design.md, shared
# memory on one host). On a cluster of 2 hosts (tests/cluster/cluster.sh),
# a server on host 0 and three workers of one job train a few steps:
#   - worker 0 on host 0, connected to host 0's own address (not loopback),
#     shares memory with the server;
#   - worker 1 on host 1, given the server's numeric address, offers none:
#     it knows the server is on another host;
#   - worker 2 on host 1, given the server's name (host 1's /etc/hosts names
#     host 0), offers it, and the server refuses, since the connection
#     comes from host 1's address;
# and each says so in its log; every worker finishes its steps.
# Needs root (CI runs as root) and runs unsandboxed (tag no-sandbox), like
# cluster_test.
set -uo pipefail

cluster=tests/cluster/cluster.sh
server_bin=server/psync_server
worker_bin=worker/psync_worker
name="sm$$"
logs=$(mktemp -d)
pids=()
# Ends what is left (a daemon stops on SIGTERM, a worker within seconds;
# SIGKILL after 20 s), then the hosts.
any_alive() {
  local p
  for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && return 0; done
  return 1
}
cleanup() {
  local p i
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for (( i = 0; i < 200; ++i )); do
    any_alive || break
    sleep 0.1
  done
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  "$cluster" down --name="$name" >/dev/null 2>&1
  rm -rf "$logs"
}
trap cleanup EXIT

hosts=$("$cluster" up --name="$name" --hosts=2) || exit 1
read -r _ a0 <<<"$(sed -n 1p <<<"$hosts")"
read -r _ a1 <<<"$(sed -n 2p <<<"$hosts")"
echo "host 0 $a0, host 1 $a1"

job=(--num_servers=1 --num_workers=3 --synthetic_samples=192 --steps=3 --batch_per_device=16)
ip netns exec "$name-h0" timeout 120 "$server_bin" --server_rank=0 --servers="$a0:7070" \
  --host=0.0.0.0 --port=7070 "${job[@]}" 2>"$logs/server" &
pids+=($!)
# Run in the background, each as the process its pid names (exec), so that
# killing that pid reaches the worker through `timeout`.
worker() {  # RANK HOST SERVER_ADDRESS
  exec ip netns exec "$name-h$2" timeout 120 "$worker_bin" --worker_rank="$1" --servers="$3" \
    "${job[@]}" --connect_timeout_s=60 2>"$logs/worker$1"
}
worker 0 0 "$a0:7070" & w0=$!
worker 1 1 "$a0:7070" & w1=$!
worker 2 1 "$name-h0:7070" & w2=$!
pids+=("$w0" "$w1" "$w2")

failures=0
check() {  # DESCRIPTION COMMAND...
  local what=$1
  shift
  if "$@"; then echo "ok: $what"; else echo "FAILED: $what" >&2; failures=$((failures + 1)); fi
}
logged() { grep -qF -- "$2" "$logs/$1"; }

for rank in 0 1 2; do
  rc=0
  wait "${pids[$((rank + 1))]}" || rc=$?
  check "worker $rank finished its steps (exit $rc)" test "$rc" == 0
done

check "worker 0 (host 0, by host 0's address) shares memory" \
  logged worker0 "worker 0: server 0 shares memory with this worker"
check "worker 1 (host 1, by address) offers none: the server is on another host" \
  logged worker1 "worker 1: payloads to server 0 travel in the messages: it is on another host ($a0:7070 is not loopback nor an address of this host"
check "worker 2 (host 1, by name) is refused: it connects from host 1" \
  logged worker2 "worker 2: payloads to server 0 travel in the messages: the worker connects from $a1, which is not this server's host"
check "the server says why it refused worker 2" \
  logged server "worker 2's payloads travel in the messages: the worker connects from $a1"
check "the server took no offer from worker 1" bash -c "! grep -q \"worker 1's payloads\" $logs/server"
check "the server maps worker 0's model" \
  logged worker0 "worker 0: server 0 reads gradients from and writes weights to this worker's model in place"
check "the server maps neither worker 1's nor worker 2's model" \
  bash -c "! grep -h 'model in place' $logs/worker1 $logs/worker2 | grep -q ."

if (( failures > 0 )); then
  for f in server worker0 worker1 worker2; do
    echo "---- $f (last 15 lines)" >&2
    tail -15 "$logs/$f" >&2
  done
  echo "$failures checks failed" >&2
  exit 1
fi
echo "all checks passed"
