#include "server/listener_watch.h"

#include <dirent.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace psync {
namespace {

// Whether `fd` is a listening TCP socket bound to `port`.
bool ListensOn(int fd, int port) {
  int listening = 0;
  socklen_t len = sizeof(listening);
  if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening) {
    return false;
  }
  sockaddr_storage addr{};
  len = sizeof(addr);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return false;
  if (addr.ss_family == AF_INET) {
    return ntohs(reinterpret_cast<const sockaddr_in&>(addr).sin_port) == port;
  }
  if (addr.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6&>(addr).sin6_port) == port;
  }
  return false;
}

}  // namespace

std::vector<int> ListeningSockets(int port) {
  std::vector<int> found;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return found;
  while (const dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == dirfd(dir)) continue;
    if (ListensOn(static_cast<int>(fd), port)) found.push_back(static_cast<int>(fd));
  }
  closedir(dir);
  return found;
}

int64_t AcceptQueueLength(const std::vector<int>& sockets, int port) {
  if (sockets.empty()) return -1;
  int64_t total = 0;
  for (int fd : sockets) {
    // Checked each time: the descriptor may have been closed and reused.
    tcp_info info{};
    socklen_t len = sizeof(info);
    if (!ListensOn(fd, port) || getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) {
      return -1;
    }
    total += info.tcpi_unacked;  // of a listening socket: its accept queue
  }
  return total;
}

std::vector<std::string> ListenerWatch::Check(absl::Time now) {
  std::vector<std::string> stuck;
  for (size_t i = 0; i < ports_.size(); ++i) {
    // (Reading /proc/net/tcp instead walks the kernel's whole connection
    // table: 3 ms a read on a machine with 2^18 hash buckets.)
    int64_t queue = AcceptQueueLength(sockets_[i], ports_[i]);
    if (queue < 0) {
      sockets_[i] = ListeningSockets(ports_[i]);
      queue = AcceptQueueLength(sockets_[i], ports_[i]);
    }
    const bool accepted = queue < last_queue_[i];  // someone took connections off it
    last_queue_[i] = queue;
    if (queue <= 0 || accepted) {
      busy_since_[i] = queue <= 0 ? absl::InfiniteFuture() : now;
      continue;
    }
    if (busy_since_[i] == absl::InfiniteFuture()) busy_since_[i] = now;
    if (now - busy_since_[i] >= stuck_after_) {
      stuck.push_back(absl::StrCat(ports_[i], " (", queue, " waiting)"));
    }
  }
  return stuck;
}

}  // namespace psync
