// One job's configuration (proto/job_config.proto), as every binary reads
// it: the defaults in the .proto, then --config=FILE, then each job flag
// given on the command line (a flag per field, named like the field and
// defined once, in job_config.cc, for every binary).
#ifndef PSYNC_COMMON_JOB_CONFIG_H_
#define PSYNC_COMMON_JOB_CONFIG_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/job_config.pb.h"

namespace psync {

// Where each field's value came from, by field name: "FILE:LINE" or
// "--flag"; absent for a default. Named in validation errors.
using ConfigSources = std::map<std::string, std::string>;

struct LoadedJobConfig {
  proto::JobConfig config;
  ConfigSources sources;
};

// Reads --config (if set) and the job flags given on the command line,
// fills in what follows from them (num_servers from a list of addresses)
// and validates the result. Call after absl::ParseCommandLine.
absl::StatusOr<LoadedJobConfig> LoadJobConfig();

// The pieces, for tests and for the launcher.
// Parses `text` (JSON if `name` ends in .json, else protobuf text format)
// into `loaded`; errors name `name` and the line.
absl::Status ParseJobConfig(absl::string_view name, const std::string& text,
                            LoadedJobConfig* loaded);
// Sets the field called `field` (any nested message's) from its text form,
// as a flag would.
absl::Status SetJobConfigField(absl::string_view field, absl::string_view value,
                               absl::string_view source, LoadedJobConfig* loaded);
// Applies every job flag given on the command line.
absl::Status ApplyJobFlags(LoadedJobConfig* loaded);
absl::Status FinishJobConfig(LoadedJobConfig* loaded);

// The servers' addresses by rank: the list, or the pattern with "{rank}"
// expanded. REQUIRES: a validated config.
std::vector<std::string> ServerAddresses(const proto::JobConfig& config);

// The rank given by `flag` (e.g. "--worker_rank") as `value`: a number, or
// "auto": a server takes the ordinal its StatefulSet pod name ends in
// ($HOSTNAME "psync-server-2" -> 2), a worker its Indexed Job's
// $JOB_COMPLETION_INDEX. Checked against 0..count-1.
enum class Role { kServer, kWorker };
absl::StatusOr<int> ResolveRank(Role role, absl::string_view flag, absl::string_view value,
                                int count);

// Text format, for a file another process reads with --config.
std::string JobConfigToText(const proto::JobConfig& config);

}  // namespace psync

#endif  // PSYNC_COMMON_JOB_CONFIG_H_
