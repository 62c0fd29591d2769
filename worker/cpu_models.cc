// CreateCpuModel (declared in model.h) lives apart from the interface so
// that depending on //worker:model does not pull in any implementation.
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "worker/cnn.h"
#include "worker/mlp.h"
#include "worker/model.h"

namespace psync {

absl::StatusOr<std::unique_ptr<Model>> CreateCpuModel(
    const std::string& name) {
  if (name == "mlp") return std::make_unique<CpuMlp>();
  if (name == "cnn") {
    auto cnn = CpuCnn::Create(CnnConfig{});
    if (!cnn.ok()) return cnn.status();
    return std::unique_ptr<Model>(std::move(*cnn));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "CreateCpuModel: unknown model \"", name, "\", known: mlp, cnn"));
}

}  // namespace psync
