// The transports psync_bench compares psync against: a plain TCP socket
// and a plain gRPC unary echo, each between two processes on loopback.
#ifndef PSYNC_TESTS_BENCH_BASELINES_H_
#define PSYNC_TESTS_BENCH_BASELINES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace psync {

// Serves echo requests until the process is killed. The chosen port is
// written to `port_file`.
absl::Status ServeTcpEcho(const std::string& port_file);
absl::Status ServeGrpcEcho(const std::string& port_file, int64_t max_message_bytes);

// Sends `bytes` and reads them back, `count` times; returns each round
// trip in milliseconds.
absl::StatusOr<std::vector<double>> TimeTcpEcho(int port, int64_t bytes, int count);
absl::StatusOr<std::vector<double>> TimeGrpcEcho(int port, int64_t bytes, int count);

}  // namespace psync

#endif  // PSYNC_TESTS_BENCH_BASELINES_H_
