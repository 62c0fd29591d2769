#include "worker/model/blas.h"

#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

// OpenBLAS's own API (cblas.h declares only some of these).
extern "C" {
char* openblas_get_config(void);
char* openblas_get_corename(void);
int openblas_get_num_threads(void);
}

namespace psync {
namespace {

constexpr char kCoreTypeVariable[] = "OPENBLAS_CORETYPE";

// "OpenBLAS 0.3.21" of "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ...".
std::string LibraryName() {
  const std::vector<absl::string_view> words =
      absl::StrSplit(openblas_get_config(), ' ', absl::SkipEmpty());
  if (words.size() < 2) return "OpenBLAS";
  return absl::StrCat(words[0], " ", words[1]);
}

}  // namespace

std::string BlasInfo::Describe() const {
  return absl::StrCat(library, ", ", core, " kernels (", chosen_by, "), ", threads,
                      threads == 1 ? " thread" : " threads");
}

std::string SlowKernelsWarning(const BlasInfo& info, bool avx2) {
  if (!avx2 || info.chosen_by != kPickedForThisCpu ||
      !absl::EqualsIgnoreCase(info.core, "Prescott")) {
    return "";
  }
  return absl::StrCat(
      info.library, " does not know this CPU and picked its generic Prescott kernels, though "
      "the CPU runs AVX2: --blas_core=Haswell (or SkylakeX, with AVX-512) computes faster; give "
      "every worker the same value, for bit-identical runs");
}

BlasInfo CurrentBlas(bool pinned) {
  BlasInfo info;
  info.library = LibraryName();
  info.core = openblas_get_corename();
  info.threads = openblas_get_num_threads();
  // The environment's value goes into logs and the JSON summary: only the
  // letters and digits a core name has (at most 32), so no quote or
  // control character of it can break them.
  std::string asked;
  for (const char* c = getenv(kCoreTypeVariable); c != nullptr && *c != 0; ++c) {
    if (absl::ascii_isalnum(*c) && asked.size() < 32) asked.push_back(*c);
  }
  info.chosen_by = pinned           ? "pinned by --blas_core"
                   : !asked.empty() ? absl::StrCat("$", kCoreTypeVariable, "=", asked)
                                    : kPickedForThisCpu;
  return info;
}

absl::Status PinBlasCore(absl::string_view core, char** argv) {
  const std::string running = openblas_get_corename();
  if (absl::EqualsIgnoreCase(running, core)) return absl::OkStatus();
  const char* env = getenv(kCoreTypeVariable);
  if (env == nullptr || !absl::EqualsIgnoreCase(env, core)) {
    // OpenBLAS reads the variable only as it loads: a new image of this
    // binary loads it again.
    const std::string value(core);
    setenv(kCoreTypeVariable, value.c_str(), /*overwrite=*/1);
    execv("/proc/self/exe", argv);
    return absl::InternalError(absl::StrCat("--blas_core=", core, ": cannot execute this binary ",
                                            "again with ", kCoreTypeVariable, "=", core, ": ",
                                            std::strerror(errno)));
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "--blas_core is '", core, "' but OpenBLAS runs its ", running, " kernels although ",
      kCoreTypeVariable, "=", env, ": '", core,
      "' is not a core this OpenBLAS knows or this CPU can run; expected one such as Haswell, "
      "SkylakeX, Zen or Sandybridge (the cores of ", LibraryName(), ")"));
}

}  // namespace psync
