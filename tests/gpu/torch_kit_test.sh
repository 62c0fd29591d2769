#!/usr/bin/env bash
# The torch package built without Bazel, as a GPU machine builds it
# (docs/gpu.md, "Running the GPU checks"): tests/gpu/make_torch_kit.sh packs
# the C++ client of the `bazel build //worker/torch:psync` here, then
# tests/gpu/build_torch_binding.py compiles the binding against Debian's
# python3 and torch from that kit alone. Checks that
#   1. the kit and the package build;
#   2. the package imports, names the torch it was built for, and trains:
#      tests/torch_device_test.py passes with it (host copies against the
#      direct path, bit for bit, with real servers);
#   3. a compiler that links libstdc++ statically (as one GPU machine's did)
#      still gives an extension that loads the shared one: a private copy
#      of the runtime exported from it crashed the client's logging.
# Prints "PASS name" / "FAIL name" per check; exits non-zero if one failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
source tests/check_results.sh
work=$(mktemp -d /tmp/psync_torch_kit.XXXXXX)
trap 'rm -rf "$work"' EXIT

built_ok=0
if bash tests/gpu/make_torch_kit.sh "$work/kit" > "$work/build.log" 2>&1 &&
  timeout 300 /usr/bin/python3 tests/gpu/build_torch_binding.py "$work/kit" "$work/out" \
    >> "$work/build.log" 2>&1; then
  built_ok=1
fi
result "torch kit: the package builds without Bazel" $built_ok "$(tail -20 "$work/build.log")"

ok=0
want=$(/usr/bin/python3 -c 'import torch; print(torch.__version__)')
if ((built_ok)); then
  runfiles="$work/runfiles/psync"
  mkdir -p "$runfiles/server" "$work/tmp"
  ln -s "$PWD/bazel-bin/server/psync_server" "$runfiles/server/psync_server"
  built=$(cd "$work" && PYTHONPATH="$work/out" /usr/bin/python3 -c \
    'import psync.torch; print(psync.built_torch_version)' 2> "$work/import.log")
  if [ "$built" == "$want" ] &&
    TEST_SRCDIR="$work/runfiles" TEST_TMPDIR="$work/tmp" PYTHONPATH="$work/out:$PWD/tests" \
      PYTHONDONTWRITEBYTECODE=1 OMP_NUM_THREADS=1 timeout 300 /usr/bin/python3 \
      tests/torch_device_test.py > "$work/test.log" 2>&1; then
    ok=1
  fi
fi
result "torch kit: the package imports as torch $want's and trains" $ok \
  "$(cat "$work/import.log"; grep -vE '^[IW][0-9]' "$work/test.log" | tail -20)"
ok=0
if ((built_ok)); then
  printf '#!/bin/sh\nexec g++ -static-libstdc++ "$@"\n' > "$work/static-g++"
  chmod +x "$work/static-g++"
  if CXX="$work/static-g++" timeout 300 /usr/bin/python3 tests/gpu/build_torch_binding.py \
    "$work/kit" "$work/static" > "$work/static.log" 2>&1 &&
    readelf -d "$work"/static/psync/_psync*.so | grep -q 'NEEDED.*\[libstdc++\.so\.6\]' &&
    (cd "$work" && PYTHONPATH="$work/static" /usr/bin/python3 -c 'import psync.torch') \
      >> "$work/static.log" 2>&1; then
    ok=1
  fi
fi
result "torch kit: a compiler linking libstdc++ statically still gives the shared one" $ok \
  "$(tail -20 "$work/static.log")"
exit $failed
