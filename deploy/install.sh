#!/usr/bin/env bash
# Installs psync's binaries side by side into PREFIX/bin, where psync_launch
# and psync_bench find the daemons (beside themselves):
#
#   bazel run //deploy:install -- PREFIX      (PREFIX relative to where bazel runs)
#   bazel-bin/deploy/install PREFIX
#
# Installing again replaces each file atomically (a running binary keeps its
# old copy), so a second run over the same PREFIX is harmless. Where CUDA is
# enabled, the worker's CUDA plugin libpsync_cuda.so goes beside it too.
# Where the torch binding was built (a torch was found: docs/torch.md), its
# Python package goes to PREFIX/lib/python/psync (PYTHONPATH=PREFIX/lib/python).
set -euo pipefail

binaries=(server/psync_server worker/psync_worker deploy/local/psync_launch
          server/psync_ctl server/psync_ckpt tests/bench/psync_bench)

fail() { echo "install: $*" >&2; exit 2; }

[[ $# -eq 1 ]] ||
  fail "expected one argument, the install prefix PREFIX (binaries go to PREFIX/bin); got $#"
[[ -n "$1" ]] || fail "PREFIX is empty; expected a directory (binaries go to PREFIX/bin)"
prefix=$1
# `bazel run` starts this script in its runfiles: a relative PREFIX is the
# caller's.
if [[ "$prefix" != /* ]]; then prefix="${BUILD_WORKING_DIRECTORY:-$PWD}/$prefix"; fi
if [[ -e "$prefix" && ! -d "$prefix" ]]; then
  fail "PREFIX '$1' exists and is not a directory; expected a directory (made if missing)"
fi
if [[ -e "$prefix/bin" && ! -d "$prefix/bin" ]]; then
  fail "'$prefix/bin' exists and is not a directory; expected PREFIX/bin to be a directory"
fi
mkdir -p "$prefix/bin" 2>/dev/null || fail "cannot create '$prefix/bin' (PREFIX '$1'): check its permissions"
[[ -w "$prefix/bin" ]] || fail "'$prefix/bin' is not writable (PREFIX '$1'): check its permissions"

# This script's runfiles: beside it when run from bazel-bin or by `bazel
# run`, or the runfiles of a test that runs it.
if [[ -d "$0.runfiles/psync" ]]; then runfiles="$0.runfiles/psync"
elif [[ -n "${RUNFILES_DIR:-}" && -d "$RUNFILES_DIR/psync" ]]; then runfiles="$RUNFILES_DIR/psync"
elif [[ -n "${TEST_SRCDIR:-}" && -d "$TEST_SRCDIR/psync" ]]; then runfiles="$TEST_SRCDIR/psync"
else fail "cannot find the built binaries: no $0.runfiles; run it with bazel run //deploy:install"
fi

files=("${binaries[@]}")
plugin=worker/gpu/libpsync_cuda.so  # in psync_worker's runfiles where CUDA is enabled
[[ -f "$runfiles/$plugin" ]] && files+=("$plugin")
for f in "${files[@]}"; do
  [[ -f "$runfiles/$f" ]] || fail "$runfiles/$f is missing; expected it built with this script"
  target="$prefix/bin/${f##*/}"
  tmp=$(mktemp "$prefix/bin/.${f##*/}.XXXXXX")
  cp "$runfiles/$f" "$tmp" && chmod 0755 "$tmp" && mv -f "$tmp" "$target" ||
    { rm -f "$tmp"; fail "cannot write $target"; }
done
echo "install: ${#files[@]} files in $prefix/bin: $(cd "$prefix/bin" && for f in "${files[@]}"; do printf '%s ' "${f##*/}"; done)"

package=worker/torch/python/psync  # //worker/torch:psync, in the runfiles where torch was found
[[ -f "$runfiles/$package/__init__.py" ]] || exit 0
to="$prefix/lib/python/psync"
if [[ -e "$to" && ! -d "$to" ]]; then
  fail "'$to' exists and is not a directory; expected the psync package's directory"
fi
mkdir -p "$to" 2>/dev/null || fail "cannot create '$to' (PREFIX '$1'): check its permissions"
names=()
for f in "$runfiles/$package"/*; do
  [[ -f "$f" ]] || continue  # not a __pycache__ an import left there
  name=${f##*/}
  tmp=$(mktemp "$to/.$name.XXXXXX")
  cp "$f" "$tmp" && chmod 0644 "$tmp" && mv -f "$tmp" "$to/$name" ||
    { rm -f "$tmp"; fail "cannot write $to/$name"; }
  names+=("$name")
done
echo "install: the Python package psync in $to (PYTHONPATH=$prefix/lib/python): ${names[*]}"
