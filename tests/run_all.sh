#!/usr/bin/env bash
# Bootstraps, builds and runs every test, then checks that the build without
# CUDA still works, the sources' size limits (tests/code_limits.py), runs
# psync_launch across network namespaces (tests/hosts/launch_hosts_test.sh),
# builds the torch package without Bazel (tests/gpu/torch_kit_test.sh), lints
# the deployment files (tests/k8s/check_manifests.sh)
# and plays the Kubernetes manifests as containers (tests/k8s/play_test.sh,
# elastic_play_test.sh);
# ends with "N passed, N failed" counted from the test cases in Bazel's
# test.xml files plus one item per build and deployment check.
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

# Deployment: each script prints "PASS name" / "FAIL name" per check; a
# script that dies without printing a result counts as one failure.
extra=("nocuda build" "$nocuda")
deployment_check() {  # SCRIPT [ARG...] (.sh run by bash, .py by Debian's python3)
  echo "== $*"
  local run=bash
  [[ "$1" == *.py ]] && run=/usr/bin/python3
  "$run" "$@" 2>&1 | tee "$log.deploy"
  local rc=${PIPESTATUS[0]} before=${#extra[@]}
  while read -r verdict name; do
    [[ "$verdict" == PASS ]] && extra+=("$name" PASSED)
    [[ "$verdict" == FAIL ]] && extra+=("$name" FAILED)
  done < <(grep -E '^(PASS|FAIL) ' "$log.deploy")
  rm -f "$log.deploy"
  # A script that failed without a FAIL line (killed, or broken) is one.
  if (( rc != 0 )) && ! printf '%s\n' "${extra[@]:before}" | grep -qx FAILED; then
    extra+=("$1 (exit $rc)" FAILED)
  fi
}
# The sources' size limits (no file over 600 lines, no function over 80).
deployment_check tests/code_limits.py
# psync_launch across hosts: network namespaces, which need root and
# /run/netns, read-only in Bazel's sandbox; so a check here, on the
# binaries `bazel test //...` built.
deployment_check tests/hosts/launch_hosts_test.sh
# The same with payloads on the servers' payload lanes.
deployment_check tests/hosts/launch_hosts_test.sh --payload_lane
# The torch package built without Bazel from the kit a GPU machine gets
# (tests/gpu/make_torch_kit.sh), against Debian's torch here.
deployment_check tests/gpu/torch_kit_test.sh
if bash deploy/bootstrap_tools.sh; then
  deployment_check tests/k8s/check_manifests.sh
  deployment_check tests/k8s/play_test.sh
  deployment_check tests/k8s/elastic_play_test.sh
else
  extra+=("deploy/bootstrap_tools.sh" FAILED)
fi

/usr/bin/python3 tests/count_results.py "$log" "$testlogs" "${extra[@]}"
count_rc=$?
if (( bazel_rc != 0 && count_rc == 0 )); then
  # Bazel failed without any failing test case: the build itself broke.
  echo "0 passed, 1 failed"
  exit 1
fi
exit $count_rc
