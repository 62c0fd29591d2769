#!/usr/bin/env bash
# Bootstraps, builds and runs every test, then checks that the build without
# CUDA still works; ends with "N passed, N failed" counted from the test
# cases in Bazel's test.xml files (plus the no-CUDA build as one item).
# Exit status is non-zero if any test failed or a build broke.
set -uo pipefail
cd "$(dirname "$0")/.."

bash deploy/bootstrap.sh || exit 1

log=$(mktemp)
trap 'rm -f "$log"' EXIT
bazel test //... 2>&1 | tee "$log"
bazel_rc=${PIPESTATUS[0]}

testlogs=$(bazel info bazel-testlogs 2>/dev/null)

# The build without CUDA must keep working (GPU code is compiled only where
# the toolkit is): checked as one more result.
echo "== bazel build --config=nocuda //..."
if bazel build --config=nocuda //... >"$log.nocuda" 2>&1; then
  nocuda=PASSED
else
  nocuda=FAILED
  tail -30 "$log.nocuda"
fi
rm -f "$log.nocuda"

/usr/bin/python3 tests/count_results.py "$log" "$testlogs" "nocuda build" "$nocuda"
count_rc=$?
if (( bazel_rc != 0 && count_rc == 0 )); then
  # Bazel failed without any failing test case: the build itself broke.
  echo "0 passed, 1 failed"
  exit 1
fi
exit $count_rc
