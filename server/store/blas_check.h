// Deterministic runs are bit-identical only when every worker computes
// with the same BLAS kernels (worker/model/blas.h): this remembers the
// first registered worker's and describes every worker whose differ, so
// that mixed kernels are seen when they join, not found out later.
#ifndef PSYNC_SERVER_STORE_BLAS_CHECK_H_
#define PSYNC_SERVER_STORE_BLAS_CHECK_H_

#include <map>
#include <string>
#include <vector>

namespace psync {

// Thread-compatible: WorkerRoster calls it under its own lock.
class BlasCheck {
 public:
  // Records the kernels worker `rank` registered with (e.g. "OpenBLAS
  // 0.3.21 Haswell"). Returns a warning naming both workers and both
  // kernels when they differ from the first registered worker's, else "".
  // Empty `kernels` (a tool that does not say) are not checked.
  std::string Record(int rank, const std::string& kernels);
  // One such warning per worker whose kernels differ now, by rank.
  std::vector<std::string> Mixed() const;

 private:
  int first_rank_ = -1;
  std::string first_kernels_;
  std::map<int, std::string> mixed_;  // rank -> its warning
};

}  // namespace psync

#endif  // PSYNC_SERVER_STORE_BLAS_CHECK_H_
