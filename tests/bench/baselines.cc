#include "tests/bench/baselines.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/rpc/same_host.h"
#include "common/monitoring/process_metrics.h"
#include "common/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "tests/bench/echo.grpc.pb.h"

namespace psync {
namespace {

// `what` failed with `error` (an errno; 0: the peer closed the connection).
absl::Status Errno(const char* what, int error = errno) {
  return absl::InternalError(absl::StrCat(
      what, ": ", error == 0 ? "the peer closed the connection" : std::strerror(error)));
}

// No SIGPIPE: a peer that went away is an error to report, not a signal.
bool WriteAll(int fd, const char* p, int64_t n) {
  while (n > 0) {
    const ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= w;
  }
  return true;
}

bool ReadAll(int fd, char* p, int64_t n) {
  while (n > 0) {
    const ssize_t r = read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) errno = 0;  // closed
    if (r <= 0) return false;
    p += r;
    n -= r;
  }
  return true;
}

// A buffer of `bytes` placed 64 bytes past a page boundary. Kernel copies
// between a user buffer and a socket's page fragments ran at half speed or
// worse on the development machine (AMD EPYC, Linux 6.18) when the two were
// a few bytes apart modulo 4 KiB: a 16 MiB echo from a page-aligned buffer
// (which follows a 16-byte header) took 12-27 ms, from one 64 bytes or 2 KiB
// past a page 6-9 ms. Where malloc put the buffers decided which the
// baseline got; this placement keeps it at the fast one.
class PlacedBuffer {
 public:
  // False (and no buffer) when memory runs out.
  bool Resize(int64_t bytes) {
    if (bytes <= capacity_) return true;
    storage_.reset(static_cast<char*>(std::aligned_alloc(kPage, RoundUp(bytes + kOffset))));
    if (storage_ == nullptr) {
      capacity_ = -1;
      return false;
    }
    std::memset(storage_.get(), 1, RoundUp(bytes + kOffset));  // fault the pages in now
    capacity_ = bytes;
    return true;
  }
  char* data() const { return storage_.get() + kOffset; }

 private:
  static constexpr int64_t kPage = 4096, kOffset = 64;
  static int64_t RoundUp(int64_t n) { return (n + kPage - 1) / kPage * kPage; }
  struct Free {
    void operator()(char* p) const { std::free(p); }
  };
  std::unique_ptr<char, Free> storage_;
  int64_t capacity_ = -1;
};

// Round trips `warmup` + `count` times; times the last `count`, and counts
// the CPU time of this process and `server_pid` meanwhile.
template <typename RoundTrip>
absl::StatusOr<EchoTimes> TimeRoundTrips(int server_pid, int warmup, int count,
                                         RoundTrip round_trip) {
  EchoTimes out;
  for (int i = 0; i < warmup + count; ++i) {
    if (i == warmup) out.cpu_ms = -(CpuSeconds() + CpuSeconds(server_pid));
    const absl::Time t0 = absl::Now();
    if (absl::Status s = round_trip(); !s.ok()) return s;
    if (i >= warmup) out.ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
  }
  out.cpu_ms = (out.cpu_ms + CpuSeconds() + CpuSeconds(server_pid)) * 1e3 / count;
  return out;
}

// `host` (an IPv4 address) and `port` as a socket address.
absl::StatusOr<sockaddr_in> Ipv4Address(const std::string& host, int port) {
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("echo address '", host, "' is not an IPv4 address (e.g. 127.0.0.1)"));
  }
  return addr;
}

void WritePort(const std::string& port_file, int port) {
  std::ofstream(port_file + ".tmp") << port << "\n";
  std::rename((port_file + ".tmp").c_str(), port_file.c_str());
}

class EchoService final : public bench::Echo::Service {
  grpc::Status Echo(grpc::ServerContext*, const bench::EchoMessage* req,
                    bench::EchoMessage* resp) override {
    *resp = *req;
    return grpc::Status::OK;
  }
};

}  // namespace

bool IsIpv4Address(const std::string& host) { return Ipv4Address(host, 0).ok(); }

absl::Status ServeTcpEcho(const std::string& host, const std::string& port_file,
                          const TcpCongestion& congestion) {
  PSYNC_ASSIGN_OR_RETURN(sockaddr_in addr, Ipv4Address(host, 0));
  const bool loopback = IsLoopbackHost(host);
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  if (listener < 0) return Errno("socket");
  socklen_t len = sizeof(addr);
  if (bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return Errno("bind");
  if (listen(listener, 4) != 0) return Errno("listen");
  getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
  WritePort(port_file, ntohs(addr.sin_port));
  PlacedBuffer buf;
  while (true) {
    const int fd = accept(listener, nullptr, nullptr);
    if (fd < 0) return Errno("accept");
    ApplyTcpCongestion(fd, congestion, loopback);
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    // Each round trip: its size and piece (0: the whole), then the bytes.
    int64_t header[2] = {0, 0};
    while (ReadAll(fd, reinterpret_cast<char*>(header), sizeof(header))) {
      const auto [n, piece] = header;
      if (n < 0 || n >= (int64_t{1} << 32) || piece < 0) break;
      if (!buf.Resize(n)) break;
      const int64_t step = piece == 0 ? std::max<int64_t>(n, 1) : piece;
      bool ok = true;
      for (int64_t off = 0; off < n && ok; off += step) {
        const int64_t len = std::min(step, n - off);
        ok = ReadAll(fd, buf.data() + off, len) && WriteAll(fd, buf.data() + off, len);
      }
      if (!ok) break;
    }
    close(fd);
  }
}

absl::StatusOr<EchoTimes> TimeTcpEcho(const std::string& host, int port, int server_pid,
                                      int64_t bytes, int64_t piece, int warmup, int count,
                                      const TcpCongestion& congestion) {
  PSYNC_ASSIGN_OR_RETURN(const sockaddr_in addr, Ipv4Address(host, port));
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return Errno("socket");
  ApplyTcpCongestion(fd, congestion, IsLoopbackHost(host));
  if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return Errno("connect");
  }
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  // Every blocking call has a deadline: a stuck echo process fails the run.
  const timeval timeout = {60, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  PlacedBuffer out, in;
  if (!out.Resize(bytes) || !in.Resize(bytes)) {
    close(fd);
    return absl::ResourceExhaustedError(absl::StrCat("tcp echo: no memory for 2 x ", bytes,
                                                     " bytes"));
  }
  const int64_t header[2] = {bytes, piece};
  auto times = TimeRoundTrips(server_pid, warmup, count, [&]() -> absl::Status {
    if (piece == 0) {
      // The echo reads everything before it writes back, as a server must
      // receive a whole gradient before it can answer.
      if (!WriteAll(fd, reinterpret_cast<const char*>(header), sizeof(header)) ||
          !WriteAll(fd, out.data(), bytes) || !ReadAll(fd, in.data(), bytes)) {
        return Errno("tcp echo");
      }
      return absl::OkStatus();
    }
    // Cut-through: the pieces come back while later ones are still sent.
    bool sent = false;
    int send_error = 0;
    std::thread sender([&] {
      sent = WriteAll(fd, reinterpret_cast<const char*>(header), sizeof(header)) &&
             WriteAll(fd, out.data(), bytes);
      if (!sent) send_error = errno;
    });
    const bool received = ReadAll(fd, in.data(), bytes);
    const int receive_error = errno;
    if (!received) shutdown(fd, SHUT_RDWR);  // the sender's write fails, if it waits
    sender.join();
    if (!received) return Errno("tcp cut-through echo: receive", receive_error);
    if (!sent) return Errno("tcp cut-through echo: send", send_error);
    return absl::OkStatus();
  });
  close(fd);
  return times;
}

absl::Status ServeGrpcEcho(const std::string& host, const std::string& port_file,
                           int64_t max_message_bytes, const TcpCongestion& congestion) {
  PSYNC_RETURN_IF_ERROR(Ipv4Address(host, 0).status());
  EchoService service;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(host + ":0", grpc::InsecureServerCredentials(), &port);
  builder.SetOption(TcpCongestionOption(congestion));
  builder.SetMaxReceiveMessageSize(static_cast<int>(max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(max_message_bytes));
  builder.RegisterService(&service);
  auto server = builder.BuildAndStart();
  if (server == nullptr) return absl::UnavailableError("grpc echo: cannot listen");
  WritePort(port_file, port);
  server->Wait();
  return absl::OkStatus();
}

absl::StatusOr<EchoTimes> TimeGrpcEcho(const std::string& host, int port, int server_pid,
                                       int64_t bytes, int warmup, int count,
                                       const TcpCongestion& congestion) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(static_cast<int>(bytes + (1 << 20)));
  args.SetMaxSendMessageSize(static_cast<int>(bytes + (1 << 20)));
  const std::string address = absl::StrCat(host, ":", port);
  SetTcpCongestion(congestion, address, args);
  auto stub = bench::Echo::NewStub(
      grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args));
  bench::EchoMessage req, resp;
  req.set_payload(std::string(bytes, '\1'));
  return TimeRoundTrips(server_pid, warmup, count, [&] {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    ctx.set_wait_for_ready(true);
    grpc::Status s = stub->Echo(&ctx, req, &resp);
    if (!s.ok()) return absl::UnavailableError(absl::StrCat("grpc echo: ", s.error_message()));
    return absl::OkStatus();
  });
}

}  // namespace psync
