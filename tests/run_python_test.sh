#!/usr/bin/env bash
# Runs a Python test (argument 2) with the interpreter psync was built for
# (argument 1), the package from this test's runfiles on its path.
set -euo pipefail
python=$1
shift
export PYTHONPATH="$TEST_SRCDIR/psync/worker/torch/python"
export PYTHONNOUSERSITE=1 PYTHONDONTWRITEBYTECODE=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
exec "$python" "$@"
