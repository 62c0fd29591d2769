#!/usr/bin/env bash
# Builds the CPU image localhost/psync:cpu offline, from Debian's packages
# and this checkout's binaries built --config=nocuda (no registry needed; the
# Containerfile beside this script is the same image for machines with one).
#
#   bash deploy/image/build_cpu_image.sh [IMAGE]   (default localhost/psync:cpu)
#
# The base (Debian 12 minbase plus the runtime libraries and Fashion-MNIST)
# is made once with debootstrap, kept as localhost/psync-base:<hash of the
# package list>, and reused while the list is unchanged; each build then adds
# only the binaries as one layer. Needs root, debootstrap, buildah and podman
# (deploy/bootstrap_tools.sh installs them).
set -euo pipefail
cd "$(dirname "$0")/../.."

image=${1:-localhost/psync:cpu}
# The binaries' shared libraries (ldd), and the data set the CPU demo trains
# on (the list the Containerfile installs too). No compiler, no CUDA.
mapfile -t packages <deploy/image/runtime-packages.txt
binaries=(server/psync_server worker/psync_worker server/psync_ckpt server/psync_ctl)
uid=65532

say() { echo "build_cpu_image: $*" >&2; }

say "building the binaries --config=nocuda"
targets=()
for b in "${binaries[@]}"; do targets+=("//${b%/*}:${b##*/}"); done
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

say "adding the binaries to $base"
container=$(buildah from --quiet "$base")
trap 'buildah rm "$container" >/dev/null 2>&1 || true' EXIT
for b in "${binaries[@]}"; do
  buildah copy --quiet --chmod 0755 "$container" "$bazel_bin/$b" /usr/local/bin/ >/dev/null
done
buildah config --user "$uid:$uid" --workingdir / --env PATH=/usr/local/bin:/usr/bin:/bin \
  --label org.opencontainers.image.title=psync \
  --label org.opencontainers.image.revision="$(git rev-parse HEAD 2>/dev/null || echo unknown)" \
  "$container"
previous=$(podman image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)
buildah commit --quiet --rm "$container" "$image" >/dev/null
trap - EXIT
# The image this build replaced keeps its layer, untagged, until removed:
# one per build (every test run). Remove it unless it has other names or
# containers (podman refuses those; that is fine).
current=$(podman image inspect --format '{{.Id}}' "$image")
if [[ -n "$previous" && "$previous" != "$current" ]]; then
  podman image rm "$previous" >/dev/null 2>&1 || true
fi
size=$(podman image inspect --format '{{.Size}}' "$image")
say "built $image ($((size / 1000000)) MB)"
