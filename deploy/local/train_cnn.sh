#!/usr/bin/env bash
# The longer CNN run behind the README's accuracy figure: 2 servers and
# 2 workers x 1 CPU device train the CNN on Fashion-MNIST (about 16 s per
# epoch on 2 cores). Writes psync_cnn/weights.safetensors and summary.json
# (or under $PSYNC_CNN_OUT). Extra flags go to psync_launch.
set -euo pipefail
cd "$(dirname "$0")/../.."

bash deploy/bootstrap.sh
bazel build //deploy/local:psync_launch

out="${PSYNC_CNN_OUT:-$PWD/psync_cnn}"
mkdir -p "$out"
bazel-bin/deploy/local/psync_launch \
  --model=cnn --servers=2 --workers=2 --devices_per_worker=1 --batch_per_device=32 \
  --epochs=12 --lr=0.05 --momentum=0.9 --weight_decay=0.0005 --seed=1 --timeout_s=3600 \
  --export="$out/weights.safetensors" --summary="$out/summary.json" "$@"
echo "summary: $(cat "$out/summary.json")"
