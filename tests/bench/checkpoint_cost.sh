#!/usr/bin/env bash
# What checkpoints cost in training throughput: the single-host demo's job
# (deploy/local/demo.sh: 2 servers, 2 workers x 2 CPU devices, MLP on
# Fashion-MNIST, 5 epochs) run without checkpoints and with
# --checkpoint_every=100 (a fresh checkpoint directory per run), alternating
# none, ckpt, none, ckpt, ... so that drift hits both modes alike. Prints
# each run's throughput (samples/s of training steps, evaluation excluded:
# worker 0's --summary JSON) and checkpoints written (the servers' logs),
# each mode's median, and the ratio ckpt/none.
#
#   tests/bench/checkpoint_cost.sh                 # 5 runs of each mode
#   tests/bench/checkpoint_cost.sh --runs=1        # or CHECKPOINT_COST_RUNS=1
#   tests/bench/checkpoint_cost.sh --epochs=1      # other flags go to psync_launch
#
# A run takes about 13 s on 2 cores, so the default takes about 2.5 minutes.
set -euo pipefail
cd "$(dirname "$0")/../.."

runs="${CHECKPOINT_COST_RUNS:-5}"
launch_flags=()
for arg in "$@"; do
  case "$arg" in
    --runs=*) runs="${arg#--runs=}" ;;
    *) launch_flags+=("$arg") ;;
  esac
done
if ! [[ "$runs" =~ ^[1-9][0-9]*$ ]]; then
  echo "checkpoint_cost: --runs is '$runs', expected a positive integer" >&2
  exit 2
fi
run_limit_s=300  # one run; a healthy one takes ~13 s

bash deploy/bootstrap.sh
bazel build //deploy/local:psync_launch >/dev/null 2>&1 || bazel build //deploy/local:psync_launch

# Private copies of the binaries: a concurrent bazel build may replace the
# ones in bazel-bin halfway through the runs.
work="$(mktemp -d /tmp/psync_checkpoint_cost.XXXXXX)"
child=""  # pid of the running `timeout psync_launch`, if any
cleanup() {
  if [[ -n "$child" ]]; then
    kill -TERM "$child" 2>/dev/null || true
    wait "$child" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
mkdir "$work/bin"
cp bazel-bin/deploy/local/psync_launch bazel-bin/server/psync_server \
  bazel-bin/worker/psync_worker "$work/bin/"

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2];
                                                else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# run_one MODE INDEX: one job; appends its samples/s to $work/MODE.txt.
run_one() {
  local mode="$1" i="$2" dir="$work/$1-$2"
  mkdir "$dir"
  local flags=(--bin_dir="$work/bin" --num_servers=2 --num_workers=2 --devices=2 --model=mlp
               --batch_per_device=32 --epochs=5 --lr=0.1 --momentum=0.9 --weight_decay=0.0001
               --seed=1 --summary="$dir/summary.json" --timeout_s="$run_limit_s")
  if [[ "$mode" == ckpt ]]; then
    flags+=(--checkpoint_every=100 --checkpoint_dir="$dir/ckpt")
  fi
  timeout -k 30 "$((run_limit_s + 30))" "$work/bin/psync_launch" "${flags[@]}" \
    ${launch_flags[@]+"${launch_flags[@]}"} >"$dir/log" 2>&1 &
  child=$!
  local rc=0
  wait "$child" || rc=$?
  child=""
  local sps
  sps="$(sed -n 's/.*"samples_per_sec": \([0-9.]*\).*/\1/p' "$dir/summary.json" 2>/dev/null)"
  if [[ "$rc" -ne 0 || -z "$sps" ]]; then
    echo "run $i/$runs $mode FAILED (exit code $rc); the end of its log:" >&2
    tail -n 20 "$dir/log" >&2
    exit 1
  fi
  # Every write logs "checkpoint of version V written"; pruning keeps only
  # the newest few on disk, so the logs count, not the files.
  local written failed versions
  written="$(grep -c 'checkpoint of version [0-9]* written' "$dir/log" || true)"
  failed="$(grep -c 'checkpoint of version [0-9]* failed' "$dir/log" || true)"
  versions="$({ grep -o 'checkpoint of version [0-9]* written' "$dir/log" || true; } |
              awk '{ print $4 }' | sort -un | wc -l)"
  printf 'run %d/%d %-4s: %8.0f samples/s, %3d checkpoints written (%d versions), %d failed\n' \
    "$i" "$runs" "$mode" "$sps" "$written" "$versions" "$failed"
  echo "$sps" >>"$work/$mode.txt"
  rm -rf "$dir"
}

echo "checkpoint cost: demo job (2 servers, 2 workers x 2 devices, MLP, Fashion-MNIST, 5 epochs)," \
  "no checkpoints vs --checkpoint_every=100, alternating; runs of each: $runs"
for ((i = 1; i <= runs; ++i)); do
  run_one none "$i"
  run_one ckpt "$i"
done

none="$(median <"$work/none.txt")"
ckpt="$(median <"$work/ckpt.txt")"
# Each ckpt run against the none run just before it.
paired="$(paste "$work/none.txt" "$work/ckpt.txt" | awk '{ print 100 * $2 / $1 }' | median)"
printf 'median samples/s: none %.0f, ckpt %.0f; ckpt/none %.1f %%' \
  "$none" "$ckpt" "$(awk -v a="$ckpt" -v b="$none" 'BEGIN { print 100 * a / b }')"
printf ' (median of the %d paired ratios: %.1f %%)\n' "$runs" "$paired"
