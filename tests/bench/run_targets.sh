#!/usr/bin/env bash
# Runs psync_bench on the configurations behind the performance targets of
# docs/performance.md and prints each one's table. Every figure is the
# median of 5 runs' medians; each ratio is measured side by side in one
# psync_bench run.
# Takes about ten minutes on 2 cores. Extra flags go to every psync_bench
# run (not to the end-to-end runs of psync_launch).
set -euo pipefail
extra=("$@")
cd "$(dirname "$0")/../.."
bash deploy/bootstrap.sh
targets=(//tests/bench:psync_bench //server:psync_server //deploy/local:psync_launch)
bazel build "${targets[@]}" >/dev/null 2>&1 || bazel build "${targets[@]}"
bench=bazel-bin/tests/bench/psync_bench

run() { timeout 600 "$bench" --runs=5 "$@" "${extra[@]}" | grep -v '^JSON' ; }
run --label="16 MiB push-pull, 1w x 1s" --model_mb=16 --tensors=4 --steps=10
# The same with payloads over TCP, as between hosts (the worker and the
# server share memory otherwise, being on one host).
run --label="16 MiB push-pull, 1w x 1s, over TCP" --model_mb=16 --tensors=4 --steps=10 \
  --shared_memory=false
# The same with the system's congestion control on psync's and the echoes'
# connections (--tcp_congestion=auto gives loopback reno).
run --label="16 MiB push-pull, 1w x 1s, system congestion control" --model_mb=16 --tensors=4 \
  --steps=10 --tcp_congestion=system --shared_memory=false
# Across an emulated 4 Gbit/s full-duplex link instead of loopback (two
# network namespaces joined by a veth pair, a token bucket on each end):
# the link, not the two cores' copies, bounds the step. Needs root.
if [[ $(id -u) == 0 ]] && command -v tc >/dev/null; then
  link() { bash tests/bench/link_bench.sh --rate=4gbit --runs=5 "$@" "${extra[@]}" | grep -v '^JSON' ; }
  link --label="16 MiB push-pull, 1w x 1s, 4 Gbit/s link" --model_mb=16 --tensors=4 --steps=10
  link --label="64 MiB push-pull, 1w x 1s, 4 Gbit/s link" --model_mb=64 --tensors=8 --steps=5
else
  echo "(emulated-link rows skipped: they need root and iproute2's tc)"
fi
# Over TCP: with shared memory the payloads would skip TLS (they never leave
# the host), and only the calls' headers would pay for it.
run --label="16 MiB push-pull, TLS+token vs plaintext" --model_mb=16 --tensors=4 --steps=10 \
  --compare_tls --baselines=false --shared_memory=false
run --label="4 KiB push-pull, 1w x 1s" --model_mb=0.00390625 --tensors=1 --steps=200
run --label="64 MiB, 1w x 2s" --model_mb=64 --tensors=8 --num_workers=1 --num_servers=2 --steps=5
run --label="64 MiB, 2w x 2s" --model_mb=64 --tensors=8 --num_workers=2 --num_servers=2 --steps=5
run --label="16 MiB push-pull, bf16 on the wire" --model_mb=16 --tensors=4 --steps=10 --wire_dtype=bf16
# Memory: one server holding a 64 MiB model for 4 workers (peak RSS against
# its share, and its own memory: RSS less the workers' shared models it
# maps), plain SGD (also with every request in flight at once instead
# of the default push window) and with momentum (also with a checkpoint
# directory, which keeps the previous version's momentum for the shutdown
# checkpoint), and deterministic mode.
mem() { run --model_mb=64 --tensors=8 --num_workers=4 --num_servers=1 --steps=3 --runs=3 \
  --baselines=false "$@"; }
mem --label="memory, 64 MiB, 4w x 1s, plain SGD" --momentum=0
mem --label="memory, 64 MiB, 4w x 1s, plain SGD, no push window" --momentum=0 \
  --push_window_kb=1048576
mem --label="memory, 64 MiB, 4w x 1s, momentum 0.9" --momentum=0.9
# The same with payloads in shared slots rather than in place in the
# workers' models, which the server then does not map.
mem --label="memory, 64 MiB, 4w x 1s, momentum 0.9, slots" --momentum=0.9 --shared_model=false
mem --label="memory, 64 MiB, 4w x 1s, momentum 0.9, checkpoints" --momentum=0.9 --checkpoints
mem --label="memory, 64 MiB, 4w x 1s, deterministic" --momentum=0 --deterministic
run --label="overlap, 16 MiB in 8 layers, 4 ms each" --model_mb=16 --tensors=8 --compute_ms=4 \
  --steps=10 --baselines=false

# End to end: one server and the 784-256-128-10 MLP on Fashion-MNIST for one
# epoch, a global batch of 128 from one worker process or from two; the
# runs alternate, and each figure is the median of 5 (the job's samples/s
# from worker 0's summary).
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
e2e() {
  timeout 300 bazel-bin/deploy/local/psync_launch --num_servers=1 --devices=1 \
    --model=mlp:784-256-128-10 --epochs=1 --lr=0.1 --momentum=0.9 --seed=1 \
    --summary="$tmp/summary.json" "$@" >"$tmp/log" 2>&1 || { cat "$tmp/log"; exit 1; }
  /usr/bin/python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["samples_per_sec"])' \
    "$tmp/summary.json"
}
one=() two=()
for _ in 1 2 3 4 5; do
  one+=("$(e2e --num_workers=1 --batch_per_device=128)")
  two+=("$(e2e --num_workers=2 --batch_per_device=64)")
done
/usr/bin/python3 - "${#one[@]}" "${one[@]}" "${two[@]}" <<'PY'
import statistics, sys
n = int(sys.argv[1])
one, two = [float(x) for x in sys.argv[2:2 + n]], [float(x) for x in sys.argv[2 + n:]]
a, b = statistics.median(one), statistics.median(two)
print("\n== end to end: psync_launch, 1 server, MLP 784-256-128-10, global batch 128, 1 epoch ==")
print(f"1 worker  x 1 device x batch 128  {a:10.0f} samples/s (median of {n})")
print(f"2 workers x 1 device x batch 64   {b:10.0f} samples/s (median of {n})")
print(f"  2 workers / 1 worker = {b / a:.3f}")
PY
