#!/bin/bash
# The GPU checks, in one bounded run on a machine with an NVIDIA GPU and
# CUDA 13's libraries but no Bazel (a lent device machine): the CUDA models
# and the NCCL reducer against their CPU twins (//worker/gpu:gpu_test), GPU
# runs against CPU runs and against each other, samples/s of the MLP and the
# CNN on both paths, overlap of the per-layer reduce with backward, and the
# CNN trained on Fashion-MNIST with --device=cuda; and the torch package
# built for the machine's torch, its tests run there (a model on the GPU
# among them) and the torch CNN example trained on the GPU.
#
# Made ready here by tests/gpu/make_device_bundle.sh (.gpu_bundle/); run from
# the repository root:  bash tests/gpu/device_check.sh [OUT_DIR [PHASE...]]
# PHASEs (default all, in this order): tests equivalence drift fashion torch
# speed overlap torch_examples torch_speed torch_bench (the last three need
# torch first). TORCH_TESTS picks the torch phase's tests, TORCH_BENCH_FLAGS
# torch_bench.py's flags, TORCH_TEST_ARGS the tests' arguments (-k NAME),
# TORCH_TEST_WRAPPER a command the tests run under (a debugger),
# TORCH_TEST_TIMEOUT_S the bound of each (300 s), SPEED_DEVICES (default
# "cuda cpu") the speed phase's devices.
# Every phase has its own time bound; a failed phase is reported and the next
# one runs. DEADLINE_S (seconds from the start) skips, naming them, the
# phases that would start after it; LAUNCH_TIMEOUT_S (default 300) bounds
# each job. OUT_DIR (default $OUT, else a temp dir) gets two files, whenever
# the run ends: check.log and logs.tar.gz (every job's log, summary and trace).
set -u
out="${1:-${OUT:-$(mktemp -d)}}"
shift
phases=" ${*:-tests equivalence drift fashion torch speed overlap torch_examples torch_speed torch_bench} "
mkdir -p "$out"
exec > >(tee "$out/check.log") 2>&1
bundle="$PWD/.gpu_bundle"
bin="$bundle/bin"
data="$bundle/data"
work="${WORK_DIR:-$(mktemp -d)}"
mkdir -p "$work"
torch_dir="$work/torch"  # the torch package, once the torch phase has built it
start=$(date +%s)
trap 'exit 143' TERM
trap 'tar -C "$work" -czf "$out/logs.tar.gz" --exclude=lib --exclude="*.safetensors" .' EXIT
phase() { echo; echo "=== $1 (at $(($(date +%s) - start)) s)"; }
launch_timeout=${LAUNCH_TIMEOUT_S:-300}
# wanted PHASE: whether PHASE was asked for and its start is before DEADLINE_S.
wanted() {
  [[ "$phases" == *" $1 "* ]] || return 1
  local at=$(($(date +%s) - start))
  if [ -n "${DEADLINE_S:-}" ] && [ "$at" -ge "$DEADLINE_S" ]; then
    echo "=== $1: skipped, at $at s, past DEADLINE_S=$DEADLINE_S"
    return 1
  fi
}

phase "the machine"
nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv
nvidia-smi | head -4 | tail -2
command -v nvcc > /dev/null && nvcc --version | tail -2
grep PRETTY_NAME /etc/os-release
nproc

tar -C "$work" -xJf "$bundle/lib.tar.xz"
# cuBLAS, cuDNN and NCCL come from this machine: the first directory holding
# each (CUDA's own, else a Python package's).
cuda_dirs=""
for lib in libcublas.so.13 libcublasLt.so.13 libcudnn.so.9 libnccl.so.2; do
  found=$(find /usr/local/cuda/ /usr/local/cuda*/ /usr/lib/x86_64-linux-gnu /opt -name "$lib" 2> /dev/null | head -1)
  echo "$lib: ${found:-NOT FOUND}"
  [ -n "$found" ] && cuda_dirs="$cuda_dirs:$(dirname "$found")"
done
# The bundle's libstdc++ and libgcc_s (older than the machine's, most likely)
# only where the machine has none: ahead of its own they would load under
# code compiled here, against its newer headers (the torch package).
fallback=""
if ! /sbin/ldconfig -p | grep -qF "libstdc++.so.6 (libc6,x86-64)"; then
  fallback=":$work/lib/fallback"
fi
export LD_LIBRARY_PATH="$work/lib${cuda_dirs}${fallback}"
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
export PSYNC_CUDA_PLUGIN="$bin/libpsync_cuda.so"
ldd "$PSYNC_CUDA_PLUGIN" | grep -E "not found|cuda|cublas|cudnn|nccl"
ldd "$bin/psync_worker" | grep "not found"

if wanted tests; then
  phase "gpu_test: CUDA models and the NCCL reducer against the CPU ones"
  timeout 240 "$bin/gpu_test" --gtest_output="xml:$work/gpu_test.xml"
  echo "gpu_test exit $?"
fi

# launch NAME FLAGS...: one job, its summary and weights in $work/NAME.*
launch() {
  local name=$1
  shift
  timeout $((launch_timeout + 30)) "$bin/psync_launch" --bin_dir="$bin" --data_dir="$data" \
    --timeout_s="$launch_timeout" \
    --summary="$work/$name.json" --export_path="$work/$name.safetensors" "$@" \
    > "$work/$name.log" 2>&1
  local rc=$?
  echo "[$name] exit $rc: $(cat "$work/$name.json" 2> /dev/null)"
  grep -m2 -iE "worker 0.*(gpu|cuda)" "$work/$name.log"
  if [ $rc -ne 0 ]; then grep -E "FAILED|failed|rror|terminate|Check" "$work/$name.log" | tail -8; fi
}
compare() { python3 "$(dirname "$0")/compare_weights.py" "$work/$1.safetensors" "$work/$2.safetensors" "${@:3}"; }

if wanted equivalence; then
  phase "equivalence: the MLP on the GPU, one worker against two, and against the CPU"
  common=(--deterministic --seed=7 --steps=30 --lr=0.05 --momentum=0.9 --weight_decay=0.0001 --chunk_kb=64)
  # The CPU runs pin OpenBLAS's Haswell kernels: with the generic ones some
  # machines get, the CNN's CPU run drifts from every other (see drift).
  cpu=(--device=cpu --blas_core=Haswell)
  launch gpu_single "${common[@]}" --device=cuda --num_servers=1 --num_workers=1 --devices=1 --batch_per_device=32
  launch gpu_dist "${common[@]}" --device=cuda --num_servers=2 --num_workers=2 --devices=1 --batch_per_device=16
  launch cpu_single "${common[@]}" "${cpu[@]}" --num_servers=1 --num_workers=1 --devices=1 --batch_per_device=32
  launch gpu_two_devices "${common[@]}" --device=cuda --num_workers=1 --devices=2 --batch_per_device=16
  echo "GPU, 2 workers x 16 against 1 x 32:"; compare gpu_single gpu_dist 1e-5
  echo "GPU against CPU (Haswell kernels), 1 x 32:"; compare cpu_single gpu_single 1e-4
  launch gpu_cnn_single "${common[@]}" --model=cnn --device=cuda --num_workers=1 --devices=1 --batch_per_device=32
  launch gpu_cnn_dist "${common[@]}" --model=cnn --device=cuda --num_servers=2 --num_workers=2 --devices=1 --batch_per_device=16
  launch cpu_cnn_single "${common[@]}" --model=cnn "${cpu[@]}" --num_workers=1 --devices=1 --batch_per_device=32
  echo "CNN on the GPU, 2 workers x 16 against 1 x 32:"; compare gpu_cnn_single gpu_cnn_dist 1e-5
  echo "CNN, GPU against CPU (Haswell kernels), 1 x 32:"; compare cpu_cnn_single gpu_cnn_single 1e-4
fi

if wanted drift; then
  phase "drift: GPU against CPU after 1, 3 and 30 steps (1 worker x 32, deterministic)"
  for model in mlp cnn; do
    for steps in 1 3 30; do
      for device in cuda cpu; do
        launch "drift_${model}_${device}_$steps" --model=$model --device=$device --deterministic \
          --seed=7 --steps=$steps --lr=0.05 --momentum=0.9 --weight_decay=0.0001 --batch_per_device=32 \
          > /dev/null
      done
      echo "$model after $steps steps:"; compare "drift_${model}_cpu_$steps" "drift_${model}_cuda_$steps"
    done
  done
  # The spread between two CPU runs whose BLAS kernels differ, for scale:
  # what the GPU's own rounding does to a run is of that kind.
  launch drift_cnn_haswell_30 --model=cnn --device=cpu --blas_core=Haswell --deterministic --seed=7 \
    --steps=30 --lr=0.05 --momentum=0.9 --weight_decay=0.0001 --batch_per_device=32 > /dev/null
  echo "cnn after 30 steps, GPU against CPU with Haswell kernels:"
  compare drift_cnn_haswell_30 drift_cnn_cuda_30
  echo "cnn after 30 steps, CPU with this machine's kernels against Haswell's:"
  compare drift_cnn_haswell_30 drift_cnn_cpu_30
  for f in "$work"/drift_cnn_*_30.safetensors; do cp "$f" "${f%.safetensors}.weights"; done
fi

if wanted fashion; then
  phase "the CNN on Fashion-MNIST with --device=cuda (deploy/local/train_cnn.sh's job)"
  launch cnn_fashion --model=cnn --device=cuda --num_servers=2 --num_workers=2 --devices=1 \
    --batch_per_device=32 --epochs=12 --lr=0.05 --momentum=0.9 --weight_decay=0.0005 --seed=1 \
    --lr_schedule=cosine
  grep -h "test_acc" "$work/cnn_fashion.log" | grep "worker 0"
fi

if wanted torch; then
  phase "torch: the package built for this machine's torch, its tests, the CNN example on the GPU"
  python3 -c 'import sysconfig, torch; print("torch", torch.__version__, "CUDA", torch.version.cuda,
    "GPUs", torch.cuda.device_count(), "Python.h in", sysconfig.get_paths()["include"])'
  mkdir -p "$work/torch_kit"
  tar -C "$work/torch_kit" -xJf "$bundle/torch.tar.xz"
  if [ -d "$torch_dir/psync" ]; then
    echo "the package is built already in $torch_dir (WORK_DIR)"
  else
    timeout 300 python3 tests/gpu/build_torch_binding.py "$work/torch_kit/torch" "$torch_dir"
    echo "build exit $?"
  fi
  # The tests' runfiles, as Bazel lays them out, and the data set where the
  # job's default --data_dir looks.
  runfiles="$work/runfiles/psync"
  mkdir -p "$runfiles/server" "$runfiles/worker/torch" /usr/share/datasets/fashion-mnist
  ln -sfn "$bin/psync_server" "$runfiles/server/psync_server"
  ln -sfn "$PWD/examples" "$runfiles/examples"
  ln -sfn "$torch_dir" "$runfiles/worker/torch/python"
  for f in "$data"/*.gz; do
    [ -e "/usr/share/datasets/fashion-mnist/${f##*/}" ] || cp "$f" /usr/share/datasets/fashion-mnist/
  done
  # A crash prints the Python stack of every thread.
  export PYTHONPATH="$torch_dir:$PWD/tests" PYTHONDONTWRITEBYTECODE=1 OMP_NUM_THREADS=1 \
    PYTHONFAULTHANDLER=1
  for t in ${TORCH_TESTS:-torch_device_test torch_optimizer_test torch_local_exact_test torch_export_test torch_local_test}; do
    mkdir -p "$work/tmp_$t"
    # shellcheck disable=SC2086
    TEST_SRCDIR="$work/runfiles" TEST_TMPDIR="$work/tmp_$t" timeout "${TORCH_TEST_TIMEOUT_S:-300}" ${TORCH_TEST_WRAPPER:-} \
      python3 "tests/$t.py" ${TORCH_TEST_ARGS:-} > "$work/$t.log" 2>&1
    rc=$?
    echo "[$t] exit $rc: $(grep -E '^(Ran|OK|FAILED)' "$work/$t.log" | tr '\n' ' ')"
    grep -E "largest relative|^(FAIL|ERROR):|skipped|Error" "$work/$t.log" | head -12
    if [ $rc -ne 0 ]; then grep -vE "^[IWE][0-9]{4} " "$work/$t.log" | tail -40; fi
  done
fi

if wanted speed; then
  phase "samples/s: GPU against CPU (2 servers, 2 workers, 1 device each, 300 steps)"
  # The CPU runs with Haswell's kernels, as in equivalence: the generic ones
  # OpenBLAS 0.3.21 picks for newer CPUs would understate the CPU.
  for model in mlp cnn; do
    for batch in 32 256; do
      for device in ${SPEED_DEVICES:-cuda cpu}; do
        pin=()
        [ "$device" == cpu ] && pin=(--blas_core=Haswell)
        launch "speed_${model}_${device}_b${batch}" --model=$model --device="$device" --num_servers=2 \
          --num_workers=2 --devices=1 --batch_per_device=$batch --steps=300 --seed=1 --lr=0.05 "${pin[@]}"
      done
    done
  done
fi

if wanted overlap; then
  phase "overlap of the per-layer reduce with backward (CNN on the GPU, batch 256)"
  for overlap in true false; do
    launch "overlap_$overlap" --model=cnn --device=cuda --num_servers=2 --num_workers=2 --devices=1 \
      --batch_per_device=256 --steps=500 --seed=1 --lr=0.05 --overlap=$overlap --overlap_min_kb=0 \
      --trace="$work/trace_overlap_$overlap.json" --trace_steps=30
  done
fi

if [ ! -d "$torch_dir/psync" ] && [[ "$phases" =~ " torch_" ]]; then
  echo "torch_examples, torch_speed and torch_bench need the torch phase's package: it was not built"
  phases=" "
fi

if wanted torch_examples; then
  phase "torch_examples: the torch CNN example on the GPU and the CPU, and on Fashion-MNIST"
  for device in cuda cpu; do
    launch "torch_cnn_$device" --device=$device --num_servers=2 --num_workers=2 --batch_per_device=256 \
      --steps=200 --seed=1 --lr=0.05 --worker_cmd="python3 $PWD/examples/torch/train_cnn.py"
    grep -h "epoch 1 of 1" "$work/torch_cnn_$device.log"
  done
  launch torch_cnn_fashion --device=cuda --num_servers=2 --num_workers=2 --batch_per_device=32 \
    --epochs=12 --lr=0.05 --momentum=0.9 --weight_decay=0.0005 --seed=1 --lr_schedule=cosine \
    --worker_cmd="python3 $PWD/examples/torch/train_cnn.py"
  grep -h "^.*epoch .* of 12\|on cuda" "$work/torch_cnn_fashion.log" | head -14
fi

if wanted torch_speed; then
  phase "torch_speed: the torch CNN on the GPU pushing during backward or after it, beside psync_worker's (2 servers, 2 workers, batch 256)"
  for overlap in true false; do
    launch "torch_speed_overlap_$overlap" --device=cuda --num_servers=2 --num_workers=2 \
      --batch_per_device=256 --steps=500 --seed=1 --lr=0.05 --overlap=$overlap --overlap_min_kb=0 \
      --worker_cmd="python3 $PWD/examples/torch/train_cnn.py"
  done
  launch torch_speed_cxx --model=cnn --device=cuda --num_servers=2 --num_workers=2 --devices=1 \
    --batch_per_device=256 --steps=500 --seed=1 --lr=0.05
fi

if wanted torch_bench; then
  phase "torch_bench: tests/bench/torch_bench.py on this machine's CPUs (${TORCH_BENCH_FLAGS:---runs=3})"
  bench_bin="$work/bench_bin"
  mkdir -p "$bench_bin/server" "$bench_bin/worker/torch"
  ln -s "$bin/psync_server" "$bench_bin/server/psync_server"
  ln -s "$bin/psync_worker" "$bench_bin/worker/psync_worker"
  ln -sfn "$torch_dir" "$bench_bin/worker/torch/python"
  # --device=cpu: psync_worker's row is the C++ worker on the CPU, as the torch rows are.
  timeout 420 python3 tests/bench/torch_bench.py --bin_dir="$bench_bin" --python="$(command -v python3)" \
    --psync_flags=--device=cpu ${TORCH_BENCH_FLAGS:---runs=3}
  echo "torch_bench exit $?"
fi

phase "done"
