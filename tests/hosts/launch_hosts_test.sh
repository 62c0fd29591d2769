#!/usr/bin/env bash
# psync_launch across hosts (--hosts): four hosts of an emulated cluster
# (tests/cluster/cluster.sh: network namespaces of this machine, each link
# shaped as a NIC), two with a server and a worker, two with a worker only.
# The launcher starts every process through --host_cmd='ip netns exec {host}
# sh -c', the template users give for ssh in the same place (its bad flags
# are //tests:launch_restart_test's, which needs no root). Checks that
#   1. a deterministic job across the four hosts ends with the
#      weights_sha256 of the same job on one host;
#   2. worker 1, killed with SIGKILL by its pid on its host (--pid_dir),
#      is restarted through the template and the job ends with the same
#      weights;
#   3. the launcher stopped with SIGTERM mid-run leaves no process in any
#      of the hosts;
#   4. host 3's link cut for 3 s mid-run (`ip link set eth0 down`) and
#      restored: the job waits, goes on and ends with the same weights;
#      the same for host 1, whose server the other hosts' workers lose;
#   5. host 3's link cut for good: its worker is missing, and once
#      --peer_timeout_s has passed the servers fail the job naming it
#      (docs/failures.md), and the launcher says so.
# Arguments are more flags for every job (e.g. --payload_lane), named in
# each check's name.
# Prints "PASS name" / "FAIL name" per check; exits non-zero if one failed.
# Needs root and iproute2; the hosts are removed on exit, whatever
# happened. The binaries come from `bazel build //deploy/local:psync_launch`.
set -uo pipefail
cd "$(dirname "$0")/../.."

launch=$PWD/bazel-bin/deploy/local/psync_launch
name=psl$$  # namespaces psl<pid>-h0.., psl<pid>-sw
hosts=4
work=$(mktemp -d /tmp/psync_launch_hosts.XXXXXX)
source tests/check_results.sh
checks="launch hosts${*:+ ($*)}"  # each check's name starts so

cluster_down() { bash tests/cluster/cluster.sh down --name="$name" >/dev/null 2>&1; return 0; }
cluster_up() { bash tests/cluster/cluster.sh up --name="$name" --hosts="$hosts"; }

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
  result "$checks: root and iproute2" 0 "needs root and iproute2 (ip)"; exit 1
fi
if [[ ! -x "$launch" ]]; then
  result "$checks: binaries" 0 "no $launch: run bazel build //deploy/local:psync_launch"
  exit 1
fi
cluster_up >"$work/hosts" || { result "$checks: namespaces" 0 "could not create them"; exit 1; }
host_list=$(awk '{printf "%s%s=%s", (NR > 1 ? "," : ""), $1, $2}' "$work/hosts")
mapfile -t address < <(awk '{print $2}' "$work/hosts")
on_hosts=(--hosts="$host_list" --host_cmd='ip netns exec {host} sh -c'
          --server_hosts=0,1 --worker_hosts=0,1,2,3 --base_port=7070)
job=(--num_servers=2 --num_workers=4 --devices=1 --synthetic_samples=2000 --steps=300
     --batch_per_device=8 --deterministic --seed=3 --timeout_s=120 "$@")

# 1. The same job on one host, then across the four.
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
  result "$checks: 4 hosts give the weights of one host" 1
else
  result "$checks: 4 hosts give the weights of one host" 0 \
    "one host: '$one', 4 hosts: '$across', placed as asked: $placed, left: $(left_in_namespaces)
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
  result "$checks: a worker killed on its host is restarted there" 1
else
  result "$checks: a worker killed on its host is restarted there" 0 \
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
  result "$checks: stopping the launcher stops every host's processes" 1
else
  result "$checks: stopping the launcher stops every host's processes" 0 \
    "$running processes before, launcher exit $rc, left: $(left_in_namespaces)
$(tail -20 "$work/stop.log")"
fi
# Waits until the launcher's log shows worker 0 has trained past epoch 1
# (the job is under way on every host); 0 if it did within 60 s.
wait_for_training() {  # LOG LAUNCHER_PID
  local i
  for ((i = 0; i < 600; ++i)); do
    grep -qs "epoch 1 step" "$1" && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

# 4. A host's link down for 3 s mid-run, then up again: host 3 (a worker
# only), then host 1 (server 1 and worker 1).
timeout 240 "$launch" "${job[@]}" --steps=1500 --summary="$work/one1500.json" >"$work/one1500.log" 2>&1
cut_and_rejoin() {  # HOST WHAT
  local log="$work/cut$1.log" summary="$work/cut$1.json" cut=0
  "$launch" "${job[@]}" "${on_hosts[@]}" --steps=1500 --summary="$summary" >"$log" 2>&1 &
  launcher=$!
  if wait_for_training "$log" $launcher; then
    ip -n "$name-h$1" link set eth0 down && cut=1
    sleep 3
    ip -n "$name-h$1" link set eth0 up
  fi
  finish $launcher 240
  if [[ $cut == 1 && $rc == 0 && -n "$(sha_of "$summary")" &&
        "$(sha_of "$summary")" == "$(sha_of "$work/one1500.json")" ]]; then
    result "$checks: $2 cut off for 3 s rejoins and the weights are the same" 1
  else
    result "$checks: $2 cut off for 3 s rejoins and the weights are the same" 0 \
      "cut: $cut, launcher exit $rc, weights '$(sha_of "$summary")' vs one host's '$(sha_of "$work/one1500.json")'
$(tail -30 "$log")"
  fi
}
cut_and_rejoin 3 "a host"
cut_and_rejoin 1 "a server's host"

# 5. Host 3's link down for good: its worker is missing past the peer timeout.
"$launch" "${job[@]}" "${on_hosts[@]}" --steps=100000 --peer_timeout_s=5 >"$work/gone.log" 2>&1 &
launcher=$!
cut=0
if wait_for_training "$work/gone.log" $launcher; then
  ip -n "$name-h3" link set eth0 down && cut=1
fi
finish $launcher 120
named="worker 3 has not been heard from for"
if [[ $cut == 1 && $rc != 0 && $rc != 137 ]] && grep -qF "$named" "$work/gone.log" &&
   grep -q "^\[launch\] FAILED: server [01]@$name-h[01] exited with code 3" "$work/gone.log" &&
   [[ -z "$(left_in_namespaces)" ]]; then
  result "$checks: a host gone for good fails the job, naming its worker" 1
else
  result "$checks: a host gone for good fails the job, naming its worker" 0 \
    "cut: $cut, launcher exit $rc, left: $(left_in_namespaces)
$(grep -E "FAILED|heard from" "$work/gone.log" | tail -5)
$(tail -20 "$work/gone.log")"
fi
exit $failed
