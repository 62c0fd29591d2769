#include "server/store/blas_check.h"

#include "absl/strings/str_cat.h"

namespace psync {

std::string BlasCheck::Record(int rank, const std::string& kernels) {
  if (kernels.empty()) return "";
  if (first_rank_ < 0 || first_rank_ == rank) {
    // The first worker (or the first again, restarted) sets the reference.
    if (first_rank_ < 0 || first_kernels_ != kernels) mixed_.clear();
    first_rank_ = rank;
    first_kernels_ = kernels;
    return "";
  }
  if (kernels == first_kernels_) {
    mixed_.erase(rank);
    return "";
  }
  std::string warning = absl::StrCat(
      "worker ", rank, " computes with ", kernels, ", worker ", first_rank_,
      " (registered first) with ", first_kernels_,
      ": deterministic mode is bit-identical only on the same kernels; pin them with "
      "--blas_core (training.blas_core)");
  mixed_[rank] = warning;
  return warning;
}

std::vector<std::string> BlasCheck::Mixed() const {
  std::vector<std::string> lines;
  for (const auto& [rank, line] : mixed_) lines.push_back(line);
  return lines;
}

}  // namespace psync
