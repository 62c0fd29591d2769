#include "common/config/init_source.h"

#include "common/config/enum_names.h"

namespace psync {
namespace {

constexpr EnumName<InitSource> kSources[] = {{InitSource::kSeed, "seed"},
                                             {InitSource::kWorker, "worker"}};

}  // namespace

absl::StatusOr<InitSource> ParseInitSource(absl::string_view text) {
  return ParseEnumName(kSources, "--init_from", text);
}

std::string InitSourceChoices() { return EnumChoices(kSources); }

absl::string_view InitSourceName(InitSource source) { return EnumNameOf(kSources, source); }

}  // namespace psync
