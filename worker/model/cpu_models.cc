// CreateCpuModel (declared in model.h) lives apart from the interface so
// that depending on //worker:model does not pull in any implementation.
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/config/model_spec.h"
#include "common/status_macros.h"
#include "worker/model/cnn.h"
#include "worker/model/mlp.h"
#include "worker/model/model.h"

namespace psync {

absl::StatusOr<std::unique_ptr<Model>> CreateCpuModel(const std::string& name) {
  PSYNC_ASSIGN_OR_RETURN(const ModelSpec spec, ParseModelSpec(name));
  if (spec.kind == "mlp") {
    PSYNC_ASSIGN_OR_RETURN(std::unique_ptr<CpuMlp> mlp, CpuMlp::Create(spec.widths));
    return std::unique_ptr<Model>(std::move(mlp));
  }
  PSYNC_ASSIGN_OR_RETURN(std::unique_ptr<CpuCnn> cnn, CpuCnn::Create(CnnConfigOf(spec)));
  return std::unique_ptr<Model>(std::move(cnn));
}

}  // namespace psync
