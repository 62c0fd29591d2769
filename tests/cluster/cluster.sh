#!/usr/bin/env bash
# An emulated cluster on one machine: N hosts, each its own network
# namespace with its own address and its own `lo`, each joined to a switch
# (a bridge in a namespace of its own) by one link shaped as a NIC: at most
# RATE each way (full duplex) and DELAY each way on the link, so one host
# reaches another in 2·DELAY one way, through the switch. The machine's own
# network (the root namespace) is untouched.
#
#   cluster.sh up --name=NAME --hosts=N [--rate=RATE] [--delay=DELAY]
#       makes namespaces NAME-h0 … NAME-h(N-1) (2 ≤ N ≤ 8) and NAME-sw, and
#       prints one line per host: "NAME-hI ADDRESS" (IPv4; a /24 of
#       10.100.0.0–10.199.255.0 chosen from NAME, distinct from every other
#       live cluster's). RATE is a tc rate (default 2500mbit), DELAY a tc
#       time (default 0: none; a delay needs the kernel's netem, which
#       some kernels lack: then `up` says so and makes nothing). Inside a host
#       (`ip netns exec NAME-hI …`) /etc/hosts names every host: NAME-hI.
#   cluster.sh down --name=NAME
#       removes all that `up` made for NAME; idempotent. End the processes
#       running on the hosts first: a namespace (and its link) lives until
#       its last process exits, and `down` names those it finds.
#   cluster.sh cpu CMD [ARG…]
#       runs CMD, then prints to stderr its wall time, the CPU time CMD and
#       its children used, and how busy the machine's cores were meanwhile
#       (from /proc/stat, so every process of the machine counts, and the
#       links' packet work, softirq, too); exits with CMD's status. A run
#       whose cores were near 100% busy was bound by them, not by the links.
#
# Needs root and iproute2 (ip, tc). Bad flags exit 2 with a message naming
# the flag, the value and what was expected; any other failure exits 1.
set -Eeuo pipefail
# A failing ip or tc exits 2, which means a bad flag here: any other
# failure exits 1.
trap 'exit 1' ERR

me=cluster.sh
default_rate=2500mbit
default_delay=0
max_hosts=8

usage() {
  cat >&2 <<EOF
usage: $me up --name=NAME --hosts=N [--rate=RATE] [--delay=DELAY]
       $me down --name=NAME
       $me cpu CMD [ARG...]
EOF
  exit 2
}
bad_flag() { echo "$me: $1" >&2; exit 2; }
die() { echo "$me: $1" >&2; exit 1; }

needs_root_and_iproute2() {
  [[ $(id -u) == 0 ]] || die "needs root for network namespaces and tc (running as uid $(id -u))"
  local tool
  for tool in ip tc; do
    command -v "$tool" >/dev/null || die "needs iproute2's $tool, which is not on PATH"
  done
}

# Parses --name, --hosts, --rate, --delay into the globals of those names;
# `allowed` lists the flags the command takes.
parse_flags() {  # ALLOWED ARG...
  local allowed=$1 a flag value
  shift
  for a in "$@"; do
    [[ $a == --*=* ]] || bad_flag "unexpected argument '$a'; expected --flag=value"
    flag=${a%%=*} value=${a#*=}
    [[ " $allowed " == *" $flag "* ]] || bad_flag "unknown flag $flag; expected one of: $allowed"
    case $flag in
      --name) name=$value ;;
      --hosts) hosts=$value ;;
      --rate) rate=$value ;;
      --delay) delay=$value ;;
    esac
  done
  # Namespace NAME-sw and the links' names must stay short and plain.
  [[ $name =~ ^[a-z][a-z0-9-]{0,23}$ ]] ||
    bad_flag "--name is '$name'; expected 1 to 24 of a-z, 0-9 and '-', starting with a letter"
}

validate_up_flags() {
  [[ $hosts =~ ^[0-9]+$ ]] && (( hosts >= 2 && hosts <= max_hosts )) ||
    bad_flag "--hosts is '$hosts'; expected a number of hosts from 2 to $max_hosts"
  [[ $rate =~ ^[0-9]+(\.[0-9]+)?[kmg]?bit$ ]] ||
    bad_flag "--rate is '$rate'; expected a tc rate such as 2500mbit or 1gbit"
  [[ $rate =~ ^0+(\.0+)?[kmg]?bit$ ]] && bad_flag "--rate is '$rate'; expected more than 0"
  [[ $delay =~ ^(0|[0-9]+(\.[0-9]+)?(us|ms|s))$ ]] ||
    bad_flag "--delay is '$delay'; expected 0 or a tc time such as 50us or 2ms"
}

# The /24 a cluster's hosts live in, recorded on its bridge (the link's
# alias) so that other clusters can avoid it.
subnet_of() {  # NAME → "10.A.B" or nothing
  ip -n "$1-sw" -o link show br0 2>/dev/null | sed -n 's/.* alias psync-cluster:\([0-9.]*\)$/\1/p'
}

# A /24 from NAME's checksum, the next free one if another live cluster
# holds it.
choose_subnet() {
  local h taken=" " ns i
  h=$(printf '%s' "$name" | cksum | cut -d' ' -f1)
  for ns in $(ip netns list | awk '{print $1}' | grep -- '-sw$' || true); do
    taken+="$(subnet_of "${ns%-sw}") "
  done
  for (( i = 0; i < 25600; ++i )); do
    local k=$(( (h + i) % 25600 ))
    local subnet="10.$(( 100 + k / 256 )).$(( k % 256 ))"
    [[ $taken == *" $subnet "* ]] || { echo "$subnet"; return; }
  done
  die "no free /24 left in 10.100.0.0/16 to 10.199.255.0/24"
}

# Egress of one end of a host's link: DELAY on the wire (netem), then at
# most RATE (a token bucket whose 256 KiB burst and 5 ms queue are those
# tests/bench/link_bench.sh settled on: large enough for veth's 64 KiB
# segments, small enough that TCP sees the bottleneck).
shape() {  # NETNS DEV
  local parent=root
  if [[ $delay != 0 ]]; then
    tc -n "$1" qdisc add dev "$2" root handle 1: netem delay "$delay" limit 100000 ||
      die "could not add a delay with tc netem on $1's $2 (does the kernel have netem,
CONFIG_NET_SCH_NETEM?); --delay=$delay needs it, --delay=0 does not"
    parent="parent 1:1"
  fi
  tc -n "$1" qdisc add dev "$2" $parent handle 10: tbf rate "$rate" burst 256kb latency 5ms
}

up() {
  validate_up_flags
  needs_root_and_iproute2
  if ip netns list | awk '{print $1}' | grep -qx -- "$name-sw"; then
    die "cluster '$name' exists already (namespace $name-sw); run: $me down --name=$name"
  fi
  local subnet sw="$name-sw" i
  subnet=$(choose_subnet)
  # Whatever fails half way, nothing stays.
  trap 'down >/dev/null 2>&1 || true' EXIT
  ip netns add "$sw"
  ip -n "$sw" link set lo up
  ip -n "$sw" link add br0 type bridge
  ip -n "$sw" link set br0 alias "psync-cluster:$subnet"
  ip -n "$sw" link set br0 up
  local hosts_file="127.0.0.1 localhost
::1 localhost ip6-localhost ip6-loopback"
  for (( i = 0; i < hosts; ++i )); do
    hosts_file+=$'\n'"$subnet.$(( i + 1 )) $name-h$i"
  done
  for (( i = 0; i < hosts; ++i )); do
    local h="$name-h$i"
    ip netns add "$h"
    ip -n "$h" link set lo up
    ip link add eth0 netns "$h" type veth peer name "p$i" netns "$sw"
    ip -n "$sw" link set "p$i" master br0
    ip -n "$sw" link set "p$i" up
    ip -n "$h" addr add "$subnet.$(( i + 1 ))/24" dev eth0
    ip -n "$h" link set eth0 up
    shape "$h" eth0    # the host's NIC sending
    shape "$sw" "p$i"  # the switch's port sending to the host
    # `ip netns exec` shows /etc/netns/NS/hosts as /etc/hosts.
    mkdir -p "/etc/netns/$h"
    printf '%s\n' "$hosts_file" >"/etc/netns/$h/hosts"
  done
  trap - EXIT
  for (( i = 0; i < hosts; ++i )); do echo "$name-h$i $subnet.$(( i + 1 ))"; done
}

# Deleting a namespace deletes its links, and with them their qdiscs.
down() {
  needs_root_and_iproute2
  local ns
  for ns in $(ip netns list | awk '{print $1}' | grep -E -- "^$name-(sw|h[0-9]+)$" || true); do
    local left
    left=$(ip netns pids "$ns" | xargs)
    [[ -z $left ]] || echo "$me: processes $left still run on $ns: it lives until they exit" >&2
    ip netns del "$ns"
  done
  for ns in /etc/netns/"$name"-h*; do
    [[ -d $ns && ${ns##*/} =~ ^$name-h[0-9]+$ ]] || continue
    rm -f "$ns/hosts"
    rmdir "$ns"
  done
  rmdir /etc/netns 2>/dev/null || true
}

# The machine's CPU time from /proc/stat's first line: busy and total
# jiffies, then user (+nice), system and softirq (+irq) alone.
cpu_times() {
  local _ user nice system idle iowait irq softirq steal
  read -r _ user nice system idle iowait irq softirq steal _ </proc/stat
  echo "$(( user + nice + system + irq + softirq + steal )) \
$(( user + nice + system + idle + iowait + irq + softirq + steal )) \
$(( user + nice )) $system $(( irq + softirq ))"
}

# Seconds of CPU the shell's waited-for children used so far: bash's
# `times`, run in this shell (in a subshell it would count the subshell's),
# second line "0m1.250s 0m0.310s", user then system.
children_cpu_s() {  # FILE
  times >"$1"
  tail -1 "$1" | awk '{ t = 0; for (i = 1; i <= 2; ++i) { split($i, p, /[ms]/); t += p[1] * 60 + p[2] } printf "%.2f", t }'
}

cpu() {
  (( $# > 0 )) || usage
  local before after start end own_before own_after rc=0
  before=($(cpu_times))
  local times_file
  times_file=$(mktemp)
  children_cpu_s "$times_file" >"$times_file.before"
  start=$(date +%s.%N)
  "$@" || rc=$?
  end=$(date +%s.%N)
  children_cpu_s "$times_file" >"$times_file.after"
  own_before=$(<"$times_file.before") own_after=$(<"$times_file.after")
  rm -f "$times_file" "$times_file.before" "$times_file.after"
  after=($(cpu_times))
  local cores total busy
  cores=$(grep -c '^cpu[0-9]' /proc/stat)
  total=$(( after[1] - before[1] ))
  (( total > 0 )) || total=1
  pct() { echo $(( 100 * (after[$1] - before[$1]) / total )); }
  busy=$(pct 0)
  echo "$me cpu: $*: $(awk "BEGIN { printf \"%.1f s, itself %.2f s of CPU\", $end - $start, $own_after - $own_before }");" \
    "the machine's $cores cores $busy% busy (user $(pct 2)%, system $(pct 3)%, softirq $(pct 4)%," \
    "every process counted)$( (( busy >= 90 )) && echo ": the cores, not the links, may have bound it")" >&2
  return $rc
}

name="" hosts="" rate=$default_rate delay=$default_delay
(( $# > 0 )) || usage
command=$1
shift
case $command in
  up)
    parse_flags "--name --hosts --rate --delay" "$@"
    up
    ;;
  down)
    parse_flags "--name" "$@"
    down
    ;;
  cpu)
    trap - ERR  # CMD's own status is the result
    cpu "$@"
    ;;
  *) echo "$me: unknown command '$command'; expected up, down or cpu" >&2; usage ;;
esac
