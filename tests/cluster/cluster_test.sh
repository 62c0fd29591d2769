#!/usr/bin/env bash
# //tests/cluster:cluster_test: tests/cluster/cluster.sh as its users see it.
#   - bad flags exit 2 naming the flag; a non-root user and an existing
#     name are refused (exit 1) and change nothing;
#   - `up` of 3 hosts prints NAME-hI ADDRESS for each, distinct addresses of
#     one /24; every host has its `lo` up and its address, names every host
#     in its /etc/hosts, and reaches every other by TCP;
#   - every link is shaped both ways: a tbf at --rate on the host's end and
#     on the switch's port (read back from tc), and a bulk transfer each way
#     takes at least the time the rate allows (a lower bound only: a busy
#     machine makes a transfer slower, never faster, so the check cannot
#     depend on the machine's speed); --delay adds netem on both ends, or,
#     where the kernel has no netem, `up` says so and makes nothing;
#   - a second cluster beside the first gets another /24;
#   - `down` leaves no namespace, link, qdisc or hosts file behind (the root
#     namespace's links and qdiscs are as before), and is idempotent;
#   - `cpu` runs a command, passes on its exit status and reports CPU use.
# Needs root (CI runs as root) and runs unsandboxed (tag no-sandbox):
# Bazel's sandbox mounts /run read-only, where `ip netns` keeps namespaces.
set -uo pipefail

cluster=tests/cluster/cluster.sh
probe="/usr/bin/python3 tests/cluster/tcp_probe.py"
a="ct$$a" b="ct$$b"
failures=0
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  "$cluster" down --name="$a" >/dev/null 2>&1
  "$cluster" down --name="$b" >/dev/null 2>&1
}
trap cleanup EXIT

check() {  # DESCRIPTION COMMAND...
  local what=$1
  shift
  if "$@"; then echo "ok: $what"; else echo "FAILED: $what" >&2; failures=$((failures + 1)); fi
}

exits_with() {  # STATUS TEXT COMMAND...: exits STATUS, stderr contains TEXT
  local want=$1 text=$2 rc=0 err
  shift 2
  err=$("$@" 2>&1 >/dev/null) || rc=$?
  [[ $rc == "$want" && $err == *"$text"* ]] ||
    { echo "  '$*' exited $rc (want $want): $err" >&2; return 1; }
}

root_state() { ip -o link show; tc qdisc show; ip netns list | grep -E "^ct$$" || true; }
before=$(root_state)

# Bad flags.
check "no command" exits_with 2 "usage:" "$cluster"
check "unknown command" exits_with 2 "unknown command 'start'" "$cluster" start --name="$a"
check "unknown flag" exits_with 2 "unknown flag --host" "$cluster" up --name="$a" --host=3
check "bad name" exits_with 2 "--name is 'A_1'" "$cluster" up --name=A_1 --hosts=3
check "missing name" exits_with 2 "--name is ''" "$cluster" down
check "one host" exits_with 2 "--hosts is '1'; expected a number of hosts from 2 to 8" \
  "$cluster" up --name="$a" --hosts=1
check "nine hosts" exits_with 2 "--hosts is '9'" "$cluster" up --name="$a" --hosts=9
check "bad rate" exits_with 2 "--rate is '2.5G'" "$cluster" up --name="$a" --hosts=2 --rate=2.5G
check "zero rate" exits_with 2 "--rate is '0bit'" "$cluster" up --name="$a" --hosts=2 --rate=0bit
check "bad delay" exits_with 2 "--delay is '50'" "$cluster" up --name="$a" --hosts=2 --delay=50
check "not root" exits_with 1 "needs root" \
  setpriv --reuid=65534 --regid=65534 --clear-groups "$cluster" up --name="$a" --hosts=2
check "bad flags made nothing" test "$(root_state)" == "$before"

# A delay needs netem.
rc=0
err=$("$cluster" up --name="$b" --hosts=2 --delay=1ms 2>&1 >/dev/null) || rc=$?
if (( rc == 0 )); then
  check "delay: netem 1ms on the host's end" \
    bash -c "tc -n $b-h0 qdisc show dev eth0 | grep -q 'netem.*delay 1ms'"
  check "delay: netem 1ms on the switch's port" \
    bash -c "tc -n $b-sw qdisc show dev p1 | grep -q 'netem.*delay 1ms'"
  "$cluster" down --name="$b"
else
  check "delay without netem: exit 1 naming netem ($err)" test "$rc" == 1 -a -n "$(grep netem <<<"$err")"
fi
check "delay: nothing left" test "$(root_state)" == "$before"

# Three hosts.
out=$("$cluster" up --name="$a" --hosts=3 --rate=200mbit)
check "up exits 0" test $? == 0
mapfile -t lines <<<"$out"
check "one line per host" test "${#lines[@]}" == 3
declare -a addr
for i in 0 1 2; do
  read -r host address <<<"${lines[$i]}"
  addr[$i]=$address
  check "line $i names $a-h$i" test "$host" == "$a-h$i"
  check "host $i address $address is IPv4 of the cluster's /24" \
    bash -c "[[ $address =~ ^10\\.[0-9]+\\.[0-9]+\\.$((i + 1))$ && ${address%.*} == ${addr[0]%.*} ]]"
  check "host $i has its address" bash -c "ip -n $a-h$i -o addr show dev eth0 | grep -q 'inet $address/24'"
  check "host $i has lo up" bash -c "ip -n $a-h$i -o link show lo | grep -q 'UP'"
  check "host $i's /etc/hosts names host 2" \
    bash -c "ip netns exec $a-h$i getent hosts $a-h2 | grep -q '^${addr[0]%.*}.3 '"
  check "host $i: tbf 200Mbit on its end" \
    bash -c "tc -n $a-h$i qdisc show dev eth0 | grep -q 'tbf .*rate 200Mbit'"
  check "host $i: tbf 200Mbit on the switch's port" \
    bash -c "tc -n $a-sw qdisc show dev p$i | grep -q 'tbf .*rate 200Mbit'"
done
check "up again refused" exits_with 1 "exists already" "$cluster" up --name="$a" --hosts=2

# Every host reaches every other (100 KiB each way, bounded in time).
transfer() {  # FROM TO BYTES PORT → "BYTES SECONDS MBIT"
  ip netns exec "$a-h$2" $probe serve "${addr[$2]}" "$4" 60 >/dev/null &
  local server=$!
  pids+=("$server")
  ip netns exec "$a-h$1" $probe send "${addr[$2]}" "$4" "$3" 60
  wait "$server"
}
reaches() { transfer "$1" "$2" 102400 7001 >/dev/null; }
for pair in "0 1" "1 2" "2 0" "1 0"; do
  read -r from to <<<"$pair"
  check "host $from reaches host $to" reaches "$from" "$to"
done

# 10 MB at 200 Mbit/s take 0.4 s; the 256 KiB burst saves 10 ms of it.
for pair in "0 1" "1 0"; do
  read -r from to <<<"$pair"
  result=$(transfer "$from" "$to" 10000000 7002)
  read -r _ seconds mbit <<<"$result"
  echo "  10 MB from host $from to host $to at 200mbit: $seconds s, $mbit Mbit/s"
  check "host $from to $to shaped (>= 0.35 s)" awk "BEGIN { exit !($seconds >= 0.35) }"
done

# A second cluster beside it.
out_b=$("$cluster" up --name="$b" --hosts=2)
check "second cluster up" test $? == 0
read -r _ b0 <<<"$(head -1 <<<"$out_b")"
check "second cluster in another /24 ($b0)" test "${b0%.*}" != "${addr[0]%.*}"
check "second cluster's default rate 2500Mbit" \
  bash -c "tc -n $b-h0 qdisc show dev eth0 | grep -q 'rate 2500Mbit'"

check "down" "$cluster" down --name="$a"
check "down again" "$cluster" down --name="$a"
check "down the second" "$cluster" down --name="$b"
check "nothing left in the root namespace" test "$(root_state)" == "$before"
check "no hosts files left" bash -c "! ls -d /etc/netns/ct$$* 2>/dev/null"

check "cpu passes the status on" exits_with 3 "cluster.sh cpu: bash -c exit 3" \
  "$cluster" cpu bash -c "exit 3"
check "cpu reports the cores" bash -c "$cluster cpu true 2>&1 | grep -q 'cores [0-9]*% busy'"

if (( failures > 0 )); then
  echo "$failures checks failed" >&2
  exit 1
fi
echo "all checks passed"
