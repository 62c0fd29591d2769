#include "common/process/free_ports.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace psync {
namespace {

// The lowest port picked: clear of most services' well-known ones.
constexpr int kLowestPort = 10000;
constexpr int kTries = 64;

bool BindLoopback(int fd, int port) {
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  return bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
}

// The ports outside the kernel's ephemeral range (which it hands out by
// itself, to every connect and every bind to port 0), from kLowestPort:
// one of them, once released, is taken only by a process that names it,
// where a port of that range may go to any process's next connection
// before the server that was to have it binds it.
std::vector<std::pair<int, int>> PortsTheKernelKeeps() {
  int lo = 32768, hi = 60999;  // Linux's default
  std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> lo >> hi;
  std::vector<std::pair<int, int>> ranges;
  if (lo > kLowestPort) ranges.push_back({kLowestPort, lo - 1});
  if (hi < 65535) ranges.push_back({std::max(hi + 1, kLowestPort), 65535});
  return ranges;
}

}  // namespace

bool CanBindLoopback(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const bool bound = BindLoopback(fd, port);
  close(fd);
  return bound;
}

absl::StatusOr<int> PortReservation::Add() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", strerror(errno)));
  fds_.push_back(fd);
  const std::vector<std::pair<int, int>> ranges = PortsTheKernelKeeps();
  int ports = 0;
  for (const auto& [first, last] : ranges) ports += last - first + 1;
  std::mt19937 rng(std::random_device{}());
  for (int i = 0; i < kTries && ports > 0; ++i) {
    int k = std::uniform_int_distribution<int>(0, ports - 1)(rng);
    for (const auto& [first, last] : ranges) {
      if (k <= last - first) {
        if (BindLoopback(fd, first + k)) return first + k;
        break;
      }
      k -= last - first + 1;
    }
  }
  // None free there (or no such ports): one the kernel picks.
  sockaddr_in addr = {};
  socklen_t len = sizeof(addr);
  if (!BindLoopback(fd, 0) || getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot pick a free port on 127.0.0.1: ", strerror(errno)));
  }
  return ntohs(addr.sin_port);
}

void PortReservation::Release() {
  for (int fd : fds_) close(fd);
  fds_.clear();
}

}  // namespace psync
