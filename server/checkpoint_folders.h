// Internal to //server:checkpoint: the folders of a checkpoint directory
// (D/ckpt-<version>/server-<rank>-of-<num_servers>.safetensors).
#ifndef PSYNC_SERVER_CHECKPOINT_FOLDERS_H_
#define PSYNC_SERVER_CHECKPOINT_FOLDERS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace psync {
namespace checkpoint_internal {

// `s` with "<op>: " before its message.
absl::Status Prefixed(absl::string_view op, const absl::Status& s);
// InvalidArgument unless 0 <= rank < num_servers <= 4096.
absl::Status CheckServer(int rank, int num_servers);

struct FoundFile {
  std::string path;
  int64_t version = 0;
  int rank = 0;
  int num_servers = 0;
};

// Files named like server files in the version folders of `dir` (NotFound
// when `dir` is missing). Version folders that cannot be listed are added to
// `refused` as "<path>: <reason>".
absl::StatusOr<std::vector<FoundFile>> FindServerFiles(const std::string& dir,
                                                       std::vector<std::string>* refused);

// version (newest first) -> num_servers -> rank -> paths (first seen first).
using FileGroups = std::map<int64_t, std::map<int, std::map<int, std::vector<std::string>>>,
                            std::greater<int64_t>>;
FileGroups GroupFiles(const std::vector<FoundFile>& files);

}  // namespace checkpoint_internal
}  // namespace psync

#endif  // PSYNC_SERVER_CHECKPOINT_FOLDERS_H_
