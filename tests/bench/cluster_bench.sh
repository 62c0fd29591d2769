#!/usr/bin/env bash
# psync across the hosts of an emulated cluster (tests/cluster/cluster.sh)
# against each placement's link bound and gloo's all-reduce of the same
# bytes: tests/bench/cluster_bench.py says what it runs. Builds what it
# needs, then runs it with the flags given; writes cluster_bench.png and
# .json under --out (default ./cluster_bench_out).
#
#   tests/bench/cluster_bench.sh                                  # 2, 4, 8 hosts; 16, 64, 256 MiB
#   tests/bench/cluster_bench.sh --hosts=2,4 --sizes=16 --steps=3 # a quick look
#
# Needs root (network namespaces and tc) and iproute2; every cluster it
# makes is removed when its host count is done, or on failure.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [[ $(id -u) != 0 ]]; then
  echo "cluster_bench.sh: needs root for network namespaces and tc (running as uid $(id -u))" >&2
  exit 2
fi
bash deploy/bootstrap.sh
targets=(//tests/bench:psync_bench //server:psync_server //worker:psync_worker //deploy/local:psync_launch
         //worker/torch:psync)
bazel build "${targets[@]}" >/dev/null 2>&1 || bazel build "${targets[@]}"
exec timeout -k 30 7200 /usr/bin/python3 tests/bench/cluster_bench.py "$@"
