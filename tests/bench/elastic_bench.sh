#!/usr/bin/env bash
# What a change of an elastic job's workers costs, and what elasticity
# costs a job whose workers do not change.
#
# (a) One long elastic job (2 servers, 1..3 workers; workers 0 and 1 stay)
#     where worker 2 joins, leaves (SIGTERM), joins again and is killed
#     (kill -9), --events times each, each after ELASTIC_PAUSE_S (1) seconds
#     of training. elastic_probe makes each event happen and times it; its
#     header defines "steps flowing again": every server holds the new
#     members and has applied a step they trained. A join is timed from the
#     worker's spawn (its start, registration attempt and the coordinator's
#     change included), a leave from SIGTERM (the worker finishes its step
#     first), a kill from kill(2). Prints every event and, per kind, the
#     median, min and max, also of "decided" (every server holds the new
#     members) and, for a join, from the worker's first request to join
#     (a server reports it pending) to steps flowing.
# (b) The step time of an elastic job (--min_workers=1 --num_workers=2)
#     whose two workers stay, against the fixed job of the same shape
#     (--num_workers=2), --runs pairs alternating which goes first, each
#     --steps steps; a run's figure is the median step time of worker 0's
#     steps past the first 20 (its --metrics_csv, every step: the global
#     batch over the step's samples/s). Prints each pair and the medians'
#     ratio.
#
#   tests/bench/elastic_bench.sh                      # 10 events of each kind, 5 pairs of 1000 steps
#   tests/bench/elastic_bench.sh --events=2 --runs=1 --steps=100   # a quick look
#
# The jobs: the MLP on 12800 synthetic samples, 1 CPU device per worker,
# batch 32 per device. The default run takes about 3 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/../.."

events="${ELASTIC_EVENTS:-10}"
runs="${ELASTIC_RUNS:-5}"
steps="${ELASTIC_STEPS:-1000}"
pause_s="${ELASTIC_PAUSE_S:-1}"  # of training before each event
for arg in "$@"; do
  case "$arg" in
    --events=*) events="${arg#--events=}" ;;
    --runs=*) runs="${arg#--runs=}" ;;
    --steps=*) steps="${arg#--steps=}" ;;
    *) echo "elastic_bench: unknown argument '$arg', expected --events=N, --runs=N or --steps=N" >&2
       exit 2 ;;
  esac
done
for pair in "events:$events" "runs:$runs" "steps:$steps"; do
  if ! [[ "${pair#*:}" =~ ^[1-9][0-9]*$ ]]; then
    echo "elastic_bench: --${pair%%:*} is '${pair#*:}', expected a positive integer" >&2
    exit 2
  fi
done
if ((steps <= 40)); then
  echo "elastic_bench: --steps is $steps, expected more than 40 (the first 20 are not timed)" >&2
  exit 2
fi

bash deploy/bootstrap.sh
targets=(//server:psync_server //worker:psync_worker //tests/bench:elastic_probe)
bazel build "${targets[@]}" >/dev/null 2>&1 || bazel build "${targets[@]}"

# Private copies of the binaries: a concurrent bazel build may replace the
# ones in bazel-bin while the jobs run.
work="$(mktemp -d /tmp/psync_elastic_bench.XXXXXX)"
pids=()  # every process started, killed at the end if still running
# The workers elastic_probe started (not this shell's children).
started_pids() { cat "$work"/w*.pid 2>/dev/null || true; }
cleanup() {
  for pid in ${pids[@]+"${pids[@]}"} $(started_pids); do
    kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in ${pids[@]+"${pids[@]}"} $(started_pids); do
    for _ in $(seq 100); do alive "$pid" || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  done
  wait 2>/dev/null || true
  if [[ -n "$keep" ]]; then echo "elastic_bench: the logs are in $work" >&2; else rm -rf "$work"; fi
}
keep=""  # set by fail: the logs stay
trap cleanup EXIT
trap 'exit 130' INT TERM
mkdir "$work/bin"
cp bazel-bin/server/psync_server bazel-bin/worker/psync_worker bazel-bin/tests/bench/elastic_probe \
  "$work/bin/"

fail() {
  keep=1
  echo "elastic_bench: $*" >&2
  for f in "$work"/*.log; do echo "--- the end of $f" >&2; tail -n 15 "$f" >&2; done
  exit 1
}

# Two free ports on 127.0.0.1 (the kernel's choice, released at once: the
# servers take them a moment later).
free_ports() {
  /usr/bin/python3 -c '
import socket
socks = [socket.socket() for _ in range(2)]
for s in socks: s.bind(("127.0.0.1", 0))
print(",".join("127.0.0.1:%d" % s.getsockname()[1] for s in socks))'
}

job_flags=(--model=mlp --devices=1 --batch_per_device=32 --synthetic_samples=12800 --lr=0.1
           --momentum=0.9 --seed=1 --device=cpu --peer_timeout_s=60)

# start_servers NAME NUM_WORKERS [FLAGS...]: two servers; sets $servers.
start_servers() {
  local name="$1" num_workers="$2"
  shift 2
  servers="$(free_ports)"
  local addresses i
  IFS=, read -ra addresses <<<"$servers"
  for i in 0 1; do
    "$work/bin/psync_server" --servers="$servers" --server_rank=$i --port="${addresses[i]##*:}" \
      --num_workers="$num_workers" "${job_flags[@]}" "$@" >"$work/$name-server$i.log" 2>&1 &
    pids+=($!)
  done
}

# stop_all: SIGTERM to every process started, and waits for them.
stop_all() {
  for pid in ${pids[@]+"${pids[@]}"} $(started_pids); do
    kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in $(started_pids); do  # not this shell's children
    for _ in $(seq 300); do alive "$pid" || break; sleep 0.1; done
  done
  wait 2>/dev/null || true
  pids=()
  rm -f "$work"/w*.pid
}

# median: of the numbers on stdin, one a line.
median() {
  sort -g | awk '{ v[NR] = $1 }
                 END { printf "%.3f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# alive PID: the process runs (a zombie does not: a worker that
# elastic_probe started is not this shell's child to reap).
alive() { [[ -e /proc/$1/stat ]] && ! grep -q ') Z ' "/proc/$1/stat"; }

# stats EVENT FIELD: "median M s (min A, max B)" of FIELD over EVENT's lines.
stats() {
  grep "event=$1 " "$work/results.txt" | tr ' ' '\n' | sed -n "s/^$2=//p" | sort -g |
    awk '{ v[NR] = $1 } END { m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2;
                              printf "median %.3f s (min %.3f, max %.3f, %d events)", m, v[1], v[NR], NR }'
}

# (a) Joins, leaves and kills.
elastic=(--min_workers=1)
start_servers changes 3 "${elastic[@]}"
worker_cmd() {  # worker_cmd RANK: sets cmd, the command line of an elastic job's worker
  cmd=("$work/bin/psync_worker" --servers="$servers" --worker_rank="$1" --num_workers=3
       "${job_flags[@]}" "${elastic[@]}" --steps=1000000000)
}
for r in 0 1; do
  worker_cmd $r
  "${cmd[@]}" >"$work/changes-worker$r.log" 2>&1 &
  pids+=($!)
done
probe() {
  timeout --foreground -k 5 150 "$work/bin/elastic_probe" --servers="$servers" --rank=2 "$@"
}
echo "changes: 2 servers, workers 0 and 1 stay, worker 2 joins, leaves (SIGTERM), joins and is" \
  "killed (kill -9), $events times each, each after ${pause_s} s of training"
: >"$work/results.txt"
record() {  # record LABEL OUTPUT
  printf '%-6s %s\n' "$1" "$(grep -v '^RESULT' <<<"$2")"
  grep '^RESULT' <<<"$2" >>"$work/results.txt"
}
for ((k = 1; k <= events; ++k)); do
  for end in leave kill; do
    sleep "$pause_s"
    worker_cmd 2
    out="$(probe --event=join --pid_file="$work/w2.pid" --log="$work/changes-worker2.log" \
             -- "${cmd[@]}")" || fail "join $k: ${out:-no output}"
    record join "$out"
    sleep "$pause_s"
    pid="$(cat "$work/w2.pid")"
    out="$(probe --event=$end --pid="$pid")" || fail "$end $k: ${out:-no output}"
    record "$end" "$out"
    for _ in $(seq 300); do alive "$pid" || break; sleep 0.1; done
    alive "$pid" && fail "worker 2 (pid $pid) still runs 30 s after its $end"
    rm -f "$work/w2.pid"
  done
done
stop_all
for event in join leave kill; do
  echo "$event -> steps flowing: $(stats "$event" seconds); members decided after" \
    "$(stats "$event" decided_s)"
done
echo "join, from the worker's first request to join (a server reports it pending) -> steps" \
  "flowing: $(stats join from_ask_s)"

# (b) Step time of a stable elastic job against the fixed one.
# run_job NAME FLAGS...: sets job_ms, worker 0's median step time in ms
# past step 20.
run_job() {
  local name="$1"
  shift
  start_servers "$name" 2 "$@"
  local workers=() w
  for w in 0 1; do
    "$work/bin/psync_worker" --servers="$servers" --worker_rank=$w --num_workers=2 \
      "${job_flags[@]}" "$@" --steps="$steps" --metrics_csv="$work/$name.csv" \
      --metrics_csv_every=1 >"$work/$name-worker$w.log" 2>&1 &
    workers+=($!)
    pids+=($!)
  done
  for pid in "${workers[@]}"; do wait "$pid" || fail "$name: a worker failed"; done
  stop_all
  # samples_per_s is the 9th column; the global batch is 2 x 32.
  job_ms="$(awk -F, '$1 == "step" && $3 > 20 { print 64000 / $9 }' "$work/$name.csv" | median)"
}
echo "step time: 2 servers, 2 workers, $steps steps a run, $runs pairs;" \
  "the elastic job is --min_workers=1 --num_workers=2"
: >"$work/pairs.txt"
for ((r = 1; r <= runs; ++r)); do
  for kind in $( ((r % 2)) && echo fixed elastic || echo elastic fixed); do
    if [[ "$kind" == fixed ]]; then
      run_job "fixed$r"
      fixed_ms="$job_ms"
    else
      run_job "elastic$r" "${elastic[@]}"
      elastic_ms="$job_ms"
    fi
  done
  ratio="$(awk -v e="$elastic_ms" -v f="$fixed_ms" 'BEGIN { printf "%.3f", e / f }')"
  echo "pair $r: fixed $fixed_ms ms, elastic $elastic_ms ms a step: elastic/fixed $ratio"
  echo "$fixed_ms $elastic_ms $ratio" >>"$work/pairs.txt"
done
median_col() { awk -v c="$1" '{ print $c }' "$work/pairs.txt" | median; }
echo "stable membership: median step time fixed $(median_col 1) ms, elastic $(median_col 2) ms;" \
  "elastic/fixed median $(median_col 3) (range $(sort -g -k3 "$work/pairs.txt" | head -1 |
  awk '{ print $3 }')-$(sort -g -k3 "$work/pairs.txt" | tail -1 | awk '{ print $3 }'))"
