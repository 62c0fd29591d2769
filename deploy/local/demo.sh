#!/usr/bin/env bash
# The single-host demo: 2 parameter servers, 2 workers x 2 CPU devices,
# training the MLP on Fashion-MNIST. Prints one line per epoch and writes
# the final weights, a JSON summary and the training curves (CSV, and a PNG
# drawn by plot_run.py) to ./psync_demo/ (or $PSYNC_DEMO_OUT).
# Extra flags are passed to psync_launch (e.g. --epochs=10 --deterministic).
set -euo pipefail
cd "$(dirname "$0")/../.."

bash deploy/bootstrap.sh
bazel build //deploy/local:psync_launch

out="${PSYNC_DEMO_OUT:-$PWD/psync_demo}"
mkdir -p "$out"
bazel-bin/deploy/local/psync_launch \
  --num_servers=2 --num_workers=2 --devices=2 --model=mlp \
  --batch_per_device=32 --epochs=5 --lr=0.1 --momentum=0.9 --weight_decay=0.0001 \
  --seed=1 --export_path="$out/weights.safetensors" --summary="$out/summary.json" \
  --metrics_csv="$out/curves.csv" --metrics_csv_every=10 "$@"
echo "summary: $(cat "$out/summary.json")"
echo "weights: $out/weights.safetensors"
/usr/bin/python3 deploy/local/plot_run.py "$out/curves.csv" --out "$out/curves.png" \
  --label="2 servers, 2 workers x 2 devices" --title="psync demo: MLP on Fashion-MNIST"
