// Starting psync_bench's child processes on the server side (psync servers
// and echo servers), inside a network namespace when one is named, and
// waiting for the port each writes to its port file.
#ifndef PSYNC_TESTS_BENCH_BENCH_PROCESSES_H_
#define PSYNC_TESTS_BENCH_BENCH_PROCESSES_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/process/subprocess.h"

namespace psync {

// Starts `argv`, through `ip netns exec netns` unless `netns` is empty.
// FailedPrecondition when a namespace is named and iproute2's ip is not
// installed.
absl::StatusOr<std::unique_ptr<Subprocess>> StartInNetns(std::vector<std::string> argv,
                                                            const std::string& prefix, bool echo,
                                                            const std::string& netns);

// The port `p` wrote to `path`; Aborted with its last output when `p`
// exits first, DeadlineExceeded after 30 s.
absl::StatusOr<int> WaitForPort(const std::string& path, Subprocess& p);

}  // namespace psync

#endif  // PSYNC_TESTS_BENCH_BENCH_PROCESSES_H_
