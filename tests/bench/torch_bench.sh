#!/usr/bin/env bash
# PyTorch workers through psync against torch's DDP (gloo) and one torch
# process, and against psync_worker (docs/performance.md, "PyTorch workers").
# Builds what it needs, then runs tests/bench/torch_bench.py with the flags
# given (--runs=5 by default; --models=mlp for the MLP alone; --help).
# Takes 3 to 5 minutes on a quiet 2-core machine (every row, both models, 5 runs).
#
#   tests/bench/torch_bench.sh
#   tests/bench/torch_bench.sh --runs=1 --models=mlp
set -euo pipefail
cd "$(dirname "$0")/../.."
bash deploy/bootstrap.sh
targets=(//server:psync_server //worker:psync_worker //worker/torch:psync)
bazel build "${targets[@]}" >/dev/null 2>&1 || bazel build "${targets[@]}"
exec timeout -k 30 1200 /usr/bin/python3 tests/bench/torch_bench.py --bin_dir=bazel-bin "$@"
