#!/bin/bash
# Packs what tests/gpu/build_torch_binding.py needs to build psync's torch
# extension on a machine with another Python and torch but no Bazel or
# Debian packages (a lent GPU machine): the C++ client as one shared
# library, libpsync_torch_core.so (every object of //worker/torch:_psync.so
# but the three files that include Python's, pybind11's or torch's headers,
# which are compiled there against that machine's), and the headers those
# three include beyond the repository's own (Abseil's, protobuf's, the
# generated .pb.h). Run from the repository root after
#   bazel build //worker/torch:psync
# Writes DIR/lib/libpsync_torch_core.so and DIR/include/, replacing them.
set -euo pipefail
dir=${1:?usage: make_torch_kit.sh DIR}
params=bazel-bin/worker/torch/_psync.so-2.params
[ -f "$params" ] || { echo "make_torch_kit.sh: no $params: bazel build //worker/torch:psync first" >&2; exit 1; }
rm -rf "$dir/lib" "$dir/include"
mkdir -p "$dir/lib" "$dir/include/proto"
# The link line of _psync.so less the binding's own objects and torch's
# libraries; every object is kept (--whole-archive), since nothing in the
# core library refers to what only the binding will call.
mapfile -t objects < <(grep '\.pic\.o$' "$params" |
  grep -vE '/_objs/(psync_module|output_binding|torch_tensor)/')
mapfile -t libs < <(grep -E '^-l|^-Wl,--(push|pop)-state' "$params" |
  grep -vE '^-l(torch|torch_python|torch_cpu|c10)$')
((${#objects[@]} > 0)) || { echo "make_torch_kit.sh: no objects in $params" >&2; exit 1; }
g++ -shared -o "$dir/lib/libpsync_torch_core.so" -Wl,-z,defs \
  -Wl,--whole-archive "${objects[@]}" -Wl,--no-whole-archive "${libs[@]}"
strip --strip-debug "$dir/lib/libpsync_torch_core.so"
cp -r /usr/include/absl "$dir/include/"
mkdir -p "$dir/include/google"
cp -r /usr/include/google/protobuf "$dir/include/google/"
cp bazel-bin/proto/*.pb.h "$dir/include/proto/"
chmod -R u+w "$dir"
