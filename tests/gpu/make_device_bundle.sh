#!/bin/bash
# Packs what tests/gpu/device_check.sh needs on a GPU machine that has
# CUDA's libraries but neither Bazel nor Debian's gRPC, protobuf, Abseil or
# OpenBLAS: the binaries, every shared library they load except glibc's and
# the large CUDA libraries (cuBLAS, cuDNN, NCCL: the machine's own are used),
# Fashion-MNIST, and the kit that builds the torch package there
# (tests/gpu/make_torch_kit.sh). Run from the repository root after
#   bazel build //worker/gpu:gpu_test //worker/gpu:libpsync_cuda.so \
#     //worker:psync_worker //server:psync_server //deploy/local:psync_launch \
#     //server:psync_ckpt //worker/torch:psync
# Writes .gpu_bundle/ (ignored by git): bin/, lib.tar.xz, data/, torch.tar.xz.
set -euo pipefail
out=.gpu_bundle
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/data"
bins=(worker/gpu/gpu_test worker/gpu/libpsync_cuda.so worker/psync_worker server/psync_server
      deploy/local/psync_launch server/psync_ckpt)
tests/gpu/make_torch_kit.sh "$out/torch"
for b in "${bins[@]}"; do
  cp bazel-bin/"$b" "$out/bin/"
  chmod u+w "$out/bin/$(basename "$b")"
  strip --strip-debug "$out/bin/$(basename "$b")"
done
# Libraries: everything ldd resolves, less glibc's own and CUDA's big ones.
skip='/(libc|libm|libdl|libpthread|librt|ld-linux-x86-64)\.so|/lib(cublas|cublasLt|cudnn|nccl)\.so'
for b in "${bins[@]/#/bazel-bin/}" "$out/torch/lib/libpsync_torch_core.so"; do ldd "$b"; done | awk '$3 ~ /^\// {print $1, $3}' | sort -u |
  while read -r name path; do
    if ! [[ "$path" =~ $skip ]]; then cp -L "$path" "$out/lib/$name"; fi
  done
chmod -R u+w "$out/lib"
# Older than the machine's own, most likely: loaded only where it has none.
mkdir "$out/lib/fallback"
mv "$out"/lib/libstdc++.so.* "$out"/lib/libgcc_s.so.* "$out/lib/fallback/"
strip --strip-unneeded "$out"/lib/*.so* "$out"/lib/fallback/* 2> /dev/null || true
tar -C "$out" -cJf "$out/lib.tar.xz" lib
rm -rf "$out/lib"
tar -C "$out" -cJf "$out/torch.tar.xz" torch
rm -rf "$out/torch"
cp /usr/share/datasets/fashion-mnist/*.gz "$out/data/"
du -sh "$out"/*
