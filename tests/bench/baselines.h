// The transports psync_bench compares psync against: a plain TCP socket
// and a plain gRPC unary echo, each between two processes (on loopback
// unless psync_bench is given another address).
#ifndef PSYNC_TESTS_BENCH_BASELINES_H_
#define PSYNC_TESTS_BENCH_BASELINES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/rpc/tcp_congestion.h"

namespace psync {

// Whether `host` is an IPv4 address literal: the echoes speak IPv4 only.
bool IsIpv4Address(const std::string& host);

// Serves echo requests on the IPv4 address `host` until the process is
// killed. The chosen port is written to `port_file`. Each connection gets
// the congestion control `congestion` gives a peer at `host` (loopback or
// not), as psync's own connections do.
absl::Status ServeTcpEcho(const std::string& host, const std::string& port_file,
                          const TcpCongestion& congestion);
absl::Status ServeGrpcEcho(const std::string& host, const std::string& port_file,
                           int64_t max_message_bytes, const TcpCongestion& congestion);

// Timed round trips: each one's time, and the CPU time both ends (this
// process and the echo server's) used per round trip, in milliseconds.
struct EchoTimes {
  std::vector<double> ms;
  double cpu_ms = 0;
};

// Sends `bytes` and reads them back, `warmup` times untimed, then `count`
// times timed, to the echo server at `host`:`port`, process `server_pid`.
// TCP: with `piece` 0 the echo reads all the bytes before it writes them
// back (store-and-forward); otherwise it writes back each `piece` bytes as
// soon as it has read them, while this process sends on from a second
// thread (cut-through: what pipelining alone gains, with no RPC layer and
// no work on the bytes).
absl::StatusOr<EchoTimes> TimeTcpEcho(const std::string& host, int port, int server_pid,
                                      int64_t bytes, int64_t piece, int warmup, int count,
                                      const TcpCongestion& congestion);
absl::StatusOr<EchoTimes> TimeGrpcEcho(const std::string& host, int port, int server_pid,
                                       int64_t bytes, int warmup, int count,
                                       const TcpCongestion& congestion);

}  // namespace psync

#endif  // PSYNC_TESTS_BENCH_BASELINES_H_
