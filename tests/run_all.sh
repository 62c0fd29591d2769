#!/usr/bin/env bash
# Bootstraps, builds and runs every test; ends with "N passed, N failed"
# counted from the test cases in Bazel's test.xml files. Exit status is
# non-zero if any test failed or the build broke.
set -uo pipefail
cd "$(dirname "$0")/.."

bash deploy/bootstrap.sh || exit 1

log=$(mktemp)
trap 'rm -f "$log"' EXIT
bazel test //... 2>&1 | tee "$log"
bazel_rc=${PIPESTATUS[0]}

/usr/bin/python3 tests/count_results.py "$log" "$(bazel info bazel-testlogs 2>/dev/null)"
count_rc=$?
if (( bazel_rc != 0 && count_rc == 0 )); then
  # Bazel failed without any failing test case: the build itself broke.
  echo "0 passed, 1 failed"
  exit 1
fi
exit $count_rc
