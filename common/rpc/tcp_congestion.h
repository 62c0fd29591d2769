// The TCP congestion control of psync's connections (--tcp_congestion).
//
// On loopback, BBR (the default of many kernels and cloud images) holds a
// connection to about 10 segments in flight, since a round trip of a few
// microseconds makes its bandwidth-delay product tiny, and it paces from a
// timer that may run on the other core, which reorders the connection's
// segments and sets off spurious retransmissions. A push-pull sends both
// ways at once and suffers most: on 2 cores a 2 MiB push-pull took 3.5 ms
// with BBR and 2.3 ms with reno, and 16 MiB 20 ms against 13
// (docs/performance.md). Between hosts the system's choice is kept, the
// operator's to make, but for BBR, which auto replaces with CUBIC: every
// worker pushes to every server at once, and through a switch's shallow
// buffers BBR left flows of that incast behind: on 4 and 8 emulated hosts
// steps took up to 1.5 times CUBIC's, and in one shape of eight 0.97
// (docs/performance.md, "Across hosts").
#ifndef PSYNC_COMMON_RPC_TCP_CONGESTION_H_
#define PSYNC_COMMON_RPC_TCP_CONGESTION_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/impl/server_builder_option.h"
#include "grpcpp/support/channel_arguments.h"

namespace psync {

struct TcpCongestion {
  enum class Mode {
    kAuto,    // "auto": reno where the peer is a loopback address, else the
              // system's, or CUBIC in place of BBR
    kSystem,  // "system": the system's default everywhere
    kNamed,   // any other value: that algorithm on every connection
  };
  Mode mode = Mode::kAuto;
  std::string name;  // kNamed only
};

// What auto uses on loopback: built into every kernel, and allowed to
// unprivileged processes (net.ipv4.tcp_allowed_congestion_control).
inline constexpr char kLoopbackCongestion[] = "reno";
// What auto uses between hosts where the system's is BBR: every kernel's
// usual default. Where the system's is BBR, unprivileged processes may
// often use reno and BBR only (net.ipv4.tcp_allowed_congestion_control):
// such a process keeps BBR, as the daemons' start-up line says.
inline constexpr char kInsteadOfBbr[] = "cubic";

// Longest algorithm name and its NUL (the kernel's TCP_CA_NAME_MAX).
inline constexpr int kTcpCongestionNameMax = 16;

// Parses --tcp_congestion. A name is checked on a socket of this process:
// one the kernel lacks or does not allow this user is an error naming the
// value and the kernel's lists.
absl::StatusOr<TcpCongestion> ParseTcpCongestion(absl::string_view value);

// For the daemons' logs, e.g. "reno with loopback peers, the system's bbr
// with others".
std::string DescribeTcpCongestion(const TcpCongestion& policy);

// The algorithm `policy` gives a connection whose system's algorithm is
// `system`, or "" for the system's.
std::string CongestionFor(const TcpCongestion& policy, bool peer_is_loopback,
                          absl::string_view system);

// Sets the algorithm `policy` gives a socket whose peer is or will be
// loopback (or not). Returns false, and logs once per process, where the
// kernel refuses: the connection then keeps the system's.
bool ApplyTcpCongestion(int fd, const TcpCongestion& policy, bool peer_is_loopback);

// Client side: the channel to `address` ("host:port", "[v6]:port") gets sockets with the
// algorithm `policy` gives its host. Call before creating the channel.
void SetTcpCongestion(const TcpCongestion& policy, const std::string& address,
                      grpc::ChannelArguments& args);

// Server side: each accepted connection gets the algorithm `policy` gives
// its peer (ServerBuilder::SetOption).
std::unique_ptr<grpc::ServerBuilderOption> TcpCongestionOption(const TcpCongestion& policy);

}  // namespace psync

#endif  // PSYNC_COMMON_RPC_TCP_CONGESTION_H_
