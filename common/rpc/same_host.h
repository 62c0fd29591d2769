// Which peers are on this process's host, and so may share memory with it.
//
// A host is what the network sees: a network namespace with its own
// addresses (a machine, a Kubernetes pod, an emulated host of
// tests/cluster/cluster.sh), not a kernel. Processes in two namespaces of
// one kernel could map each other's memory (pidfd_getfd works across
// network namespaces), but two machines could not, so psync shares memory
// only between a worker and a server of one host: a connection from
// loopback or from one of the host's own interface addresses, which only
// a process of that host can send from (or a proxy there, for a remote
// peer: then pidfd_getfd and the region's nonce are what stop it). No
// name is resolved here.
#ifndef PSYNC_COMMON_RPC_SAME_HOST_H_
#define PSYNC_COMMON_RPC_SAME_HOST_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace psync {

// True for 127.0.0.0/8, ::1, IPv4-mapped 127.x and "localhost" (a host
// name, an address literal, or a bracketed IPv6 literal).
bool IsLoopbackHost(absl::string_view host);

// The same for an address "host:port" ("[v6]:port"), as
// ParseServerAddresses gives them: the port follows the last colon.
bool IsLoopbackAddress(absl::string_view address);

// The interface addresses of one host, as numeric text (IPv4-mapped IPv6
// addresses as IPv4). Immutable, so thread-safe.
class HostAddresses {
 public:
  // This process's host: the addresses of its network namespace's
  // interfaces (getifaddrs), read now; an interface may gain or lose one
  // later. An error names the system call's.
  static absl::StatusOr<HostAddresses> OfThisProcess();

  // `addresses`: numeric IPv4 or IPv6 addresses; anything else is ignored.
  explicit HostAddresses(const std::vector<std::string>& addresses);

  // Whether `host` — a numeric address, IPv6 with or without brackets, or
  // "localhost" — is loopback or one of these. A name is not (names are
  // not resolved).
  bool Holds(absl::string_view host) const;

  // "10.1.2.1, fe80::1" for messages; "no address" when empty.
  std::string ToString() const;
  // The addresses, canonical, in the order given.
  const std::vector<std::string>& addresses() const { return addresses_; }

 private:
  std::vector<std::string> addresses_;  // canonical, as Canonical() gives
};

// The host of a gRPC peer as grpc::ServerContext::peer() names it:
// "ipv4:10.0.0.1:5000" gives "10.0.0.1", "ipv6:[::1]:5000" and
// "ipv6:%5B::1%5D:5000" give "::1". InvalidArgument naming the peer for
// anything else: a Unix socket ("unix:/path"), no port, not an address.
absl::StatusOr<std::string> PeerHost(absl::string_view peer);

// OK when the connection from `peer` comes from loopback or one of
// `host`'s addresses (a worker there may share memory with this process);
// otherwise FailedPrecondition saying from where it comes.
absl::Status PeerOnHost(absl::string_view peer, const HostAddresses& host);

// Where a server at `address` ("host:port", "[v6]:port") lies, seen from a
// process on `host`.
enum class ServerPlace {
  kThisHost,   // loopback or one of `host`'s addresses
  kOtherHost,  // a numeric address that is neither
  kNamed,      // a name: not resolved here (the server decides by the
               // connection's address)
};
ServerPlace PlaceOfServer(absl::string_view address, const HostAddresses& host);

}  // namespace psync

#endif  // PSYNC_COMMON_RPC_SAME_HOST_H_
