// Which optimizer the servers apply, parsed once from the job's
// configuration (optimizer.optimizer, --optimizer) so that nothing compares
// its name on the step's path. The names are also what the servers print
// in OptimizerOptions::Describe, which checkpoints store: they never change.
#ifndef PSYNC_COMMON_CONFIG_OPTIMIZER_KIND_H_
#define PSYNC_COMMON_CONFIG_OPTIMIZER_KIND_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace psync {

enum class OptimizerKind { kSgd, kAdam, kAdamW };

// The names ParseOptimizerKind takes, as errors list them: "sgd, adam or
// adamw".
std::string OptimizerKindChoices();

// "sgd", "adam" or "adamw"; anything else is an InvalidArgument error
// naming --optimizer and the value.
absl::StatusOr<OptimizerKind> ParseOptimizerKind(absl::string_view text);

// The name ParseOptimizerKind takes.
absl::string_view OptimizerKindName(OptimizerKind kind);

}  // namespace psync

#endif  // PSYNC_COMMON_CONFIG_OPTIMIZER_KIND_H_
