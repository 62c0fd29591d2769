#!/usr/bin/env bash
# psync_launch across hosts (--hosts): three network namespaces of this
# machine stand for three hosts, and the launcher starts every process
# through --host_cmd='ip netns exec {host} sh -c', the template users give
# for ssh in the same place (its bad flags are //tests:launch_restart_test's,
# which needs no root). Checks that
#   1. a deterministic job with servers on hosts 0 and 1 and workers on all
#      three ends with the weights_sha256 of the same job on one host;
#   2. worker 1, killed with SIGKILL by its pid on its host (--pid_dir),
#      is restarted through the template and the job ends with the same
#      weights;
#   3. the launcher stopped with SIGTERM mid-run leaves no process in any
#      of the namespaces.
# Prints "PASS name" / "FAIL name" per check; exits non-zero if one failed.
# Needs root and iproute2; the namespaces are removed on exit, whatever
# happened. The binaries come from `bazel build //deploy/local:psync_launch`.
set -uo pipefail
cd "$(dirname "$0")/../.."

launch=$PWD/bazel-bin/deploy/local/psync_launch
name=psl$$  # namespaces psl<pid>-h0.., psl<pid>-sw
hosts=3
work=$(mktemp -d /tmp/psync_launch_hosts.XXXXXX)
failed=0
result() {  # NAME OK [DETAIL]
  if [[ "$2" == 1 ]]; then echo "PASS $1"; else echo "${3:+$3
}FAIL $1"; failed=1; fi
}
sha_of() {  # summary.json -> weights_sha256
  sed -n 's/.*"weights_sha256": "\([0-9a-f]*\)".*/\1/p' "$1" 2>/dev/null
}

# --- a temporary stand-in for tests/cluster/cluster.sh (same interface:
# namespaces NAME-hI, one address each, joined by a bridge; one line
# "NAME-hI ADDRESS" per host). The bridge lives in a namespace of its own,
# so this machine's interfaces are never touched.
cluster_down() {
  local i
  for ((i = 0; i < hosts; ++i)); do ip netns del "$name-h$i" 2>/dev/null; done
  ip netns del "$name-sw" 2>/dev/null
  return 0
}
cluster_up() {
  ip netns add "$name-sw" || return 1
  ip -n "$name-sw" link add br0 type bridge && ip -n "$name-sw" link set br0 up || return 1
  local i
  for ((i = 0; i < hosts; ++i)); do
    ip netns add "$name-h$i" &&
      ip link add eth0 netns "$name-h$i" type veth peer name p$i netns "$name-sw" &&
      ip -n "$name-sw" link set p$i master br0 up &&
      ip -n "$name-h$i" addr add "10.213.0.$((i + 1))/24" dev eth0 &&
      ip -n "$name-h$i" link set eth0 up &&
      ip -n "$name-h$i" link set lo up || return 1
    echo "$name-h$i 10.213.0.$((i + 1))"
  done
}
# --- end of the stand-in

# Every process still running in the namespaces (none, once a run is over).
left_in_namespaces() {
  local i
  for ((i = 0; i < hosts; ++i)); do ip netns pids "$name-h$i" 2>/dev/null; done
}
# Waits for the launcher PID up to SECONDS, killing it past them; sets rc
# to its exit code (137 if it had to be killed).
finish() {  # PID SECONDS
  timeout "$2" tail --pid="$1" -f /dev/null || kill -9 "$1" 2>/dev/null
  wait "$1"
  rc=$?
}
cleanup() {
  local pid
  for pid in $(left_in_namespaces); do kill -9 "$pid" 2>/dev/null; done
  cluster_down
  rm -rf "$work"
}
trap cleanup EXIT

if [[ $(id -u) != 0 ]] || ! command -v ip >/dev/null; then
  result "launch hosts: root and iproute2" 0 "needs root and iproute2 (ip)"; exit 1
fi
if [[ ! -x "$launch" ]]; then
  result "launch hosts: binaries" 0 "no $launch: run bazel build //deploy/local:psync_launch"
  exit 1
fi
cluster_up >"$work/hosts" || { result "launch hosts: namespaces" 0 "could not create them"; exit 1; }
host_list=$(awk '{printf "%s%s=%s", (NR > 1 ? "," : ""), $1, $2}' "$work/hosts")
mapfile -t address < <(awk '{print $2}' "$work/hosts")
on_hosts=(--hosts="$host_list" --host_cmd='ip netns exec {host} sh -c'
          --server_hosts=0,1 --worker_hosts=0,1,2 --base_port=7070)
job=(--num_servers=2 --num_workers=3 --devices=1 --synthetic_samples=2000 --steps=300
     --batch_per_device=8 --deterministic --seed=3 --timeout_s=120)

# 1. The same job on one host, then across the three.
timeout 180 "$launch" "${job[@]}" --summary="$work/one.json" >"$work/one.log" 2>&1
timeout 180 "$launch" "${job[@]}" "${on_hosts[@]}" --summary="$work/hosts.json" \
  >"$work/hosts.log" 2>&1
one=$(sha_of "$work/one.json")
across=$(sha_of "$work/hosts.json")
placed=1
# Each process where it was put: its prefix, and its address as the servers see it.
for line in "servers started at ${address[0]}:7070,${address[1]}:7070" "[worker 2@$name-h2] " \
            "[server 1@$name-h1] " "server 1: worker 2 registered from ipv4:${address[2]}:"; do
  grep -qF -- "$line" "$work/hosts.log" || placed=0
done
if [[ -n "$one" && "$one" == "$across" && $placed == 1 && -z "$(left_in_namespaces)" ]]; then
  result "launch hosts: 3 hosts give the weights of one host" 1
else
  result "launch hosts: 3 hosts give the weights of one host" 0 \
    "one host: '$one', 3 hosts: '$across', placed as asked: $placed, left: $(left_in_namespaces)
$(tail -30 "$work/hosts.log")"
fi

# 2. Worker 1 killed on its host once it trains, restarted through the template.
"$launch" "${job[@]}" "${on_hosts[@]}" --pid_dir="$work/pids" --summary="$work/kill.json" \
  >"$work/kill.log" 2>&1 &
launcher=$!
killed=""
for ((i = 0; i < 600; ++i)); do  # 60 s
  if grep -qs "worker 1 registered" "$work/kill.log" && [[ -s "$work/pids/worker-1.pid" ]]; then
    killed=$(cat "$work/pids/worker-1.pid")
    kill -9 "$killed"
    break
  fi
  kill -0 $launcher 2>/dev/null || break
  sleep 0.1
done
finish $launcher 180
restarted="worker 1@$name-h1 exited with code 137 (killed by SIGKILL); restarting it"
if [[ -n "$killed" && $rc == 0 && "$(sha_of "$work/kill.json")" == "$one" ]] &&
   grep -qF "$restarted" "$work/kill.log" &&
   [[ "$(cat "$work/pids/worker-1.pid")" != "$killed" ]]; then
  result "launch hosts: a worker killed on its host is restarted there" 1
else
  result "launch hosts: a worker killed on its host is restarted there" 0 \
    "killed pid '$killed', launcher exit $rc, weights '$(sha_of "$work/kill.json")' vs '$one'
$(tail -30 "$work/kill.log")"
fi

# 3. SIGTERM to the launcher mid-run: every process on every host stops.
"$launch" "${job[@]}" "${on_hosts[@]}" --steps=100000 >"$work/stop.log" 2>&1 &
launcher=$!
for ((i = 0; i < 600; ++i)); do
  grep -qs "worker 2 registered" "$work/stop.log" && break
  sleep 0.1
done
running=$(left_in_namespaces | wc -l)
kill -TERM $launcher
finish $launcher 60
if [[ $running -ge 5 && $rc == 1 && -z "$(left_in_namespaces)" ]] &&
   grep -q "interrupted: received SIGTERM" "$work/stop.log"; then
  result "launch hosts: stopping the launcher stops every host's processes" 1
else
  result "launch hosts: stopping the launcher stops every host's processes" 0 \
    "$running processes before, launcher exit $rc, left: $(left_in_namespaces)
$(tail -20 "$work/stop.log")"
fi
exit $failed
