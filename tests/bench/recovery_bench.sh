#!/usr/bin/env bash
# Time from a kill -9 until training steps flow again, for a worker and for
# a server. One long job runs under psync_launch, which restarts a killed
# process with the same rank, port and checkpoint directory; it is killed
# --kills times per kind, alternating worker 0, server 0, worker 1,
# server 1, ..., each kill after RECOVERY_PAUSE_S (3) seconds of training,
# so that every recovery starts from a cluster in its steady state.
# recovery_probe does each kill and times it; its header defines "steps
# flowing": the first poll at which every server is ready in one generation
# and a step that needed the restarted process has been applied (after a
# server kill: the first step above the restored checkpoint). Prints every
# kill and, per kind, the median, min and max.
#
#   tests/bench/recovery_bench.sh                          # 10 kills of each kind
#   tests/bench/recovery_bench.sh --kills=2                # or RECOVERY_KILLS=2
#   tests/bench/recovery_bench.sh --synthetic_samples=0    # other flags go to psync_launch
#
# The job: 2 servers, 2 workers x 2 CPU devices, the MLP on 12800 synthetic
# samples (--synthetic_samples=0: Fashion-MNIST, which a restarted worker
# then loads), a checkpoint every 20 steps, as many steps as it takes. A
# kill takes about 5 s (worker) or 3.5 s (server) on 2 cores, the pause
# included, so the default run takes about 1.5 minutes.
set -euo pipefail
cd "$(dirname "$0")/../.."

kills="${RECOVERY_KILLS:-10}"
pause_s="${RECOVERY_PAUSE_S:-3}"  # of training before each kill
launch_flags=()
for arg in "$@"; do
  case "$arg" in
    --kills=*) kills="${arg#--kills=}" ;;
    *) launch_flags+=("$arg") ;;
  esac
done
if ! [[ "$kills" =~ ^[1-9][0-9]*$ ]]; then
  echo "recovery_bench: --kills is '$kills', expected a positive integer" >&2
  exit 2
fi
probe_timeout_s=60  # each of a probe's two waits (for training, for the recovery)
job_limit_s=$((120 + 2 * kills * (pause_s + 2 * probe_timeout_s)))

bash deploy/bootstrap.sh
targets=(//deploy/local:psync_launch //tests/bench:recovery_probe)
bazel build "${targets[@]}" >/dev/null 2>&1 || bazel build "${targets[@]}"

# Private copies of the binaries: a concurrent bazel build may replace the
# ones in bazel-bin while the job runs (and restarts processes).
work="$(mktemp -d /tmp/psync_recovery_bench.XXXXXX)"
launcher=""  # pid of psync_launch while it runs
cleanup() {
  if [[ -n "$launcher" ]] && kill -TERM "$launcher" 2>/dev/null; then
    # On SIGTERM it stops its workers and servers (which write a final
    # checkpoint); its children die with it if it must be killed.
    for _ in $(seq 600); do
      kill -0 "$launcher" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$launcher" 2>/dev/null || true
    wait "$launcher" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
mkdir "$work/bin"
cp bazel-bin/deploy/local/psync_launch bazel-bin/server/psync_server \
  bazel-bin/worker/psync_worker bazel-bin/tests/bench/recovery_probe "$work/bin/"

log="$work/launch.log"
"$work/bin/psync_launch" --bin_dir="$work/bin" --num_servers=2 --num_workers=2 --devices=2 \
  --model=mlp --batch_per_device=32 --steps=1000000000 --synthetic_samples=12800 --lr=0.1 \
  --momentum=0.9 --seed=1 --checkpoint_dir="$work/ckpt" --checkpoint_every=20 \
  --max_restarts=$((4 * kills + 10)) --pid_dir="$work/pids" --peer_timeout_s=60 \
  --timeout_s="$job_limit_s" ${launch_flags[@]+"${launch_flags[@]}"} >"$log" 2>&1 &
launcher=$!

fail() {
  echo "recovery_bench: $*; the end of the job's log:" >&2
  tail -n 30 "$log" >&2
  exit 1
}

# "[launch] 2 servers up at 127.0.0.1:P0,127.0.0.1:P1 ..."
servers=""
for _ in $(seq 600); do
  servers="$(sed -n 's/^\[launch\] [0-9]* servers up at \([^ ]*\).*/\1/p' "$log")"
  [[ -n "$servers" ]] && break
  kill -0 "$launcher" 2>/dev/null || fail "psync_launch ended before its servers were up"
  sleep 0.1
done
[[ -n "$servers" ]] || fail "the servers were not up within 60 s"

echo "recovery: 2 servers, 2 workers x 2 devices, MLP, checkpoints every 20 steps;" \
  "$kills kills of each kind, each after ${pause_s} s of training"
victims=(worker-0 server-0 worker-1 server-1)
for ((k = 0; k < 2 * kills; ++k)); do
  victim="${victims[k % 4]}"
  sleep "$pause_s"
  # --foreground: Ctrl-C reaches the probe (and so ends this script at once).
  out="$(timeout --foreground -k 5 $((2 * probe_timeout_s + 30)) "$work/bin/recovery_probe" \
           --servers="$servers" --pid_file="$work/pids/$victim.pid" --launcher_pid="$launcher" \
           --timeout_s="$probe_timeout_s")" || fail "kill $((k + 1)) ($victim): ${out:-no output}"
  printf 'kill %2d: %s\n' "$((k + 1))" "$(grep -v '^RESULT' <<<"$out")"
  grep '^RESULT' <<<"$out" >>"$work/results.txt"
done

# stats KIND FIELD: "median M (min A, max B)" of FIELD over KIND's kills.
stats() {
  grep "victim=$1-" "$work/results.txt" | tr ' ' '\n' | sed -n "s/^$2=//p" | sort -g |
    awk '{ v[NR] = $1 } END { m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2;
                              printf "median %.3f s (min %.3f, max %.3f)", m, v[1], v[NR] }'
}
echo "worker kill -9 -> steps flowing: $(stats worker seconds) over $kills kills;" \
  "restarted by psync_launch after $(stats worker restart_s)"
echo "server kill -9 -> steps flowing: $(stats server seconds) over $kills kills;" \
  "restarted after $(stats server restart_s), every server ready again after" \
  "$(stats server ready_s)"
rolled="$(grep 'victim=server-' "$work/results.txt" | tr ' ' '\n' |
          sed -n 's/^rolled_back_steps=//p' | sort -n | tr '\n' ' ')"
echo "steps rolled back per server kill: ${rolled% }" \
  "(psync_launch logged $(grep -c 'restarting it' "$log" || true) restarts)"
