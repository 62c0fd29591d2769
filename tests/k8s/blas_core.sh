# Sourced by tests/k8s/play_test.sh and elastic_play_test.sh: pick_blas_core
# sets host_core (the kernels OpenBLAS picks for this CPU, as in a
# container) and core (other kernels this CPU runs, which every run of the
# test is pinned to with training.blas_core); it fails if there are none.
# The pods do not inherit this host's environment (OPENBLAS_CORETYPE, say),
# so equal weights prove that the pin, not the luck of the environment,
# chose the kernels.

# The kernels OpenBLAS runs here with OPENBLAS_CORETYPE=$1 (none: those it
# picks for this CPU, as in a container).
openblas_core() {
  env -u OPENBLAS_CORETYPE ${1:+OPENBLAS_CORETYPE=$1} /usr/bin/python3 -c 'import ctypes
blas = ctypes.CDLL("libopenblas.so.0")
blas.openblas_get_corename.restype = ctypes.c_char_p
print(blas.openblas_get_corename().decode())'
}

pick_blas_core() {
  host_core=$(openblas_core)
  # The first of these this CPU runs (OpenBLAS falls back to its own choice
  # for one it cannot) and that is not its own: Sandybridge runs on every
  # x86-64 CPU with AVX and sums unlike Haswell, Zen and SkylakeX.
  core=""
  local candidate
  for candidate in Sandybridge Haswell Nehalem; do
    if [[ "${candidate,,}" != "${host_core,,}" && "$(openblas_core "$candidate")" == "$candidate" ]]; then
      core=$candidate; break
    fi
  done
  [[ -n "$host_core" && -n "$core" ]]
}
