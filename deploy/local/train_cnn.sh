#!/usr/bin/env bash
# The longer CNN run behind the accuracy figure in docs/performance.md: the demo cluster
# (2 servers) with 2 workers x 1 CPU device training the CNN for 12 epochs,
# the rate down to 0 on a cosine schedule (about 15 s per epoch on 2
# cores; --device=cuda for a GPU, about 2.5 s per epoch). Writes psync_cnn/weights.safetensors
# and summary.json (or under $PSYNC_DEMO_OUT). Extra flags go to psync_launch.
# demo.sh passes these after its own, and the last value of a flag wins.
set -euo pipefail
cd "$(dirname "$0")"
export PSYNC_DEMO_OUT="${PSYNC_DEMO_OUT:-$PWD/../../psync_cnn}"
exec bash demo.sh --model=cnn --num_workers=2 --devices=1 --batch_per_device=32 \
  --epochs=12 --lr=0.05 --momentum=0.9 --weight_decay=0.0005 --seed=1 \
  --lr_schedule=cosine --timeout_s=3600 "$@"
