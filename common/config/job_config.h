// One job's configuration (proto/job_config.proto), as every binary reads
// it: the defaults in the .proto, then a file, then single fields set by
// name. No flags here: common/config/job_flags.h reads --config and the job flags
// with these functions. Thread-compatible: the functions keep no state.
#ifndef PSYNC_COMMON_CONFIG_JOB_CONFIG_H_
#define PSYNC_COMMON_CONFIG_JOB_CONFIG_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/config/cluster_spec.h"
#include "common/config/init_source.h"
#include "common/config/lr_policy.h"
#include "proto/job_config.pb.h"

namespace psync {

// Where each field's value came from, by field name: "FILE:LINE" or
// "--flag"; absent for a default. Named in validation errors.
using ConfigSources = std::map<std::string, std::string>;

struct LoadedJobConfig {
  proto::JobConfig config;
  ConfigSources sources;
};

// Largest configuration file ReadJobConfigFile accepts.
inline constexpr int64_t kMaxJobConfigFileBytes = int64_t{1} << 20;

// Reads the file `path` (a regular file of at most kMaxJobConfigFileBytes:
// never blocks on a FIFO or reads /dev/zero forever) and parses it into
// `loaded` with ParseJobConfig. Errors name the path and what was expected.
absl::Status ReadJobConfigFile(const std::string& path, LoadedJobConfig* loaded);

// Parses `text` (JSON if `name` ends in .json, else protobuf text format)
// into `loaded`; errors name `name` and the line.
absl::Status ParseJobConfig(absl::string_view name, const std::string& text,
                            LoadedJobConfig* loaded);
// Sets the field called `field` (any nested message's) from its text form,
// as a flag would; `source` ("--lr", say) is named in errors.
absl::Status SetJobConfigField(absl::string_view field, absl::string_view value,
                               absl::string_view source, LoadedJobConfig* loaded);
// Fills in what follows from the fields set (num_servers from a list of
// addresses) and validates the result; errors name each value's source.
absl::Status FinishJobConfig(LoadedJobConfig* loaded);

// An InvalidArgument error about the field called `field` (REQUIRES: one
// of JobConfigFieldNames()): where its value came from, the value, and
// `expected`, as FinishJobConfig words its errors.
absl::Status JobConfigFieldError(const LoadedJobConfig& loaded, absl::string_view field,
                                 absl::string_view expected);

// Every leaf field's name (one job flag each), in .proto order.
std::vector<std::string> JobConfigFieldNames();

// The servers' addresses by rank: the list, or the pattern with "{rank}"
// expanded. REQUIRES: a validated config.
std::vector<std::string> ServerAddresses(const proto::JobConfig& config);

// The learning-rate policy of optimizer.* . REQUIRES: a validated config.
LrPolicy LrPolicyOf(const proto::JobConfig& config);

// Where the job's initial weights come from: worker when training.init_weights
// names a file, else training.init_from; nullopt where that is empty (the
// workers' kind decides: psync_worker seed, a torch worker worker; a server
// takes the first registration's). REQUIRES: a validated config.
std::optional<InitSource> InitSourceOf(const proto::JobConfig& config);

// The job's optimizer and learning-rate settings as one line (its optimizer
// section as text), which every server and worker of a job must share: a
// server refuses a worker with others (so servers that disagree refuse the
// same worker, and a worker's summary reports what the servers apply).
std::string UpdateRuleOf(const proto::JobConfig& config);

// Text format, for a file another process reads with --config.
std::string JobConfigToText(const proto::JobConfig& config);

}  // namespace psync

#endif  // PSYNC_COMMON_CONFIG_JOB_CONFIG_H_
