#!/usr/bin/env bash
# Runs psync_bench on the configurations behind the README's performance
# targets and prints each one's table. Every figure is the median of 5 runs'
# medians; each ratio is measured side by side in one psync_bench run.
# Takes about two minutes on 2 cores. Extra flags go to every run.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash deploy/bootstrap.sh
bazel build //tests/bench:psync_bench //server:psync_server >/dev/null 2>&1 ||
  bazel build //tests/bench:psync_bench //server:psync_server
bench=bazel-bin/tests/bench/psync_bench

run() { timeout 600 "$bench" --runs=5 "$@" | grep -v '^JSON' ; }
run --label="16 MiB push-pull, 1w x 1s" --model_mb=16 --tensors=4 --steps=10
run --label="16 MiB push-pull, TLS+token vs plaintext" --model_mb=16 --tensors=4 --steps=10 \
  --compare_tls --baselines=false
run --label="4 KiB push-pull, 1w x 1s" --model_mb=0.00390625 --tensors=1 --steps=200
run --label="64 MiB, 1w x 2s" --model_mb=64 --tensors=8 --num_workers=1 --num_servers=2 --steps=5 --baselines=false
run --label="64 MiB, 2w x 2s" --model_mb=64 --tensors=8 --num_workers=2 --num_servers=2 --steps=5 --baselines=false
run --label="overlap, 16 MiB in 8 layers, 4 ms each" --model_mb=16 --tensors=8 --compute_ms=4 \
  --steps=10 --baselines=false
