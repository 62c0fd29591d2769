// The BLAS library under the CPU models, and the kernels it runs.
//
// OpenBLAS built for several CPUs (DYNAMIC_ARCH, as Debian's is) picks its
// kernels once, when the library is loaded: those for the CPU it detects,
// or those $OPENBLAS_CORETYPE names. Kernels differ in the order they sum,
// so two runs on different kernels differ in the last bits: deterministic
// mode is bit-identical only on the same kernels. These functions say which
// kernels run, and pin them for a job (--blas_core).
#ifndef PSYNC_WORKER_MODEL_BLAS_H_
#define PSYNC_WORKER_MODEL_BLAS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace psync {

// BlasInfo::chosen_by when OpenBLAS chose the kernels itself.
inline constexpr char kPickedForThisCpu[] = "picked for this CPU";

struct BlasInfo {
  std::string library;  // e.g. "OpenBLAS 0.3.21"
  std::string core;     // the kernels, e.g. "Haswell"
  int threads = 0;      // threads one BLAS call may use
  // Where the kernels came from: "picked for this CPU", "$OPENBLAS_CORETYPE"
  // or "pinned by --blas_core".
  std::string chosen_by;

  // "OpenBLAS 0.3.21 Haswell": what registrations carry and servers compare.
  std::string Kernels() const { return library + " " + core; }
  // "OpenBLAS 0.3.21, Haswell kernels (picked for this CPU), 1 thread".
  std::string Describe() const;
};

// A warning, or empty: OpenBLAS picked its generic Prescott (SSE3) kernels
// for a CPU that runs AVX2 (`avx2`), which it does not know (one newer than
// the library), where Haswell's kernels compute much faster.
std::string SlowKernelsWarning(const BlasInfo& info, bool avx2);

// The BLAS of this process. `pinned`: the job pins the kernels
// (--blas_core), which chosen_by reports.
BlasInfo CurrentBlas(bool pinned = false);

// Makes this process compute with OpenBLAS's `core` kernels (a core name,
// compared without regard to case). OK at once if OpenBLAS runs them
// already. Otherwise, if $OPENBLAS_CORETYPE is not `core` yet, sets it and
// executes this binary again with `argv` (the same pid; does not return
// unless exec fails). Otherwise OpenBLAS was asked for `core` and runs
// others (a name it does not know, or kernels this CPU cannot run): an
// error naming both. Call before this process starts threads of its own.
absl::Status PinBlasCore(absl::string_view core, char** argv);

}  // namespace psync

#endif  // PSYNC_WORKER_MODEL_BLAS_H_
