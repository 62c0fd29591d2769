#include "common/config/optimizer_kind.h"

#include "common/config/enum_names.h"

namespace psync {
namespace {

constexpr EnumName<OptimizerKind> kKinds[] = {{OptimizerKind::kSgd, "sgd"},
                                              {OptimizerKind::kAdam, "adam"},
                                              {OptimizerKind::kAdamW, "adamw"}};

}  // namespace

absl::StatusOr<OptimizerKind> ParseOptimizerKind(absl::string_view text) {
  return ParseEnumName(kKinds, "--optimizer", text);
}

std::string OptimizerKindChoices() { return EnumChoices(kKinds); }

absl::string_view OptimizerKindName(OptimizerKind kind) { return EnumNameOf(kKinds, kind); }

}  // namespace psync
