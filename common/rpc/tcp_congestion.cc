#include "common/rpc/tcp_congestion.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/config/enum_names.h"
#include "common/rpc/same_host.h"
#include "glog/logging.h"
#include "grpc/support/sync.h"

// gRPC's socket mutator, the one way to set a socket option on gRPC's own
// sockets. ChannelArguments::SetSocketMutator is public but the structs are
// declared in gRPC's internal src/core/lib/iomgr/socket_mutator.h, which
// Debian's libgrpc-dev does not install: these mirror gRPC 1.51's (the
// version BUILD_NOTES.md pins). gRPC calls mutate_fd_2 when it is set, with
// the fd and its use; tcp_congestion_test checks the algorithm of the
// sockets of a real channel and server.
typedef enum {
  GRPC_FD_CLIENT_CONNECTION_USAGE,
  GRPC_FD_SERVER_LISTENER_USAGE,
  GRPC_FD_SERVER_CONNECTION_USAGE,
} grpc_fd_usage;

typedef struct {
  int fd;
  grpc_fd_usage usage;
} grpc_mutate_socket_info;

struct grpc_socket_mutator_vtable {
  bool (*mutate_fd)(int fd, grpc_socket_mutator* mutator);
  int (*compare)(grpc_socket_mutator* a, grpc_socket_mutator* b);
  void (*destroy)(grpc_socket_mutator* mutator);
  bool (*mutate_fd_2)(const grpc_mutate_socket_info* info, grpc_socket_mutator* mutator);
};

struct grpc_socket_mutator {
  const grpc_socket_mutator_vtable* vtable;
  gpr_refcount refcount;
};

namespace psync {
namespace {

std::string ReadProcLine(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string SocketCongestion(int fd) {
  char name[kTcpCongestionNameMax] = {};
  socklen_t len = sizeof(name);
  if (getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &len) != 0) return "";
  return std::string(name, strnlen(name, len));
}

// Why the kernel refused an algorithm (an errno), for messages.
std::string Refusal(int err) {
  return err == EPERM    ? "is not allowed to this process"
         : err == ENOENT ? "is not available in this kernel"
                         : std::strerror(err);
}

// 0 if this process may give a socket `name`, else why not (an errno).
int TryOnNewSocket(const std::string& name) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return errno;
  const int rc = setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name.data(), name.size());
  const int err = rc == 0 ? 0 : errno;
  close(fd);
  return err;
}

bool PeerIsLoopback(int fd) {
  sockaddr_storage peer{};
  socklen_t len = sizeof(peer);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) != 0) return false;
  char text[INET6_ADDRSTRLEN] = {};
  if (peer.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&peer)->sin_addr, text, sizeof(text));
  } else if (peer.ss_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&peer)->sin6_addr, text, sizeof(text));
  } else {
    return false;
  }
  return IsLoopbackHost(text);
}

// One mutator per channel (whose peer is known from its address) or per
// server (which asks each accepted connection's peer).
struct Mutator : grpc_socket_mutator {
  TcpCongestion policy;
  bool client_peer_is_loopback = false;
};

bool MutateFd2(const grpc_mutate_socket_info* info, grpc_socket_mutator* base) {
  const Mutator& m = *static_cast<Mutator*>(base);
  switch (info->usage) {
    case GRPC_FD_CLIENT_CONNECTION_USAGE:  // before connect(2)
      ApplyTcpCongestion(info->fd, m.policy, m.client_peer_is_loopback);
      break;
    case GRPC_FD_SERVER_CONNECTION_USAGE:
      ApplyTcpCongestion(info->fd, m.policy, PeerIsLoopback(info->fd));
      break;
    case GRPC_FD_SERVER_LISTENER_USAGE:
      break;
  }
  return true;  // a refusal is logged; the connection goes on with the system's
}

bool MutateFd(int, grpc_socket_mutator*) { return true; }  // unused: mutate_fd_2 is set

int Compare(grpc_socket_mutator* a, grpc_socket_mutator* b) {
  const Mutator& x = *static_cast<Mutator*>(a);
  const Mutator& y = *static_cast<Mutator*>(b);
  auto key = [](const Mutator& m) {
    return std::make_tuple(static_cast<int>(m.policy.mode), m.policy.name,
                           m.client_peer_is_loopback);
  };
  return key(x) < key(y) ? -1 : key(y) < key(x) ? 1 : 0;
}

void Destroy(grpc_socket_mutator* m) { delete static_cast<Mutator*>(m); }

constexpr grpc_socket_mutator_vtable kVtable = {MutateFd, Compare, Destroy, MutateFd2};

// Owned by the channel arguments (which unref it) once handed over.
grpc_socket_mutator* NewMutator(const TcpCongestion& policy, bool client_peer_is_loopback) {
  auto* m = new Mutator;
  m->vtable = &kVtable;
  gpr_ref_init(&m->refcount, 1);
  m->policy = policy;
  m->client_peer_is_loopback = client_peer_is_loopback;
  return m;
}

class ServerOption final : public grpc::ServerBuilderOption {
 public:
  explicit ServerOption(TcpCongestion policy) : policy_(std::move(policy)) {}
  void UpdateArguments(grpc::ChannelArguments* args) override {
    args->SetSocketMutator(NewMutator(policy_, false));
  }
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>*) override {}

 private:
  const TcpCongestion policy_;
};

// The modes named by a word of their own; any other value names an
// algorithm (kNamed).
constexpr EnumName<TcpCongestion::Mode> kModes[] = {{TcpCongestion::Mode::kAuto, "auto"},
                                                    {TcpCongestion::Mode::kSystem, "system"}};

}  // namespace

absl::StatusOr<TcpCongestion> ParseTcpCongestion(absl::string_view value) {
  TcpCongestion policy;
  if (const TcpCongestion::Mode* mode = FindEnumName(kModes, value)) {
    policy.mode = *mode;
    return policy;
  }
  auto error = [&](absl::string_view why) {
    const std::string available =
        ReadProcLine("/proc/sys/net/ipv4/tcp_available_congestion_control");
    const std::string allowed =
        ReadProcLine("/proc/sys/net/ipv4/tcp_allowed_congestion_control");
    return absl::InvalidArgumentError(absl::StrCat(
        "--tcp_congestion is '", value, "', expected ",
        EnumChoices(kModes, "an algorithm of the kernel's"),
        " (available: ", available.empty() ? "?" : available,
        "; allowed without privileges: ", allowed.empty() ? "?" : allowed, "): '", value, "' ",
        why));
  };
  if (value.empty() || value.size() >= kTcpCongestionNameMax) return error("is not a name");
  const std::string name(value);
  if (const int err = TryOnNewSocket(name); err != 0) return error(Refusal(err));
  policy.mode = TcpCongestion::Mode::kNamed;
  policy.name = name;
  return policy;
}

std::string DescribeTcpCongestion(const TcpCongestion& policy) {
  const std::string system_name = ReadProcLine("/proc/sys/net/ipv4/tcp_congestion_control");
  const std::string system = absl::StrCat("the system's ", system_name);
  switch (policy.mode) {
    case TcpCongestion::Mode::kAuto: {
      std::string others = system;
      if (!CongestionFor(policy, false, system_name).empty()) {
        const int err = TryOnNewSocket(kInsteadOfBbr);
        others = err == 0 ? absl::StrCat(kInsteadOfBbr, " in place of ", system)
                          : absl::StrCat(system, " (", kInsteadOfBbr, ", auto's choice over ",
                                         system_name, ", ", Refusal(err),
                                         err == EPERM ? "; see net.ipv4.tcp_allowed_"
                                                        "congestion_control)"
                                                      : ")");
      }
      return absl::StrCat(kLoopbackCongestion, " with loopback peers, ", others, " with others");
    }
    case TcpCongestion::Mode::kSystem:
      return system;
    case TcpCongestion::Mode::kNamed:
      return policy.name;
  }
  return "";
}

std::string CongestionFor(const TcpCongestion& policy, bool peer_is_loopback,
                          absl::string_view system) {
  switch (policy.mode) {
    case TcpCongestion::Mode::kAuto:
      if (peer_is_loopback) return kLoopbackCongestion;
      return system == "bbr" ? kInsteadOfBbr : "";
    case TcpCongestion::Mode::kSystem:
      return "";
    case TcpCongestion::Mode::kNamed:
      return policy.name;
  }
  return "";
}

bool ApplyTcpCongestion(int fd, const TcpCongestion& policy, bool peer_is_loopback) {
  const std::string current = SocketCongestion(fd);  // the system's, unless set before
  const std::string name = CongestionFor(policy, peer_is_loopback, current);
  if (name.empty() || current == name) return true;
  if (setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name.data(), name.size()) == 0) return true;
  const int err = errno;
  // Auto's CUBIC over BBR, refused to this process on every socket, as
  // DescribeTcpCongestion said at start: not worth a warning. (A route that
  // locks its algorithm refuses it on that route's sockets alone.)
  if (policy.mode == TcpCongestion::Mode::kAuto && name == kInsteadOfBbr &&
      TryOnNewSocket(name) != 0) {
    return false;
  }
  static std::atomic<bool> logged{false};
  if (!logged.exchange(true)) {
    LOG(WARNING) << "tcp_congestion: the kernel refused " << name << " on a connection ("
                 << std::strerror(err) << "); it keeps " << current;
  }
  return false;
}

void SetTcpCongestion(const TcpCongestion& policy, const std::string& address,
                      grpc::ChannelArguments& args) {
  if (policy.mode == TcpCongestion::Mode::kSystem) return;
  // Each socket is looked at when it is made (auto: its own default, which
  // may be BBR), as a server's are.
  args.SetSocketMutator(NewMutator(policy, IsLoopbackAddress(address)));
}

std::unique_ptr<grpc::ServerBuilderOption> TcpCongestionOption(const TcpCongestion& policy) {
  return std::make_unique<ServerOption>(policy);
}

}  // namespace psync
