#!/usr/bin/env bash
# The Kubernetes manifests actually run: builds the CPU image, renders the
# cpu-demo overlay, plays it as podman containers (tests/k8s/play_k8s.py:
# the StatefulSet, the Indexed Job, the headless Service's names, the
# ConfigMap) and checks that
#   1. the job completes with the weights_sha256 of a native psync_launch run
#      of the same configuration (its pushes and pulls on the servers'
#      payload lanes, which the servers log), and psync_ctl in a server pod
#      then finds every server healthy;
#   2. with server 1 killed (SIGKILL) once it has written a checkpoint, and
#      restarted as its StatefulSet would, the job still completes, with the
#      same weights;
#   3. with worker 1 sent SIGTERM (as an eviction would) at the same point,
#      its pod exits non-zero, the Job starts a new pod for its index, and
#      the job completes with the same weights;
#   4. the secure-demo overlay (mutual TLS and the token, from a Secret made
#      by deploy/k8s/tools/make_security_secret.sh) completes with the same
#      weights (the servers logging that TLS keeps the payload lane off),
#      and psync_ctl in a server pod is answered with the token and refused
#      without it;
#   5. the torch image (build_cpu_image.sh --torch) imports psync.torch as
#      the pods run it, and the torch overlay, shortened to 300 steps, runs
#      the torch example as the workers: the Job completes, every server
#      logs that the job finished at step 300, psync_ctl finds them healthy,
#      and worker 0 prints a test accuracy of 0.70 at least (about 0.8 here).
# Every run, the native one included, is pinned to BLAS kernels other than
# those OpenBLAS picks for this CPU (training.blas_core): the pods do not
# inherit this host's environment (OPENBLAS_CORETYPE, say), so equal weights
# prove that the pin, not the luck of the environment, chose the kernels.
# Prints "PASS name" / "FAIL name" per check; exits non-zero if one failed.
# Needs root, podman, buildah, debootstrap, kubectl and Debian's python3-yaml
# (deploy/bootstrap_tools.sh installs them).
set -uo pipefail
cd "$(dirname "$0")/../.."

image=localhost/psync:cpu
work=$(mktemp -d /tmp/psync_k8s_play.XXXXXX)
plays=()  # run ids: whatever a killed play left is removed by its label
cleanup() {
  for id in "${plays[@]}"; do
    podman rm -f $(podman ps -aq --filter "label=psync-play=$id") >/dev/null 2>&1
    podman network rm -f "psync-play-$id" >/dev/null 2>&1
  done
  [[ -n "${PSYNC_KEEP_PLAY:-}" ]] || rm -rf "$work"
}
trap cleanup EXIT
# This test's podman settings, whatever the environment says (runc, limits).
export CONTAINERS_CONF=$PWD/tests/k8s/containers.conf
source tests/check_results.sh

if ! timeout 600 bash deploy/image/build_cpu_image.sh "$image"; then
  result "k8s play: build $image" 0; exit 1
fi
result "k8s play: build $image" 1
timeout 60 kubectl kustomize deploy/k8s/overlays/cpu-demo >"$work/rendered.yaml" || {
  result "k8s play: render cpu-demo" 0; exit 1; }

source tests/k8s/blas_core.sh
pick_blas_core || {
  result "k8s play: BLAS kernels other than this CPU's ('$host_core')" 0; exit 1; }
echo "BLAS kernels: this CPU's are $host_core; every run here is pinned to $core"

# The native run: the ConfigMap's file and the workers' job flags, with this
# host's paths for what the pods keep on volumes.
/usr/bin/python3 tests/k8s/play_k8s.py native "$work/rendered.yaml" --work "$work/native" \
  --blas-core "$core" \
  >"$work/native.flags" || { result "k8s play: native configuration" 0; exit 1; }
mapfile -t flags <"$work/native.flags"
timeout 120 bazel build --config=nocuda //deploy/local:psync_launch 2>&1 | tail -1
timeout 300 "$(bazel info --config=nocuda bazel-bin 2>/dev/null)/deploy/local/psync_launch" \
  --config="$work/native/job.pbtxt" "${flags[@]}" \
  --checkpoint_dir="$work/native/checkpoints" --export_path="$work/native/weights.safetensors" \
  --summary="$work/native/summary.json" --timeout_s=280 --metrics_port=0 \
  >"$work/native.log" 2>&1
native=$(sha_of "$work/native/summary.json")
[[ -n "$native" ]] || { tail -20 "$work/native.log"; result "k8s play: native run" 0; exit 1; }
grep -q "\"blas_core\": \"$core\"" "$work/native/summary.json" ||
  { result "k8s play: the native run computed with $core" 0; exit 1; }
echo "native run (${flags[*]}): weights_sha256 $native"

# The secure-demo overlay, with a Secret made as an operator would.
timeout 60 kubectl kustomize deploy/k8s/overlays/secure-demo >"$work/secure.yaml" &&
  timeout 60 bash deploy/k8s/tools/make_security_secret.sh psync "" 4 >>"$work/secure.yaml" || {
  result "k8s play: render secure-demo with its Secret" 0; exit 1; }

# NAME RENDERED [play_k8s.py flags...]: plays the manifests; checks the sha.
play() {
  local name=$1 rendered=$2; shift 2
  local dir="$work/play${#plays[@]}" id="k8s$$-${#plays[@]}"
  plays+=("$id")
  # The play's own deadline (400 s) plus its teardown, with room to spare.
  timeout 540 /usr/bin/python3 tests/k8s/play_k8s.py play "$rendered" --work "$dir" \
    --image "$image" --run-id "$id" --timeout 400 --blas-core "$core" "$@" >"$dir.log" 2>&1
  local rc=$? sha
  sha=$(sha_of "$dir/pvc/psync-output/summary.json")
  grep '^\[play\]' "$dir.log" | grep -v "not translated" | sed 's/^/  /'
  if ! grep -q "\"blas_core\": \"$core\"" "$dir/pvc/psync-output/summary.json" 2>/dev/null; then
    rc="$rc, kernels not $core"
  fi
  # The payload lane: open on job.pbtxt's port in plaintext, off with TLS.
  if ! grep -q "$lane_line" "$dir/logs/psync-server-0.log" 2>/dev/null; then
    rc="$rc, server 0 did not log '$lane_line'"
  fi
  if [[ $rc != 0 || "$sha" != "$native" ]]; then
    tail -5 "$dir"/logs/psync-worker-*.log "$dir"/logs/psync-server-*.log 2>/dev/null
    result "k8s play: $name" 0 "exit $rc, weights_sha256 '${sha}', native $native"
  else
    result "k8s play: $name" 1
  fi
}
checkpointed='pvc/checkpoints-psync-server-1/ckpt-*/server-1-of-*.safetensors'
sec=/etc/psync-security
lane_line="payload lane on :7072"
# psync_ctl's default 5 s per server is a health probe's; on a loaded CI
# machine one connection once took longer, so these checks wait 30 s.
play "StatefulSet + Indexed Job, weights equal the native run's, psync_ctl healthy" \
  "$work/rendered.yaml" \
  --exec-after psync-server-0 "psync_ctl status --config=/etc/psync/job.pbtxt --timeout_s=30"
play "server 1 killed and restarted, same weights" "$work/rendered.yaml" \
  --kill psync-server-1 --when "$checkpointed"
play "worker 1 evicted (SIGTERM) and replaced, same weights" "$work/rendered.yaml" \
  --kill psync-worker-1-0 --signal TERM --when "$checkpointed"
tls="--tls_cert=$sec/tls.crt --tls_key=$sec/tls.key --tls_ca=$sec/ca.crt"
lane_line="no payload lane: this server speaks TLS"
play "mutual TLS and token from a Secret, same weights; psync_ctl refused without the token" \
  "$work/secure.yaml" --exec-after psync-server-0 \
  "sh -c 'psync_ctl status --config=/etc/psync/job.pbtxt $tls --auth_token_file=$sec/token \
            --timeout_s=30 &&
          psync_ctl status --config=/etc/psync/job.pbtxt $tls --num_servers=2 --timeout_s=30 |
          grep UNAUTHENTICATED'"

# --- torch workers ------------------------------------------------------------
# Not pinned to BLAS kernels and not compared with a native run: the torch
# workers compute with torch's own kernels, not training.blas_core's.
torch_started=$SECONDS
torch_image=localhost/psync:torch
# Making the torch base (apt-get) takes a few minutes once; then seconds.
if ! timeout 900 bash deploy/image/build_cpu_image.sh --torch "$torch_image"; then
  result "k8s play: build $torch_image" 0; exit 1
fi
result "k8s play: build $torch_image" 1
# As a pod runs it: user 65532, read-only root, no capabilities, no network.
if imported=$(timeout 120 podman run --rm --read-only --read-only-tmpfs=false --cap-drop=all \
     --security-opt no-new-privileges --user 65532:65532 --network none "$torch_image" \
     /usr/bin/python3 -c 'import psync.torch, torch; print("torch", torch.__version__)' 2>&1); then
  result "k8s play: $torch_image imports psync.torch as a pod runs it ($imported)" 1
else
  result "k8s play: $torch_image imports psync.torch as a pod runs it" 0 "$imported"
fi

# The torch overlay with 300 steps instead of an epoch's 938.
mkdir -p "$work/torch-short"
rel=$(realpath --relative-to="$work/torch-short" deploy/k8s)
cat >"$work/torch-short/kustomization.yaml" <<EOF
resources: [$rel/overlays/torch]
patches:
  - target: {kind: StatefulSet, name: psync-server}
    patch: '[{"op": "add", "path": "/spec/template/spec/containers/0/args/-", "value": "--steps=300"}]'
  - target: {kind: Job, name: psync-worker}
    patch: '[{"op": "add", "path": "/spec/template/spec/containers/0/args/-", "value": "--steps=300"}]'
transformers: [$rel/base/cluster-size]
EOF
timeout 60 kubectl kustomize "$work/torch-short" >"$work/torch.yaml" || {
  result "k8s play: render the torch overlay" 0; exit 1; }
dir="$work/play-torch" id="k8s$$-torch"
plays+=("$id")
# No --image: the servers run the rendering's localhost/psync:cpu, the
# workers localhost/psync:torch.
timeout 540 /usr/bin/python3 tests/k8s/play_k8s.py play "$work/torch.yaml" --work "$dir" \
  --run-id "$id" --timeout 400 --exec-after psync-server-0 \
  "psync_ctl status --config=/etc/psync/job.pbtxt --timeout_s=30" >"$dir.log" 2>&1
rc=$?
grep '^\[play\]' "$dir.log" | grep -v "not translated" | sed 's/^/  /'
problems=()
(( rc == 0 )) || problems+=("play_k8s.py exited with code $rc")
for rank in 0 1; do
  grep -q "server $rank: the job finished at version 300 " "$dir/logs/psync-server-$rank.log" 2>/dev/null ||
    problems+=("server $rank did not log 'the job finished at version 300'")
done
# (Any pod of the index: a replaced one prints it too.)
accuracy=$(cat "$dir"/logs/psync-worker-0-*.log 2>/dev/null | sed -n 's/^test accuracy \([0-9.]*\)$/\1/p' | tail -1)
if [[ -z "$accuracy" ]] || ! awk -v a="$accuracy" 'BEGIN { exit !(a >= 0.70) }'; then
  problems+=("worker 0's test accuracy '$accuracy', expected 0.70 at least")
fi
cat "$dir"/logs/psync-worker-1-*.log 2>/dev/null | grep -q '^step 299 loss ' ||
  problems+=("worker 1 did not print its last step, 299")
if (( ${#problems[@]} )); then
  tail -5 "$dir"/logs/psync-worker-*.log "$dir"/logs/psync-server-*.log 2>/dev/null
  result "k8s play: torch workers" 0 "$(printf '%s\n' "${problems[@]}")"
else
  result "k8s play: torch workers run the example to the end, test accuracy $accuracy" 1
fi
echo "torch part: $((SECONDS - torch_started)) s"
exit $failed
