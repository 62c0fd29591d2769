// Where a job's initial weights come from, parsed once from the job's
// configuration (training.init_from, --init_from; training.init_weights
// implies kWorker): the servers' seed, or worker 0. Servers and workers of
// one job must agree, so the registration carries it (RegisterRequest's
// init_from) and a server refuses a worker that differs.
#ifndef PSYNC_COMMON_CONFIG_INIT_SOURCE_H_
#define PSYNC_COMMON_CONFIG_INIT_SOURCE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace psync {

enum class InitSource {
  // Every server computes its chunks' initial values from the layout's seed
  // and each tensor's name and shape (common/model/init.h).
  kSeed,
  // A fresh server holds its chunks as awaiting initial weights until worker
  // 0 pushes them (a push for step kInitialWeightsStep); every other worker
  // pulls version 0.
  kWorker,
};

// The push step that carries initial weights rather than gradients: the
// step "before" step 0, whose push-pull answers version 0.
inline constexpr int64_t kInitialWeightsStep = -1;

// "seed or worker", as errors list the names.
std::string InitSourceChoices();

// "seed" or "worker"; anything else is an InvalidArgument error naming
// --init_from and the value.
absl::StatusOr<InitSource> ParseInitSource(absl::string_view text);

absl::string_view InitSourceName(InitSource source);

}  // namespace psync

#endif  // PSYNC_COMMON_CONFIG_INIT_SOURCE_H_
