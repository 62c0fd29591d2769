#!/usr/bin/env bash
# Installs every Debian package psync needs to build, test and run.
# Idempotent: when everything is present it only runs dpkg-query (well under
# a second) and installs nothing.
set -euo pipefail

packages=(
  bazel-bootstrap default-jdk-headless
  g++ pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libgtest-dev libgmock-dev libgoogle-glog-dev libopenblas-dev libcpp-httplib-dev
  dataset-fashion-mnist
  python3 python3-matplotlib zlib1g-dev
  # The torch binding (worker/torch/): Debian's CPU torch for /usr/bin/python3,
  # its C++ headers (libtorch-dev: python3-torch has none), Python's headers
  # and pybind11 (docs/torch.md).
  python3-torch libtorch-dev python3-dev pybind11-dev
  prometheus
  iproute2
  # What the tests run besides the project's binaries (util-linux, with
  # prlimit, setpriv and taskset, is essential to Debian): --secure and the
  # TLS tests make certificates with openssl.
  openssl
)

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done

if (( ${#missing[@]} == 0 )); then
  exit 0
fi

echo "bootstrap: installing ${missing[*]}" >&2
if [[ $(id -u) -ne 0 ]]; then
  echo "bootstrap: must run as root to install packages (missing: ${missing[*]})" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "bootstrap: done" >&2
