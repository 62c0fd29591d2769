#!/usr/bin/env bash
# Builds the CPU image localhost/psync:cpu offline, from Debian's packages
# and this checkout's binaries built --config=nocuda (no registry needed; the
# Containerfile beside this script is the same image for machines with one).
# With --torch it builds the torch workers' image localhost/psync:torch
# instead (Containerfile.torch's): the same, plus Debian's python3-torch and
# the psync Python package with the example scripts.
#
#   bash deploy/image/build_cpu_image.sh [--torch] [IMAGE]
#     (default localhost/psync:cpu; with --torch localhost/psync:torch)
#
# The base (Debian 12 minbase plus the runtime libraries and Fashion-MNIST)
# is made once with debootstrap, kept as localhost/psync-base:<hash of the
# package list>, and reused while the list is unchanged; each build then adds
# only the binaries as one layer. The torch image's base is that base plus
# one layer of deploy/image/torch-packages.txt installed with apt-get, kept
# likewise as localhost/psync-torch-base:<hash>. Needs root, debootstrap,
# buildah and podman (deploy/bootstrap_tools.sh installs them).
set -euo pipefail
cd "$(dirname "$0")/../.."

torch=0
if [[ "${1:-}" == --torch ]]; then torch=1; shift; fi
if [[ $# -gt 1 || "${1:-}" == -* ]]; then
  echo "build_cpu_image: unexpected arguments '$*'; expected [--torch] [IMAGE]" >&2; exit 2
fi
if (( torch )); then image=${1:-localhost/psync:torch}; else image=${1:-localhost/psync:cpu}; fi
# The binaries' shared libraries (ldd), and the data set the CPU demo trains
# on (the list the Containerfile installs too). No compiler, no CUDA.
mapfile -t packages <deploy/image/runtime-packages.txt
binaries=(server/psync_server worker/psync_worker server/psync_ckpt server/psync_ctl)
uid=65532

say() { echo "build_cpu_image: $*" >&2; }

say "building the binaries --config=nocuda"
targets=()
for b in "${binaries[@]}"; do targets+=("//${b%/*}:${b##*/}"); done
# The torch package, installed as `bazel run //deploy:install` does; naming
# //worker/torch:psync fails the build with the reason where no torch is.
(( torch )) && targets+=(//worker/torch:psync //deploy:install)
build_log=$(mktemp)
if ! bazel build --config=nocuda "${targets[@]}" >"$build_log" 2>&1; then
  tail -30 "$build_log" >&2; rm -f "$build_log"; exit 1
fi
rm -f "$build_log"
bazel_bin=$(bazel info --config=nocuda bazel-bin 2>/dev/null)
for b in "${binaries[@]}"; do
  libraries=$(ldd "$bazel_bin/$b")
  if grep -q -E 'libcuda|libcublas|libnccl|libcudnn' <<<"$libraries"; then
    say "$b links CUDA libraries: not a --config=nocuda build"; exit 1
  fi
done
# A CUDA build's worker links no CUDA library either: it dlopens the plugin
# libpsync_cuda.so, which this image does not carry. Its loader names it.
if grep -q -a libpsync_cuda.so "$bazel_bin/worker/psync_worker"; then
  say "worker/psync_worker loads the CUDA plugin: not a --config=nocuda build"; exit 1
fi

base_tag=$(printf '%s\n' "${packages[@]}" "$uid" | sha256sum | cut -c1-12)
base="localhost/psync-base:$base_tag"
if ! podman image exists "$base"; then
  say "making $base with debootstrap (about a minute)"
  rootfs=$(mktemp -d /tmp/psync_rootfs.XXXXXX)
  trap 'rm -rf "$rootfs"' EXIT
  mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
  debootstrap --variant=minbase --include="$(IFS=,; echo "${packages[*]}")" \
    bookworm "$rootfs" "$mirror" >"$rootfs.log" 2>&1 || {
      tail -20 "$rootfs.log" >&2; rm -f "$rootfs.log"; exit 1; }
  rm -f "$rootfs.log"
  # What a runtime image does not need: package lists, docs, locales.
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/* \
         "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* \
         "$rootfs"/usr/share/locale/*
  echo "psync:x:$uid:$uid:psync:/nonexistent:/usr/sbin/nologin" >>"$rootfs/etc/passwd"
  echo "psync:x:$uid:" >>"$rootfs/etc/group"
  tar -C "$rootfs" -c . | podman import --quiet - "$base" >/dev/null
  rm -rf "$rootfs"
  trap - EXIT
fi

if (( torch )); then
  # The extension is built for this machine's interpreter and torch, so the
  # image's must be the same: Debian's, from the same release.
  mapfile -t torch_packages <deploy/image/torch-packages.txt
  torch_base="localhost/psync-torch-base:$(printf '%s\n' "$base" "${torch_packages[@]}" |
                                           sha256sum | cut -c1-12)"
  if ! podman image exists "$torch_base"; then
    say "making $torch_base: $base plus ${torch_packages[*]} (a few minutes)"
    container=$(buildah from --quiet "$base")
    trap 'buildah rm "$container" >/dev/null 2>&1 || true' EXIT
    apt_log=$(mktemp)
    buildah run --isolation=chroot --network=host "$container" -- sh -c '
        export DEBIAN_FRONTEND=noninteractive &&
        apt-get update -qq && apt-get install -y -qq --no-install-recommends "$@" &&
        apt-get clean &&
        rm -rf /var/lib/apt/lists/* /usr/share/doc/* /usr/share/man/* /usr/share/info/* \
               /usr/share/locale/*' sh "${torch_packages[@]}" >"$apt_log" 2>&1 || {
      tail -20 "$apt_log" >&2; rm -f "$apt_log"; exit 1; }
    rm -f "$apt_log"
    buildah commit --quiet --rm "$container" "$torch_base" >/dev/null
    trap - EXIT
  fi
  base=$torch_base
  # install.sh puts the package in PREFIX/lib/python/psync.
  staged=$(mktemp -d /tmp/psync_install.XXXXXX)
  trap 'rm -rf "$staged"' EXIT
  "$bazel_bin/deploy/install" "$staged" >/dev/null
  [[ -f "$staged/lib/python/psync/__init__.py" ]] ||
    { say "//deploy:install put no psync package in $staged/lib/python"; exit 1; }
fi

say "adding the binaries to $base"
container=$(buildah from --quiet "$base")
trap 'buildah rm "$container" >/dev/null 2>&1 || true; rm -rf "${staged:-}"' EXIT
for b in "${binaries[@]}"; do
  buildah copy --quiet --chmod 0755 "$container" "$bazel_bin/$b" /usr/local/bin/ >/dev/null
done
env=(--env PATH=/usr/local/bin:/usr/bin:/bin)
if (( torch )); then
  buildah copy --quiet "$container" "$staged/lib/python/psync" \
    /usr/local/lib/python/psync >/dev/null
  # The examples and the module they share (fashion_mnist.py).
  buildah copy --quiet --chmod 0644 "$container" examples/torch/*.py \
    /usr/local/share/psync/examples/torch/ >/dev/null
  # The root file system is read-only in the pods: no bytecode to write.
  env+=(--env PYTHONPATH=/usr/local/lib/python --env PYTHONDONTWRITEBYTECODE=1)
  # An extension built for another interpreter or torch fails the build here
  # (psync's import check names both), not the pod at its start.
  buildah run --isolation=chroot --user "$uid:$uid" "${env[@]}" "$container" -- \
    /usr/bin/python3 -c 'import psync.torch' || { say "the image cannot import psync.torch"; exit 1; }
  # Nor can an example that misses a module of its own: --help imports them all.
  buildah run --isolation=chroot --user "$uid:$uid" "${env[@]}" "$container" -- \
    /usr/bin/python3 /usr/local/share/psync/examples/torch/train_mlp.py --help >/dev/null ||
    { say "the image's train_mlp.py does not start"; exit 1; }
fi
buildah config --user "$uid:$uid" --workingdir / "${env[@]}" \
  --label org.opencontainers.image.title=psync \
  --label org.opencontainers.image.revision="$(git rev-parse HEAD 2>/dev/null || echo unknown)" \
  "$container"
previous=$(podman image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)
buildah commit --quiet --rm "$container" "$image" >/dev/null
trap - EXIT
rm -rf "${staged:-}"
# The image this build replaced keeps its layer, untagged, until removed:
# one per build (every test run). Remove it unless it has other names or
# containers (podman refuses those; that is fine).
current=$(podman image inspect --format '{{.Id}}' "$image")
if [[ -n "$previous" && "$previous" != "$current" ]]; then
  podman image rm "$previous" >/dev/null 2>&1 || true
fi
size=$(podman image inspect --format '{{.Size}}' "$image")
say "built $image ($((size / 1000000)) MB)"
